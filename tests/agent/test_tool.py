"""Tool definitions, the registry, approval, idempotency and bounded execution."""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Annotated, Literal, Optional

import pydantic
import pytest

from agent.artifact import ArtifactStore
from agent.cancel import CancelToken
from agent.errors import ArgumentsMismatchError, DuplicateToolError, ToolDefinitionError
from agent.protocol.base import ToolSpec
from agent.results import ResultErrorKind as R
from agent.schema import ArgumentErrors, ValidatedArguments, validate_arguments
from agent.tool import (
    ApprovalDecision,
    IdempotencyStore,
    Tool,
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolOutcome,
    ToolRegistry,
    check_approval,
    default_policy,
    execute_tool,
)
import agent.tool.execution as execution

ADD_SCHEMA = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
              "required": ["a", "b"], "additionalProperties": False}


def add(args, ctx):
    return args["a"] + args["b"]


def make(function=add, *, name="add", parameters=ADD_SCHEMA, **kw) -> Tool:
    return Tool(name=name, description="Add two numbers.", parameters=parameters, function=function, **kw)


def valid(tool: Tool, raw) -> ValidatedArguments:
    result = validate_arguments(tool.name, tool.parameters, raw)
    assert isinstance(result, ValidatedArguments), result
    return result


def ctx(**kw) -> ToolContext:
    return ToolContext(run_id="run-1", call_id="call-1", **kw)


def run(tool: Tool, raw, context: ToolContext | None = None, **kw) -> ToolOutcome:
    kw.setdefault("timeout_s", 30)
    return execute_tool(tool, valid(tool, raw), context or ctx(), **kw)


# -- definitions ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["add", "crm.search_customer", "billing.search-customer", "_x", "a" * 64])
def test_valid_tool_names_include_namespaces(name):
    assert make(name=name).name == name


@pytest.mark.parametrize("name", ["", "1add", "has space", "a/b", "a" * 65, "émoji", "a\n"])
def test_invalid_tool_names_are_definition_errors(name):
    with pytest.raises(ToolDefinitionError):
        make(name=name)


def test_invalid_parameters_schema_is_a_definition_error_with_the_tool_name():
    with pytest.raises(ToolDefinitionError) as info:
        make(parameters={"type": "object", "properties": {"a": {"type": "nope"}}})
    assert info.value.name == "add"


@pytest.mark.parametrize("bad", [{"function": 3}, {"timeout_s": 0}, {"timeout_s": float("inf")}, {"kind": "delete"}])
def test_other_bad_definitions_are_definition_errors(bad):
    kw = {"name": "add", "parameters": ADD_SCHEMA, "function": add} | bad
    with pytest.raises(ToolDefinitionError):
        Tool(**kw)


def test_parameters_are_copied_at_construction():
    params = {"type": "object", "properties": {"a": {"type": "number"}}}
    tool = make(parameters=params)
    params["properties"]["b"] = {"type": "string"}
    assert "b" not in tool.parameters["properties"]


def test_spec_is_the_codec_view_of_the_tool():
    tool = make(constrained=True)
    spec = tool.spec()
    assert spec == ToolSpec(name="add", description="Add two numbers.", parameters=ADD_SCHEMA, constrained=True)
    spec.parameters["properties"].clear()
    assert tool.parameters == ADD_SCHEMA


# -- from_function ----------------------------------------------------------------------------------------------

class Line(pydantic.BaseModel):
    """An order line."""

    sku: str
    qty: int = 1


def order(items: list[Line], mode: Literal["fast", "slow"], note: Optional[str] = None,  # noqa: UP045
          weight: Annotated[float, pydantic.Field(description="Kilograms.", ge=0)] = 1.0,
          tags: dict[str, int] | None = None, gift: bool = False, *, ctx: ToolContext) -> dict:
    """Place an order for the customer.

    More detail that is not part of the summary.

    Args:
        items: Lines to order,
            one per product.
        mode (str): Shipping speed.
        weight: Overridden by the Field description.
    """
    return {"first": items[0], "n": len(items), "mode": mode, "note": note, "weight": weight, "run": ctx.run_id}


