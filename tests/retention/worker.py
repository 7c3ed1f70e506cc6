"""A pruner in its own process, for the kill and lock tests.

Usage: ``python -m tests.retention.worker SPEC_JSON NOW BATCH PAUSE``. It opens the
spec's saver with the tests' per-tenant policy (:data:`POLICIES`), runs
``prune_expired(now=NOW, batch=BATCH)``, prints ``progress DONE`` after every
batch (then sleeps PAUSE seconds, so a test can kill it mid-run or hold the
lock), and finally the report as one JSON line.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from typing import Any

from langgraph_durable import Retention

#: Tenant "old" expires 50 s after a write, "young" after 30 days: a pruner run
#: with ``now`` a minute ahead deletes every "old" thread and no "young" one,
#: while no native expiry (Redis, DynamoDB TTL) fires during a test.
POLICIES = {
    "old": Retention(idle=datetime.timedelta(seconds=50)),
    "young": Retention(idle=datetime.timedelta(days=30)),
}


def policy(tenant: str) -> Retention | None:
    return POLICIES.get(tenant)


def _saver_class(backend: str) -> Any:
    # Imported here rather than through tests.redaction_helpers (whose chat-model
    # imports take a second), since each pruner test starts this process often.
    if backend == "postgres":
        from langgraph_durable.postgres import PostgresSaver

        return PostgresSaver
    if backend == "redis":
        from langgraph_durable.redis import RedisSaver

        return RedisSaver
    from langgraph_durable.dynamodb import DynamoDBSaver

    return DynamoDBSaver


def main(argv: list[str]) -> int:
    raw, now, batch, pause = argv
    spec = json.loads(raw)  # the fields of tests.redaction_helpers.SaverSpec
    if spec.get("mode") is not None:
        raise ValueError("the pruner worker opens savers without redaction")
    kwargs = {**spec.get("kwargs", {}), "retention": policy}

    def progress(step: Any) -> None:
        print(f"progress {step.done}", flush=True)
        time.sleep(float(pause))

    with _saver_class(spec["backend"]).from_conn_string(spec["conn"], **kwargs) as saver:
        saver.setup()
        report = saver.prune_expired(now=float(now), batch=int(batch), progress=progress)
    print(json.dumps(report.as_dict()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
