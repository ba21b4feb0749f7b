"""`agent.json_depth`: depth measured without recursion, for a document of any depth (hostile cases:
tests/hostile/test_hostile_depth.py)."""

from __future__ import annotations

from typing import Any

from agent.json_depth import MAX_JSON_DEPTH, shown_path, text_depth, too_deep
from agent.schema import MAX_DEPTH_LIMIT


def _nest(depth: int, key: Any = "a") -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {key: value} if key is not None else [value]
    return value


def test_the_json_depth_limit_holds_the_deepest_arguments_in_a_call_in_a_fenced_array() -> None:
    assert MAX_JSON_DEPTH == MAX_DEPTH_LIMIT + 2


def test_too_deep_names_the_first_container_past_the_limit_at_any_depth() -> None:
    assert too_deep(_nest(5), 5) is None and too_deep(1, 0) is None
    assert too_deep(_nest(6), 5) == ("a",) * 5
    assert too_deep([0, {"k": [[1]]}], 3) == (1, "k", 0)
    assert too_deep(_nest(100_000, key=None), 258) == (0,) * 258  # no RecursionError
    cycle: list[Any] = []
    cycle.append(cycle)
    assert too_deep(cycle, 10) == (0,) * 10


def test_text_depth_counts_brackets_outside_strings_for_one_value() -> None:
    assert text_depth('{"a":[1,{"b":"[[[{{"}]}') == (3, 8)
    assert text_depth('  [[]] [[[[]]]]', 2) == (2, 3)  # the value at the offset only
    assert text_depth("[" * 50_000) == (50_000, 49_999)  # unterminated: what is open at the end
    assert text_depth('"[[["') == (0, 0)


def test_a_long_path_is_cut_in_the_middle() -> None:
    assert shown_path(("a", 0, "b c")) == 'a[0]["b c"]'
    assert shown_path(("properties", "a/b"), pointer=True) == "#/properties/a~1b"
    long = shown_path(("a",) * 300)
    assert len(long) <= 121 and long.startswith("a.a.") and "…" in long
