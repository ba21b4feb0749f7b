"""How deep a JSON Schema may nest, checked before any recursive walk, and the recursion room compiling one takes.

The schema compilers (`translate.schema_to_pattern`, `translate.schema_to_rules`, `grammar.compile_json_schema`) are
recursive walks: about five Python frames per nested container value, two per ``$ref`` followed, and `json`'s C
encoder and decoder take one per container. Python's default limit (1,000 frames) made a 200-level schema a
`RecursionError`. So every compile of a schema goes through here first:

    schema (dict | bool | JSON text)
      ├─ text: a bracket scan (no recursion) ─── deeper than MAX_SCHEMA_DEPTH ──► UnsupportedSchemaError
      ├─ value: an iterative walk of the document ─ deeper than MAX_SCHEMA_DEPTH ──► UnsupportedSchemaError(path, kw)
      ▼
    recursion_room(): the recursion limit raised to cover MAX_SCHEMA_DEPTH levels while the compile runs
      ▼
    the compiler counts subschema levels as it walks, ``$ref`` hops included (`walk.SchemaWalk.flatten`):
    deeper than MAX_SCHEMA_DEPTH ──► UnsupportedSchemaError(path, "$ref")

Refuses: nothing else; what a schema means is the compiler's business. The refusal names the depth and the JSON
pointer where the limit was crossed; it comes before the walk that would have crossed it, so a 10,000-level
schema is refused in milliseconds, never a `RecursionError`, a crash or a hang.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from constrained.errors import UnsupportedSchemaError
from constrained.frontends.json_schema.vocabulary import ANNOTATION_KEYWORDS, SUPPORTED_KEYWORDS, UNSUPPORTED_KEYWORDS

__all__ = ["MAX_SCHEMA_DEPTH", "check_schema_depth", "recursion_room", "too_deep"]

MAX_SCHEMA_DEPTH = 1_024
"""The deepest schema compiled, in levels: nested containers of the schema document (a nested object schema takes
two, itself and its ``properties``; a nested array schema one), and subschemas entered along one path of the
compile (each ``$ref`` followed counts). A 300-level object schema is 601 containers deep; real schemas nest tens.
The bound keeps a compile's recursion (raised by `recursion_room` to cover it) and `json`'s C recursion over the
document far inside the C stack."""
_FRAMES_PER_LEVEL = 8
"""Python frames one level of the compile takes at most (measured: 5 through a nested value, 2 through a ``$ref``
or a combinator member; 8 leaves room), what `recursion_room` provides for."""
_ROOM_FRAMES = _FRAMES_PER_LEVEL * MAX_SCHEMA_DEPTH + 1_000
"""Frames `recursion_room` guarantees above its caller's stack (the 1,000: the default limit's own headroom)."""

_TEXT_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]')
"""A JSON string (possibly unterminated: the parser reports that) or one bracket: what the text scan steps over."""


def too_deep(path: str, levels: str, keyword: str | None = None) -> UnsupportedSchemaError:
    """The one refusal of a schema past `MAX_SCHEMA_DEPTH`, naming the limit, what counted and where it was crossed
    (``keyword``: by default the innermost keyword of ``path``)."""
    if keyword is None:
        keyword = _keyword([t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]])
    return UnsupportedSchemaError(path, keyword, f"the schema nests deeper than MAX_SCHEMA_DEPTH = "
                                  f"{MAX_SCHEMA_DEPTH:,} {levels} here")  # fmt: skip


def check_schema_depth(schema: Any) -> None:
    """Refuse a schema (a parsed value, or JSON text) nested deeper than `MAX_SCHEMA_DEPTH` containers, without
    recursion; a cyclic value (a dict that contains itself) is refused the same way, as infinitely deep.

    Raises:
        UnsupportedSchemaError: the pointer of the first container past the limit and the keyword above it
            (text: ``#`` and the character offset).
    """
    if isinstance(schema, str):
        depth = 0
        for match in _TEXT_TOKENS.finditer(schema):
            token = match.group()
            if token in "[{":
                depth += 1
                if depth > MAX_SCHEMA_DEPTH:
                    raise too_deep("#", f"containers (JSON text, at character {match.start():,})", "$schema")
            elif token in "]}":
                depth -= 1
        return
    if not isinstance(schema, (dict, list)):
        return
    # (container, depth, parent entry, key in the parent): the path is built only for a refusal
    stack: list[tuple[Any, int, Any, Any]] = [(schema, 1, None, None)]
    while stack:
        entry = stack.pop()
        node, depth = entry[0], entry[1]
        for key, value in (node.items() if isinstance(node, dict) else enumerate(node)):
            if isinstance(value, (dict, list)):
                if depth + 1 > MAX_SCHEMA_DEPTH:
                    tokens = _tokens((value, depth + 1, entry, key))
                    raise too_deep(_pointer(tokens), "containers")
                stack.append((value, depth + 1, entry, key))


def _tokens(entry: Any) -> list[str]:
    tokens = []
    while entry[2] is not None:
        tokens.append(str(entry[3]))
        entry = entry[2]
    return tokens[::-1]


def _pointer(tokens: list[str]) -> str:
    return "#" + "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


def _keyword(tokens: list[str]) -> str:
    """The innermost schema keyword on the path (``properties`` above a property name, ``allOf`` above an index)."""
    known = SUPPORTED_KEYWORDS | UNSUPPORTED_KEYWORDS | ANNOTATION_KEYWORDS
    return next((t for t in reversed(tokens) if t in known), tokens[-1] if tokens else "$schema")


# -- the recursion room --------------------------------------------------------------------------------------

_room_lock = threading.Lock()
_room_users = 0
_limit_before = 0
_limit_raised_to = 0


@contextlib.contextmanager
def recursion_room() -> Iterator[None]:
    """Python's recursion limit at least `_ROOM_FRAMES` above the caller's stack while the block runs.

    Why not iterative walks: the compiler is a recursive descent over ~20 keywords, and its depth is bounded by
    `MAX_SCHEMA_DEPTH` before it starts; frames between Python functions take no C stack on CPython 3.11+. The
    limit is process-wide, so the room is shared: raised by the first user, restored by the last one out (unless
    someone else changed it meanwhile).
    """
    global _room_users, _limit_before, _limit_raised_to
    frame: FrameType | None = sys._getframe()
    depth = 0
    while frame is not None:
        depth += 1
        frame = frame.f_back
    with _room_lock:
        if _room_users == 0:
            _limit_before = _limit_raised_to = sys.getrecursionlimit()
        _room_users += 1
        if sys.getrecursionlimit() < depth + _ROOM_FRAMES:
            _limit_raised_to = depth + _ROOM_FRAMES
            sys.setrecursionlimit(_limit_raised_to)
    try:
        yield
    finally:
        with _room_lock:
            _room_users -= 1
            if _room_users == 0 and sys.getrecursionlimit() == _limit_raised_to:
                sys.setrecursionlimit(_limit_before)
