"""An object's members as pattern text: which of its listed members may appear, in schema order.

    optional members                ──subsequences──►  every non-empty subsequence, each member copied O(log n) times
    minProperties / maxProperties   ──counted_members──►  members with a counted number present

A member is (pattern text ``"key": value``, name, required); ``sep`` is the whitespace policy's comma.
"""

from __future__ import annotations

from typing import Callable

from constrained.dialect.writer import alt, rep
from constrained.errors import UnsupportedSchemaError

__all__ = ["subsequences", "counted_members"]

# -- optional members ------------------------------------------------------------------------------------------------


def subsequences(parts: list[str], sep: str) -> str:
    """Non-empty, order-preserving subsequences of `parts` joined by `sep`.

    Splitting parts = L + R: N(L ∪ R) = N(L) T(R) | N(R), where T(R) = each of R optional behind a
    separator (linear). The split points are chosen by dynamic programming on pattern length, so a
    member is copied O(log n) times rather than O(n) (the naive "first present member" form).
    """
    n = len(parts)
    opt = [f"(?:{sep}{p})?" for p in parts]
    if n > 64:  # DP is cubic; balanced halves are within a small factor
        def build_halves(i: int, j: int) -> str:
            if j - i == 1:
                return parts[i]
            k = (i + j) // 2
            return f"(?:{build_halves(i, k)}{''.join(opt[k:j])}|{build_halves(k, j)})"
        return build_halves(0, n)
    weight = [0] * (n + 1)
    for i, p in enumerate(opt):
        weight[i + 1] = weight[i] + len(p)
    cost: dict[tuple[int, int], tuple[int, int]] = {}
    for span in range(1, n + 1):
        for i in range(0, n - span + 1):
            j = i + span
            if span == 1:
                cost[i, j] = (len(parts[i]), -1)
                continue
            cost[i, j] = min(
                (cost[i, k][0] + (weight[j] - weight[k]) + cost[k, j][0] + 6, k) for k in range(i + 1, j)
            )

    def build(i: int, j: int) -> str:
        k = cost[i, j][1]
        if k < 0:
            return parts[i]
        return f"(?:{build(i, k)}{''.join(opt[k:j])}|{build(k, j)})"
    return build(0, n)


# -- minProperties / maxProperties -----------------------------------------------------------------------------------


def counted_members(members: list[tuple[str, str, bool]], extra: str | None, sep: str, lo: int, hi: int | None,
                    members_body: Callable[[list, str | None], tuple[str | None, bool]], path: str,
                    extras: Callable[[bool, int, int | None], str | None] | None = None,
                    ) -> tuple[str | None, bool]:
    """`members_body` with between lo and hi members present: (body pattern, whether the object may be empty).

    Members keep schema order, required ones always present; the count is tracked while walking them (a state per
    count still open), then extras make up the rest (``extras(started, need, room)``: their pattern when they are
    more than any number of ``extra``, e.g. witnesses). Refused when the states would copy members too often.
    """
    n = len(members)
    if (n + 1) * (max(lo, hi or 0) + 1) > 4096:
        raise UnsupportedSchemaError(path, "minProperties", "counting that many properties")
    memo: dict[tuple[int, bool, int, int | None], str | None] = {}

    def tail_free(i: int, started: bool) -> str | None:
        """Members i.. and extras, no count left to enforce; '' means nothing more (None: no way to finish)."""
        if not started:
            body, can_empty = members_body(members[i:], extra)
            if body is None:
                return "" if can_empty else None
            return f"(?:{body})?" if can_empty else body
        text = "".join(f"{sep}{p}" if req else f"(?:{sep}{p})?" for p, _, req in members[i:])
        if extras is not None:
            rest = extras(True, 0, None)
            return None if rest is None else text + rest
        return text + (f"(?:{sep}{extra})*" if extra else "")

    def go(i: int, started: bool, need: int, room: int | None) -> str | None:
        if room is not None and room < 0:
            return None
        if need <= 0 and room is None:
            return tail_free(i, started)
        key = (i, started, max(need, 0), room)
        if key in memo:
            return memo[key]
        if i == n:
            need = max(need, 0)
            if extras is not None:
                out = extras(started, need, room)
            elif extra is None:
                out = "" if need == 0 else None
            elif started:
                out = rep(f"{sep}{extra}", need, room) if room != 0 else ("" if need == 0 else None)
            elif room == 0:
                out = "" if need == 0 else None
            else:
                first = extra + rep(f"{sep}{extra}", max(need - 1, 0), None if room is None else room - 1)
                out = f"(?:{first})?" if need == 0 else first
        else:
            p, _, req = members[i]
            take = go(i + 1, True, need - 1, None if room is None else room - 1)
            take = None if take is None else (f"{sep}{p}" if started else p) + take
            skip = None if req else go(i + 1, started, need, room)
            if take is not None and skip == "":
                out = f"(?:{take})?"
            else:
                out = alt([take, skip])
        memo[key] = out
        return out

    body = go(0, False, max(lo, 1), hi)  # the non-empty objects; the empty one is the container's business
    return (body or None), lo == 0