def test_from_function_derives_a_closed_schema_from_annotations_and_docstring():
    tool = Tool.from_function(order, kind=ToolKind.ACTION)
    p = tool.parameters
    assert tool.name == "order" and tool.description == "Place an order for the customer."
    assert p["type"] == "object" and p["additionalProperties"] is False
    assert p["required"] == ["items", "mode"]
    assert set(p["properties"]) == {"items", "mode", "note", "weight", "tags", "gift"}  # ctx is not an argument
    assert p["properties"]["items"]["description"] == "Lines to order, one per product."
    assert p["properties"]["mode"] == {"type": "string", "enum": ["fast", "slow"], "description": "Shipping speed."}
    assert p["properties"]["weight"]["description"] == "Kilograms."
    assert p["properties"]["weight"]["minimum"] == 0
    assert p["properties"]["gift"]["type"] == "boolean"
    assert p["$defs"]["Line"]["additionalProperties"] is False
    assert "title" not in p and "title" not in p["properties"]["mode"]


def test_from_function_tool_validates_and_runs_with_model_instances_and_the_context():
    tool = Tool.from_function(order)
    outcome = run(tool, {"items": [{"sku": "a"}, {"sku": "b", "qty": 2}], "mode": "slow"})
    assert outcome.ok, outcome
    assert outcome.value == {"first": {"sku": "a", "qty": 1}, "n": 2, "mode": "slow", "note": None, "weight": 1.0,
                             "run": "run-1"}


def test_from_function_schema_rejects_what_the_annotations_forbid():
    tool = Tool.from_function(order)
    result = validate_arguments(tool.name, tool.parameters,
                                {"items": [{"sku": "a", "qty": "2"}], "mode": "medium", "weight": -1, "x": 1})
    assert isinstance(result, ArgumentErrors)
    assert [e.path for e in result.errors] == ["items[0].qty", "mode", "weight", "x"]


def test_from_function_passes_plain_python_types():
    seen = {}

    def stats(values: list[int], scale: float = 1.0) -> float:
        """Sum the values."""
        seen["types"] = (type(values), type(scale))
        return sum(values) * scale

    outcome = run(Tool.from_function(stats), {"values": [1, 2, 3]})
    assert outcome.ok and outcome.value == 6.0 and seen["types"] == (list, float)


def test_from_function_parameter_names_may_shadow_pydantic_attributes():
    def lookup(json: str, schema: int = 0) -> str:
        return f"{json}:{schema}"

    tool = Tool.from_function(lookup)
    assert set(tool.parameters["properties"]) == {"json", "schema"}
    assert run(tool, {"json": "x", "schema": 2}).value == "x:2"


async def fetch(url: str) -> str:
    return url


@pytest.mark.parametrize("fn", [
    lambda *values: 0,
    lambda **kw: 0,
    lambda x: 0,
    fetch,
])
def test_from_function_refuses_signatures_the_model_cannot_name_or_the_watchdog_cannot_run(fn):
    with pytest.raises(ToolDefinitionError):
        Tool.from_function(fn, name="bad")


class Range(pydantic.BaseModel):
    lo: int
    hi: int

    @pydantic.model_validator(mode="after")
    def ordered(self):
        if self.lo > self.hi:
            raise ValueError("lo must not exceed hi")
        return self


def test_from_function_model_validator_failure_is_invalid_arguments():
    def span(r: Range) -> int:
        return r.hi - r.lo

    outcome = run(Tool.from_function(span), {"r": {"lo": 5, "hi": 1}})
    assert outcome.error_kind is R.INVALID_ARGUMENTS and "lo must not exceed hi" in outcome.detail


class Search(pydantic.BaseModel):
    """Search customers by name."""

    query: str = pydantic.Field(description="Name fragment.")
    limit: int = 10


