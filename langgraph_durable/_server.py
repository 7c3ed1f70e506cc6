"""Shared pieces of the Agent Server checkpointer factories (``<backend>.server``).

Also used by the ``langgraph-durable`` command line (``rotate-keys``), so a cron
job and the server read the keyring from the same variables. Nothing here
imports a driver or LangGraph at module import time.

Encryption settings read by :func:`encryption_from_env`:

======================================== ===============================================
``LGD_KEYRING``                          local keyring ``ID=BASE64[,ID=BASE64...]``, the
                                         first key active (``@PATH``: read it from a file)
``LGD_KMS_KEY_ID``                       AWS KMS key id, ARN or alias (instead of
                                         ``LGD_KEYRING``; boto3's usual credentials)
``LGD_ENCRYPTION_CLEAR_METADATA``        comma-separated metadata keys kept in clear
                                         (default ``source,step,parents,run_id``;
                                         ``none`` for no key)
``LGD_ENCRYPTION_SEARCHABLE_METADATA``   comma-separated metadata keys kept as a keyed
                                         hash, filterable by equality (default: none)
``LGD_ENCRYPTION_ALLOW_PLAINTEXT``       ``on`` reads records written before encryption
                                         was turned on (migration mode; default ``off``)
======================================== ===============================================
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError, DurableError

if TYPE_CHECKING:
    from ._core.retention import Retention
    from .protect import Encryption, KeyProvider

__all__ = [
    "KEYRING_ENV",
    "KMS_KEY_ENV",
    "encryption_from_env",
    "env_flag",
    "env_list",
    "env_required",
    "keyring_from_env",
    "set_up_saver",
]

#: Environment variable holding a local keyring (``ID=BASE64[,ID=BASE64...]`` or ``@PATH``).
KEYRING_ENV = "LGD_KEYRING"
#: Environment variable holding an AWS KMS key id, ARN or alias.
KMS_KEY_ENV = "LGD_KMS_KEY_ID"
_CLEAR_ENV = "LGD_ENCRYPTION_CLEAR_METADATA"
_SEARCHABLE_ENV = "LGD_ENCRYPTION_SEARCHABLE_METADATA"
_PLAINTEXT_ENV = "LGD_ENCRYPTION_ALLOW_PLAINTEXT"

_OFF = {"0", "off", "false", "no"}
_ON = {"1", "on", "true", "yes"}


def env_flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    """An on/off setting (``on``/``off``, ``true``/``false``, ``1``/``0``, ``yes``/``no``)."""
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ConfigurationError(f"{name} must be on or off, got {value!r}")


def env_required(env: Mapping[str, str], name: str, what: str) -> str:
    """A setting that must be present; ``what`` says what to put there."""
    value = env.get(name, "").strip()
    if not value:
        raise ConfigurationError(f"{name} is not set: give {what}")
    return value


def env_number(env: Mapping[str, str], name: str, integer: bool = False) -> float | None:
    """A number setting (an integer if ``integer``); ``None`` when unset or blank."""
    value = env.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value) if integer else float(value)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ConfigurationError(f"{name} must be {kind}, got {value!r}") from None


@asynccontextmanager
async def set_up_saver(opened: Any, run_setup: bool) -> AsyncIterator[Any]:
    """Enter a saver's async context manager, run ``setup()`` if asked, yield the saver."""
    async with opened as saver:
        if run_setup:
            await saver.setup()
        yield saver


def env_list(env: Mapping[str, str], name: str) -> tuple[str, ...] | None:
    """A comma-separated list setting.

    Args:
        env: The environment to read.
        name: The variable.

    Returns:
        The stripped, non-empty items; ``()`` for the value ``none``; ``None`` when the
        variable is unset or blank (the caller's default applies).
    """
    value = env.get(name, "").strip()
    if not value:
        return None
    if value.lower() == "none":
        return ()
    return tuple(item.strip() for item in value.split(",") if item.strip())


