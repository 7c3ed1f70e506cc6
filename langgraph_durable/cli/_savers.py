"""Which saver a URL names, and the keyring from the environment, for the commands.

``setup``, ``rotate-keys``, ``shred``, ``prune`` and ``verify`` work on any backend: the
URL's scheme picks the sync saver (``postgresql://`` -> ``PostgresSaver``, ``redis://``
-> ``RedisSaver``, ``dynamodb://`` -> ``DynamoDBSaver``). The keyring comes from the same
variables the Agent Server factories read
(:func:`langgraph_durable._server.encryption_from_env`), so a cron job set up like the
server rotates the server's keys.

Nothing here imports a driver, LangGraph or the encryption code at module import time.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from langgraph_durable.cli._common import CommandError, mask_url

if TYPE_CHECKING:
    from langgraph_durable.protect import Encryption

__all__ = [
    "URL_ENV_VARS",
    "Target",
    "add_target_arguments",
    "encryption_required",
    "open_saver",
    "resolve_target",
]

#: Variables read, in this order, when a command gets no ``--url`` (at most one set).
URL_ENV_VARS = ("LGD_POSTGRES_URL", "LGD_REDIS_URL", "LGD_DYNAMODB_URL")

_BACKENDS = {
    "postgresql": "postgres",
    "postgres": "postgres",
    "redis": "redis",
    "rediss": "redis",
    "unix": "redis",
    "redis+cluster": "redis",
    "rediss+cluster": "redis",
    "dynamodb": "dynamodb",
}
_SCHEMA_ENV = "LGD_POSTGRES_SCHEMA"
_PREFIX_ENV = "LGD_REDIS_PREFIX"
_KEY_ENV_HELP = (
    "set $LGD_KEYRING (ID=BASE64[,ID=BASE64...], the first key active) "
    "or $LGD_KMS_KEY_ID (an AWS KMS key id, ARN or alias)"
)


@dataclass(frozen=True)
class Target:
    """A resolved storage location.

    Attributes:
        backend: ``"postgres"``, ``"redis"`` or ``"dynamodb"``.
        url: The connection URL (with its password; never print it, print :attr:`where`).
        schema: The PostgreSQL schema, or ``None`` for the saver's default.
        prefix: The Redis key prefix, or ``None`` for the saver's default.
    """

    backend: str
    url: str
    schema: str | None = None
    prefix: str | None = None

    @property
    def where(self) -> str:
        """The location for messages: the namespace and the URL, password masked."""
        if self.backend == "postgres":
            space = f"schema {self.schema or 'langgraph_durable'!r}"
        elif self.backend == "redis":
            space = f"prefix {self.prefix or 'lgd'!r}"
        else:
            space = f"table {urlsplit(self.url).netloc!r}"
        return f"{space} at {mask_url(self.url)}"


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--url``, ``--schema`` and ``--prefix`` to a command's parser.

    Args:
        parser: The subcommand's parser.
    """
    names = ", ".join(f"${name}" for name in URL_ENV_VARS)
    parser.add_argument(
        "--url",
        help=(
            "postgresql://, redis://, rediss://, redis+cluster:// or dynamodb://TABLE?... URL "
            f"(default: whichever of {names} is set)"
        ),
    )
    parser.add_argument(
        "--schema",
        help=f"PostgreSQL schema of the saver's tables (default: ${_SCHEMA_ENV}, "
        "else langgraph_durable)",
    )
    parser.add_argument(
        "--prefix",
        help=f"Redis key prefix of the saver (default: ${_PREFIX_ENV}, else lgd)",
    )


def backend_of(url: str) -> str:
    """The backend a connection URL names.

    Args:
        url: A ``postgresql://``, ``redis://`` (and variants) or ``dynamodb://`` URL, or a
            libpq ``key=value`` string.

    Returns:
        ``"postgres"``, ``"redis"`` or ``"dynamodb"``.

    Raises:
        CommandError: The scheme is none of those.
    """
    scheme, sep, _ = url.partition("://")
    if not sep:
        if "=" in url:
            return "postgres"  # libpq key=value string
        raise CommandError(
            f"{mask_url(url)!r} is not a URL: use postgresql://..., redis://..., "
            "rediss://..., redis+cluster://... or dynamodb://TABLE?region=..."
        )
    backend = _BACKENDS.get(scheme.lower())
    if backend is None:
        raise CommandError(
            f"unsupported URL scheme {scheme + '://'!r} in {mask_url(url)}: use "
            "postgresql://, postgres://, redis://, rediss://, redis+cluster:// or dynamodb://"
        )
    return backend


