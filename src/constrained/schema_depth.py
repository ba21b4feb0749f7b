"""Moved to `constrained.frontends.json_schema.depth`; kept for one release: the public names of the old
``constrained.schema_depth``, re-exported."""

from constrained.frontends.json_schema.depth import MAX_SCHEMA_DEPTH, check_schema_depth, recursion_room, too_deep

__all__ = ["MAX_SCHEMA_DEPTH", "check_schema_depth", "recursion_room", "too_deep"]
