"""Every Lua script of the saver, loaded from this package's ``lua/`` folder.

Each script is one file, ``lua/<name>.lua``: its first line is the script's
shebang (``#!lua`` with its flags, which Redis requires first), then comments
saying what it takes (KEYS, ARGV) and returns, then its code. Helpers that
several scripts share are fragments in ``lua/lib/``; a script (or a fragment)
names the fragments it calls in a header line::

    -- uses: thread, expire

and the loader puts them, with the fragments they use in turn, each once and
each before its users, between the shebang and the script's own lines. The
fragment ``thread`` binds the thread's keys (``KEYS[1..6]``) and the shapes
of their fields; every fragment uses it. Two values come from Python, written
into ``lib/thread.lua`` as placeholders: ``__TASKS__`` (LangGraph's TASKS
channel) and ``__EFFECT_FIELDS__`` (``_keys.EFFECT_FIELDS``).

The files are read once, at import (package data, no network); nothing else
in this module does I/O, and no redis import.
"""

from __future__ import annotations

import re
from importlib.resources import files

from langgraph.checkpoint.serde.types import TASKS

from ._keys import EFFECT_FIELDS
from ._requests import LuaScript

__all__ = ["load_script", "SCRIPTS", "PRUNE_SCRIPTS"]

_LUA = files(__package__) / "lua"
_USES = re.compile(r"--\s*uses:(.*)")
_PLACEHOLDERS = {
    "__TASKS__": TASKS,
    "__EFFECT_FIELDS__": ", ".join(f"'{name}'" for name in EFFECT_FIELDS),
}
_UNFILLED = re.compile(r"__[A-Z][A-Z_]*__")


def _read(path: str) -> str:
    return (_LUA / path).read_text(encoding="utf-8")


def _uses(text: str) -> list[str]:
    """The fragments a file's header names (its leading comment lines)."""
    for line in text.splitlines():
        if line.startswith("#!"):
            continue
        if not line.startswith("--"):
            break
        match = _USES.match(line)
        if match:
            return [name.strip() for name in match.group(1).split(",") if name.strip()]
    return []


def _add_fragments(
    names: list[str], done: dict[str, bool], out: list[str], chain: tuple[str, ...]
) -> None:
    """Append each fragment (after those it uses) to ``out``, once each."""
    for name in names:
        if name in chain:
            raise RuntimeError(f"Lua fragments use each other in a cycle: {' -> '.join(chain)}")
        if done.get(name):
            continue
        text = _read(f"lib/{name}.lua")
        _add_fragments(_uses(text), done, out, (*chain, name))
        done[name] = True
        out.append(f"-- lib/{name}.lua\n{text.strip()}\n")


def load_script(name: str) -> LuaScript:
    """The script ``lua/<name>.lua`` with the fragments it uses.

    Raises:
        RuntimeError: The file has no ``#!lua`` first line, its fragments use
            each other in a cycle, or a placeholder is left unfilled.
    """
    text = _read(f"{name}.lua")
    shebang, _, body = text.partition("\n")
    if not shebang.startswith("#!lua"):
        raise RuntimeError(f"lua/{name}.lua must start with a '#!lua' line")
    parts: list[str] = [shebang + "\n"]
    _add_fragments(_uses(text), {}, parts, ())
    parts.append(body.strip() + "\n")
    source = "\n".join(parts)
    for placeholder, value in _PLACEHOLDERS.items():
        source = source.replace(placeholder, value)
    left = _UNFILLED.search(source)
    if left:
        raise RuntimeError(f"lua/{name}.lua: placeholder {left.group()} is not filled in")
    return LuaScript(name, source)


# The saver's scripts (see each file for its KEYS, ARGV and reply).
PUT = load_script("put")
PUT_WRITES = load_script("put_writes")
GET = load_script("get")
PAGE = load_script("page")
IDS = load_script("ids")
FETCH = load_script("fetch")
DELETE_RUNS = load_script("delete_runs")
READ_ALL = load_script("read_all")
MERGE = load_script("merge")
INDEX_PAGE = load_script("index_page")
INDEX_FORGET = load_script("index_forget")
SWAP_DATA_KEYS = load_script("swap_data_keys")
DROP = load_script("drop")
EFFECT_CLAIM = load_script("effect_claim")
EFFECT_TAKEOVER = load_script("effect_takeover")
EFFECT_COMPLETE = load_script("effect_complete")
EFFECT_DELETE = load_script("effect_delete")
EFFECT_PAGE = load_script("effect_page")
EFFECT_WRITE = load_script("effect_write")

# The pruner's scripts (``_prune``).
PRUNE_INSPECT = load_script("prune_inspect")
PRUNE_DROP = load_script("prune_drop")
PRUNE_NODES = load_script("prune_nodes")
PRUNE_TRIM = load_script("prune_trim")
INDEX_SCAN = load_script("index_scan")
LOCK_TAKE = load_script("prune_lock_take")
LOCK_RELEASE = load_script("prune_lock_release")

#: Every script but the pruner's, for ``setup()`` to load.
SCRIPTS: tuple[LuaScript, ...] = (
    PUT,
    PUT_WRITES,
    GET,
    PAGE,
    IDS,
    FETCH,
    DELETE_RUNS,
    READ_ALL,
    MERGE,
    INDEX_PAGE,
    INDEX_FORGET,
    SWAP_DATA_KEYS,
    DROP,
    EFFECT_CLAIM,
    EFFECT_TAKEOVER,
    EFFECT_COMPLETE,
    EFFECT_DELETE,
    EFFECT_PAGE,
    EFFECT_WRITE,
)

#: The pruner's scripts, for ``setup()`` to load.
PRUNE_SCRIPTS: tuple[LuaScript, ...] = (
    PRUNE_INSPECT,
    PRUNE_DROP,
    PRUNE_NODES,
    PRUNE_TRIM,
    INDEX_SCAN,
    LOCK_TAKE,
    LOCK_RELEASE,
)

#: The scripts a saver with ``wait_replicas`` follows with ``WAIT``: those that store a
#: thread's records one call at a time (a checkpoint, its writes, a copied thread's
#: parts, an effect-journal change). Reads never wait (their expiry refresh is not worth
#: an error when no replica is up), nor do batches over many threads (deleting threads
#: or runs, the pruner): a deletion a failover loses is made again by calling again.
REPLICATED: frozenset[str] = frozenset(
    script.sha
    for script in (
        PUT,
        PUT_WRITES,
        MERGE,
        EFFECT_CLAIM,
        EFFECT_TAKEOVER,
        EFFECT_COMPLETE,
        EFFECT_DELETE,
        EFFECT_WRITE,
    )
)
