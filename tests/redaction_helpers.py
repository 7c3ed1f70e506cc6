"""Backend-neutral pieces of the redaction tests: PII values, graphs, scans, a resuming child.

Each backend's ``test_redaction.py`` opens its savers through :func:`open_saver`
/ :func:`aopen_saver` (the backend's ``from_conn_string`` with ``redaction=``,
encryption off so the scan is meaningful) and:

- runs :func:`run_pii_graph` (or its async twin): a user message, tool-call
  arguments, a tool result, ``configurable`` and ``metadata`` that each carry
  their own e-mail, card number, IBAN, phone number and AWS access key id (25
  values, :data:`PII`), and a ``scratch`` channel that the rules drop; then
  dumps every byte of its raw storage and checks it with :func:`pii_hits` (no
  value in any form: raw, compact, digits only, hex, base64) and
  :func:`redaction_marks` (every kind's placeholder, pseudonym or token is
  there), and compares :func:`state_view` of ``get_state`` with
  :func:`expected_view`;
- interrupts an agent (``create_agent`` + ``HumanInTheLoopMiddleware``) with
  :func:`start_agent`, then resumes it in a new Python process
  (:func:`resume_in_new_process`, running this module as ``python -m
  tests.redaction_helpers SPEC``), which reports what the tool received and the
  final state.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command

from langgraph_durable._core.records import RecordIdentity, RecordKind
from langgraph_durable.protect import IdentityPipeline, Redaction, RedactionPipeline, Rule
from tests.encryption_helpers import canary_forms

__all__ = [
    "KINDS",
    "LOCATIONS",
    "PII",
    "SCRATCH",
    "MODES",
    "ALL_MODES",
    "mode_id",
    "SaverSpec",
    "make_redaction",
    "open_saver",
    "aopen_saver",
    "pii_forms",
    "pii_hits",
    "raw_hits",
    "redaction_marks",
    "run_pii_graph",
    "arun_pii_graph",
    "state_view",
    "expected_view",
    "replacements",
    "start_agent",
    "astart_agent",
    "resume_in_new_process",
    "aresume_in_new_process",
    "check_resumed",
    "check_storage",
    "check_paused",
    "tool_result",
]

ROOT = Path(__file__).resolve().parents[1]

KINDS = ("email", "card", "iban", "phone", "aws_key")
#: The detector behind each kind (its placeholder is ``<DETECTOR>``).
DETECTOR = {
    "email": "email",
    "card": "card",
    "iban": "iban",
    "phone": "phone",
    "aws_key": "aws_access_key",
}
LOCATIONS = ("message", "args", "result", "configurable", "metadata")

#: Distinct, valid-looking values per location, so a leak names where it came from.
PII: dict[str, dict[str, str]] = {
    "message": {
        "email": "ann.lee@example.com",
        "card": "4111 1111 1111 1111",
        "iban": "GB82 WEST 1234 5698 7654 32",
        "phone": "+1 415 555 0132",
        "aws_key": "AKIAIOSFODNN7EXAMPLE",
    },
    "args": {
        "email": "bo.ortiz@example.org",
        "card": "5555 5555 5555 4444",
        "iban": "DE89 3704 0044 0532 0130 00",
        "phone": "+44 20 7946 0958",
        "aws_key": "AKIAI44QH8DHBEXAMPLE",
    },
    "result": {
        "email": "chen.wu@example.net",
        "card": "4012 8888 8888 1881",
        "iban": "FR14 2004 1010 0505 0001 3M02 606",
        "phone": "+1 212 555 0187",
        "aws_key": "ASIAY34FZKBOKMUTVV7A",
    },
    "configurable": {
        "email": "dana.k@example.com",
        "card": "3782 822463 10005",
        "iban": "NL91 ABNA 0417 1643 00",
        "phone": "+33 1 23 45 67 89",
        "aws_key": "AKIAJZ5Y7Q3XB2M4N6PQ",
    },
    "metadata": {
        "email": "eve.m@example.co.uk",
        "card": "6011 1111 1111 1117",
        "iban": "ES91 2100 0418 4502 0005 1332",
        "phone": "+49 30 12345678",
        "aws_key": "AKIA2E0A8F3B244C9986",
    },
}

#: The keys of ``configurable`` (copied into checkpoint metadata by LangGraph).
CONFIG_KEYS = {
    "email": "user_email",
    "card": "card",
    "iban": "iban",
    "phone": "phone",
    "aws_key": "aws_access_key_id",
}
#: Not PII: only the ``drop`` rule on its channel keeps it out of storage.
SCRATCH = "scratch-note-7c41e0b9d2 of the planner"
SCRATCH_CHANNEL = "scratch"
MODES = ("mask", "pseudonymize", "tokenize")
#: The modes with redaction off (None) first, and their test ids.
ALL_MODES = (None, *MODES)


def mode_id(mode: str | None) -> str:
    return mode or "off"


FINAL = "Payment done."
TOOL = "send_payment"


def _text(location: str, values: dict[str, str]) -> str:
    v = values
    return (
        f"[{location}] mail {v['email']}, card {v['card']}, IBAN {v['iban']}, "
        f"phone {v['phone']}, AWS key {v['aws_key']}."
    )


def user_text() -> str:
    return "Please pay. " + _text("message", PII["message"])


def tool_result(values: dict[str, str]) -> str:
    """What the graph's tool node returns, and the agent's tool, for the args it got."""
    return "Paid. " + _text("result", values)


# ---- settings and savers ---------------------------------------------------------


def make_redaction(mode: str | None, key: bytes | None = None) -> Redaction | None:
    """``mode`` on every channel and the metadata, ``scratch`` dropped; None: off.

    ``tokenize`` restores on read.
    """
    if mode is None:
        return None
    keyed = mode in ("pseudonymize", "tokenize")
    return Redaction(
        [Rule(channels=SCRATCH_CHANNEL, mode="drop"), Rule(mode=mode)],
        key=key if keyed else None,
        restore=mode == "tokenize",
    )


@dataclass
class SaverSpec:
    """How to open a saver on the test's namespace (JSON-able: handed to the child).

    Attributes:
        backend: ``postgres``, ``redis`` or ``dynamodb``.
        conn: The ``from_conn_string`` URL.
        kwargs: Other constructor arguments (``schema=``, ``prefix=``).
        mode: Redaction mode, or None for off.
        key: Hex of the redaction key.
    """

    backend: str
    conn: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    mode: str | None = None
    key: str = field(default_factory=lambda: os.urandom(32).hex())

    def redaction(self) -> Redaction | None:
        return make_redaction(self.mode, bytes.fromhex(self.key))

    def with_mode(self, mode: str | None) -> SaverSpec:
        return SaverSpec(self.backend, self.conn, dict(self.kwargs), mode, self.key)


def _classes(backend: str) -> tuple[Any, Any]:
    if backend == "postgres":
        from langgraph_durable.postgres import AsyncPostgresSaver, PostgresSaver

        return PostgresSaver, AsyncPostgresSaver
    if backend == "redis":
        from langgraph_durable.redis import AsyncRedisSaver, RedisSaver

        return RedisSaver, AsyncRedisSaver
    if backend == "dynamodb":
        from langgraph_durable.dynamodb import AsyncDynamoDBSaver, DynamoDBSaver

        return DynamoDBSaver, AsyncDynamoDBSaver
    raise ValueError(f"unknown backend {backend!r}")


@contextmanager
def open_saver(spec: SaverSpec) -> Iterator[Any]:
    """A set-up sync saver from ``from_conn_string(..., redaction=...)``."""
    cls = _classes(spec.backend)[0]
    with cls.from_conn_string(spec.conn, redaction=spec.redaction(), **spec.kwargs) as saver:
        saver.setup()
        yield saver


@asynccontextmanager
async def aopen_saver(spec: SaverSpec) -> AsyncIterator[Any]:
    """A set-up async saver from ``from_conn_string(..., redaction=...)``."""
    cls = _classes(spec.backend)[1]
    async with cls.from_conn_string(spec.conn, redaction=spec.redaction(), **spec.kwargs) as saver:
        await saver.setup()
        yield saver


# ---- scans -----------------------------------------------------------------------


def pii_forms(value: str) -> list[bytes]:
    """The byte strings a value may show as: raw, without spaces or separators,
    digits only (numbers), each also in hex and base64 (``canary_forms``)."""
    variants = {value, value.replace(" ", ""), re.sub(r"[\s().+/-]", "", value)}
    digits = re.sub(r"\D", "", value)
    if len(digits) >= 8:
        variants.add(digits)
    return [form for variant in sorted(variants) for form in canary_forms(variant)]


def all_values() -> list[str]:
    return [PII[loc][kind] for loc in LOCATIONS for kind in KINDS]


def pii_hits(dump: bytes, locations: Sequence[str] = LOCATIONS) -> list[str]:
    """Which PII values (of ``locations``) appear in ``dump`` in any form, as ``loc.kind``."""
    return [
        f"{loc}.{kind}"
        for loc in locations
        for kind in KINDS
        if any(form in dump for form in pii_forms(PII[loc][kind]))
    ]


def raw_hits(dump: bytes) -> list[str]:
    """Which PII values appear in ``dump`` as they are."""
    return [
        f"{loc}.{kind}" for loc in LOCATIONS for kind in KINDS if PII[loc][kind].encode() in dump
    ]


def scratch_in(dump: bytes) -> bool:
    return any(form in dump for form in canary_forms(SCRATCH))


def _mark(kind: str, mode: str) -> str:
    name = DETECTOR[kind].upper()
    if mode == "mask":
        return re.escape(f"<{name}>")
    if mode == "pseudonymize":
        return f"<{name}:[0-9a-f]{{12}}>"
    return f"<{name}:tok_[0-9a-f]{{16}}>"


def redaction_marks(dump: bytes, mode: str) -> list[str]:
    """The kinds whose replacement (placeholder, pseudonym, token) ``dump`` holds."""
    return [k for k in KINDS if re.search(_mark(k, mode).encode(), dump)]


def check_storage(dump: bytes, mode: str | None) -> None:
    """Off: every value is stored as it is (the scan works). On: none in any form, the
    dropped channel's value absent, and each kind's replacement there instead."""
    if mode is None:
        assert raw_hits(dump) == [f"{loc}.{kind}" for loc in LOCATIONS for kind in KINDS]
        assert scratch_in(dump)
    else:
        assert pii_hits(dump) == []
        assert not scratch_in(dump)
        assert redaction_marks(dump, mode) == list(KINDS)


# ---- what get_state must show -------------------------------------------------------


def replacements(
    location: str, mode: str | None, redaction: Redaction | None, tenant: str = "default"
) -> dict[str, str]:
    """Each kind's value of ``location`` as a read through the saver shows it."""
    values = PII[location]
    if mode in (None, "tokenize"):  # off, or tokens restored on read
        return dict(values)
    if mode == "mask":
        return {k: f"<{DETECTOR[k].upper()}>" for k in KINDS}
    assert mode == "pseudonymize" and redaction is not None
    pipeline = RedactionPipeline(IdentityPipeline(JsonPlusSerializer()), redaction)
    identity = RecordIdentity(tenant, "any", "", RecordKind.BLOB, "", "c", "1", "c")
    out = {k: pipeline.open(identity, pipeline.seal(identity, v)) for k, v in values.items()}
    for kind, pseudonym in out.items():
        assert re.fullmatch(_mark(kind, mode), pseudonym), pseudonym
    return out


