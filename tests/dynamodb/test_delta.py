"""Delta encoding of growing list channels on DynamoDB: what is stored, what comes back,
and what it costs in calls.

A ``messages`` list that grows by appending is stored as the appended items plus its
base version, the base's item count and its whole chain; every test compares what the
saver returns with what ``InMemorySaver`` returns for the same run.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_durable import Retention
from langgraph_durable.dynamodb import AsyncDynamoDBSaver, DynamoDBOptions, DynamoDBSaver
from langgraph_durable.dynamodb._deltas import (
    ChainMemory,
    delta_attributes,
    item_chain,
    parse_refs,
    refs_entry,
)
from langgraph_durable.dynamodb._items import ITEM_LIMIT, TRANSACTION_BYTES, thread_pk
from langgraph_durable.dynamodb.saver import parse_conn_string
from langgraph_durable.errors import ConfigurationError, CorruptRecordError, DecryptionError
from langgraph_durable.protect import Encryption, LocalKeyring
from tests.delta_graphs import chat_graph, run_turns
from tests.dynamodb.helpers import CallCounter, make_client, raw_items, table_dump
from tests.helpers import cfg, make_cp


def history(saver: Any, thread: str) -> list[list[Any]]:
    """The messages of every checkpoint of a thread, newest first."""
    return [messages_dump(t.checkpoint["channel_values"]) for t in saver.list(cfg(thread))]


def messages_dump(values: dict[str, Any]) -> list[Any]:
    return [(m.id, m.content, type(m).__name__) for m in values.get("messages", [])]


def reference(turns: int, thread: str = "t", edit_first: bool = False) -> list[list[Any]]:
    memory = InMemorySaver()
    run_turns(chat_graph(memory, edit_first=edit_first), thread, turns)
    return history(memory, thread)


def blob_kinds(saver: DynamoDBSaver, thread: str) -> tuple[int, int, int]:
    """(delta blobs, full blobs, payload bytes) of the ``messages`` channel of a thread."""
    pk = thread_pk("default", thread)
    items = [
        i
        for i in raw_items(saver.client, saver.table)
        if i["pk"]["S"] == pk and i["sk"]["S"].startswith("b##messages#")
    ]
    mains = [i for i in items if "#k#" not in i["sk"]["S"]]
    deltas = sum(1 for i in mains if "bv" in i)
    size = sum(len(i["d"]["B"]) for i in items if "d" in i)
    return deltas, len(mains) - deltas, size


class KeysAsked:
    """The keys of each BatchGetItem a client sends."""

    def __init__(self, client: Any) -> None:
        self.calls: list[list[str]] = []
        client.meta.events.register("provide-client-params.dynamodb.BatchGetItem", self._count)

    def _count(self, params: dict[str, Any], **_: Any) -> None:
        for request in params["RequestItems"].values():
            self.calls.append([k["pk"]["S"] + " " + k["sk"]["S"] for k in request["Keys"]])

    @property
    def sizes(self) -> list[int]:
        return [len(keys) for keys in self.calls]


@pytest.fixture
def client(dynamodb_endpoint: str) -> Any:
    return make_client(dynamodb_endpoint)


@pytest.fixture
def saver(client: Any, dynamodb_table: str) -> Iterator[DynamoDBSaver]:
    s = DynamoDBSaver(client, table=dynamodb_table, delta_chain=4)
    s.setup()
    yield s


def test_history_matches_memory_saver_and_stores_deltas(saver: DynamoDBSaver, client: Any) -> None:
    full = DynamoDBSaver(client, table=saver.table, delta_chain=0)
    run_turns(chat_graph(saver), "t", 12)
    run_turns(chat_graph(full), "f", 12, tag="t")
    want = reference(12)
    assert len(want) == 36
    assert history(saver, "t") == want
    assert history(full, "f") == want
    latest = saver.get_tuple(cfg("t"))
    assert latest is not None and messages_dump(latest.checkpoint["channel_values"]) == want[0]
    deltas, fulls, size = blob_kinds(saver, "t")
    f_deltas, _, f_size = blob_kinds(full, "f")
    assert f_deltas == 0
    # 24 versions of the list: a full copy starts each chain of 4 deltas
    assert (deltas, fulls) == (19, 5)
    assert size * 2 < f_size
    # every delta names its base, the base's item count and its chain down to a full copy
    pk = thread_pk("default", "t")
    mains = {
        i["sk"]["S"].rsplit("#", 1)[1]: i
        for i in raw_items(client, saver.table)
        if i["pk"]["S"] == pk and i["sk"]["S"].startswith("b##messages#")
    }
    for item in mains.values():
        if "bv" in item:
            chain = [v for v, _n in json.loads(item["bc"]["S"])]
            assert chain[0] == item["bv"]["S"] and 1 <= len(chain) <= 4
            assert all(v in mains for v in chain) and "bv" not in mains[chain[-1]]


def test_get_tuple_is_one_query_and_one_batch_get_with_every_base(
    saver: DynamoDBSaver, client: Any, dynamodb_table: str
) -> None:
    run_turns(chat_graph(saver), "t", 7)
    counter, asked = CallCounter(client), KeysAsked(client)
    latest = saver.get_tuple(cfg("t"))
    assert counter.reset() == {"Query": 1, "BatchGetItem": 1}
    assert latest is not None
    assert messages_dump(latest.checkpoint["channel_values"]) == reference(7)[0]
    # the newest value is a delta whose chain is in the pointer: bases in the same call
    assert blob_kinds(saver, "t")[0] > 0 and asked.sizes[0] >= 3
    # every checkpoint by id too, and from another process that never wrote the thread
    other = DynamoDBSaver(client, table=dynamodb_table, delta_chain=4)
    for t in list(saver.list(cfg("t"))):
        counter.reset()
        got = other.get_tuple(t.config)
        assert got is not None and got.checkpoint == t.checkpoint
        assert counter.reset() == {"Query": 1, "BatchGetItem": 1}


def test_a_pointer_without_chain_hints_costs_one_more_batch_get(
    saver: DynamoDBSaver, client: Any, dynamodb_table: str
) -> None:
    """A process that neither wrote nor read the value references it unchanged."""
    run_turns(chat_graph(saver), "t", 5)  # 10 versions of messages: the last 4 are deltas
    latest = saver.get_tuple(cfg("t"))
    assert latest is not None
    stranger = DynamoDBSaver(client, table=dynamodb_table, delta_chain=4)
    cp = {**latest.checkpoint, "id": "1f100000-0000-6000-8000-000000000001"}
    stored = stranger.put(latest.config, cp, {"source": "update", "step": 99}, {})
    counter, asked = CallCounter(client), KeysAsked(client)
    back = saver.get_tuple(stored)
    assert back is not None and back.checkpoint["channel_values"] == cp["channel_values"]
    # the delta itself first, then all of its bases at once
    assert counter.reset() == {"Query": 1, "BatchGetItem": 2}
    assert asked.sizes == [1, 4]


def test_item_changed_in_place_is_stored(saver: DynamoDBSaver) -> None:
    run_turns(chat_graph(saver, edit_first=True), "e", 6)
    got = history(saver, "e")
    assert got == reference(6, "e", edit_first=True)
    assert got[0][0][1] == "edited at 11"


def test_items_written_without_deltas_keep_reading_and_grow_deltas(
    client: Any, dynamodb_table: str
) -> None:
    # full copies, as every release before delta encoding wrote them (no base attributes)
    old = DynamoDBSaver(client, table=dynamodb_table, delta_chain=0)
    old.setup()
    run_turns(chat_graph(old), "t", 5)
    assert blob_kinds(old, "t")[0] == 0
    assert not any("bv" in i or "bc" in i for i in raw_items(client, dynamodb_table))
    new = DynamoDBSaver(client, table=dynamodb_table)  # the default: deltas on
    assert new.options.delta_chain == 32
    assert history(new, "t") == reference(5)
    run_turns(chat_graph(new), "t", 5, start=5)
    assert history(new, "t") == reference(10)
    assert history(old, "t") == reference(10)
    assert blob_kinds(new, "t")[0] > 0


def test_a_base_deleted_elsewhere_makes_the_write_a_full_copy(
    saver: DynamoDBSaver, client: Any, dynamodb_table: str
) -> None:
    run_turns(chat_graph(saver), "d", 3)
    state = saver.get_tuple(cfg("d"))
    assert state is not None
    # Another process deletes the thread; this one still remembers its bases.
    DynamoDBSaver(client, table=dynamodb_table).delete_thread("d")
    values = dict(state.checkpoint["channel_values"])
    msgs = [*values["messages"], AIMessage(content="after delete", id="late")]
    versions = dict(state.checkpoint["channel_versions"])
    versions["messages"] = saver.get_next_version(versions["messages"])
    cp = {
        **state.checkpoint,
        "id": "1f000000-0000-6000-8000-000000000001",
        "channel_values": {**values, "messages": msgs},
        "channel_versions": versions,
    }
    counter = CallCounter(client)
    saver.put(
        {"configurable": {"thread_id": "d", "checkpoint_ns": ""}},
        cp,
        {"source": "update", "step": 99},
        {"messages": versions["messages"]},
    )
    # refused (its ConditionCheck on the base failed), then written with full copies
    assert counter.failed == {"TransactWriteItems": 1}
    assert counter.reset() == {"TransactWriteItems": 1}
    back = saver.get_tuple(cfg("d"))
    assert back is not None
    assert [m.id for m in back.checkpoint["channel_values"]["messages"]] == [m.id for m in msgs]
    assert blob_kinds(saver, "d")[0] == 0
    # and the thread grows deltas again from there
    run_turns(chat_graph(saver), "d", 2, start=3)
    assert blob_kinds(saver, "d")[0] > 0


def test_prune_and_delete_for_runs_keep_bases(saver: DynamoDBSaver, client: Any) -> None:
    graph = chat_graph(saver)
    run_turns(graph, "k", 7)
    want = messages_dump(saver.get_tuple(cfg("k")).checkpoint["channel_values"])  # type: ignore[union-attr]
    deltas, fulls, _ = blob_kinds(saver, "k")
    assert deltas > 0
    saver.prune(["k"], strategy="keep_latest")
    assert len(history(saver, "k")) == 1
    assert messages_dump(saver.get_tuple(cfg("k")).checkpoint["channel_values"]) == want  # type: ignore[union-attr]
    kept_deltas, kept_fulls, _ = blob_kinds(saver, "k")
    assert kept_fulls == 1 and 0 < kept_deltas < deltas  # the chain of the latest, whole
    # Another run on top, then delete that run: the earlier checkpoint still reads.
    graph.invoke(
        {"messages": [HumanMessage(content="more", id="more")]},
        {"configurable": {"thread_id": "k", "run_id": "1f0aaaaa-0000-6000-8000-00000000run2"}},
    )
    last_run = saver.get_tuple(cfg("k")).metadata["run_id"]  # type: ignore[union-attr]
    assert len({t.metadata.get("run_id") for t in saver.list(cfg("k"))}) == 2
    saver.delete_for_runs([last_run])
    assert messages_dump(saver.get_tuple(cfg("k")).checkpoint["channel_values"]) == want  # type: ignore[union-attr]


def test_prune_expired_keep_latest_keeps_whole_chains(saver: DynamoDBSaver) -> None:
    run_turns(chat_graph(saver), "old", 9)
    want = history(saver, "old")[0]
    report = saver.prune_expired(Retention(strategy="keep_latest", idle=1), now=4e9)
    assert report.trimmed == 1
    assert history(saver, "old") == [want]
    deltas, fulls, _ = blob_kinds(saver, "old")
    assert fulls == 1 and deltas >= 1
    run_turns(chat_graph(saver), "old", 1, start=9)
    assert history(saver, "old")[0][: len(want)] == want


def test_copy_thread_and_fork(saver: DynamoDBSaver) -> None:
    memory = InMemorySaver()
    for s in (saver, memory):
        graph = chat_graph(s)
        run_turns(graph, "src", 6)
        if s is saver:
            saver.copy_thread("src", "dst")
        else:  # InMemorySaver has no copy_thread: the same run again
            run_turns(graph, "dst", 6, tag="src")
        # Time travel: continue from an early checkpoint of the copy.
        old = list(s.list(cfg("dst")))[9].config
        graph.invoke({"messages": [HumanMessage(content="fork", id="fork")]}, old)
    for thread in ("src", "dst"):
        assert history(saver, thread) == history(memory, thread)
    saver.delete_thread("src")  # the copy's chains are its own
    assert history(saver, "dst") == history(memory, "dst")
    assert blob_kinds(saver, "dst")[0] > 0


def test_listing_decodes_shared_items_once_and_fetches_bases_once(
    client: Any, dynamodb_table: str
) -> None:
    with DynamoDBSaver.from_conn_string(
        f"dynamodb://{dynamodb_table}?delta_chain=3",
        client=client,
        list_page_items=6,
    ) as s:
        s.setup()
        run_turns(chat_graph(s), "pg", 8)
        want = reference(8, "pg")
        counter, asked = CallCounter(client), KeysAsked(client)
        tuples = list(s.list(cfg("pg")))
        calls = counter.reset()
        assert [messages_dump(t.checkpoint["channel_values"]) for t in tuples] == want
        # each checkpoint has its own list; the items they share are one object each
        a = tuples[0].checkpoint["channel_values"]["messages"]
        b = tuples[3].checkpoint["channel_values"]["messages"]
        assert a is not b and a[0] is b[0]
        # one BatchGetItem per page at most; a base one page fetched, the next does not
        assert calls["BatchGetItem"] <= calls["Query"] and calls["Query"] > 3
        keys = [k for call in asked.calls for k in call]
        assert len(keys) == len(set(keys))
        some = list(s.list(cfg("pg"), limit=5, before=tuples[7].config))
        assert [messages_dump(t.checkpoint["channel_values"]) for t in some] == want[8:13]
        inputs = s.list(cfg("pg"), filter={"source": "input"})
        flt = [messages_dump(t.checkpoint["channel_values"]) for t in inputs]
        assert flt == [
            w for w, t in zip(want, tuples, strict=True) if t.metadata["source"] == "input"
        ]
        assert len(flt) == 8


def test_listing_across_namespaces_and_threads(saver: DynamoDBSaver) -> None:
    run_turns(chat_graph(saver), "a", 4)
    run_turns(chat_graph(saver), "b", 4, tag="a")
    everything = list(saver.list(None))
    assert len(everything) == 24
    by_thread: dict[str, list[Any]] = {}
    for t in everything:
        by_thread.setdefault(t.config["configurable"]["thread_id"], []).append(
            messages_dump(t.checkpoint["channel_values"])
        )
    assert by_thread["a"] == by_thread["b"] == reference(4, "a")
    whole = list(saver.list({"configurable": {"thread_id": "a"}}, limit=7))
    assert [messages_dump(t.checkpoint["channel_values"]) for t in whole] == reference(4, "a")[:7]


def test_encrypted_deltas_are_sealed_and_read_back(client: Any, dynamodb_table: str) -> None:
    encryption = Encryption(LocalKeyring({"k": os.urandom(32)}, "k"))
    s = DynamoDBSaver(client, table=dynamodb_table, encryption=encryption, delta_chain=4)
    s.setup()
    run_turns(chat_graph(s), "t", 8)
    assert history(s, "t") == reference(8)
    assert blob_kinds(s, "t")[0] > 0
    dump = table_dump(client, dynamodb_table)
    assert b"reply" not in dump and b"xxxxxxxx" not in dump
    # a delta's sealed items are bound to their version: moved to another, they fail
    pk = thread_pk("default", "t")
    deltas = [
        i
        for i in raw_items(client, dynamodb_table)
        if i["pk"]["S"] == pk and "bv" in i and "d" in i
    ]
    newest = max(deltas, key=lambda i: i["sk"]["S"])
    other = next(i for i in deltas if i["sk"] != newest["sk"])
    client.put_item(TableName=dynamodb_table, Item={**newest, "d": other["d"]})
    with pytest.raises(DecryptionError):
        list(s.list(cfg("t")))


def test_a_missing_base_is_a_clear_error(saver: DynamoDBSaver, client: Any) -> None:
    run_turns(chat_graph(saver), "m", 3)
    pk = thread_pk("default", "m")
    full = [
        i
        for i in raw_items(client, saver.table)
        if i["pk"]["S"] == pk and i["sk"]["S"].startswith("b##messages#") and "bv" not in i
    ]
    client.delete_item(TableName=saver.table, Key={"pk": full[0]["pk"], "sk": full[0]["sk"]})
    with pytest.raises(CorruptRecordError, match="base of a delta, is missing"):
        list(saver.list(cfg("m")))


async def test_async_saver_history(client: Any, dynamodb_table: str) -> None:
    async with AsyncDynamoDBSaver.from_conn_string(
        f"dynamodb://{dynamodb_table}?delta_chain=3", client=client
    ) as saver:
        await saver.setup()
        graph = chat_graph(saver)
        for i in range(6):
            await graph.ainvoke(
                {"messages": [HumanMessage(content=f"q{i}", id=f"ht-{i}")]},
                {"configurable": {"thread_id": "t"}},
            )
        got = [
            messages_dump(t.checkpoint["channel_values"])
            async for t in saver.alist({"configurable": {"thread_id": "t"}})
        ]
        latest = await saver.aget_tuple(cfg("t"))
    assert got == reference(6)
    assert latest is not None and messages_dump(latest.checkpoint["channel_values"]) == got[0]


def test_a_sync_and_an_async_saver_take_turns_on_one_thread(
    client: Any, dynamodb_table: str
) -> None:
    """Two processes write one thread by turns: each builds on what the other wrote."""
    one = DynamoDBSaver(client, table=dynamodb_table, delta_chain=3)
    one.setup()

    async def other_turns(start: int) -> None:
        async with AsyncDynamoDBSaver.from_conn_string(
            f"dynamodb://{dynamodb_table}?delta_chain=3", client=client
        ) as two:
            graph = chat_graph(two)
            for i in range(start, start + 2):
                await graph.ainvoke(
                    {"messages": [HumanMessage(content=f"q{i}", id=f"ht-{i}")]},
                    {"configurable": {"thread_id": "t"}},
                    durability="sync",
                )

    for turn in range(3):
        run_turns(chat_graph(one), "t", 2, start=4 * turn)
        asyncio.run(other_turns(4 * turn + 2))
    assert history(one, "t") == reference(12)
    assert blob_kinds(one, "t")[0] > 0


@pytest.mark.parametrize("bad", [-1, 1001, 2.5, True, "4"])
def test_delta_chain_is_validated(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="delta_chain"):
        DynamoDBOptions(table="tbl", delta_chain=bad)


def test_delta_chain_in_urls() -> None:
    assert parse_conn_string("dynamodb://tbl?delta_chain=0")["delta_chain"] == 0
    assert DynamoDBOptions(table="tbl").delta_chain == 32
    with pytest.raises(ConfigurationError, match="delta_chain must be a whole number"):
        parse_conn_string("dynamodb://tbl?delta_chain=many")
    with pytest.raises(ConfigurationError, match="delta_chain"):
        DynamoDBOptions.from_settings(parse_conn_string("dynamodb://tbl?delta_chain=5000"))


def test_a_100_step_conversation_of_3_5_mb_needs_no_bucket(
    client: Any, dynamodb_table: str
) -> None:
    """About 35 KB of messages per step for 100 steps, with the default chain (32).

    Every put stores the appended message, but the first after each trim stores a full
    copy (the last one, at step 90, about 3.2 MB: chunked, under the 4 MB a transaction
    holds). The thread is trimmed to its latest checkpoint every 30 steps and at the
    end (``keep_latest``), so the table holds one chain; the history is not what is tested
    here. (The size per step, not the count of steps, is what makes the full copies
    large: 1,000 steps of 3.5 KB cross the same limits, ten times slower.)
    """
    s = DynamoDBSaver(client, table=dynamodb_table)
    s.setup()
    sizes: list[int] = []

    def payload_bytes(params: dict[str, Any], **_: Any) -> None:
        puts = [a["Put"]["Item"] for a in params["TransactItems"] if "Put" in a]
        sizes.append(sum(len(item["d"]["B"]) for item in puts if "d" in item))

    client.meta.events.register("provide-client-params.dynamodb.TransactWriteItems", payload_bytes)
    rng = random.Random(7)
    messages: list[dict[str, Any]] = []
    config: dict[str, Any] = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
    version = None
    counter = CallCounter(client)
    for step in range(100):
        role = "user" if step % 2 else "assistant"
        messages.append({"role": role, "step": step, "text": rng.randbytes(17_500).hex()})
        version = s.get_next_version(version)
        cp = make_cp(messages=list(messages), step=step)
        cp["v"] = 4
        cp["channel_versions"] = {"messages": version, "step": version}
        config = s.put(config, cp, {"source": "loop", "step": step}, {"messages": version})
        if step % 30 == 29 or step == 99:
            s.prune(["long"])
    calls = counter.reset()
    assert calls["TransactWriteItems"] == 100 and not counter.failed
    assert sum(len(m["text"]) for m in messages) == 3_500_000
    # most puts carry one message (35 KB); the full copies stay under one transaction
    assert sorted(sizes)[len(sizes) // 2] < 100_000
    assert 3_000_000 < max(sizes) < TRANSACTION_BYTES
    assert max(sizes) > ITEM_LIMIT  # the full copies are chunked
    tup = s.get_tuple(cfg("long"))
    assert counter.reset() == {"Query": 1, "BatchGetItem": 1}
    assert tup is not None and tup.checkpoint["channel_values"]["messages"] == messages
    fresh = DynamoDBSaver(client, table=dynamodb_table).get_tuple(cfg("long"))
    assert fresh is not None and fresh.checkpoint["channel_values"]["messages"] == messages
    deltas, fulls, _ = blob_kinds(s, "long")
    assert deltas > 0 and fulls == 1  # the latest chain


def test_chain_memory_knows_whole_chains_only() -> None:
    memory = ChainMemory(capacity=5)
    scope = ("default", "t", "")
    memory.remember(scope, "messages", "v1", 2, None)
    memory.remember(scope, "messages", "v2", 0, (("v1", 2),))
    memory.remember(scope, "messages", "v3", 0, (("v2", 0), ("v1", 2)))
    assert memory.lookup(scope, "messages", "v3") == (0, (("v2", 0), ("v1", 2)))
    assert memory.lookup(scope, "messages", "v1") == (2, ())
    assert memory.lookup(scope, "other", "v1") is None
    # a reader learns a chain whole from one item
    memory.remember(scope, "log", "w9", 1, (("w8", 0), ("w7", 3)))
    assert memory.lookup(scope, "log", "w8") == (0, (("w7", 3),))
    # capacity 5: the least recently used (v3) went, then a link of v2's chain
    assert memory.lookup(scope, "messages", "v3") is None
    memory.remember(scope, "log", "w10", 0, (("w9", 1), ("w8", 0), ("w7", 3)))
    assert memory.lookup(scope, "messages", "v2") is None  # v2 or v1 forgotten
    memory.forget_thread("default", "t")
    assert memory.lookup(scope, "log", "w9") is None


def test_delta_attributes_and_refs_round_trip() -> None:
    attrs = delta_attributes("v2", 7, (("v2", 0), ("v1", 3)))
    item = {"pk": {"S": "p"}, "sk": {"S": "b##messages#v3"}, **attrs}
    assert item_chain(item, "x") == (("v2", 0), ("v1", 3))
    assert item_chain({"pk": {"S": "p"}}, "x") is None
    with pytest.raises(CorruptRecordError, match="does not start at its base"):
        item_chain({**item, "bv": {"S": "v9"}}, "x")
    refs = json.dumps([refs_entry("a", "1", 0, None), refs_entry("m", "3", 2, (("2", 0),))])
    assert parse_refs(refs) == [("a", "1", 0, None), ("m", "3", 2, (("2", 0),))]
    assert parse_refs('[["a","1",-1]]') == [("a", "1", -1, None)]  # as written before deltas