def test_from_pydantic_hands_the_function_a_model_instance():
    def search(q: Search, ctx: ToolContext) -> list:
        return [q.query, q.limit, ctx.call_id]

    tool = Tool.from_pydantic(Search, search, name="crm.search_customer")
    assert tool.description == "Search customers by name."
    assert tool.parameters["required"] == ["query"] and tool.parameters["additionalProperties"] is False
    assert run(tool, {"query": "ann"}).value == ["ann", 10, "call-1"]


def test_typed_function_and_pydantic_tools_are_constrained_unless_turned_off():
    def search(q: Search) -> list:
        return [q.query]

    assert Tool.from_function(order).constrained and Tool.from_function(order).spec().constrained
    assert Tool.from_pydantic(Search, search).constrained
    assert not Tool.from_function(order, constrained=False).constrained
    assert not Tool.from_pydantic(Search, search, constrained=False).spec().constrained


def test_from_openai_accepts_wrapped_and_bare_definitions():
    body = {"name": "add", "description": "Add.", "parameters": ADD_SCHEMA}
    wrapped = Tool.from_openai({"type": "function", "function": body}, add)
    bare = Tool.from_openai(body, add)
    assert wrapped.spec() == bare.spec() and wrapped.spec().to_openai() == {"type": "function", "function": body}
    assert run(bare, {"a": 1, "b": 2}).value == 3


@pytest.mark.parametrize("definition", [
    {"type": "function", "function": {"name": "x", "parameters": ADD_SCHEMA}, "extra": 1},
    {"type": "tool", "function": {"name": "x"}},
    {"name": "x", "params": {}},
    {"description": "no name"},
])
def test_from_openai_refuses_malformed_definitions(definition):
    with pytest.raises(ToolDefinitionError):
        Tool.from_openai(definition, add)


# -- registry ------------------------------------------------------------------------------------------------------

def test_registry_refuses_duplicate_names():
    with pytest.raises(DuplicateToolError) as info:
        ToolRegistry([make(), make()])
    assert info.value.name == "add"


def test_registry_lookup_order_and_specs():
    tools = [make(name="crm.search_customer"), make(name="billing.search_customer")]
    registry = ToolRegistry(tools)
    assert len(registry) == 2 and list(registry) == tools
    assert registry.get("billing.search_customer") is tools[1] and registry.get("search_customer") is None
    assert "crm.search_customer" in registry
    assert [s.name for s in registry.specs()] == ["crm.search_customer", "billing.search_customer"]
    with pytest.raises(AttributeError):
        registry.extra = 1


def test_registry_snapshot_hash_pins_the_tool_contract():
    a = ToolRegistry([make()])
    assert a.snapshot_sha256 == ToolRegistry([make()]).snapshot_sha256
    changed = Tool(name="add", description="Add two numbers!", parameters=ADD_SCHEMA, function=add)
    assert a.snapshot_sha256 != ToolRegistry([changed]).snapshot_sha256
    assert a.snapshot_sha256 != ToolRegistry([make(constrained=True)]).snapshot_sha256


# -- raw text never reaches a tool ---------------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [{"a": 1, "b": 2}, '{"a": 1, "b": 2}', None])
def test_execute_refuses_anything_but_validated_arguments(raw):
    calls = []
    tool = make(lambda args, c: calls.append(args))
    with pytest.raises(TypeError):
        execute_tool(tool, raw, ctx(), timeout_s=5)  # type: ignore[arg-type]
    assert calls == []


def test_tool_functions_receive_validated_arguments():
    received = []
    tool = make(lambda args, c: received.append(type(args)) or 0)
    assert run(tool, {"a": 1, "b": 2}).ok
    assert received == [ValidatedArguments]