def expected_view(
    mode: str | None, redaction: Redaction | None, tenant: str = "default"
) -> dict[str, Any]:
    """What :func:`state_view` must give for the PII graph's finished thread."""
    r = {loc: replacements(loc, mode, redaction, tenant) for loc in LOCATIONS}
    return {
        "message": "Please pay. " + _text("message", r["message"]),
        "args": r["args"],
        "result": tool_result(r["result"]),
        "configurable": {CONFIG_KEYS[k]: v for k, v in r["configurable"].items()},
        "metadata": _text("metadata", r["metadata"]),
        "scratch": SCRATCH if mode is None else None,
        "final": "done",
    }


def state_view(state: Any) -> dict[str, Any]:
    """The PII-bearing parts of the graph's ``get_state``."""
    messages = state.values["messages"]
    human = [m for m in messages if isinstance(m, HumanMessage)]
    calls = [m for m in messages if isinstance(m, AIMessage) and m.tool_calls]
    tools = [m for m in messages if isinstance(m, ToolMessage)]
    assert len(human) == len(calls) == len(tools) == 1, messages
    return {
        "message": human[0].content,
        "args": calls[0].tool_calls[0]["args"],
        "result": tools[0].content,
        "configurable": {key: state.metadata.get(key) for key in CONFIG_KEYS.values()},
        "metadata": state.metadata.get("note"),
        "scratch": state.values.get(SCRATCH_CHANNEL),
        "final": messages[-1].content,
    }


