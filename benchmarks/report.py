"""Summary table, ratios and the PNG chart, all built from the JSON result document."""

from __future__ import annotations

import statistics
from typing import Any

from savers import (
    ENCRYPTED,
    ENCRYPTION_PAIRS,
    INTEGRITY_PAIRS,
    PAIRS,
    REDACTED,
    REDACTION_PAIRS,
    RLS_PAIRS,
    SAME_PAIRS,
    SIGNED_PAIRS,
    SPECS,
)

COLORS = {
    "ours": "#1f77b4",
    "ours-async": "#6baed6",
    "upstream": "#d62728",
    "upstream-async": "#fc9272",
    "memory": "#7f7f7f",
    "redis": "#1f77b4",
    "redis-async": "#6baed6",
    "plainredis": "#d62728",
    "plainredis-async": "#fc9272",
    "dynamodb": "#1f77b4",
    "dynamodb-async": "#6baed6",
    "aws-dynamodb": "#d62728",
    "aws-dynamodb-async": "#fc9272",
}
# Encrypted twins of ours in green: "<name>-enc".
COLORS |= {f"{n}-enc": "#98df8a" if "async" in n else "#2ca02c" for n in ENCRYPTED}
# Redacted twins in purple: "<name>-red".
COLORS |= {f"{n}-red": "#c5b0d5" if "async" in n else "#9467bd" for n in REDACTED}

SERVER_CPU = {
    "postgres": "PostgreSQL backends",
    "redis": "redis-server, whole process",
}


def groups(names: list[str], dynamodb_timed: bool = False) -> dict[str, list[str]]:
    """Savers by backend, in order; InMemorySaver joins the first server-backed group
    that is timed (PostgreSQL or Redis; DynamoDB with ``--dynamodb-timings``), to be
    read against it."""
    out: dict[str, list[str]] = {}
    for n in names:
        b = SPECS[n].backend if n in SPECS else "memory"
        if b != "memory":
            out.setdefault(b, []).append(n)
    for n in names:
        if (SPECS[n].backend if n in SPECS else "memory") == "memory":
            host = next((b for b in out if b != "dynamodb" or dynamodb_timed), None)
            out.setdefault(host or "memory", []).append(n)
    return out