def keyring_from_env(env: Mapping[str, str]) -> KeyProvider | None:
    """The keyring named by ``LGD_KEYRING`` or ``LGD_KMS_KEY_ID``.

    Args:
        env: The environment to read.

    Returns:
        A :class:`~langgraph_durable.protect.LocalKeyring` for ``LGD_KEYRING``, a
        :class:`~langgraph_durable.protect.KmsKeyring` for ``LGD_KMS_KEY_ID``, or ``None``
        when neither is set.

    Raises:
        ConfigurationError: Both are set, or ``LGD_KEYRING`` is malformed.
    """
    local = env.get(KEYRING_ENV, "").strip()
    kms = env.get(KMS_KEY_ENV, "").strip()
    if local and kms:
        raise ConfigurationError(
            f"both {KEYRING_ENV} and {KMS_KEY_ENV} are set: keep the one that holds "
            "the keyring (a local keyring or an AWS KMS key), unset the other"
        )
    from .protect import KmsKeyring, LocalKeyring

    if local:
        return LocalKeyring.from_text(local, source=KEYRING_ENV)
    if kms:
        return KmsKeyring(kms)
    return None


def encryption_from_env(env: Mapping[str, str]) -> Encryption | None:
    """Envelope-encryption settings from the environment (see the module docstring).

    Args:
        env: The environment to read (``os.environ`` or a test's mapping).

    Returns:
        An :class:`~langgraph_durable.protect.Encryption`, or ``None`` when neither
        ``LGD_KEYRING`` nor ``LGD_KMS_KEY_ID`` is set (payloads are then stored
        unencrypted).

    Raises:
        ConfigurationError: A keyring variable or a setting is malformed, or both
            keyring variables are set.
    """
    keyring = keyring_from_env(env)
    if keyring is None:
        for name in (_CLEAR_ENV, _SEARCHABLE_ENV, _PLAINTEXT_ENV):
            if env.get(name, "").strip():
                raise ConfigurationError(
                    f"{name} is set but encryption is off: set {KEYRING_ENV} or "
                    f"{KMS_KEY_ENV} to turn encryption on"
                )
        return None
    from .protect import Encryption

    options: dict[str, Any] = {"allow_plaintext": env_flag(env, _PLAINTEXT_ENV, False)}
    clear = env_list(env, _CLEAR_ENV)
    if clear is not None:
        options["clear_metadata"] = clear
    searchable = env_list(env, _SEARCHABLE_ENV)
    if searchable is not None:
        options["searchable_metadata"] = searchable
    return Encryption(keyring, **options)


def retention_from_env(env: Mapping[str, str]) -> Retention | None:
    """A retention policy from ``LGD_RETENTION_*``, or None when none is set.

    ``LGD_RETENTION_IDLE`` and ``LGD_RETENTION_ABSOLUTE`` take durations
    (``90s``, ``15m``, ``12h``, ``30d``), ``LGD_RETENTION_STRATEGY`` is
    ``delete`` (default) or ``keep-latest``, ``LGD_RETENTION_KEEP`` a count.

    Raises:
        ConfigurationError: A value is malformed.
    """
    from ._core.retention import Retention, parse_duration

    names = ("IDLE", "ABSOLUTE", "STRATEGY", "KEEP")
    values = {n: env.get(f"LGD_RETENTION_{n}", "").strip() for n in names}
    if not any(values.values()):
        return None
    try:
        keep = values["KEEP"] or "1"
        if not keep.isdigit():
            raise ConfigurationError(f"must be a positive integer, got {keep!r}")
        return Retention(
            idle=parse_duration(values["IDLE"]) if values["IDLE"] else None,
            absolute=parse_duration(values["ABSOLUTE"]) if values["ABSOLUTE"] else None,
            strategy=values["STRATEGY"] or "delete",
            keep=int(keep),
        )
    except DurableError as exc:
        raise ConfigurationError(f"LGD_RETENTION_*: {exc}") from exc