def resolve_target(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Target:
    """The storage a command works on, from its options and the environment.

    Args:
        args: Parsed options ``url``, ``schema`` and ``prefix``.
        env: The environment (default: ``os.environ``).

    Returns:
        The target.

    Raises:
        CommandError: No URL (or several candidates), an unsupported scheme, or an
            option that does not apply to the URL's backend.
    """
    env = os.environ if env is None else env
    url = args.url
    if not url:
        found = [name for name in URL_ENV_VARS if env.get(name, "").strip()]
        if not found:
            names = ", ".join(f"${name}" for name in URL_ENV_VARS)
            raise CommandError(f"{args.command} needs a database: pass --url or set one of {names}")
        if len(found) > 1:
            names = ", ".join(f"${name}" for name in found)
            raise CommandError(f"{names} are all set: pass --url to say which storage to use")
        url = env[found[0]].strip()
    backend = backend_of(url)
    if args.schema is not None and backend != "postgres":
        raise CommandError("--schema applies to PostgreSQL URLs only")
    if args.prefix is not None and backend != "redis":
        raise CommandError("--prefix applies to Redis URLs only")
    schema = prefix = None
    if backend == "postgres":
        schema = args.schema or env.get(_SCHEMA_ENV, "").strip() or None
        if schema is not None:
            from langgraph_durable.postgres._schema import validate_schema_name

            schema = validate_schema_name(schema)
    elif backend == "redis":
        prefix = args.prefix or env.get(_PREFIX_ENV, "").strip() or None
    return Target(backend, url, schema, prefix)


def encryption_required(command: str, env: Mapping[str, str] | None = None) -> Encryption:
    """The encryption settings (keyring) from the environment, which ``command`` needs.

    Args:
        command: The command name, for the message.
        env: The environment (default: ``os.environ``).

    Returns:
        The :class:`~langgraph_durable.protect.Encryption` of
        :func:`langgraph_durable._server.encryption_from_env`.

    Raises:
        CommandError: Neither ``LGD_KEYRING`` nor ``LGD_KMS_KEY_ID`` is set.
        ConfigurationError: A keyring variable is malformed, or both are set.
    """
    from langgraph_durable._server import encryption_from_env

    encryption = encryption_from_env(os.environ if env is None else env)
    if encryption is None:
        raise CommandError(f"{command} needs the keyring: {_KEY_ENV_HELP}")
    return encryption


@contextmanager
def open_saver(
    target: Target, encryption: Encryption | None, integrity: Any = None
) -> Iterator[Any]:
    """Open the sync saver of ``target`` with ``encryption`` (or none); close it on exit.

    No migration or table creation is run: a missing schema or table is reported by
    the saver's first call.

    Args:
        target: Where the saver's data is.
        encryption: The saver's encryption settings.
        integrity: The chain key; default: ``LGD_INTEGRITY_KEY`` when it is set
            (so a pruner's trim tombstones are signed).

    Yields:
        A ``PostgresSaver``, ``RedisSaver`` or ``DynamoDBSaver``.
    """
    if integrity is None:
        from langgraph_durable.protect.integrity import integrity_from_env

        integrity = integrity_from_env()
    if target.backend == "postgres":
        from langgraph_durable.postgres import PostgresSaver

        # The saver connects once before opening its pool: an unreachable server fails
        # here, at once, with one clear error.
        pg_options: dict[str, Any] = {
            "pool_size": 1,
            "encryption": encryption,
            "integrity": integrity,
        }
        if target.schema is not None:
            pg_options["schema"] = target.schema
        signing_key = os.environ.get("LGD_TENANT_SIGNING_KEY", "").strip()
        if signing_key:  # signed tenants: setup() stores the key (docs/postgres.md)
            pg_options["row_level_security"] = True
            pg_options["tenant_signing_key"] = signing_key
        with PostgresSaver.from_conn_string(target.url, **pg_options) as saver:
            yield saver
    elif target.backend == "redis":
        from langgraph_durable.redis import RedisSaver

        redis_options: dict[str, Any] = {"encryption": encryption, "integrity": integrity}
        if target.prefix is not None:
            redis_options["prefix"] = target.prefix
        with RedisSaver.from_conn_string(target.url, **redis_options) as saver:
            yield saver
    else:
        from langgraph_durable.dynamodb import DynamoDBSaver

        with DynamoDBSaver.from_conn_string(
            target.url, encryption=encryption, integrity=integrity
        ) as saver:
            yield saver