def test_a_tool_compiles_its_parameters_once_and_they_validate_as_the_schema_does():
    tool = make()
    compiled = validate_arguments(tool.name, tool.compiled_parameters, {"a": 1, "b": 2})
    assert compiled == valid(tool, {"a": 1, "b": 2}) and compiled.schema_sha256 == tool.schema_sha256
    assert run(tool, {"a": 1, "b": 2}).value == 3
    errors = validate_arguments(tool.name, tool.compiled_parameters, {"a": "x", "c": 1})
    assert isinstance(errors, ArgumentErrors)
    assert [(e.path, e.kind.value) for e in errors.errors] == [("a", "wrong_type"), ("b", "missing_required"),
                                                              ("c", "unknown_field")]


def test_arguments_validated_for_another_tool_or_schema_are_refused():
    other = make(name="other")
    with pytest.raises(ArgumentsMismatchError):
        execute_tool(make(), valid(other, {"a": 1, "b": 2}), ctx(), timeout_s=5)
    loose = make(parameters={"type": "object", "properties": {"a": {}, "b": {}}})
    with pytest.raises(ArgumentsMismatchError):
        execute_tool(make(), valid(loose, {"a": "x", "b": "y"}), ctx(), timeout_s=5)


# -- outcomes ------------------------------------------------------------------------------------------------------

def test_ok_outcome_and_its_result():
    outcome = run(make(), {"a": 1, "b": 2.5})
    assert outcome.ok and outcome.value == 3.5 and outcome.error_kind is None and outcome.started
    assert outcome.duration_ms >= 0 and not outcome.replayed
    assert outcome.to_result() == {"ok": True, "result": 3.5}


def raiser(exc):
    def fn(args, c):
        raise exc
    return fn


@pytest.mark.parametrize("exc", [ValueError("boom"), SystemExit(3), KeyboardInterrupt(), GeneratorExit()])
def test_exceptions_are_contained_as_execution_failed_with_type_and_message(exc):
    outcome = run(make(raiser(exc)), {"a": 1, "b": 2})
    assert outcome.ok is False and outcome.error_kind is R.EXECUTION_FAILED and outcome.started
    assert outcome.detail.startswith(type(exc).__name__)
    assert outcome.to_result()["kind"] == "execution_failed"


def test_tool_failure_gives_a_clean_detail_and_its_kind():
    outcome = run(make(raiser(ToolFailure("no such customer"))), {"a": 1, "b": 2})
    assert (outcome.error_kind, outcome.detail) == (R.EXECUTION_FAILED, "no such customer")
    outcome = run(make(raiser(ToolFailure("bad id", kind=R.INVALID_ARGUMENTS))), {"a": 1, "b": 2})
    assert outcome.error_kind is R.INVALID_ARGUMENTS
    with pytest.raises(ValueError):
        ToolFailure("x", kind=R.TIMEOUT)


@pytest.mark.parametrize("value", [{1, 2}, float("nan"), object(), {"k": float("inf")}, b"bytes"])
def test_non_json_results_are_result_not_serializable(value):
    outcome = run(make(lambda args, c: value), {"a": 1, "b": 2})
    assert outcome.error_kind is R.RESULT_NOT_SERIALIZABLE and outcome.started


class _ItemsBomb(dict):
    def items(self):
        raise RuntimeError("items bomb")


def test_a_result_whose_serialization_raises_anything_is_result_not_serializable():
    outcome = run(make(lambda args, c: _ItemsBomb(a=1)), {"a": 1, "b": 2})
    assert outcome.error_kind is R.RESULT_NOT_SERIALIZABLE and "items bomb" in outcome.detail


def test_result_value_is_a_private_copy():
    shared = {"rows": [1]}
    outcome = run(make(lambda args, c: shared), {"a": 1, "b": 2})
    shared["rows"].append(2)
    assert outcome.value == {"rows": [1]}


# -- timeout and cancel --------------------------------------------------------------------------------------------