def _get(d: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def summarize(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per saver: the headline figures, flattened."""
    out: dict[str, dict[str, Any]] = {}
    for name, res in doc["results"].items():
        g, r, c = res.get("graph") or {}, res.get("raw") or {}, res.get("round_trips") or {}
        a = res.get("api_calls") or {}
        out[name] = {
            "raw_puts_per_s": _get(r, "puts_per_s"),
            "raw_put_p50_ms": _get(r, "put.p50_ms"),
            "raw_put_p99_ms": _get(r, "put.p99_ms"),
            "raw_cpu_ms_per_call": _get(r, "cpu_ms_per_call"),
            "raw_bytes_per_call": _get(r, "bytes_per_call"),
            "steps_per_s": _get(g, "steps_per_s"),
            "put_p50_ms": _get(g, "put.p50_ms"),
            "put_p99_ms": _get(g, "put.p99_ms"),
            "get_p50_ms": _get(g, "get_tuple.p50_ms"),
            "get_p99_ms": _get(g, "get_tuple.p99_ms"),
            "get_seq_p50_ms": _get(g, "get_tuple_sequential.p50_ms"),
            "get_per_s": _get(g, "get_tuple_per_s"),
            "get_seq_p99_ms": _get(g, "get_tuple_sequential.p99_ms"),
            "history_list_ms": _get(g, "history_list_ms"),
            "bytes_per_step": _get(g, "bytes_per_step"),
            "cpu_ms_per_step": _get(g, "cpu_ms_per_step"),
            "server_cpu_ms_per_step": _get(g, "server_cpu_ms_per_step"),
            "raw_server_cpu_ms_per_call": _get(r, "server_cpu_ms_per_call"),
            "rt_put": _get(c, "put.round_trips"),
            "rt_put_writes": _get(c, "put_writes.round_trips"),
            "rt_get_tuple": _get(c, "get_tuple.round_trips"),
            "rt_list": _get(c, "list.round_trips"),
            "rt_step": _get(c, "graph_step.round_trips"),
            "rt_list_history": _get(c, "list_history.round_trips"),
            "calls_put": _get(a, "put.calls"),
            "calls_put_writes": _get(a, "put_writes.calls"),
            "calls_get_tuple": _get(a, "get_tuple.calls"),
            "calls_get_by_id": _get(a, "get_tuple_by_id.calls"),
            "rt_get_by_id": _get(c, "get_tuple_by_id.round_trips"),
            "calls_step": _get(a, "graph_step.calls"),
            "calls_list": _get(a, "list.calls"),
            "calls_list_history": _get(a, "list_history.calls"),
            "wcu_step": _get(a, "graph_step.write_units"),
            "reported_wcu_step": _get(a, "graph_step.reported_write_units"),
            "s3_calls_step": _get(a, "graph_step.s3_calls") or (0.0 if a else None),
            "http_step": _get(a, "graph_step.http_requests"),
            "calls_cpu_ms_per_step": _get(a, "graph_step.cpu_ms"),
            "net_rtt_ms": _get(c, "emulated_network.rtt_ms"),
            "net_get_ms": _get(c, "emulated_network.get_tuple_ms"),
            "net_step_ms": _get(c, "emulated_network.graph_step_ms"),
            "net_list_ms": _get(c, "emulated_network.list_history_ms"),
            "history_checkpoints": _get(g, "history_checkpoints")
            or _get(c, "list_history.checkpoints")
            or _get(a, "list_history.checkpoints"),
        }
    return out


RATIO_KEYS = [
    # (label, summary key or results path, higher_is_better)
    ("raw puts/s", "raw_puts_per_s", True),
    ("graph steps/s", "steps_per_s", True),
    ("get_tuple p50 (C=1)", "get_seq_p50_ms", False),
    ("get_tuple p50 (C)", "get_p50_ms", False),
    ("get_tuple/s (C)", "get_per_s", True),
    ("put p50 (graph)", "put_p50_ms", False),
    ("client CPU/step", "cpu_ms_per_step", False),
    ("raw client CPU/call", "raw_cpu_ms_per_call", False),
    ("server CPU/step", "server_cpu_ms_per_step", False),
    ("raw server CPU/call", "raw_server_cpu_ms_per_call", False),
    ("bytes/step", "bytes_per_step", False),
    ("list history", "history_list_ms", False),
    ("round trips/step", "rt_step", False),
    ("round trips/get_tuple", "rt_get_tuple", False),
    ("round trips/get_tuple by id", "rt_get_by_id", False),
    ("round trips list history", "rt_list_history", False),
    ("API calls/step", "calls_step", False),
    ("API calls/get_tuple", "calls_get_tuple", False),
    ("API calls/get_tuple by id", "calls_get_by_id", False),
    ("API calls list history", "calls_list_history", False),
    ("write units/step", "wcu_step", False),
    ("client CPU/step (calls pass)", "calls_cpu_ms_per_step", False),
    ("get_tuple, emulated RTT", "net_get_ms", False),
    ("graph step, emulated RTT", "net_step_ms", False),
    ("list history, emulated RTT", "net_list_ms", False),
]


def ratios(doc: dict[str, Any], summary: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Ours vs the saver it is compared with (``savers.PAIRS``), and each encrypted or
    redacted saver vs its plain twin (``savers.ENCRYPTION_PAIRS``, ``REDACTION_PAIRS``:
    "ours-enc vs ours", "ours-red vs ours"), as "how many times better the first is" (>1 =
    first better; for a twin, 1 minus the ratio is what encryption or redaction costs).

    For throughput that is first/second; for latency, CPU and bytes second/first. The
    per-round throughput ratios (same round, back to back) and their median are kept too.
    """
    out: dict[str, Any] = {}
    for ours, up in (
        PAIRS
        + ENCRYPTION_PAIRS
        + REDACTION_PAIRS
        + INTEGRITY_PAIRS
        + RLS_PAIRS
        + SIGNED_PAIRS
        + SAME_PAIRS
    ):
        if ours not in summary or up not in summary:
            continue
        pair: dict[str, Any] = {}
        for label, key, higher in RATIO_KEYS:
            a, b = summary[ours].get(key), summary[up].get(key)
            if a and b:
                pair[label] = a / b if higher else b / a
        for label, mode, key in (
            ("raw puts/s", "raw", "puts_per_s_by_round"),
            ("graph steps/s", "graph", "steps_per_s_by_round"),
        ):
            a = _get(doc["results"][ours], f"{mode}.{key}")
            b = _get(doc["results"][up], f"{mode}.{key}")
            if a and b:
                per = [x / y for x, y in zip(a, b, strict=False) if y]
                pair[f"{label} by round"] = per
                pair[f"{label} median round"] = statistics.median(per) if per else None
        out[f"{ours} vs {up}"] = pair
    return out


def ratio_lines(rat: dict[str, Any]) -> list[str]:
    lines = []
    twins = {f"{t} vs {p}": ("encrypted", "encryption") for t, p in ENCRYPTION_PAIRS}
    twins |= {f"{t} vs {p}": ("redacted", "redaction") for t, p in REDACTION_PAIRS}
    twins |= {f"{t} vs {p}": ("chained", "the hash chain") for t, p in INTEGRITY_PAIRS}
    twins |= {f"{t} vs {p}": ("with RLS", "row-level security") for t, p in RLS_PAIRS}
    twins |= {f"{t} vs {p}": ("signed", "signed tenants") for t, p in SIGNED_PAIRS}
    twins |= {f"{t} vs {p}": ("twin", "nothing: noise") for t, p in SAME_PAIRS}
    for pair, vals in rat.items():
        digits = 3 if pair in twins else 2
        parts = [f"{k} {v:.{digits}f}x" for k, v in vals.items() if isinstance(v, float)]
        who = (
            f"{twins[pair][0]} better; <1 = cost of {twins[pair][1]}"
            if pair in twins
            else "ours better"
        )
        lines.append(f"{pair} (>1 = {who}): " + ", ".join(parts))
    return lines


# Columns of the PostgreSQL and Redis tables.
COLUMNS = [
    ("saver", None, "{}"),
    ("raw puts/s", "raw_puts_per_s", "{:.0f}"),
    ("steps/s", "steps_per_s", "{:.0f}"),
    ("put p50/p99 ms", ("put_p50_ms", "put_p99_ms"), "{:.2f}/{:.2f}"),
    ("get p50/p99 ms C=1", ("get_seq_p50_ms", "get_seq_p99_ms"), "{:.2f}/{:.2f}"),
    ("get p50/p99 ms C", ("get_p50_ms", "get_p99_ms"), "{:.2f}/{:.2f}"),
    ("gets/s C", "get_per_s", "{:.0f}"),
    ("list100 ms", "history_list_ms", "{:.1f}"),
    ("bytes/step", "bytes_per_step", "{:.0f}"),
    ("CPU ms/step cli/srv", ("cpu_ms_per_step", "server_cpu_ms_per_step"), "{:.2f}/{:.2f}"),
    ("RT put/writes/get", ("rt_put", "rt_put_writes", "rt_get_tuple"), "{:.1f}/{:.1f}/{:.1f}"),
    ("RT/step", "rt_step", "{:.2f}"),
    ("RT list100", "rt_list_history", "{:.0f}"),
]

# Columns of the DynamoDB table: API calls first; timings on a mock server come last.
DYNAMODB_COLUMNS = [
    ("saver", None, "{}"),
    (
        "calls put/writes/get",
        ("calls_put", "calls_put_writes", "calls_get_tuple"),
        "{:.2f}/{:.2f}/{:.2f}",
    ),
    ("calls get by id", "calls_get_by_id", "{:.2f}"),
    ("calls/step", "calls_step", "{:.2f}"),
    ("write units/step", "wcu_step", "{:.1f}"),
    ("S3 calls/step", "s3_calls_step", "{:.2f}"),
    ("calls list100", "calls_list_history", "{:.0f}"),
    ("client CPU ms/step", "calls_cpu_ms_per_step", "{:.2f}"),
    ("bytes/step", "bytes_per_step", "{:.0f}"),
    ("raw puts/s (moto)", "raw_puts_per_s", "{:.0f}"),
    ("steps/s (moto)", "steps_per_s", "{:.0f}"),
    ("get p50 ms C=1 (moto)", "get_seq_p50_ms", "{:.2f}"),
    ("list100 ms (moto)", "history_list_ms", "{:.1f}"),
]


# Calls timed through the relay with a round-trip delay added (--rtt-ms).
NETWORK_COLUMNS = [
    ("saver", None, "{}"),
    ("added RTT ms", "net_rtt_ms", "{:.2f}"),
    ("get_tuple ms", "net_get_ms", "{:.2f}"),
    ("graph ms/step", "net_step_ms", "{:.2f}"),
    ("list100 ms", "net_list_ms", "{:.1f}"),
]


def columns_for(backend: str) -> list[tuple[str, Any, str]]:
    if backend == "network":
        return NETWORK_COLUMNS
    return DYNAMODB_COLUMNS if backend == "dynamodb" else COLUMNS


def _cell(row: dict[str, Any], key: Any, fmt: str) -> str:
    keys = key if isinstance(key, tuple) else (key,)
    vals = [row.get(k) for k in keys]
    if all(v is None for v in vals):
        return "-"
    parts = fmt.split("/")
    if len(parts) == len(vals):
        return "/".join("-" if v is None else p.format(v) for p, v in zip(parts, vals, strict=True))
    return fmt.format(*vals)


def table_rows(
    summary: dict[str, dict[str, Any]], backend: str = "postgres"
) -> tuple[list[str], list[list[str]]]:
    cols = columns_for(backend)
    header = [c[0] for c in cols]
    rows = []
    for name, row in summary.items():
        rows.append([name] + [_cell(row, key, fmt) for _, key, fmt in cols[1:]])
    return header, rows


def _tables(summary: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    timed = any(
        row.get("steps_per_s") is not None
        for n, row in summary.items()
        if n in SPECS and SPECS[n].backend == "dynamodb"
    )
    out = [(b, {n: summary[n] for n in ns}) for b, ns in groups(list(summary), timed).items()]
    net = {n: row for n, row in summary.items() if row.get("net_rtt_ms") is not None}
    if net:
        out.append(("network", net))
    return out


def text_table(summary: dict[str, dict[str, Any]]) -> str:
    parts = []
    tables = _tables(summary)
    for backend, sub in tables:
        header, rows = table_rows(sub, backend)
        widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]

        def line(cells: list[str], widths: list[int] = widths) -> str:
            return "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )

        lines = [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]
        if len(tables) > 1:
            lines.insert(0, f"[{backend}]")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def markdown_table(summary: dict[str, dict[str, Any]]) -> str:
    parts = []
    tables = _tables(summary)
    for backend, sub in tables:
        header, rows = table_rows(sub, backend)
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        if len(tables) > 1:
            out.insert(0, f"**{backend}**\n")
        parts.append("\n".join(out))
    return "\n\n".join(parts)


def chart(
    doc: dict[str, Any], summary: dict[str, dict[str, Any]], path: str, backend: str = "postgres"
) -> None:
    """The chart of one backend's savers (``summary`` holds only those)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if backend == "dynamodb":
        _chart_dynamodb(doc, summary, path, plt)
        return
    names = list(summary)
    server = SERVER_CPU.get(backend, "server")
    panels = [
        ("raw replay: put+put_writes calls/s", ["raw_puts_per_s"], "db"),
        ("graph: super-steps/s", ["steps_per_s"], "db"),
        ("graph: put latency ms (p50 | p99)", ["put_p50_ms", "put_p99_ms"], None),
        (
            "get_tuple latency ms (p50 | p99)\none at a time, then at concurrency C (hatched)",
            ["get_seq_p50_ms", "get_seq_p99_ms", "get_p50_ms", "get_p99_ms"],
            "pairs",
        ),
        (
            f"CPU ms per super-step (client | {server})",
            ["cpu_ms_per_step", "server_cpu_ms_per_step"],
            None,
        ),
        ("bytes stored per super-step", ["bytes_per_step"], None),
        (
            "round trips per call (put | put_writes | get_tuple)",
            ["rt_put", "rt_put_writes", "rt_get_tuple"],
            None,
        ),
        (f"list {doc['settings']['history']} checkpoints: ms", ["history_list_ms"], None),
    ]
    fig, axes = plt.subplots(2, 4, figsize=(20, 8.5))
    _draw(axes.flat, panels, summary, names)
    st = doc["settings"]
    fig.suptitle(
        f"LangGraph checkpoint savers ({backend}) — {st['turns']} turns, "
        f"{st['threads']} graph threads, "
        f"{st['raw_threads']} raw threads, concurrency {st['concurrency']}, "
        f"pool {st['pool_size']}, "
        f"durability={st['durability']}, {doc['environment'].get('cpu_count')} CPUs"
        + (", --pii workload" if st.get("pii") else ""),
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _chart_dynamodb(
    doc: dict[str, Any], summary: dict[str, dict[str, Any]], path: str, plt: Any
) -> None:
    names = list(summary)
    hist = doc["settings"]["history"]
    panels = [
        (
            "DynamoDB API calls per call (put | put_writes |\n"
            "get_tuple latest | get_tuple by id, with writes | graph super-step)",
            ["calls_put", "calls_put_writes", "calls_get_tuple", "calls_get_by_id", "calls_step"],
            None,
        ),
        (f"API calls to list {hist} checkpoints", ["calls_list_history"], None),
        ("write units per super-step (from item sizes)", ["wcu_step"], None),
        ("client CPU ms per super-step", ["calls_cpu_ms_per_step"], None),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.8))
    _draw(axes.flat, panels, summary, names)
    st = doc["settings"]
    fig.suptitle(
        f"LangGraph checkpoint savers (DynamoDB, counted on moto) — {st['turns']} turns, "
        "one call at a time",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _draw(
    axes: Any,
    panels: list[tuple[str, list[str], str | None]],
    summary: dict[str, dict[str, Any]],
    names: list[str],
) -> None:
    for ax, (title, keys, only) in zip(axes, panels, strict=True):
        shown = names
        if only == "db" and "memory" in names:
            # In-memory throughput would flatten the database bars; quote it instead.
            mem = summary["memory"].get(keys[0])
            if mem is not None:
                title += f"\n(InMemorySaver: {mem:.0f}, not drawn)"
            shown = [n for n in names if n != "memory"] or names
        width = 0.8 / len(keys)
        any_val = False
        for j, key in enumerate(keys):
            xs, hs, cs = [], [], []
            for i, n in enumerate(shown):
                v = summary[n].get(key)
                if v is None:
                    continue
                xs.append(i - 0.4 + width * (j + 0.5))
                hs.append(v)
                cs.append(COLORS.get(n, "#333333"))
            if not xs:
                continue
            any_val = True
            light = j % 2 if only == "pairs" else j > 0
            bars = ax.bar(
                xs,
                hs,
                width=width * 0.92,
                color=cs,
                alpha=0.55 if light else 1.0,
                hatch="///" if only == "pairs" and j >= 2 else None,
                edgecolor="black",
                linewidth=0.4,
            )
            for b, h in zip(bars, hs, strict=True):
                label = f"{h:.0f}" if h >= 100 else (f"{h:.1f}" if h >= 10 else f"{h:.2f}")
                ax.annotate(
                    label,
                    (b.get_x() + b.get_width() / 2, h),
                    ha="center",
                    va="bottom",
                    fontsize=7 if len(keys) < 4 else 5.5,
                )
        ax.set_title(title, fontsize=9)
        ax.set_xticks(range(len(shown)))
        ax.set_xticklabels(shown, fontsize=8, rotation=15)
        ax.tick_params(axis="y", labelsize=8)
        ax.margins(y=0.15)
        if not any_val:
            ax.text(0.5, 0.5, "n/a", ha="center", va="center", transform=ax.transAxes)
