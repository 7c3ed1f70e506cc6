"""``langgraph-durable forget``: the deletion endpoint for a subject's long-term memory.

Removes a tenant's store items (all of them, or those under one namespace prefix
given as ``--namespace a/b``) and, with ``--thread``, those threads of the tenant
(checkpoints, writes, effect journal: the saver's ``delete_thread``), and reports
what it removed: items per namespace, and which of the asked threads existed.

How (PostgreSQL, Redis): the tenant's namespaces are listed (``list_namespaces``)
and deleted deepest first with ``delete_namespace``, so each count is the items of
exactly that namespace; with ``--namespace`` a last ``delete_namespace`` of the
prefix itself takes what the listing did not show (items put meanwhile, or already
expired and not yet swept). Namespaces put while it runs are found by a second
listing. A dry run counts the items it would remove by reading them (``search``,
which needs the keyring when values are encrypted: ``LGD_KEYRING`` /
``LGD_KMS_KEY_ID``) and changes nothing; items already expired are not counted
(they are never returned; the next ``prune`` sweeps them).

How (DynamoDB): one pass over the tenant's namespace index under the prefix (a
paged Query, whatever the number of namespaces), then transactions of 100
actions deleting the items with their index items, each item counted in its
namespace only if it was still stored; passes repeat until the index holds
nothing under the prefix (items put meanwhile go too). Expired items still stored
go too. A dry run counts the live entries of the index (one Query; no item is
read, so no keyring is needed).

Exit codes: 0 done (also when there was nothing to remove), 2 bad usage (an empty
tenant, a namespace with an empty label or a ``.`` in a label, no storage), 1 an
error of the store (the report says what was removed before it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

from langgraph_durable.cli._common import CommandError, one_line, plural, say
from langgraph_durable.cli._savers import Target, add_target_arguments, open_saver, resolve_target

__all__ = [
    "EXIT_ERROR",
    "ForgetReport",
    "add_parser",
    "forget",
    "open_store",
    "parse_namespace",
    "store_class",
    "run_forget",
]

#: Exit code when the store failed (unreachable, refused, corrupt).
EXIT_ERROR = 1
#: Namespaces a text report lists (the counts cover them all).
_LISTED = 50
#: Page size of the namespace listings and of a dry run's searches.
_PAGE = 1000
#: Listings after the first: namespaces put while ``forget`` runs are removed too.
_PASSES = 3


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register the ``forget`` subcommand."""
    parser = subparsers.add_parser(
        "forget",
        help="delete a tenant's long-term memory (store items) and, when asked, threads",
        description=(
            "The deletion endpoint: remove every store item of --tenant (or only those "
            "under --namespace a/b) and, with --thread, those threads of the tenant, and "
            "report what was removed (items per namespace, threads). --dry-run reports "
            "what a run would remove and changes nothing (on PostgreSQL and Redis counting "
            "reads the items: encrypted values need $LGD_KEYRING or $LGD_KMS_KEY_ID). "
            "Exit codes: 0 done, "
            "2 bad usage, 1 error of the store."
        ),
    )
    add_target_arguments(parser)
    parser.add_argument("--tenant", required=True, help="the tenant (subject) to forget")
    parser.add_argument(
        "--namespace",
        help="only the items under this namespace prefix, labels separated by '/' "
        "(default: every item of the tenant)",
    )
    parser.add_argument(
        "--thread",
        action="append",
        default=[],
        metavar="ID",
        help="also delete this thread of the tenant (repeat for more)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="change nothing; report what a run would remove"
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON line")
    parser.set_defaults(handler=run_forget)


def parse_namespace(text: str) -> tuple[str, ...]:
    """``a/b`` as the namespace prefix ``("a", "b")``, checked by LangGraph's label rules.

    Raises:
        CommandError: An empty text or label (``a//b``, ``/a``, ``a/``), or a label
            holding ``.`` or NUL.
    """
    if not text.strip():
        raise CommandError("--namespace must not be empty (omit it to forget every item)")
    labels = tuple(text.split("/"))
    for label in labels:
        if not label:
            raise CommandError(
                f"--namespace {text!r} has an empty label: write labels separated by "
                "single '/' (e.g. users/42/memories)"
            )
        if "." in label or "\x00" in label:
            raise CommandError(
                f"--namespace {text!r}: label {label!r} holds a period or a NUL byte, "
                "which namespace labels cannot hold"
            )
    return labels


def _check_args(args: argparse.Namespace) -> tuple[str, tuple[str, ...] | None, list[str]]:
    tenant = args.tenant
    if not tenant or not tenant.strip():
        raise CommandError("--tenant must not be empty")
    if tenant != tenant.strip():
        raise CommandError(f"--tenant {tenant!r} starts or ends with white space")
    prefix = None if args.namespace is None else parse_namespace(args.namespace)
    threads: list[str] = []
    for thread in args.thread:
        if not thread.strip():
            raise CommandError("--thread must not be empty")
        if thread not in threads:
            threads.append(thread)
    return tenant, prefix, threads


def store_class(backend: str) -> type[Any]:
    """The sync store class of ``backend`` (``postgres``, ``redis`` or ``dynamodb``)."""
    if backend == "postgres":
        from langgraph_durable.postgres import PostgresStore

        return PostgresStore
    if backend == "redis":
        from langgraph_durable.redis import RedisStore

        return RedisStore
    from langgraph_durable.dynamodb import DynamoDBStore

    return DynamoDBStore


@contextmanager
def open_store(target: Target, encryption: Any = None, tenant: str | None = None) -> Iterator[Any]:
    """Open the sync store of ``target`` for ``tenant``; close it on exit.

    No migration or table creation is run. Same options as :func:`open_saver`
    (the schema or prefix of the target; on PostgreSQL row-level security with
    signed tenants when ``LGD_TENANT_SIGNING_KEY`` is set).

    Args:
        target: Where the store's data is.
        encryption: The store's encryption settings (None: none; deleting and
            sweeping need no keys).
        tenant: The tenant the store's calls work on (None: the default tenant).

    Yields:
        A ``PostgresStore``, ``RedisStore`` or ``DynamoDBStore``.
    """
    options: dict[str, Any] = {"encryption": encryption}
    if tenant is not None:
        options["tenant"] = tenant
    if target.backend == "postgres":
        options["pool_size"] = 1
        if target.schema is not None:
            options["schema"] = target.schema
        signing_key = os.environ.get("LGD_TENANT_SIGNING_KEY", "").strip()
        if signing_key:
            options["row_level_security"] = True
            options["tenant_signing_key"] = signing_key
    elif target.backend == "redis" and target.prefix is not None:
        options["prefix"] = target.prefix
    with store_class(target.backend).from_conn_string(target.url, **options) as store:
        yield store


@dataclass
class ForgetReport:
    """What ``forget`` removed (or, in a dry run, would remove).

    Attributes:
        tenant: The tenant.
        prefix: The namespace prefix, or None for every item of the tenant.
        dry_run: Nothing was changed.
        namespaces: Items removed per namespace (exactly that namespace's items).
        threads: The asked thread ids, each with whether it was stored.
        seconds: Wall time.
    """

    tenant: str
    prefix: tuple[str, ...] | None
    dry_run: bool
    namespaces: dict[tuple[str, ...], int] = field(default_factory=dict)
    threads: dict[str, bool] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def items(self) -> int:
        """Items removed in all."""
        return sum(self.namespaces.values())

    @property
    def threads_removed(self) -> int:
        """Asked threads that were stored (and removed, unless a dry run)."""
        return sum(self.threads.values())

    def add(self, namespace: tuple[str, ...], count: int) -> None:
        if count:
            self.namespaces[namespace] = self.namespaces.get(namespace, 0) + count

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-able data (namespaces as lists of labels, sorted)."""
        return {
            "tenant": self.tenant,
            "namespace": None if self.prefix is None else list(self.prefix),
            "dry_run": self.dry_run,
            "items": self.items,
            "namespaces": [
                {"namespace": list(ns), "items": n} for ns, n in sorted(self.namespaces.items())
            ],
            "threads": [{"thread_id": t, "found": found} for t, found in self.threads.items()],
            "threads_removed": self.threads_removed,
            "seconds": round(self.seconds, 3),
        }


def _namespaces(store: Any, prefix: tuple[str, ...] | None) -> list[tuple[str, ...]]:
    """Every namespace of the store's tenant under ``prefix`` (all pages)."""
    found: list[tuple[str, ...]] = []
    while True:
        page = store.list_namespaces(prefix=prefix, limit=_PAGE, offset=len(found))
        found.extend(tuple(ns) for ns in page)
        if len(page) < _PAGE:
            return found


def _count(store: Any, namespace: tuple[str, ...]) -> int:
    """Live items stored in exactly ``namespace`` (read page by page, changing nothing)."""
    count = offset = 0
    while True:
        page = store.search(namespace, limit=_PAGE, offset=offset, refresh_ttl=False)
        count += sum(1 for item in page if tuple(item.namespace) == namespace)
        offset += len(page)
        if len(page) < _PAGE:
            return count


def _counted(store: Any) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """A store's count and counted delete under a prefix (``()``: the tenant's every item),
    each returning the items per namespace, when it has them (DynamoDB: one pass over the
    tenant's namespace index); else None.

    The delete fills the dict it is given as it goes (a failure still tells what was
    deleted before it).
    """
    count, delete = getattr(store, "_count_under", None), getattr(store, "_forget_under", None)
    if count is None or delete is None:
        return None
    return count, delete


def _deepest_first(namespaces: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    return sorted(set(namespaces), key=lambda ns: (-len(ns), ns))


def forget(
    store: Any,
    saver: Any,
    tenant: str,
    prefix: tuple[str, ...] | None,
    threads: list[str],
    *,
    dry_run: bool = False,
    report: ForgetReport | None = None,
) -> ForgetReport:
    """Remove (or count) the tenant's items under ``prefix`` and the asked threads.

    Args:
        store: A sync store whose tenant is ``tenant``.
        saver: A sync saver on the same storage (used only when ``threads``).
        tenant: The tenant.
        prefix: The namespace prefix, or None for every item of the tenant.
        threads: Thread ids of the tenant to delete.
        dry_run: Count only; change nothing.
        report: Filled as the work goes (so a failure still tells what was removed).

    Returns:
        The report.
    """
    started = time.monotonic()
    report = report if report is not None else ForgetReport(tenant, prefix, dry_run)
    counted = _counted(store)
    if counted is not None:  # one pass over the tenant's index, not one call per namespace
        count, delete = counted
        found: dict[tuple[str, ...], int] = {}
        try:
            found = count(prefix or ()) if dry_run else delete(prefix or (), found)
        finally:
            for namespace, n in sorted(found.items()):
                report.add(namespace, n)
    elif dry_run:
        for namespace in _deepest_first(_namespaces(store, prefix)):
            report.add(namespace, _count(store, namespace))
    else:
        for _ in range(_PASSES):
            listed = _deepest_first(_namespaces(store, prefix))
            if not listed:
                break
            for namespace in listed:
                report.add(namespace, int(store.delete_namespace(namespace)))
        if prefix is not None:  # what no listing showed: expired items, late puts
            report.add(prefix, int(store.delete_namespace(prefix)))
    for thread in threads:
        config = {"configurable": {"thread_id": thread, "tenant_id": tenant}}
        report.threads[thread] = next(iter(saver.list(config, limit=1)), None) is not None
        if not dry_run:
            saver.delete_thread(thread, tenant_id=tenant)
    report.seconds = time.monotonic() - started
    return report


def _label(namespace: tuple[str, ...]) -> str:
    return "/".join(namespace)


def _print(out: TextIO, target: Target, report: ForgetReport) -> None:
    scope = (
        f"tenant {report.tenant!r}"
        if report.prefix is None
        else f"tenant {report.tenant!r} under {_label(report.prefix)!r}"
    )
    what = plural(report.items, "item") + " in " + plural(len(report.namespaces), "namespace")
    if report.threads:
        what += f", {plural(report.threads_removed, 'thread')}"
    if report.dry_run:
        say(out, f"Dry run on {target.where} ({scope}): a run would remove {what}.")
    else:
        say(out, f"Forgot {scope} in {target.where}: removed {what} in {report.seconds:.1f}s.")
    for namespace, count in sorted(report.namespaces.items())[:_LISTED]:
        say(out, f"  {_label(namespace)}: {plural(count, 'item')}")
    more = len(report.namespaces) - _LISTED
    if more > 0:
        say(out, f"  ... and {plural(more, 'more namespace')}")
    stored = "stored" if report.dry_run else "removed"
    for thread, found in report.threads.items():
        say(out, f"  thread {thread!r}: {stored if found else 'not stored'}")
    if report.dry_run:
        say(out, "Nothing was changed.")


def run_forget(args: argparse.Namespace, out: TextIO) -> int:
    """Run ``forget`` (see the module docstring for output and exit codes)."""
    from langgraph_durable._server import encryption_from_env
    from langgraph_durable.errors import (
        ConfigurationError,
        CorruptRecordError,
        DurableError,
        InvalidInputError,
    )

    tenant, prefix, threads = _check_args(args)
    target = resolve_target(args)
    # Deleting needs no keys; reading (a dry run's counts, a thread's existence) does
    # when values are encrypted, so the keyring is used when the environment has one.
    encryption = encryption_from_env(os.environ)
    report = ForgetReport(tenant, prefix, args.dry_run)
    try:
        with open_store(target, encryption, tenant) as store:
            if threads:
                with open_saver(target, encryption) as saver:
                    forget(
                        store, saver, tenant, prefix, threads, dry_run=args.dry_run, report=report
                    )
            else:
                forget(store, None, tenant, prefix, [], dry_run=args.dry_run, report=report)
    except (ConfigurationError, InvalidInputError, CommandError):
        raise  # bad usage: exit 2
    except DurableError as exc:
        done = "" if args.dry_run else f" (removed before it: {plural(report.items, 'item')})"
        if encryption is None and isinstance(exc, CorruptRecordError):
            done += (
                "; reading encrypted values (a dry run's counts, --thread) needs the keyring: "
                "set $LGD_KEYRING or $LGD_KMS_KEY_ID"
            )
        print(
            f"langgraph-durable forget: error: {one_line(exc)}{done}", file=sys.stderr, flush=True
        )
        if args.json:
            say(
                out,
                json.dumps(
                    {
                        "command": "forget",
                        "backend": target.backend,
                        "error": one_line(exc),
                        **report.as_dict(),
                    },
                    separators=(",", ":"),
                ),
            )
        return EXIT_ERROR
    if args.json:
        summary = {"command": "forget", "backend": target.backend, **report.as_dict()}
        say(out, json.dumps(summary, separators=(",", ":")))
    else:
        _print(out, target, report)
    return 0