# ---- the PII graph ----------------------------------------------------------------


class PiiState(MessagesState):
    scratch: str


def build_pii_graph(checkpointer: Any) -> Any:
    """``agent`` calls a tool with PII in its arguments; ``tool`` answers with PII
    and writes the ``scratch`` channel; ``agent`` then finishes."""

    def agent(state: PiiState) -> dict[str, Any]:
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {"messages": [AIMessage(content="done")]}
        call = {"name": "lookup", "args": dict(PII["args"]), "id": "call-1", "type": "tool_call"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    def tool(state: PiiState) -> dict[str, Any]:
        return {
            "messages": [ToolMessage(content=tool_result(PII["result"]), tool_call_id="call-1")],
            SCRATCH_CHANNEL: SCRATCH,
        }

    def route(state: PiiState) -> str:
        last = state["messages"][-1]
        return "tool" if getattr(last, "tool_calls", None) else "__end__"

    builder = StateGraph(PiiState)
    builder.add_node("agent", agent)
    builder.add_node("tool", tool)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tool", "__end__"])
    builder.add_edge("tool", "agent")
    return builder.compile(checkpointer=checkpointer)


def pii_config(thread: str) -> dict[str, Any]:
    values = PII["configurable"]
    return {
        "configurable": {"thread_id": thread, **{CONFIG_KEYS[k]: values[k] for k in KINDS}},
        "metadata": {"note": _text("metadata", PII["metadata"])},
    }


def run_pii_graph(saver: Any, thread: str = "pii") -> Any:
    """Run the PII graph on ``saver`` to its end; ``get_state`` of the thread."""
    graph = build_pii_graph(saver)
    config = pii_config(thread)
    graph.invoke({"messages": [HumanMessage(user_text())]}, config)
    return graph.get_state({"configurable": {"thread_id": thread}})


async def arun_pii_graph(saver: Any, thread: str = "pii") -> Any:
    """Async :func:`run_pii_graph`."""
    graph = build_pii_graph(saver)
    config = pii_config(thread)
    await graph.ainvoke({"messages": [HumanMessage(user_text())]}, config)
    return await graph.aget_state({"configurable": {"thread_id": thread}})


# ---- the agent interrupted for approval -----------------------------------------------


class ScriptedChatModel(GenericFakeChatModel):
    """Asks for ``send_payment`` (PII in the arguments) until a tool answered, then finishes.

    The answer depends on the conversation only, so a model built in another
    process continues the same script.
    """

    messages: Iterator[AIMessage] = iter(())

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        if any(isinstance(m, ToolMessage) for m in messages):
            message = AIMessage(content=FINAL)
        else:
            call = {"name": TOOL, "args": dict(PII["args"]), "id": "call-pay", "type": "tool_call"}
            message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])


