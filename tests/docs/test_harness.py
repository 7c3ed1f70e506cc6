"""The docs harness itself: every fence of every page goes through it, and it fails when
it should (a test that cannot fail proves nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.harness import (
    PAGES,
    REPO,
    UnmarkedBlockError,
    console_commands,
    fence_lines,
    is_excerpt_marker,
    parse_page,
    run_page,
    unmarked,
)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_fence_is_run_or_marked(page: Path) -> None:
    """Each fence a plain line scan finds is a block the harness runs, or one right after an
    excerpt marker: a new page or block cannot slip through."""
    document = parse_page(page)
    markers, blocks = set(), {}
    for example in document.examples():
        if is_excerpt_marker(example.region):
            markers.add(example.line)
        else:
            blocks[example.line] = example.region.evaluator
    assert sorted(blocks) == fence_lines(document.text)
    missing = [line for line, run in blocks.items() if run is unmarked and line - 1 not in markers]
    assert missing == [], f"{page}: blocks neither run nor marked as excerpts at lines {missing}"
    stray = sorted(line for line in markers if line + 1 not in blocks)
    assert stray == [], f"{page}: excerpt markers not right before a block at lines {stray}"


def write(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    return page


def test_a_block_without_a_language_or_a_marker_fails(tmp_path: Path) -> None:
    page = write(tmp_path, "# t\n\n```\nsome output\n```\n")
    with pytest.raises(AssertionError, match="page.md:3") as failure:
        run_page(page, {})
    assert isinstance(failure.value.__cause__, UnmarkedBlockError)


def test_an_excerpt_is_skipped_with_its_reason(tmp_path: Path) -> None:
    text = '<!-- skip: next "a diagram" -->\n```\nA -> B\n```\n\n```python\nx = 1\n```\n'
    page = write(tmp_path, text)
    run = run_page(page, {})
    assert run.excerpts == [(2, "a diagram")]
    assert run.ran == [6]


@pytest.mark.parametrize(
    "directive",
    ["<!-- skip: next -->", '<!-- skip: next "" -->', "<!-- skip: start -->"],
)
def test_an_excerpt_needs_a_reason(tmp_path: Path, directive: str) -> None:
    page = write(tmp_path, f"{directive}\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match="skip"):
        parse_page(page)


def test_python_blocks_share_a_namespace_and_may_await(tmp_path: Path) -> None:
    page = write(
        tmp_path,
        "```python\nimport asyncio\nx = 2\n```\n\n```python\nawait asyncio.sleep(0)\n"
        "assert x * x == 4\n```\n",
    )
    assert run_page(page, {}).ran == [1, 6]


def test_a_failing_python_block_names_its_line(tmp_path: Path) -> None:
    page = write(tmp_path, "text\n\n```python\nassert 1 == 2, 'wrong'\n```\n")
    with pytest.raises(AssertionError, match=r"page.md:3: block failed: AssertionError: wrong"):
        run_page(page, {})


@pytest.mark.parametrize(
    "block",
    [
        "```sh\nfalse\n```\n",
        "```sh\nfalse | true\n```\n",  # pipefail
        "```bash\necho $UNSET_VARIABLE_OF_THE_DOCS_TESTS\n```\n",  # -u
        "```console\n$ true\nsome output\n$ exit 3\n```\n",
    ],
)
def test_a_failing_shell_block_fails(tmp_path: Path, block: str) -> None:
    with pytest.raises(AssertionError, match="exit status"):
        run_page(write(tmp_path, block), {})


def test_console_commands_keep_continuations_and_drop_output() -> None:
    text = "$ echo a \\\n  b\na b\n$ echo c\nc\n"
    assert console_commands(text) == "echo a \\\n  b\necho c\n"


def test_json_blocks_are_parsed_and_checkpointer_paths_imported(tmp_path: Path) -> None:
    path = "langgraph_durable.postgres.server.checkpointer"
    good = f'```json\n{{"checkpointer": {{"path": "{path}"}}}}\n```\n'
    assert run_page(write(tmp_path, good), {}).ran == [1]
    store = '```json\n{"store": {"path": "langgraph_durable.redis.server.store"}}\n```\n'
    assert run_page(write(tmp_path, store), {}).ran == [1]
    colon = good.replace("server.checkpointer", "server:checkpointer")  # not the server's form
    for bad in (
        '```json\n{"a": 1,}\n```\n',
        good.replace('checkpointer"}', 'nothing"}'),
        colon,
        store.replace("server.store", "server.nothing"),
    ):
        with pytest.raises(AssertionError, match="block failed"):
            run_page(write(tmp_path, bad), {})
