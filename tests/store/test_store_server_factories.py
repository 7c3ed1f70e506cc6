"""The Agent Server store factories (``langgraph_durable.<backend>.server.store``).

On each backend, from the environment alone:

* the store yielded is the backend's async store, set up, on the checkpointer's
  storage (schema, prefix, table), with the tenant, TTL and index the ``LGD_STORE_*``
  variables give; values are encrypted with ``LGD_KEYRING`` (a store without the
  keyring cannot open them) and a factory entered again (a server restart) reads them;
* ``LGD_STORE_SWEEP_MINUTES`` deletes expired items while the store is open
  (PostgreSQL, Redis; refused on DynamoDB, whose native TTL deletes them);
* malformed settings are refused with one ``ConfigurationError`` each.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable._store_server import embed_from_text, store_options_from_env
from langgraph_durable.errors import ConfigurationError, DurableError, IntegrityError
from tests.cli.store_helpers import open_spec_store, raw_items
from tests.effects.conftest import BACKENDS, make_spec
from tests.redaction_helpers import SaverSpec
from tests.store.differential import embed

CLASSES = {
    "postgres": "AsyncPostgresStore",
    "redis": "AsyncRedisStore",
    "dynamodb": "AsyncDynamoDBStore",
}
_CLEARED = (
    "LGD_KMS_KEY_ID",
    "LGD_INTEGRITY_KEY",
    "LGD_TENANT_SIGNING_KEY",
    "LGD_POSTGRES_RLS",
    "LGD_POSTGRES_SETUP",
    "LGD_REDIS_SETUP",
    "LGD_DYNAMODB_SETUP",
    "LGD_REDIS_TTL",
    "LGD_RETENTION_IDLE",
    "LGD_RETENTION_ABSOLUTE",
    "LGD_RETENTION_STRATEGY",
    "LGD_RETENTION_KEEP",
    "LGD_ENCRYPTION_CLEAR_METADATA",
    "LGD_ENCRYPTION_SEARCHABLE_METADATA",
    "LGD_ENCRYPTION_ALLOW_PLAINTEXT",
    "LGD_STORE_TENANT",
    "LGD_STORE_TTL_MINUTES",
    "LGD_STORE_REFRESH_ON_READ",
    "LGD_STORE_SWEEP_MINUTES",
    "LGD_STORE_INDEX_DIMS",
    "LGD_STORE_INDEX_EMBED",
    "LGD_STORE_INDEX_FIELDS",
    "LGD_STORE_INDEX_DISTANCE",
    "LGD_STORE_CLEAR_VECTORS",
)


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest) -> SaverSpec:
    return make_spec(request, request.param)


def _environ(spec: SaverSpec, monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    """The server's environment: the backend's variables, then ``values``."""
    for name in _CLEARED:
        monkeypatch.delenv(name, raising=False)
    if spec.backend == "postgres":
        monkeypatch.setenv("LGD_POSTGRES_URL", spec.conn)
        monkeypatch.setenv("LGD_POSTGRES_SCHEMA", spec.kwargs["schema"])
        monkeypatch.setenv("LGD_POSTGRES_POOL_SIZE", "1")
    elif spec.backend == "redis":
        monkeypatch.setenv("LGD_REDIS_URL", spec.conn)
        monkeypatch.setenv("LGD_REDIS_PREFIX", spec.kwargs["prefix"])
    else:
        monkeypatch.setenv("LGD_DYNAMODB_URL", spec.conn)
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def _factory(backend: str) -> Any:
    return importlib.import_module(f"langgraph_durable.{backend}.server").store


def test_the_store_factory_reads_the_environment(
    spec: SaverSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    _environ(
        spec,
        monkeypatch,
        LGD_KEYRING=f"k1={key}",
        LGD_STORE_TENANT="acme",
        LGD_STORE_TTL_MINUTES="30",
        LGD_STORE_REFRESH_ON_READ="off",
        LGD_STORE_INDEX_DIMS="8",
        LGD_STORE_INDEX_EMBED="tests.store.differential:embed",
        LGD_STORE_INDEX_FIELDS="text",
    )
    factory = _factory(spec.backend)

    async def first() -> list[Any]:
        async with factory() as store:
            assert type(store).__name__ == CLASSES[spec.backend]
            assert store.tenant == "acme"
            assert store.ttl_config == {"refresh_on_read": False, "default_ttl": 30.0}
            assert store.index_config["dims"] == 8 and store.index_config["fields"] == ["text"]
            await store.aput(("mem", "u1"), "pie", {"text": "apple pie"})
            await store.aput(("mem", "u1"), "sky", {"text": "blue sky"})
            return await store.asearch(("mem",), query="apple")  # type: ignore[no-any-return]

    found = asyncio.run(first())
    assert [item.key for item in found][0] == "pie" and found[0].score is not None
    assert raw_items(spec) == {("acme", ("mem", "u1"), "pie"), ("acme", ("mem", "u1"), "sky")}

    async def restarted() -> Any:
        async with factory() as store:  # a server restart: a new store, the same settings
            return await store.aget(("mem", "u1"), "pie")

    item = asyncio.run(restarted())
    assert item is not None and item.value == {"text": "apple pie"}
    with open_spec_store(spec, "acme") as plain, pytest.raises(DurableError):
        plain.get(("mem", "u1"), "pie")  # encrypted: no reading it without the keyring


def test_the_store_factory_sweeps_expired_items(
    spec: SaverSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    _environ(spec, monkeypatch, LGD_STORE_SWEEP_MINUTES="0.005", LGD_STORE_TENANT="acme")
    factory = _factory(spec.backend)
    if spec.backend == "dynamodb":
        with pytest.raises(ConfigurationError, match="native TTL"):
            asyncio.run(factory().__aenter__())
        return

    async def run() -> None:
        async with factory() as store:
            await store.aput(("mem",), "short", {"v": 1}, ttl=0.005)  # 0.3 s
            await store.aput(("mem",), "kept", {"v": 2})
            deadline = time.monotonic() + 20
            while ("acme", ("mem",), "short") in raw_items(spec):
                assert time.monotonic() < deadline, "the sweeper never deleted the item"
                await asyncio.sleep(0.2)

    asyncio.run(run())
    assert raw_items(spec) == {("acme", ("mem",), "kept")}


def test_without_store_settings_there_are_no_store_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in _CLEARED:
        monkeypatch.delenv(name, raising=False)
    assert store_options_from_env({}) == {}
    options = store_options_from_env({"LGD_STORE_TTL_MINUTES": "1.5"})
    assert options == {"ttl": {"refresh_on_read": True, "default_ttl": 1.5}}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LGD_STORE_INDEX_DIMS": "8"}, "needs both"),
        ({"LGD_STORE_INDEX_EMBED": "openai:text-embedding-3-small"}, "needs both"),
        ({"LGD_STORE_INDEX_DIMS": "eight", "LGD_STORE_INDEX_EMBED": "a:b"}, "positive integer"),
        ({"LGD_STORE_TTL_MINUTES": "soon"}, "number of minutes"),
        ({"LGD_STORE_TTL_MINUTES": "0"}, "number of minutes"),
        ({"LGD_STORE_TTL_MINUTES": "nan"}, "number of minutes"),
        ({"LGD_STORE_SWEEP_MINUTES": "-1"}, "number of minutes"),
        ({"LGD_STORE_REFRESH_ON_READ": "maybe"}, "on or off"),
        (
            {"LGD_STORE_INDEX_DIMS": "8", "LGD_STORE_INDEX_EMBED": "no_such.module:embed"},
            "cannot import",
        ),
        (
            {"LGD_STORE_INDEX_DIMS": "8", "LGD_STORE_INDEX_EMBED": "tests.store.differential:x"},
            "has no",
        ),
        ({"LGD_STORE_INDEX_DIMS": "8", "LGD_STORE_INDEX_EMBED": "embed"}, "provider:model"),
    ],
)
def test_malformed_store_settings_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        store_options_from_env(env)


def test_embed_names_a_provider_a_module_or_a_file(tmp_path: Path) -> None:
    assert embed_from_text("openai:text-embedding-3-small") == "openai:text-embedding-3-small"
    assert embed_from_text("tests.store.differential:embed") is embed
    module = tmp_path / "my_embed.py"
    module.write_text("def embed(texts):\n    return [[1.0, 0.0] for _ in texts]\n")
    loaded = embed_from_text(f"{module}:embed")
    assert loaded(["a", "b"]) == [[1.0, 0.0], [1.0, 0.0]]


def test_the_store_factory_tags_values_with_the_integrity_key(
    spec: SaverSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LGD_INTEGRITY_KEY`` covers the store too: a value stored without its tag (by a
    server that had no key) is refused by a server that has one, and a tagged value reads."""
    _environ(spec, monkeypatch, LGD_STORE_TENANT="acme")
    factory = _factory(spec.backend)

    async def put(key: str) -> None:
        async with factory() as store:
            await store.aput(("mem",), key, {"text": key})

    async def get(key: str) -> Any:
        async with factory() as store:
            return await store.aget(("mem",), key)

    asyncio.run(put("untagged"))
    monkeypatch.setenv("LGD_INTEGRITY_KEY", os.urandom(32).hex())
    asyncio.run(put("tagged"))
    assert asyncio.run(get("tagged")).value == {"text": "tagged"}
    with pytest.raises(IntegrityError):
        asyncio.run(get("untagged"))