def late_writer(release: threading.Event, finished: threading.Event, seen: dict, before=None):
    """A tool that blocks until released, then tries to write through its (by then detached) context."""

    def tool(args, c):
        if before is not None:
            before(c)
        release.wait()
        seen["cancel_set_after_detach"] = c.cancel.is_set()
        try:
            c.artifacts.write("late.txt", b"after the detach")
        except RuntimeError as exc:
            seen["late_write"] = str(exc)
        finished.set()
        return "late result"

    return tool


def test_timeout_detaches_the_worker_and_discards_its_late_result(tmp_path):
    store = ArtifactStore(tmp_path / "artifacts")
    release, finished, seen = threading.Event(), threading.Event(), {}
    try:
        outcome = run(make(late_writer(release, finished, seen)), {"a": 1, "b": 2}, ctx(artifacts=store),
                      timeout_s=0.05)
    finally:
        release.set()
    assert outcome.error_kind is R.TIMEOUT and outcome.value is None and outcome.started
    assert "detached" in outcome.detail and outcome.artifacts == ()
    assert finished.wait(10)
    assert seen["cancel_set_after_detach"] is True and "detached" in seen["late_write"]
    assert store.refs() == []


def test_cancel_reports_artifacts_written_before_it_and_refuses_later_writes(tmp_path):
    store, token = ArtifactStore(tmp_path / "artifacts"), CancelToken()
    release, finished, seen = threading.Event(), threading.Event(), {}

    def write_then_cancel(c):
        c.artifacts.write("early.txt", b"before the cancel")
        token.cancel("user pressed ^C")  # the run is cancelled while this call is in flight

    tool = make(late_writer(release, finished, seen, before=write_then_cancel))
    try:
        outcome = run(tool, {"a": 1, "b": 2}, ctx(artifacts=store, cancel=token), timeout_s=3600)
    finally:
        release.set()
    assert outcome.error_kind is R.CANCELLED and outcome.started
    assert [ref.name for ref in outcome.artifacts] == ["early.txt"]
    assert finished.wait(10)
    assert seen["cancel_set_after_detach"] is True and "detached" in seen["late_write"]
    assert [ref.name for ref in store.refs()] == ["early.txt"]


def test_the_tighter_of_tool_and_run_timeouts_applies():
    release = threading.Event()
    tool = make(lambda args, c: release.wait(), timeout_s=0.05)
    try:
        outcome = run(tool, {"a": 1, "b": 2}, timeout_s=3600)
    finally:
        release.set()
    assert outcome.error_kind is R.TIMEOUT and "0.05" in outcome.detail


def test_cancel_before_start_never_runs_the_tool():
    token = CancelToken()
    token.cancel()
    calls = []
    outcome = run(make(lambda args, c: calls.append(1)), {"a": 1, "b": 2}, ctx(cancel=token))
    assert outcome.error_kind is R.CANCELLED and not outcome.started and calls == []


# -- workers ------------------------------------------------------------------------------------------------------

class _WatchedPool(execution._WorkerPool):
    """The worker pool with its transitions observable: each park and each retire is queued as (event, thread id),
    so a test waits on the pool having done something instead of sleeping and polling its lists."""

    def __init__(self) -> None:
        super().__init__(execution._MAX_IDLE_WORKERS)
        self.events: queue.Queue[tuple[str, int | None]] = queue.Queue()

    def park(self, worker) -> bool:
        parked = super().park(worker)
        self.events.put(("parked" if parked else "ending", threading.get_ident()))
        return parked

    def retire(self, worker) -> None:
        super().retire(worker)
        self.events.put(("retired", worker._thread.ident))

    def next_event(self) -> tuple[str, int | None]:
        return self.events.get(timeout=10)


@pytest.fixture
def fresh_pool(monkeypatch):
    """A worker pool of the test's own: what earlier tests parked or left running (concurrent data calls,
    detached workers still in their tools) cannot change which thread runs a call or how many pipes are open."""
    pool = _WatchedPool()
    monkeypatch.setattr(execution, "_POOL", pool)
    return pool