#: Where ``make setup`` installs ``langchain`` (outside the virtualenv, see the Makefile).
AGENT_DEPS = ROOT / ".lgd" / "agent-deps"


def _langchain_path() -> None:
    """Make the separately installed ``langchain`` importable (``make setup`` installs it)."""
    path = str(AGENT_DEPS)
    if path not in sys.path:
        sys.path.append(path)


def build_agent(checkpointer: Any, received: list[dict[str, str]]) -> Any:
    """``create_agent`` with a payment tool that needs approval; calls land in ``received``."""
    _langchain_path()
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_core.tools import tool

    @tool(TOOL)
    def send_payment(email: str, card: str, iban: str, phone: str, aws_key: str) -> str:
        """Send a payment and mail the receipt."""
        args = {"email": email, "card": card, "iban": iban, "phone": phone, "aws_key": aws_key}
        received.append(args)
        return tool_result(args)

    return create_agent(
        ScriptedChatModel(),
        tools=[send_payment],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={TOOL: True})],
        checkpointer=checkpointer,
    )


def _agent_config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def _interrupted(result: Any, state: Any, received: list[Any]) -> dict[str, Any]:
    assert "__interrupt__" in result, result
    assert received == [], "the tool ran before approval"
    assert state.next == ("HumanInTheLoopMiddleware.after_model",), state.next
    (pending,) = state.interrupts
    (action,) = pending.value["action_requests"]
    return {"stored_args": state.values["messages"][-1].tool_calls[0]["args"], "action": action}


