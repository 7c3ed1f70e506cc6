"""``langgraph-durable rotate-keys`` and ``shred`` on real PostgreSQL, Redis and DynamoDB.

Checkpoints are written by an encrypted saver under local key A, then the command runs
with ``LGD_KEYRING="B=...,A=..."`` (B active), and every checkpoint is read back by a
saver whose keyring holds only B. ``main()`` runs in-process (the environment is set
with ``monkeypatch``); a few error cases run in a subprocess, as a user runs them.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable.cli import main
from langgraph_durable.cli._common import ProgressBar
from langgraph_durable.errors import DecryptionError
from langgraph_durable.protect import Encryption, LocalKeyring

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 240
URL_VARS = ("LGD_POSTGRES_URL", "LGD_REDIS_URL", "LGD_DYNAMODB_URL")
KEY_VARS = ("LGD_KEYRING", "LGD_KMS_KEY_ID")
TENANTS = ("acme", "globex", "initech")
THREADS = ("t1", "t2")
STEPS = 3


def _b64() -> str:
    return base64.b64encode(os.urandom(32)).decode()


@dataclass
class Store:
    """One backend's storage for a test: its CLI arguments and a way to open its saver."""

    backend: str
    args: list[str]
    open: Callable[[Encryption], AbstractContextManager[Any]]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*URL_VARS, *KEY_VARS, "LGD_POSTGRES_SCHEMA", "LGD_REDIS_PREFIX"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=["postgres", "redis", "dynamodb"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """A fresh schema, prefix or table of each backend (created by ``setup()``)."""
    if request.param == "postgres":
        from langgraph_durable.postgres import PostgresSaver

        url = request.getfixturevalue("pg_url")
        schema = request.getfixturevalue("pg_schema")
        with PostgresSaver.from_conn_string(url, schema=schema) as saver:
            saver.setup()
        yield Store(
            "postgres",
            ["--url", url, "--schema", schema],
            lambda enc: PostgresSaver.from_conn_string(url, schema=schema, encryption=enc),
        )
    elif request.param == "redis":
        from langgraph_durable.redis import RedisSaver

        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        yield Store(
            "redis",
            ["--url", url, "--prefix", prefix],
            lambda enc: RedisSaver.from_conn_string(url, prefix=prefix, encryption=enc),
        )
    else:
        from langgraph_durable.dynamodb import DynamoDBSaver

        endpoint = request.getfixturevalue("dynamodb_endpoint")
        table = request.getfixturevalue("dynamodb_table")
        url = f"dynamodb://{table}?region=us-east-1&endpoint={endpoint}"
        with DynamoDBSaver.from_conn_string(url) as saver:
            saver.setup()
        yield Store(
            "dynamodb",
            ["--url", url],
            lambda enc: DynamoDBSaver.from_conn_string(url, encryption=enc),
        )


def _config(tenant: str, thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": "", "tenant_id": tenant}}


def _secret(tenant: str, thread: str, step: int) -> str:
    return f"secret of {tenant}/{thread} at step {step}"


def write_checkpoints(saver: Any, tenants: tuple[str, ...] = TENANTS) -> None:
    """A few checkpoints with a channel value and pending writes, per thread and tenant."""
    for tenant in tenants:
        for thread in THREADS:
            config: Any = _config(tenant, thread)
            version = None
            for step in range(STEPS):
                version = saver.get_next_version(version)
                checkpoint = empty_checkpoint()
                checkpoint["channel_values"] = {"notes": _secret(tenant, thread, step)}
                checkpoint["channel_versions"] = {"notes": version}
                config = saver.put(
                    config, checkpoint, {"source": "loop", "step": step}, {"notes": version}
                )
                saver.put_writes(config, [("notes", f"pending {step}")], task_id=f"task-{step}")


def assert_readable(saver: Any, tenants: tuple[str, ...] = TENANTS) -> None:
    """Every checkpoint of ``write_checkpoints`` reads back intact."""
    for tenant in tenants:
        for thread in THREADS:
            history = list(saver.list(_config(tenant, thread)))
            assert len(history) == STEPS
            values = sorted(t.checkpoint["channel_values"]["notes"] for t in history)
            assert values == sorted(_secret(tenant, thread, s) for s in range(STEPS))
            latest = saver.get_tuple(_config(tenant, thread))
            assert latest is not None
            assert latest.pending_writes == [("task-2", "notes", "pending 2")]


def _last_json(out: str) -> dict[str, Any]:
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    return json.loads(lines[0])  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------- rotate-keys


def test_rotate_keys_rewraps_every_tenant(
    store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key_a, key_b = _b64(), _b64()
    monkeypatch.setenv("LGD_KEYRING", f"A={key_a}")
    with store.open(Encryption(LocalKeyring.from_env())) as saver:
        write_checkpoints(saver)

    monkeypatch.setenv("LGD_KEYRING", f"B={key_b},A={key_a}")
    assert main(["rotate-keys", *store.args, "--json"]) == 0
    captured = capsys.readouterr()
    summary = _last_json(captured.out)
    assert summary["command"] == "rotate-keys" and summary["backend"] == store.backend
    assert summary["tenants"] == len(TENANTS)
    assert summary["rewrapped"] >= len(TENANTS) and summary["current"] == 0
    assert summary["active_key"] == "B"
    assert captured.err == ""  # stderr is no terminal here: no progress bar

    only_b = Encryption(LocalKeyring({"B": base64.b64decode(key_b)}, "B"))
    with store.open(only_b) as saver:
        assert_readable(saver)

    # Run again: everything is under B already.
    assert main(["rotate-keys", *store.args, "--json"]) == 0
    again = _last_json(capsys.readouterr().out)
    assert again["rewrapped"] == 0
    assert again["current"] == summary["rewrapped"] and again["tenants"] == len(TENANTS)


def test_rotate_keys_resumes_after_a_partial_run(
    store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key_a, key_b = _b64(), _b64()
    monkeypatch.setenv("LGD_KEYRING", f"A={key_a}")
    with store.open(Encryption(LocalKeyring.from_env())) as saver:
        write_checkpoints(saver)
    monkeypatch.setenv("LGD_KEYRING", f"B={key_b},A={key_a}")

    # A run that stopped after the first tenant, then a full run.
    assert main(["rotate-keys", *store.args, "--tenant", "acme", "--json"]) == 0
    first = _last_json(capsys.readouterr().out)
    assert first["tenants"] == 1 and first["rewrapped"] >= 1
    assert main(["rotate-keys", *store.args]) == 0
    sentence = capsys.readouterr().out.strip()
    assert "Rewrapped" in sentence and "of 3 tenants under key 'B'" in sentence
    assert f"({first['rewrapped']} already under it)" in sentence

    only_b = Encryption(LocalKeyring({"B": base64.b64decode(key_b)}, "B"))
    with store.open(only_b) as saver:
        assert_readable(saver)


def test_rotate_keys_shows_a_progress_bar_on_a_terminal(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph_durable.postgres import PostgresSaver

    key_a, key_b = _b64(), _b64()
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, encryption=Encryption(LocalKeyring.from_text(f"A={key_a}"))
    ) as saver:
        saver.setup()
        write_checkpoints(saver)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("LGD_KEYRING", f"B={key_b},A={key_a}")
    assert main(["rotate-keys", "--url", pg_url, "--schema", pg_schema, "--json"]) == 0
    drawn = terminal.getvalue()
    assert drawn.startswith("\r[" + " " * 30 + "] 0/3 tenants")
    assert drawn.endswith("\r[" + "#" * 30 + "] 3/3 tenants\n")
    assert "] 1/3 tenants" in drawn and "] 2/3 tenants" in drawn
    assert _last_json(capsys.readouterr().out)["tenants"] == 3


def test_progress_bar_draws_nothing_off_a_terminal() -> None:
    stream = io.StringIO()
    bar = ProgressBar(stream, 4, "tenants")
    bar.update(2)
    bar.close()
    assert stream.getvalue() == ""


def test_rotate_keys_of_an_empty_store(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph_durable.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
        saver.setup()
    monkeypatch.setenv("LGD_KEYRING", f"B={_b64()}")
    monkeypatch.setenv("LGD_POSTGRES_URL", pg_url)  # the URL from the environment
    monkeypatch.setenv("LGD_POSTGRES_SCHEMA", pg_schema)
    assert main(["rotate-keys"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No tenant has data keys in schema") and pg_schema in out


def test_rotate_keys_names_the_tenant_it_cannot_rewrap(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph_durable.postgres import PostgresSaver

    key_a = _b64()
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, encryption=Encryption(LocalKeyring.from_text(f"A={key_a}"))
    ) as saver:
        saver.setup()
        write_checkpoints(saver, ("acme",))
    monkeypatch.setenv("LGD_KEYRING", f"B={_b64()}")  # key A was dropped too soon
    assert main(["rotate-keys", "--url", pg_url, "--schema", pg_schema]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "tenant 'acme'" in err and "'A'" in err and "run rotate-keys again" in err


def test_rotate_keys_without_a_keyring(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rotate-keys", "--url", pg_url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("langgraph-durable rotate-keys: error: rotate-keys needs the keyring")
    assert "LGD_KEYRING" in err and "LGD_KMS_KEY_ID" in err and err.count("\n") == 1


def test_rotate_keys_with_both_keyrings(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LGD_KEYRING", f"B={_b64()}")
    monkeypatch.setenv("LGD_KMS_KEY_ID", "alias/agents")
    assert main(["rotate-keys", "--url", pg_url]) == 2
    assert "both LGD_KEYRING and LGD_KMS_KEY_ID are set" in capsys.readouterr().err


def test_rotate_keys_with_a_malformed_keyring(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LGD_KEYRING", "B=not base64!")
    assert main(["rotate-keys", "--url", pg_url]) == 2
    err = capsys.readouterr().err
    assert "LGD_KEYRING: key 'B' is not valid base64" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--url", "mysql://db/app"], "unsupported URL scheme 'mysql://'"),
        (["--url", "nonsense"], "is not a URL"),
        (["--url", "redis://localhost:6379/0", "--schema", "s"], "--schema applies to PostgreSQL"),
        (["--url", "postgresql://db/app", "--prefix", "p"], "--prefix applies to Redis"),
        ([], "pass --url or set one of $LGD_POSTGRES_URL, $LGD_REDIS_URL, $LGD_DYNAMODB_URL"),
    ],
)
def test_bad_urls(
    args: list[str],
    needle: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LGD_KEYRING", f"B={_b64()}")
    for command in (["rotate-keys"], ["shred", "--tenant", "acme", "--yes"]):
        assert main([*command, *args]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err


def test_several_url_variables_are_ambiguous(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LGD_KEYRING", f"B={_b64()}")
    monkeypatch.setenv("LGD_POSTGRES_URL", "postgresql://db/app")
    monkeypatch.setenv("LGD_REDIS_URL", "redis://localhost:6379/0")
    assert main(["rotate-keys"]) == 2
    assert "pass --url to say which storage to use" in capsys.readouterr().err


def _run_cli(*args: str, stdin: int | None = subprocess.DEVNULL, **env: str) -> Any:
    environ = {k: v for k, v in os.environ.items() if k not in (*URL_VARS, *KEY_VARS)}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.getenv("PYTHONPATH")]))
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-m", "langgraph_durable.cli", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=environ,
        cwd=REPO_ROOT,
        stdin=stdin,
    )


def test_errors_in_a_subprocess(pg_url: str) -> None:
    no_keyring = _run_cli("rotate-keys", "--url", pg_url)
    assert no_keyring.returncode == 2 and no_keyring.stdout == ""
    assert no_keyring.stderr.strip().splitlines() == [
        "langgraph-durable rotate-keys: error: rotate-keys needs the keyring: set $LGD_KEYRING "
        "(ID=BASE64[,ID=BASE64...], the first key active) or $LGD_KMS_KEY_ID (an AWS KMS key "
        "id, ARN or alias)"
    ]
    bad_scheme = _run_cli("rotate-keys", "--url", "mongodb://db", LGD_KEYRING=f"B={_b64()}")
    assert bad_scheme.returncode == 2 and "unsupported URL scheme" in bad_scheme.stderr
    unconfirmed = _run_cli("shred", "--url", pg_url, "--tenant", "acme")
    assert unconfirmed.returncode == 2 and "Traceback" not in unconfirmed.stderr
    assert "pass --yes" in unconfirmed.stderr


# ---------------------------------------------------------------------------- shred


def test_shred_makes_one_tenant_unreadable(
    store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key_a = _b64()
    monkeypatch.setenv("LGD_KEYRING", f"A={key_a}")
    encryption = Encryption(LocalKeyring.from_env())
    with store.open(encryption) as saver:
        write_checkpoints(saver, ("acme", "globex"))

    assert main(["shred", *store.args, "--tenant", "acme", "--yes", "--json"]) == 0
    summary = _last_json(capsys.readouterr().out)
    assert summary == {
        "command": "shred",
        "backend": store.backend,
        "tenant": "acme",
        "shredded": summary["shredded"],
    }
    assert summary["shredded"] >= 1

    with store.open(Encryption(LocalKeyring.from_text(f"A={key_a}"))) as saver:
        with pytest.raises(DecryptionError, match="shredded"):
            saver.get_tuple(_config("acme", "t1"))
        with pytest.raises(DecryptionError, match="shredded"):
            list(saver.list(_config("acme", "t2")))
        assert_readable(saver, ("globex",))

    # Shredding again finds nothing left; a tenant without keys is said to have none.
    assert main(["shred", *store.args, "--tenant", "acme", "--yes"]) == 0
    assert "was already shredded: nothing to do" in capsys.readouterr().out
    assert main(["shred", *store.args, "--tenant", "nobody", "--yes"]) == 0
    assert "Tenant 'nobody' has no data keys in" in capsys.readouterr().out


def test_shred_needs_no_keyring(
    pg_url: str, pg_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph_durable.postgres import PostgresSaver

    encryption = Encryption(LocalKeyring.from_text(f"A={_b64()}"))
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=encryption) as saver:
        saver.setup()
        write_checkpoints(saver, ("acme",))
    assert main(["shred", "--url", pg_url, "--schema", pg_schema, "--tenant", "acme", "--yes"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Shredded tenant 'acme' in schema") and "data-key version" in out
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=encryption) as saver:
        with pytest.raises(DecryptionError, match="shredded"):
            saver.get_tuple(_config("acme", "t1"))


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _shred_store(pg_url: str, pg_schema: str) -> Encryption:
    from langgraph_durable.postgres import PostgresSaver

    encryption = Encryption(LocalKeyring.from_text(f"A={_b64()}"))
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=encryption) as saver:
        saver.setup()
        write_checkpoints(saver, ("acme",))
    return encryption


def test_shred_asks_on_a_terminal(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph_durable.postgres import PostgresSaver

    encryption = _shred_store(pg_url, pg_schema)
    args = ["shred", "--url", pg_url, "--schema", pg_schema, "--tenant", "acme"]

    monkeypatch.setattr(sys, "stdin", _Tty("yes\n"))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Type the tenant id (acme) to confirm:" in err
    assert err.rstrip().endswith("not confirmed: nothing was shredded")
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=encryption) as saver:
        assert_readable(saver, ("acme",))

    monkeypatch.setattr(sys, "stdin", _Tty("acme\n"))
    assert main(args) == 0
    assert capsys.readouterr().out.startswith("Shredded tenant 'acme'")
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=encryption) as saver:
        with pytest.raises(DecryptionError, match="shredded"):
            saver.get_tuple(_config("acme", "t1"))


def test_shred_without_a_terminal_needs_yes(
    pg_url: str, pg_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph_durable.postgres import PostgresSaver

    encryption = _shred_store(pg_url, pg_schema)
    args = ["shred", "--url", pg_url, "--schema", pg_schema, "--tenant", "acme"]
    assert main(args) == 2  # pytest's stdin is no terminal
    err = capsys.readouterr().err
    assert "no terminal to confirm it on: pass --yes" in err and err.count("\n") == 1
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, encryption=encryption) as saver:
        assert_readable(saver, ("acme",))


def test_shred_needs_a_tenant(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["shred", "--url", "postgresql://db/app", "--yes"]) == 2
    assert "the following arguments are required: --tenant" in capsys.readouterr().err
    assert main(["shred", "--url", "postgresql://db/app", "--tenant", " ", "--yes"]) == 2
    assert "--tenant must not be empty" in capsys.readouterr().err


# ---------------------------------------------------------------------------- KMS keyring


def test_rotate_keys_with_a_kms_keyring(
    pg_url: str,
    pg_schema: str,
    dynamodb_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``LGD_KMS_KEY_ID`` names the KMS key to rotate to (moto's KMS, through boto3's
    ``AWS_ENDPOINT_URL_KMS``); the old KMS key unwraps the keys it wrapped."""
    import boto3

    from langgraph_durable.postgres import PostgresSaver
    from langgraph_durable.protect import KmsKeyring

    monkeypatch.setenv("AWS_ENDPOINT_URL_KMS", dynamodb_endpoint)  # moto serves KMS too
    kms = boto3.client("kms")
    old = kms.create_key(Description="lgd test: old")["KeyMetadata"]["KeyId"]
    new = kms.create_key(Description="lgd test: new")["KeyMetadata"]["KeyId"]
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, encryption=Encryption(KmsKeyring(old, client=kms))
    ) as saver:
        saver.setup()
        write_checkpoints(saver, ("acme", "globex"))

    monkeypatch.setenv("LGD_KMS_KEY_ID", new)
    assert main(["rotate-keys", "--url", pg_url, "--schema", pg_schema, "--json"]) == 0
    summary = _last_json(capsys.readouterr().out)
    assert summary["active_key"] == new and summary["tenants"] == 2
    assert summary["rewrapped"] >= 2 and summary["current"] == 0

    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, encryption=Encryption(KmsKeyring(new, client=kms))
    ) as saver:
        for tenant in ("acme", "globex"):  # (moto would still decrypt under a disabled key)
            rows = saver._run(saver._ops.data_keys(tenant))
            assert rows and {row.key_id for row in rows} == {new}
        assert_readable(saver, ("acme", "globex"))
    assert main(["rotate-keys", "--url", pg_url, "--schema", pg_schema, "--json"]) == 0
    assert _last_json(capsys.readouterr().out)["rewrapped"] == 0


# ---------------------------------------------------------------------------- keyring env


def test_encryption_from_env() -> None:
    from langgraph_durable._server import encryption_from_env
    from langgraph_durable.errors import ConfigurationError
    from langgraph_durable.protect import KmsKeyring

    assert encryption_from_env({}) is None
    key = _b64()
    local = encryption_from_env({"LGD_KEYRING": f" k2={key} , k1={_b64()} "})
    assert local is not None and isinstance(local.keyring, LocalKeyring)
    assert local.keyring.active_key_id("any") == "k2"
    assert local.clear_metadata == ("source", "step", "parents", "run_id")
    assert local.searchable_metadata == () and local.allow_plaintext is False

    kms = encryption_from_env(
        {
            "LGD_KMS_KEY_ID": "alias/agents",
            "LGD_ENCRYPTION_CLEAR_METADATA": "source, step",
            "LGD_ENCRYPTION_SEARCHABLE_METADATA": "user_id,org",
            "LGD_ENCRYPTION_ALLOW_PLAINTEXT": "on",
        }
    )
    assert kms is not None and isinstance(kms.keyring, KmsKeyring)
    assert kms.keyring.active_key_id("any") == "alias/agents"
    assert kms.clear_metadata == ("source", "step")
    assert kms.searchable_metadata == ("user_id", "org") and kms.allow_plaintext is True
    nothing_clear = encryption_from_env(
        {"LGD_KEYRING": f"k={key}", "LGD_ENCRYPTION_CLEAR_METADATA": "none"}
    )
    assert nothing_clear is not None and nothing_clear.clear_metadata == ()

    with pytest.raises(ConfigurationError, match="both LGD_KEYRING and LGD_KMS_KEY_ID"):
        encryption_from_env({"LGD_KEYRING": f"k={key}", "LGD_KMS_KEY_ID": "alias/a"})
    with pytest.raises(ConfigurationError, match="LGD_KEYRING: key 'k' is not valid base64"):
        encryption_from_env({"LGD_KEYRING": "k=???"})
    with pytest.raises(ConfigurationError, match="must be 32 bytes"):
        encryption_from_env({"LGD_KEYRING": "k=" + base64.b64encode(b"short").decode()})
    with pytest.raises(ConfigurationError, match="LGD_ENCRYPTION_ALLOW_PLAINTEXT must be on or"):
        encryption_from_env({"LGD_KEYRING": f"k={key}", "LGD_ENCRYPTION_ALLOW_PLAINTEXT": "?"})
    with pytest.raises(ConfigurationError, match="in both clear_metadata and searchable"):
        encryption_from_env(
            {"LGD_KEYRING": f"k={key}", "LGD_ENCRYPTION_SEARCHABLE_METADATA": "source"}
        )
    with pytest.raises(ConfigurationError, match="set LGD_KEYRING or LGD_KMS_KEY_ID"):
        encryption_from_env({"LGD_ENCRYPTION_SEARCHABLE_METADATA": "user_id"})


def test_keyring_from_a_file(tmp_path: Path) -> None:
    from langgraph_durable._server import encryption_from_env

    path = tmp_path / "keyring"
    path.write_text(f"new={_b64()}\nold={_b64()}\n")
    encryption = encryption_from_env({"LGD_KEYRING": f"@{path}"})
    assert encryption is not None and encryption.keyring.active_key_id("t") == "new"
