"""The flight study's (g) row: today from the real ``mcp-server-time`` server, each request scored against the date
that server returned (no model: the scoring and the server's side only)."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_flights as bf  # noqa: E402
import knowledge_tools as kt  # noqa: E402
import studies_data as sd  # noqa: E402


def tool_message(value: object) -> dict:
    return {"role": "tool", "content": json.dumps(value)}


def test_the_row_offers_the_servers_tools_and_tells_the_model_to_ask_it() -> None:
    [row] = [r for r in bf.AUTO_ROWS if r.key == "auto-mcp-time"]
    assert row.mcp_time and row.session and not row.today  # no fixed today anywhere in the prompt
    assert [t.name for t in kt.time_server_tools()] == ["time.get_current_time", "time.convert_time"]
    assert "time.get_current_time" in bf._system(row, sd.REQUESTS[0])


def test_server_today_is_the_date_in_the_first_time_result_the_model_received() -> None:
    messages = [{"role": "user", "content": "x"}, tool_message({"ok": False, "kind": "timeout", "detail": "slow"}),
                tool_message({"ok": True, "result": {"timezone": "Asia/Tokyo",
                                                     "datetime": "2027-01-31T08:00:00+09:00"}}),
                tool_message({"ok": True, "result": {"datetime": "2027-02-01T08:00:00+00:00"}})]
    assert kt.server_today(messages) == dt.date(2027, 1, 31)
    assert kt.server_today([tool_message({"ok": True, "result": "no clock here"})]) is None


def test_a_request_is_scored_against_the_servers_date_the_models_or_the_benchmarks_own() -> None:
    request = next(r for r in sd.REQUESTS if r.phrase == "tomorrow")
    told = [tool_message({"ok": True, "result": {"datetime": "2027-01-31T08:00:00+09:00"}})]
    scored, today, source = bf._server_request(request, told)
    assert (scored.date, today, source) == ("2027-02-01", dt.date(2027, 1, 31), "the model's call")
    scored, today, source = bf._server_request(request, [])  # the model never asked: the benchmark asks the server
    assert source == "the benchmark's own call" and abs((today - dt.datetime.now(dt.timezone.utc).date()).days) <= 1
    assert scored.date == (today + dt.timedelta(days=1)).isoformat()