def start_agent(saver: Any, thread: str) -> dict[str, Any]:
    """Run the agent until it asks for approval; what the stored state shows."""
    received: list[dict[str, str]] = []
    agent = build_agent(saver, received)
    result = agent.invoke({"messages": [HumanMessage(user_text())]}, _agent_config(thread))
    return _interrupted(result, agent.get_state(_agent_config(thread)), received)


async def astart_agent(saver: Any, thread: str) -> dict[str, Any]:
    """Async :func:`start_agent`."""
    received: list[dict[str, str]] = []
    agent = build_agent(saver, received)
    result = await agent.ainvoke({"messages": [HumanMessage(user_text())]}, _agent_config(thread))
    return _interrupted(result, await agent.aget_state(_agent_config(thread)), received)


APPROVE: Command[Any] = Command(resume={"decisions": [{"type": "approve"}]})


def _report(state: Any, received: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "received": received,
        "next": list(state.next),
        "interrupts": len(state.interrupts),
        "messages": [
            {
                "type": m.type,
                "content": m.content,
                "tool_calls": [c["args"] for c in getattr(m, "tool_calls", None) or []],
            }
            for m in state.values["messages"]
        ],
    }


def _resume_sync(spec: SaverSpec, thread: str) -> dict[str, Any]:
    received: list[dict[str, str]] = []
    with open_saver(spec) as saver:
        agent = build_agent(saver, received)
        agent.invoke(APPROVE, _agent_config(thread))
        return _report(agent.get_state(_agent_config(thread)), received)


async def _resume_async(spec: SaverSpec, thread: str) -> dict[str, Any]:
    received: list[dict[str, str]] = []
    async with aopen_saver(spec) as saver:
        agent = build_agent(saver, received)
        await agent.ainvoke(APPROVE, _agent_config(thread))
        return _report(await agent.aget_state(_agent_config(thread)), received)


def _child_argv(spec: SaverSpec, thread: str, use_async: bool) -> list[str]:
    job = {"spec": asdict(spec), "thread": thread, "async": use_async}
    return [sys.executable, "-m", "tests.redaction_helpers", json.dumps(job)]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _parse_child(code: int | None, out: bytes, err: bytes) -> dict[str, Any]:
    assert code == 0, f"the resuming process failed ({code}):\n{err.decode()[-4000:]}"
    return json.loads(out.decode().strip().splitlines()[-1])  # type: ignore[no-any-return]


def resume_in_new_process(spec: SaverSpec, thread: str, use_async: bool) -> dict[str, Any]:
    """Approve and finish the agent's run in a new Python process; its report."""
    done = subprocess.run(
        _child_argv(spec, thread, use_async),
        cwd=ROOT,
        env=_child_env(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    return _parse_child(done.returncode, done.stdout, done.stderr)


async def aresume_in_new_process(spec: SaverSpec, thread: str, use_async: bool) -> dict[str, Any]:
    """:func:`resume_in_new_process` without blocking the event loop."""
    argv = _child_argv(spec, thread, use_async)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=ROOT,
        env=_child_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    return _parse_child(proc.returncode, out, err)


def check_paused(paused: dict[str, Any], spec: SaverSpec) -> dict[str, str]:
    """The paused run's stored tool call (and the interrupt's copy) as the mode shows
    them; returns those arguments, which the tool must get after approval."""
    args = replacements("args", spec.mode, spec.redaction())
    assert paused["stored_args"] == args
    assert paused["action"]["name"] == TOOL and paused["action"]["args"] == args
    return args


def check_resumed(report: dict[str, Any], args: dict[str, str]) -> None:
    """The run finished after approval: the tool ran once with ``args``, then the model."""
    assert report["pid"] != os.getpid()
    assert report["received"] == [args]
    assert report["next"] == [] and report["interrupts"] == 0
    messages = report["messages"]
    assert [m["type"] for m in messages] == ["human", "ai", "tool", "ai"], messages
    assert messages[1]["tool_calls"] == [args]
    assert messages[2]["content"] == tool_result(args)
    assert messages[-1]["content"] == FINAL and messages[-1]["tool_calls"] == []


def _child(raw: str) -> None:
    job = json.loads(raw)
    spec = SaverSpec(**job["spec"])
    if job["async"]:
        report = asyncio.run(_resume_async(spec, job["thread"]))
    else:
        report = _resume_sync(spec, job["thread"])
    report["pid"] = os.getpid()
    print(json.dumps(report))


if __name__ == "__main__":
    _child(sys.argv[1])
