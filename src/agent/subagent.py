"""Agent as a tool: a tool whose implementation is another Session, with its own prompt, tools, limits and trace.

The Finnish seed's third kind of tool (`ToolKind.ORCHESTRATION`). To the calling model it is a tool like any other
(a name, a description, one ``request`` string); when called, it runs a child `Session` to a typed exit and returns
the child's final answer. Owns the wiring only:

- the child's trace: one file per call, ``<trace_dir>/<parent run id>.<call id>.jsonl``, its run id linked to the
  parent's call (`ToolContext.link_run`, the parent trace's ``linked_runs``) and the file named in the result, so
  `agent.trace_verify.verify_trace` can check it with the parent's;
- cancel: the child runs under the parent call's cancel signal, so cancelling the parent stops the child at its
  next boundary or token; the tool then waits for the child's run to end (an orchestration call is never left
  running detached, see `agent.tool.execution`);
- outcome: a child that ends ``completed`` returns ``{"answer", "run_id", "trace"}``; any other exit fails the call
  with a model-facing detail (`ToolFailure`), the child's run id still linked.

Refuses to share state between calls: every call is a fresh Session (fresh ledger and idempotency store) over the
same engine and registry. The engine is shared with the parent (one model in memory); the parent never runs a turn
while its tool runs, and orchestration calls run one at a time.

    parent model ─► call agent(request) ─► Session(engine, tools, system_prompt, limits, trace).run(request)
                                                 ─► RunResult ─► {"answer", "run_id", "trace"} | ToolFailure
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.engine import TurnEngine
from agent.limits import AgentLimits
from agent.protocol.base import ToolChoice
from agent.run_result import LoopOutcome
from agent.schema import ValidatedArguments
from agent.session import Session
from agent.tool import Tool, ToolContext, ToolFailure, ToolKind, ToolRegistry
from agent.trace import TraceRecorder

__all__ = ["SubAgent", "agent_tool"]

REQUEST_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["request"],
                  "properties": {"request": {"type": "string", "minLength": 1,
                                             "description": "The question for the agent, with every detail it needs."}}}


@dataclass(frozen=True, kw_only=True)
class SubAgent:
    """Everything a child run needs besides its request."""

    engine: TurnEngine
    """The model seam (usually the parent's own engine)."""
    tools: ToolRegistry
    """The child's tools; the parent's are not visible to it."""
    system_prompt: str
    limits: AgentLimits = field(default_factory=AgentLimits)
    tool_choice: ToolChoice | Sequence[ToolChoice] = "auto"
    trace_dir: Path | None = None
    """Where each call's child trace is written; None runs the child untraced."""


def agent_tool(name: str, description: str, agent: SubAgent, *, timeout_s: float | None = None) -> Tool:
    """A tool that answers ``{"request": str}`` by running ``agent`` (see the module docstring).

    ``timeout_s`` bounds the whole child run like any tool's timeout; the child's own limits bound its steps.
    """

    def run_child(args: ValidatedArguments, ctx: ToolContext) -> dict[str, Any]:
        path = None if agent.trace_dir is None else Path(agent.trace_dir) / f"{ctx.run_id}.{ctx.call_id}.jsonl"
        trace = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            trace = TraceRecorder(path)
        try:
            session = Session(agent.engine, agent.tools, limits=agent.limits, trace=trace,
                              system_prompt=agent.system_prompt, tool_choice=agent.tool_choice)
            result = session.run(args["request"], cancel=ctx.cancel)
        finally:
            if trace is not None:
                trace.close()
        ctx.link_run(result.run_id)
        if result.outcome is not LoopOutcome.COMPLETED:
            raise ToolFailure(f"the {name} agent ended {result.outcome.value}"
                              + (f": {result.detail}" if result.detail else ""))
        return {"answer": result.final_text, "run_id": result.run_id, "trace": None if path is None else str(path)}

    return Tool(name=name, description=description, parameters=REQUEST_SCHEMA, function=run_child,
                kind=ToolKind.ORCHESTRATION, timeout_s=timeout_s)
