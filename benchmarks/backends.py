"""Where each saver under test keeps its data, and how it is opened, sized and cleaned up.

One object per storage backend: PostgreSQL (a schema per saver), Redis (a key prefix per
saver), DynamoDB (a table per saver, on moto unless an endpoint is given) and memory. A
``place`` is the name of that schema, prefix or table; every place is made for one
measurement and removed at its end.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from psycopg.conninfo import conninfo_to_dict, make_conninfo
from savers import (
    SaverSpec,
    add_old_partitions,
    admin_connect,
    backend_pids,
    drop_schema,
    open_async,
    open_sync,
    schema_bytes,
)

HERE = Path(__file__).resolve().parent
Via = tuple[str, int] | None  # connect through this (host, port) instead: the counting relay


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


class Backend:
    """What every backend provides; the defaults are those of a backend without a server."""

    name = "memory"
    relay = False  # True: round trips are counted by the TCP relay; else API calls are
    warmups = 2  # calls of each kind made before counting
    server_comm = ""  # command name of the server process, for its CPU time
    # checkpoint_ns given to list(): None lists with a thread-only config; "" lists the
    # root namespace, as graph.get_state_history() asks for it.
    list_ns: str | None = ""

    def place(self, spec: SaverSpec, mode: str, tag: str) -> str:
        return f"{spec.name}-{mode}-{tag}"

    def open_sync(
        self, spec: SaverSpec, place: str, pool_size: int, via: Via = None
    ) -> contextlib.AbstractContextManager[Any]:
        return _memory()

    def open_async(
        self, spec: SaverSpec, place: str, pool_size: int, via: Via = None
    ) -> contextlib.AbstractAsyncContextManager[Any]:
        raise ValueError(f"{spec.name} has no async flavour")

    def after_open(self, spec: SaverSpec, place: str, settings: Any) -> int | None:
        """Extra preparation of a freshly opened place; returns a partition count or None."""
        return None

    def drop(self, place: str) -> None:
        pass

    def size(self, place: str) -> int | None:
        return None

    def server_pids(self, place: str) -> list[int]:
        return []

    def relay_target(self) -> tuple[str, int]:
        raise NotImplementedError

    def clients(self, saver: Any) -> list[Any]:
        """boto3 clients of a saver, for counting API calls (DynamoDB only)."""
        return []

    def describe(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


@contextlib.contextmanager
def _memory() -> Iterator[Any]:
    from langgraph.checkpoint.memory import InMemorySaver

    yield InMemorySaver()


# --------------------------------------------------------------------------- PostgreSQL


class PostgresBackend(Backend):
    """A fresh schema per saver; connections tagged with the schema's name."""

    name = "postgres"
    relay = True
    warmups = 8  # past psycopg's prepare threshold on every connection
    server_comm = "postgres"
    list_ns = None  # as the PostgreSQL figures have always been measured

    def __init__(self, url: str) -> None:
        self.url = url

    def place(self, spec: SaverSpec, mode: str, tag: str) -> str:
        return f"lgd_bench_{spec.name.replace('-', '_')}_{mode}_{tag}"

    def _url(self, place: str, via: Via) -> str:
        url = self.url
        if via is not None:
            params = conninfo_to_dict(url)
            params.pop("hostaddr", None)
            params.update(host=via[0], port=str(via[1]), sslmode="disable")
            url = make_conninfo(**params)
        # Tag the saver's connections so that their server processes can be found.
        return make_conninfo(url, application_name=place)

    def open_sync(
        self, spec: SaverSpec, place: str, pool_size: int, via: Via = None
    ) -> contextlib.AbstractContextManager[Any]:
        drop_schema(self.url, place)
        return open_sync(spec, self._url(place, via), place, pool_size)

    def open_async(
        self, spec: SaverSpec, place: str, pool_size: int, via: Via = None
    ) -> contextlib.AbstractAsyncContextManager[Any]:
        drop_schema(self.url, place)
        return open_async(spec, self._url(place, via), place, pool_size)

    def after_open(self, spec: SaverSpec, place: str, settings: Any) -> int | None:
        if spec.kind == "ours" and settings.ours_partitions:
            return add_old_partitions(self.url, place, settings.ours_partitions)
        return None

    def drop(self, place: str) -> None:
        drop_schema(self.url, place)

    def size(self, place: str) -> int | None:
        return schema_bytes(self.url, place)

    def server_pids(self, place: str) -> list[int]:
        return backend_pids(self.url, place)

    def relay_target(self) -> tuple[str, int]:
        params = conninfo_to_dict(self.url)
        host = str(params.get("host") or "127.0.0.1").split(",")[0]
        port = int(str(params.get("port") or 5432).split(",")[0])
        return host, port

    def describe(self) -> dict[str, Any]:
        env: dict[str, Any] = {}
        try:
            with admin_connect(self.url) as conn:
                env["postgres"] = conn.execute("SHOW server_version").fetchone()[0]
                for name in ("shared_buffers", "synchronous_commit", "fsync", "max_connections"):
                    env.setdefault("postgres_settings", {})[name] = conn.execute(
                        f"SHOW {name}"
                    ).fetchone()[0]
        except Exception as exc:  # noqa: BLE001
            env["postgres"] = f"unavailable: {exc}"
        return env