def test_sequential_calls_reuse_one_parked_worker_thread_named_after_the_call(fresh_pool):
    seen = []

    def where(args, c):
        seen.append((threading.get_ident(), threading.current_thread().name))
        return 1

    tool = make(where)
    for i in range(10):
        assert run(tool, {"a": 1, "b": 2}, ToolContext(run_id="run-1", call_id=f"call-{i}")).ok
    assert len({ident for ident, _ in seen}) == 1
    assert [name for _, name in seen] == [f"ember-tool-add-call-{i}" for i in range(10)]
    assert threading.get_ident() not in {ident for ident, _ in seen}


def test_a_detached_worker_is_not_handed_the_next_call_while_its_tool_still_runs():
    release, blocked_on = threading.Event(), []

    def block(args, c):
        blocked_on.append(threading.get_ident())
        release.wait()
        return "late"

    try:
        assert run(make(block, timeout_s=0.05), {"a": 1, "b": 2}).error_kind is R.TIMEOUT
        second = []
        outcome = run(make(lambda args, c: second.append(threading.get_ident()) or 2), {"a": 1, "b": 2},
                      timeout_s=30)
    finally:
        release.set()
    assert outcome.ok and outcome.value == 2
    assert second and second[0] != blocked_on[0]


def test_a_detached_worker_back_in_the_pool_completes_only_its_next_call(fresh_pool):
    """Its late completion must not read as the completion of the call it is handed next."""
    release, late = threading.Event(), []

    def block(args, c):
        late.append(threading.get_ident())
        release.wait()
        return "late"

    assert run(make(block, timeout_s=0.05), {"a": 1, "b": 2}).error_kind is R.TIMEOUT
    assert fresh_pool.events.empty()  # the detached worker is still in its tool: not back in the pool
    release.set()
    assert fresh_pool.next_event() == ("parked", late[0])  # back in the pool, the only parked worker
    ran_on = []

    def slow_add(args, c):
        ran_on.append(threading.get_ident())
        time.sleep(0.05)  # a call that takes a while: a stale completion would end the wait before the result
        return args["a"] + args["b"]

    outcome = run(make(slow_add), {"a": 2, "b": 3})
    assert ran_on == late  # handed to the worker that was detached
    assert outcome.ok and outcome.value == 5 and outcome.duration_ms >= 50


def test_many_calls_with_timeouts_between_them_each_get_their_own_result():
    release = threading.Event()
    blocked = make(lambda args, c: release.wait(), timeout_s=0.01)
    try:
        for i in range(60):
            if i % 7 == 0:
                assert run(blocked, {"a": 0, "b": 0}).error_kind is R.TIMEOUT
            outcome = run(make(), {"a": i, "b": 1})
            assert outcome.ok and outcome.value == i + 1
    finally:
        release.set()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open descriptors through /proc")