def test_the_postgres_store_factory_reads_the_vector_settings(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = SaverSpec("postgres", pg_url, {"schema": pg_schema})
    key = base64.b64encode(os.urandom(32)).decode()
    index = {"LGD_STORE_INDEX_DIMS": "8", "LGD_STORE_INDEX_EMBED": "tests.store.differential:embed"}
    _environ(
        spec,
        monkeypatch,
        LGD_KEYRING=f"k1={key}",
        LGD_STORE_INDEX_DISTANCE="l2",
        LGD_STORE_CLEAR_VECTORS="on",
        **index,
    )
    factory = _factory("postgres")

    async def opened() -> tuple[str, bool]:
        async with factory() as store:
            vector = store._vector_index
            return vector.distance_type, vector.wants_table

    # l2, and the index's table wanted although values are encrypted: clear vectors
    assert asyncio.run(opened()) == ("l2", True)
    for name, value, extra in (
        ("LGD_STORE_INDEX_DISTANCE", "dot", index),
        ("LGD_STORE_CLEAR_VECTORS", "maybe", index),
        ("LGD_STORE_INDEX_DISTANCE", "l2", {}),
    ):
        _environ(spec, monkeypatch, **{name: value}, **extra)
        with pytest.raises(ConfigurationError, match=name):
            asyncio.run(factory().__aenter__())