# --------------------------------------------------------------------------- Redis


class RedisBackend(Backend):
    """One Redis server and database; every saver on a key prefix of its own.

    Both our savers and langgraph-checkpoint-plainredis take a key prefix, so each saver
    of a run writes only keys under ``<place>:``; those keys (and nothing else) are
    deleted when the measurement ends. Every saver gets a redis-py client on a
    ``BlockingConnectionPool`` of ``pool_size`` connections.
    """

    name = "redis"
    relay = True
    server_comm = "redis-server"
    relay_recv = 1 << 20  # read whole pipelines at once (see instrument.RoundTripProxy)

    def __init__(self, url: str) -> None:
        self.url = url

    def place(self, spec: SaverSpec, mode: str, tag: str) -> str:
        return f"lgdbench-{spec.name}-{mode}-{tag}"

    def _url(self, via: Via) -> str:
        if via is None:
            return self.url
        parts = urlsplit(self.url)
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@{via[0]}:{via[1]}" if auth else f"{via[0]}:{via[1]}"
        return urlunsplit(parts._replace(netloc=netloc))

    def _admin(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url)

    @contextlib.contextmanager
    def open_sync(  # type: ignore[override]
        self, spec: SaverSpec, place: str, pool_size: int, via: Via = None
    ) -> Iterator[Any]:
        import redis

        self.drop(place)
        if spec.from_url:  # the saver's own client: its pool, its retry, its script path
            from langgraph_durable.redis import RedisSaver

            with RedisSaver.from_conn_string(
                self._url(via), prefix=place, pool_size=pool_size, **spec.kwargs()
            ) as opened:
                opened.setup()
                yield opened
            return
        extra = {} if via is None else {"connection_class": _one_write_connection()}
        pool = redis.BlockingConnectionPool.from_url(
            self._url(via), max_connections=pool_size, timeout=60, **extra
        )
        client = redis.Redis(connection_pool=pool)
        try:
            if spec.kind == "ours":
                from langgraph_durable.redis import RedisSaver

                saver = RedisSaver(client, prefix=place, **spec.kwargs())
                saver.setup()
            else:
                from langgraph_checkpoint_plainredis import RedisSaver as PlainRedisSaver

                saver = PlainRedisSaver(client, prefix=place)  # no setup step
            yield saver
        finally:
            client.close()
            pool.disconnect()

    @contextlib.asynccontextmanager
    async def open_async(  # type: ignore[override]
        self, spec: SaverSpec, place: str, pool_size: int, via: Via = None
    ) -> AsyncIterator[Any]:
        import redis.asyncio

        self.drop(place)
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            self._url(via), max_connections=pool_size, timeout=60
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        try:
            if spec.kind == "ours":
                from langgraph_durable.redis import AsyncRedisSaver

                saver = AsyncRedisSaver(client, prefix=place, **spec.kwargs())
                await saver.setup()
            else:
                from langgraph_checkpoint_plainredis import AsyncRedisSaver as PlainAsync

                saver = PlainAsync(client, prefix=place)
            yield saver
        finally:
            await client.aclose()
            await pool.disconnect()

    def _keys(self, client: Any, place: str) -> Iterator[list[bytes]]:
        """The keys under ``<place>:``, in batches."""
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in place) + ":*"
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                yield batch
                batch = []
        if batch:
            yield batch

    def drop(self, place: str) -> None:
        with self._admin() as client:
            for batch in self._keys(client, place):
                client.unlink(*batch)

    def size(self, place: str) -> int | None:
        """Bytes Redis uses for the saver's keys (``MEMORY USAGE ... SAMPLES 0``, summed)."""
        total = 0
        with self._admin() as client:
            for batch in self._keys(client, place):
                pipe = client.pipeline(transaction=False)
                for key in batch:
                    pipe.memory_usage(key, samples=0)
                total += sum(int(v or 0) for v in pipe.execute())
        return total

    def server_pids(self, place: str) -> list[int]:
        try:
            with self._admin() as client:
                return [int(client.info("server")["process_id"])]
        except Exception:  # noqa: BLE001
            return []

    def relay_target(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        return parts.hostname or "127.0.0.1", parts.port or 6379

    def describe(self) -> dict[str, Any]:
        env: dict[str, Any] = {}
        try:
            with self._admin() as client:
                info = client.info("server")
                env["redis"] = info.get("redis_version")
                env["redis_settings"] = {
                    k: v
                    for name in ("maxmemory-policy", "appendonly", "save", "io-threads")
                    for k, v in client.config_get(name).items()
                }
                env["redis_db"] = client.connection_pool.connection_kwargs.get("db", 0)
        except Exception as exc:  # noqa: BLE001
            env["redis"] = f"unavailable: {exc}"
        return env


def _one_write_connection() -> type:
    """A redis-py connection that writes each request (a pipeline too) in one ``sendall``.

    Used only through the counting relay. redis-py's sync connection writes a
    pipeline's large values with separate ``sendall`` calls (its asyncio connection
    writes them at once); in between, the server may already answer the first commands
    (``+QUEUED``), which the relay cannot tell from an answer the client waited for. One
    write per request puts the whole burst on the wire at once; the bytes are the same.
    """
    import redis

    class OneWriteConnection(redis.Connection):
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            if isinstance(command, (list, tuple)):
                command = [b"".join(bytes(c) for c in command)]
            super().send_packed_command(command, check_health)

    return OneWriteConnection


# --------------------------------------------------------------------------- DynamoDB

REGION = "us-east-1"


class MotoProcess:
    """``moto_server.py`` as a child process; its port read from its first line."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "moto_server.py")],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(
                "the moto server did not start (pip install 'moto[server]'), or pass "
                "--dynamodb-endpoint"
            )
        self.url = f"http://127.0.0.1:{int(line)}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class DynamoDBBackend(Backend):
    """A table per saver on a DynamoDB endpoint: a moto server of our own unless given.

    Ours: ``DynamoDBSaver(client, table=place)`` and ``setup()``, which creates the table;
    its client has botocore's retries off, as docs/dynamodb.md advises (the saver retries
    itself). langgraph-checkpoint-aws: a table with ``PK``/``SK`` string keys (on-demand)
    created here as its documentation describes, and an S3 bucket for its large-payload
    offload (used only above 350 KB); it makes its own clients, with its default config.
    """

    name = "dynamodb"

    def __init__(self, endpoint: str | None) -> None:
        self._given = endpoint or None
        self._moto: MotoProcess | None = None
        self._session: Any = None

    @property
    def endpoint(self) -> str:
        if self._given:
            return self._given
        if self._moto is None:
            self._moto = MotoProcess()
        return self._moto.url

    @property
    def session(self) -> Any:
        import boto3

        if self._session is None:
            if self._given:
                self._session = boto3.Session(region_name=REGION)
            else:  # moto accepts any credentials
                self._session = boto3.Session(
                    aws_access_key_id="bench", aws_secret_access_key="bench", region_name=REGION
                )
        return self._session

    def client(self, service: str, pool: int = 10, retries: int | None = None) -> Any:
        from botocore.config import Config

        cfg: dict[str, Any] = {"max_pool_connections": max(10, pool)}
        if retries is not None:
            cfg["retries"] = {"total_max_attempts": retries, "mode": "standard"}
        return self.session.client(service, endpoint_url=self.endpoint, config=Config(**cfg))

    def place(self, spec: SaverSpec, mode: str, tag: str) -> str:
        return f"lgdbench-{spec.name}-{mode}-{tag}"

    def _create_theirs(self, place: str) -> None:
        ddb = self.client("dynamodb")
        try:
            ddb.create_table(
                TableName=place,
                KeySchema=[
                    {"AttributeName": "PK", "KeyType": "HASH"},
                    {"AttributeName": "SK", "KeyType": "RANGE"},
                ],
                AttributeDefinitions=[
                    {"AttributeName": "PK", "AttributeType": "S"},
                    {"AttributeName": "SK", "AttributeType": "S"},
                ],
                BillingMode="PAY_PER_REQUEST",
            )
            ddb.get_waiter("table_exists").wait(
                TableName=place, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
            )
        finally:
            ddb.close()
        s3 = self.client("s3")
        try:
            s3.create_bucket(Bucket=place)
        finally:
            s3.close()

    def _theirs(self, place: str) -> Any:
        from langgraph_checkpoint_aws import DynamoDBSaver as AwsSaver

        self._create_theirs(place)
        return AwsSaver(
            table_name=place,
            session=self.session,
            region_name=REGION,
            endpoint_url=self.endpoint,
            s3_offload_config={"bucket_name": place, "endpoint_url": self.endpoint},
        )

    @staticmethod
    def _close_theirs(saver: Any) -> None:
        for client in DynamoDBBackend._their_clients(saver):
            client.close()

    @staticmethod
    def _their_clients(saver: Any) -> list[Any]:
        s3 = getattr(getattr(saver, "storage", None), "s3_client", None)
        return [saver.client] + ([s3] if s3 is not None else [])

    @contextlib.contextmanager
    def open_sync(  # type: ignore[override]
        self, spec: SaverSpec, place: str, pool_size: int, via: Via = None
    ) -> Iterator[Any]:
        self.drop(place)
        if spec.kind == "ours":
            from langgraph_durable.dynamodb import DynamoDBSaver

            client = self.client("dynamodb", pool=2 * pool_size, retries=1)
            saver = DynamoDBSaver(client, table=place, **spec.kwargs())
            try:
                saver.setup()
                yield saver
            finally:
                saver.close()
                client.close()
        else:
            saver = self._theirs(place)
            try:
                yield saver
            finally:
                self._close_theirs(saver)

    @contextlib.asynccontextmanager
    async def open_async(  # type: ignore[override]
        self, spec: SaverSpec, place: str, pool_size: int, via: Via = None
    ) -> AsyncIterator[Any]:
        self.drop(place)
        if spec.kind == "ours":
            from langgraph_durable.dynamodb import AsyncDynamoDBSaver

            client = self.client("dynamodb", pool=2 * pool_size, retries=1)
            saver = AsyncDynamoDBSaver(client, table=place, **spec.kwargs())
            try:
                await saver.setup()
                yield saver
            finally:
                await saver.close()
                client.close()
        else:
            # One class serves both: its a* methods run the sync ones in an executor.
            saver = self._theirs(place)
            try:
                yield saver
            finally:
                self._close_theirs(saver)

    def drop(self, place: str) -> None:
        from botocore.exceptions import ClientError

        ddb = self.client("dynamodb")
        try:
            ddb.delete_table(TableName=place)
        except ClientError:
            pass
        finally:
            ddb.close()
        s3 = self.client("s3")
        try:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=place):
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    s3.delete_objects(Bucket=place, Delete={"Objects": keys})
            s3.delete_bucket(Bucket=place)
        except ClientError:
            pass
        finally:
            s3.close()

    def size(self, place: str) -> int | None:
        """Bytes of the saver's items by DynamoDB's item-size rules (a ``Scan`` of its
        table, as ``instrument.item_size``), plus the objects in its S3 bucket (the aws
        saver's offload of payloads over 350 KB; ours has no bucket)."""
        from botocore.exceptions import ClientError
        from instrument import item_size

        total = 0
        ddb = self.client("dynamodb")
        try:
            for page in ddb.get_paginator("scan").paginate(TableName=place):
                total += sum(item_size(item) for item in page.get("Items", []))
        finally:
            ddb.close()
        s3 = self.client("s3")
        try:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=place):
                total += sum(int(obj["Size"]) for obj in page.get("Contents", []))
        except ClientError:  # no bucket: nothing offloaded
            pass
        finally:
            s3.close()
        return total

    def clients(self, saver: Any) -> list[Any]:
        if type(saver).__module__.startswith("langgraph_checkpoint_aws"):
            return self._their_clients(saver)
        return [saver.client]

    def describe(self) -> dict[str, Any]:
        return {
            "dynamodb": self._given
            or f"moto {_version('moto')} server in a child process (requests one at a time)",
            "region": REGION,
        }

    def close(self) -> None:
        if self._moto is not None:
            self._moto.stop()
            self._moto = None


def make_backends(pg_url: str, redis_url: str, dynamodb_endpoint: str | None) -> dict[str, Backend]:
    return {
        "postgres": PostgresBackend(pg_url),
        "redis": RedisBackend(redis_url),
        "dynamodb": DynamoDBBackend(dynamodb_endpoint),
        "memory": Backend(),
    }
