"""``langgraph-durable rotate-keys`` and ``shred``: manage the tenants' data keys.

``rotate-keys`` rewraps every stored data key under the keyring's active key (the first
key of ``$LGD_KEYRING``, or ``$LGD_KMS_KEY_ID``); records are not rewritten. It works
tenant by tenant and skips keys already under the active key, so a run that was
interrupted is finished by running it again.

``shred`` deletes a tenant's wrapped data keys: everything the tenant stored can no
longer be decrypted by anyone (crypto-shredding).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

from langgraph_durable.cli._common import (
    CommandError,
    ProgressBar,
    is_terminal,
    one_line,
    plural,
    say,
)
from langgraph_durable.cli._savers import (
    Target,
    add_target_arguments,
    encryption_required,
    open_saver,
    resolve_target,
)

if TYPE_CHECKING:
    from langgraph_durable.protect import Encryption

__all__ = ["add_parsers", "run_rotate_keys", "run_shred"]


def add_parsers(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register the ``rotate-keys`` and ``shred`` subcommands.

    Args:
        subparsers: The object returned by ``ArgumentParser.add_subparsers``.
    """
    rotate = subparsers.add_parser(
        "rotate-keys",
        help="rewrap the tenants' data keys under the keyring's active key",
        description=(
            "Rewrap every stored data key under the active key of the keyring in "
            "$LGD_KEYRING (its first key) or $LGD_KMS_KEY_ID. Checkpoints are not "
            "rewritten. Keys already under the active key are skipped, so running it "
            "again after an interruption finishes the job."
        ),
    )
    add_target_arguments(rotate)
    rotate.add_argument("--tenant", help="rotate only this tenant (default: every tenant)")
    rotate.add_argument("--json", action="store_true", help="print one JSON summary line on stdout")
    rotate.set_defaults(handler=run_rotate_keys)

    shred = subparsers.add_parser(
        "shred",
        help="crypto-shred a tenant: delete its data keys so its data can never be decrypted",
        description=(
            "Delete every wrapped data key of a tenant. Everything the tenant stored stays "
            "in place but can never be decrypted again. This cannot be undone. Asks for "
            "confirmation on a terminal unless --yes is given."
        ),
    )
    add_target_arguments(shred)
    shred.add_argument("--tenant", required=True, help="the tenant to shred")
    shred.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    shred.add_argument("--json", action="store_true", help="print one JSON summary line on stdout")
    shred.set_defaults(handler=run_shred)


def run_rotate_keys(args: argparse.Namespace, out: TextIO) -> int:
    """Rewrap the data keys of every tenant (or of ``--tenant``) under the active key.

    Args:
        args: Parsed options: ``url``, ``schema``, ``prefix``, ``tenant`` and ``json``.
        out: Where to print the summary (a progress bar goes to ``sys.stderr`` when it
            is a terminal).

    Returns:
        The exit code, 0.

    Raises:
        CommandError: No URL, an unsupported one, no keyring in the environment, or a
            data key that cannot be rewrapped (the message says how far the run got).
        DurableError: The storage cannot be reached or used.
    """
    target = resolve_target(args)
    encryption = encryption_required("rotate-keys")
    totals = {"tenants": 0, "rewrapped": 0, "current": 0}
    with open_saver(target, encryption) as saver:
        if args.tenant is not None:
            tenants = [str(args.tenant)]
        else:
            tenants = sorted(saver._run(saver._ops.data_key_tenants()))
        active = encryption.keyring.active_key_id(tenants[0] if tenants else saver.default_tenant)
        bar = ProgressBar(sys.stderr, len(tenants), "tenants")
        try:
            bar.update(0)
            for tenant in tenants:
                try:
                    result = saver.rotate_keys(tenant_id=tenant)
                except Exception as exc:
                    if not _reportable(exc):
                        raise
                    raise CommandError(
                        f"tenant {tenant!r}: {one_line(exc)} (this run rewrapped "
                        f"{plural(totals['rewrapped'], 'data key')} of "
                        f"{plural(totals['tenants'], 'tenant')} before it; run rotate-keys "
                        "again once fixed: keys already rewrapped are skipped)"
                    ) from exc
                for name in totals:
                    totals[name] += int(result[name])
                bar.update(totals["tenants"])
        finally:
            bar.close()
    if args.json:
        say(
            out,
            json.dumps(
                {
                    "command": "rotate-keys",
                    "backend": target.backend,
                    **totals,
                    "active_key": active,
                },
                separators=(",", ":"),
            ),
        )
    else:
        say(out, _rotate_sentence(target, totals, active, args.tenant))
    return 0