def test_workers_beyond_the_parked_ones_end_and_close_their_wake_pipes(fresh_pool):
    release = threading.Event()
    blocked = make(lambda args, c: release.wait(), timeout_s=0.01)
    before = len(os.listdir("/proc/self/fd"))
    try:
        for _ in range(20):  # 20 detached workers, each still running its tool
            assert run(blocked, {"a": 0, "b": 0}).error_kind is R.TIMEOUT
        assert len(os.listdir("/proc/self/fd")) >= before + 2 * 12
    finally:
        release.set()
    seen: dict[str, set[int | None]] = {"parked": set(), "ending": set(), "retired": set()}
    while len(seen["parked"]) + len(seen["ending"]) < 20 or seen["retired"] != seen["ending"]:
        event, ident = fresh_pool.next_event()  # each worker returns from its tool, then parks or ends
        seen[event].add(ident)
    assert len(seen["parked"]) == 8 and len(seen["ending"]) == 20 - 8  # the pool keeps 8 parked, the rest end
    assert len(os.listdir("/proc/self/fd")) <= before + 2 * 8  # the ended ones closed their pipes
    assert run(make(), {"a": 1, "b": 2}).value == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_hand_calls_to_the_parents_parked_workers():
    assert run(make(), {"a": 1, "b": 2}).ok  # the parent now has a parked worker
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        outcome = run(make(), {"a": 1, "b": 2}, timeout_s=5)
        os._exit(0 if outcome.ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# -- approval ------------------------------------------------------------------------------------------------------

def test_default_policy_denies_only_external_actions():
    args = valid(make(), {"a": 1, "b": 2})
    for kind, external, allowed in [(ToolKind.DATA, False, True), (ToolKind.DATA, True, True),
                                    (ToolKind.ORCHESTRATION, False, True), (ToolKind.ACTION, False, True),
                                    (ToolKind.ACTION, True, False)]:
        assert default_policy(make(kind=kind, external=external), args).allowed is allowed


def test_a_denied_call_never_executes():
    calls = []
    tool = make(lambda args, c: calls.append(1), kind=ToolKind.ACTION, external=True)
    outcome = run(tool, {"a": 1, "b": 2}, approval=default_policy)
    assert outcome.error_kind is R.DENIED_BY_POLICY and not outcome.started and calls == []
    assert "default policy" in outcome.detail


def test_a_custom_policy_can_deny_on_the_arguments():
    calls = []

    def no_big_numbers(tool, args):
        return ApprovalDecision(allowed=args["a"] < 100, reason="a must be < 100 without a human")

    tool = make(lambda args, c: calls.append(args["a"]) or 0)
    assert run(tool, {"a": 1, "b": 2}, approval=no_big_numbers).ok
    assert run(tool, {"a": 500, "b": 2}, approval=no_big_numbers).error_kind is R.DENIED_BY_POLICY
    assert calls == [1]


@pytest.mark.parametrize("policy", [lambda t, a: True, lambda t, a: 1 / 0])
def test_a_broken_policy_denies(policy):
    tool = make()
    decision = check_approval(policy, tool, valid(tool, {"a": 1, "b": 2}))
    assert decision.allowed is False


# -- idempotency ---------------------------------------------------------------------------------------------------

def counting_action(effects: list, **kw) -> Tool:
    def charge(args, c):
        effects.append(args.to_dict())
        return {"charged": args["amount"], "n": len(effects)}

    params = kw.pop("parameters", {"type": "object", "properties": {"amount": {"type": "integer"}},
                                   "required": ["amount"]})
    return Tool(name="charge_card", parameters=params, function=charge, kind=kw.pop("kind", ToolKind.ACTION), **kw)


def test_an_action_retried_with_the_same_arguments_runs_once():
    effects: list = []
    tool, store = counting_action(effects), IdempotencyStore()
    first = run(tool, {"amount": 5}, idempotency=store)
    second = run(tool, {"amount": 5}, idempotency=store)
    assert len(effects) == 1
    assert first.ok and not first.replayed and second.replayed and second.value == first.value
    assert run(tool, {"amount": 6}, idempotency=store).value == {"charged": 6, "n": 2}
    assert len(effects) == 2 and len(store) == 2


def test_an_explicit_idempotency_key_decides_and_refuses_reuse_with_other_arguments():
    effects: list = []
    params = {"type": "object", "properties": {"amount": {"type": "integer"}, "idempotency_key": {"type": "string"}},
              "required": ["amount", "idempotency_key"]}
    tool, store = counting_action(effects, parameters=params), IdempotencyStore()
    assert run(tool, {"amount": 5, "idempotency_key": "k1"}, idempotency=store).ok
    assert run(tool, {"amount": 5, "idempotency_key": "k1"}, idempotency=store).replayed
    conflict = run(tool, {"amount": 7, "idempotency_key": "k1"}, idempotency=store)
    assert conflict.error_kind is R.INVALID_ARGUMENTS and "already used" in conflict.detail
    assert run(tool, {"amount": 5, "idempotency_key": "k2"}, idempotency=store).ok
    assert len(effects) == 2


def test_a_timed_out_action_is_not_run_again_on_retry():
    release, started = threading.Event(), threading.Event()
    effects: list = []

    def charge(args, c):
        effects.append(1)
        started.set()
        release.wait()

    tool = counting_action(effects)
    tool = Tool(name=tool.name, parameters=tool.parameters, function=charge, kind=ToolKind.ACTION)
    store = IdempotencyStore()
    try:
        first = run(tool, {"amount": 5}, idempotency=store, timeout_s=0.05)
        retry = run(tool, {"amount": 5}, idempotency=store, timeout_s=0.05)
    finally:
        release.set()
    assert first.error_kind is R.TIMEOUT and retry.replayed and retry.error_kind is R.TIMEOUT
    assert started.wait(10) and effects == [1]


def test_a_call_that_never_started_is_not_remembered():
    effects: list = []
    tool, store = counting_action(effects, external=True), IdempotencyStore()
    assert run(tool, {"amount": 5}, idempotency=store, approval=default_policy).error_kind is R.DENIED_BY_POLICY
    token = CancelToken()
    token.cancel()
    assert run(tool, {"amount": 5}, ctx(cancel=token), idempotency=store).error_kind is R.CANCELLED
    assert len(store) == 0 and effects == []
    assert run(tool, {"amount": 5}, idempotency=store).ok and effects == [{"amount": 5}]


def test_data_tools_are_not_deduplicated():
    effects: list = []
    tool, store = counting_action(effects, kind=ToolKind.DATA), IdempotencyStore()
    run(tool, {"amount": 5}, idempotency=store)
    run(tool, {"amount": 5}, idempotency=store)
    assert len(effects) == 2


def test_concurrent_retries_with_one_key_run_once():
    effects: list = []
    tool, store = counting_action(effects), IdempotencyStore()
    outcomes: list = []
    threads = [threading.Thread(target=lambda: outcomes.append(run(tool, {"amount": 5}, idempotency=store)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(effects) == 1 and len(outcomes) == 8
    assert sorted(o.replayed for o in outcomes) == [False] + [True] * 7


# -- artifacts and linked runs -------------------------------------------------------------------------------------

def test_artifacts_written_during_the_call_are_reported_even_on_failure(tmp_path):
    store = ArtifactStore(tmp_path)

    def writes_then_fails(args, c):
        c.artifacts.write("a.txt", b"one")
        c.artifacts.write("b.txt", b"two")
        raise RuntimeError("disk gremlin")

    outcome = run(make(writes_then_fails), {"a": 1, "b": 2}, ctx(artifacts=store))
    assert outcome.error_kind is R.EXECUTION_FAILED
    assert [r.name for r in outcome.artifacts] == ["a.txt", "b.txt"]
    assert all(store.verify(r) for r in outcome.artifacts)


def test_orchestration_tool_links_its_nested_run():
    def delegate(args, c):
        c.link_run("run-nested-7")  # a real one would run another Session here
        return "summary from the nested run"

    context = ctx()
    outcome = run(make(delegate, kind=ToolKind.ORCHESTRATION), {"a": 1, "b": 2}, context)
    assert outcome.ok and outcome.linked_runs == ("run-nested-7",)
    assert context.linked_runs == ["run-nested-7"]
    with pytest.raises(ValueError):
        context.link_run("")


def test_tool_execute_is_execute_tool_on_that_tool():
    tool = make()
    outcome = tool.execute(valid(tool, {"a": 2, "b": 40}), ctx(), timeout_s=5)
    assert outcome.ok and outcome.value == 42
    keyed = tool.execute(valid(tool, {"a": 1, "b": 1}), ctx(), timeout_s=5, approval=lambda t, a: _deny())
    assert not keyed.ok and not keyed.started and keyed.detail.endswith("no")


def _deny():
    from agent.tool import ApprovalDecision

    return ApprovalDecision(allowed=False, reason="no")
