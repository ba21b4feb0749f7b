"""How deep the JSON the agent takes in may nest, measured without recursion.

JSON from a model (a call body) or from a tool (its result) is decoded, copied, serialised and traced by recursive
code after it enters: `json`'s C codec takes a frame per level, ``copy.deepcopy`` (the ledger) two. A call body
600 levels deep decoded fine and then took the session down with a `RecursionError` in the ledger's copy. So the
depth is bounded once, where the document enters, and a deeper one is a typed outcome naming its depth:

    call body text ─► codec ``decode_value`` ─► deeper than MAX_JSON_DEPTH ─► MalformedToolCall (invalid_json)
    tool value ─────► ``execute_tool`` ───────► deeper than MAX_JSON_DEPTH ─► ok:false result_not_serializable
    argument text ──► ``validate_arguments`` ─► too deep to parse ─────────► ok:false invalid_arguments (too_deep)

`too_deep` finds the first container past a limit in a value, `text_depth` how deep the JSON value at an offset
of a text nests; neither recurses, so both answer for a document of any depth (a cycle counts as infinitely deep).
"""

from __future__ import annotations

import re
from typing import Any, Final

from agent.argument_errors import render_path

__all__ = ["MAX_JSON_DEPTH", "shown_path", "text_depth", "too_deep"]

MAX_JSON_DEPTH: Final = 258
"""The deepest JSON document accepted from a model or a tool, in containers: an arguments object at the deepest
``max_depth`` `agent.schema.validate_arguments` allows (``MAX_DEPTH_LIMIT`` = 256), inside its call object, inside
a fenced array of calls. What is accepted is then copied and serialised at most ~520 frames deep."""

_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]')
"""A JSON string (possibly unterminated) or one bracket: what `text_depth` steps over."""
_SHOWN_PATH_CHARS: Final = 120


def too_deep(value: Any, limit: int) -> tuple[str | int, ...] | None:
    """The path of the first container (dict, list or tuple) nested deeper than ``limit`` containers in ``value``
    (the value itself is level 1), or None. Whatever the containers' own methods raise propagates."""
    # (container, its depth, parent entry, key in the parent): a path is built only for the answer
    stack: list[tuple[Any, int, Any, Any]] = [(value, 1, None, None)] if isinstance(value, (dict, list, tuple)) else []
    if stack and limit < 1:
        return ()
    while stack:
        entry = stack.pop()
        node, depth = entry[0], entry[1]
        for key, item in (node.items() if isinstance(node, dict) else enumerate(node)):
            if isinstance(item, (dict, list, tuple)):
                child = (item, depth + 1, entry, key)
                if depth + 1 > limit:
                    parts: list[str | int] = []
                    while child[2] is not None:
                        parts.append(child[3] if isinstance(child[3], (str, int)) else repr(child[3]))
                        child = child[2]
                    return tuple(reversed(parts))
                stack.append(child)
    return None


def text_depth(text: str, start: int = 0) -> tuple[int, int]:
    """How deep the JSON value beginning at ``text[start]`` nests, and the offset of the bracket that first reached
    that depth (an unterminated value counts what is open at the end of the text)."""
    depth = deepest = 0
    at = start
    if text[start:start + 1] not in ("[", "{"):
        return 0, start
    for match in _TOKENS.finditer(text, start):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > deepest:
                deepest, at = depth, match.start()
        elif token in "]}":
            depth -= 1
            if depth <= 0:
                break
    return deepest, at


def shown_path(parts: tuple[str | int, ...], *, pointer: bool = False) -> str:
    """A path for a message, its middle cut when long: rendered as argument paths are (``a.b[0]``), or as a JSON
    pointer (``#/properties/a``: where in a schema)."""
    if pointer:
        text = "#" + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)
    else:
        text = render_path(parts)
    if len(text) <= _SHOWN_PATH_CHARS:
        return text
    half = _SHOWN_PATH_CHARS // 2
    return f"{text[:half]}…{text[-half:]}"