def _reportable(exc: Exception) -> bool:
    """Whether ``exc`` is an error of ours or of a driver (reported in one line)."""
    from langgraph_durable.errors import DurableError

    module = type(exc).__module__.partition(".")[0]
    return isinstance(exc, DurableError) or module in ("psycopg", "redis", "botocore")


def _rotate_sentence(target: Target, totals: dict[str, int], active: str, tenant: Any) -> str:
    if totals["tenants"] == 0:
        return f"No tenant has data keys in {target.where}: nothing to rotate."
    if tenant is not None and totals["rewrapped"] + totals["current"] == 0:
        return f"Tenant {tenant!r} has no live data keys in {target.where}: nothing to rotate."
    return (
        f"Rewrapped {plural(totals['rewrapped'], 'data key')} of "
        f"{plural(totals['tenants'], 'tenant')} under key {active!r} "
        f"({totals['current']} already under it) in {target.where}."
    )


def _confirm(args: argparse.Namespace, target: Target) -> None:
    """Ask on the terminal before shredding, unless ``--yes``; raise if not confirmed."""
    if args.yes:
        return
    if not is_terminal(sys.stdin):
        raise CommandError(
            f"shredding tenant {args.tenant!r} cannot be undone and there is no terminal to "
            "confirm it on: pass --yes to shred without asking"
        )
    sys.stderr.write(
        f"This deletes the data keys of tenant {args.tenant!r} in {target.where}.\n"
        "Everything the tenant stored can never be decrypted again. This cannot be undone.\n"
        f"Type the tenant id ({args.tenant}) to confirm: "
    )
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if answer.strip() != args.tenant:
        if not answer.endswith("\n"):
            sys.stderr.write("\n")
        raise CommandError("not confirmed: nothing was shredded")


def _shred_only_encryption() -> Encryption:
    """Encryption settings for a saver that only shreds.

    Deleting wrapped data keys never wraps or unwraps one, so ``shred`` needs no keyring
    (it must work when the keyring key is lost or revoked): the saver gets a throwaway
    local key, and ``$LGD_KEYRING``/``$LGD_KMS_KEY_ID`` are not read.
    """
    from langgraph_durable.protect import Encryption, LocalKeyring

    return Encryption(LocalKeyring({"shred-only": os.urandom(32)}, "shred-only"))


def run_shred(args: argparse.Namespace, out: TextIO) -> int:
    """Crypto-shred ``--tenant``: delete its wrapped data keys.

    Args:
        args: Parsed options: ``url``, ``schema``, ``prefix``, ``tenant``, ``yes`` and
            ``json``.
        out: Where to print the result.

    Returns:
        The exit code, 0 (also when the tenant had nothing left to shred).

    Raises:
        CommandError: No URL, an unsupported one, an empty tenant id, or no
            confirmation (``--yes`` missing without a terminal, or a wrong answer).
        DurableError: The storage cannot be reached or used.
    """
    tenant = args.tenant
    if not tenant.strip():
        raise CommandError("--tenant must not be empty")
    target = resolve_target(args)
    _confirm(args, target)
    with open_saver(target, _shred_only_encryption()) as saver:
        count = int(saver.shred_tenant(tenant))
        known = count > 0 or bool(saver._run(saver._ops.data_keys(tenant)))
    if args.json:
        summary = {"command": "shred", "backend": target.backend, "tenant": tenant}
        say(out, json.dumps({**summary, "shredded": count}, separators=(",", ":")))
    elif count:
        say(
            out,
            f"Shredded tenant {tenant!r} in {target.where}: deleted "
            f"{plural(count, 'data-key version')}; its data can no longer be decrypted.",
        )
    elif known:
        say(out, f"Tenant {tenant!r} in {target.where} was already shredded: nothing to do.")
    else:
        say(out, f"Tenant {tenant!r} has no data keys in {target.where}: nothing to shred.")
    return 0
