"""Every page of README.md and docs/ runs: each fenced block is executed or a marked excerpt."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.harness import PAGES, REPO, run_page


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_page_runs(page: Path, page_environment: dict[str, str]) -> None:
    run = run_page(page)
    slowest = sorted(run.seconds.items(), key=lambda item: -item[1])[:3]
    print(f"{page.name}: slowest blocks", [f"line {line}: {s:.2f}s" for line, s in slowest])
    assert run.ran or run.excerpts, f"{page} has no fenced block"
