"""The tool registry: the fixed, ordered set of tools one session offers, unique by name.

    [Tool, ...] ─► ToolRegistry ─► specs() ─► codec (render, tool-call grammar)
                                └► get(name) ─► the session's tool lookup (None: ``unknown_tool``)
                                └► snapshot_sha256 ─► the trace's provenance (pins the exact tool contract)

Refuses: anything but `Tool` objects (`TypeError`) and duplicate names (`DuplicateToolError`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

from agent.errors import DuplicateToolError
from agent.protocol.base import ToolSpec
from agent.schema import canonical_json
from agent.tool.definition import Tool

__all__ = ["ToolRegistry"]


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ToolRegistry:
    """The tools offered to one session, in render order. Immutable; names are unique."""

    __slots__ = ("_tools", "_by_name", "_snapshot_sha256")

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        """Raises:
            DuplicateToolError: two tools share a name.
            TypeError: an element is not a `Tool`.
        """
        items = tuple(tools)
        by_name: dict[str, Tool] = {}
        for tool in items:
            if not isinstance(tool, Tool):
                raise TypeError(f"ToolRegistry holds Tool objects, got {type(tool).__name__}")
            if tool.name in by_name:
                raise DuplicateToolError(tool.name)
            by_name[tool.name] = tool
        object.__setattr__(self, "_tools", items)
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_snapshot_sha256", _sha256(canonical_json([t.snapshot() for t in items])))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ToolRegistry is immutable; build a new one")

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None (the session answers ``unknown_tool``)."""
        return self._by_name.get(name)

    def specs(self) -> list[ToolSpec]:
        """Every tool's `ToolSpec`, in registry order."""
        return [t.spec() for t in self._tools]

    @property
    def names(self) -> tuple[str, ...]:
        """Tool names in registry order."""
        return tuple(t.name for t in self._tools)

    def snapshot(self) -> list[dict[str, Any]]:
        """`Tool.snapshot` of every tool, in order."""
        return [t.snapshot() for t in self._tools]

    @property
    def snapshot_sha256(self) -> str:
        """Hex sha256 of the canonical JSON of `snapshot`: pins the exact tool contract a run was offered."""
        return self._snapshot_sha256

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self.names)})"


