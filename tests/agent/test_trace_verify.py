"""`ember trace verify`: facts decide the verdict; ungrounded claims and the narration heuristic are reported apart
(exit 0 / 1 / 4 / 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli import main
from agent.trace import EventType, TraceRecorder, provenance_data


def _trace(path: Path, final_text: str, *, terminal: bool = True,
           user: str = "The tuned score is 21.57% better; reply DONE and that number.") -> Path:
    with TraceRecorder(path) as tr:
        tr.emit(EventType.RUN_STARTED)
        tr.emit(EventType.PROVENANCE, data=provenance_data(
            runtime_version="0", model_sha256=None, tokenizer_sha256=None, codec_id="qwen2.5-tool-call-v1",
            tool_schema_sha256="ab" * 32, config={}, limits={}))
        tr.emit(EventType.MESSAGE_COMMITTED, data={"ledger_index": 0, "kind": "user", "role": "user",
                                                    "content": user})
        if terminal:
            tr.emit(EventType.RUN_COMPLETED, data={"final_text": final_text})
    return path


def test_a_consistent_trace_whose_answer_claims_nothing_verifies_with_exit_0(tmp_path, capsys) -> None:
    assert main(["trace", "verify", str(_trace(tmp_path / "t.jsonl", "DONE 21.57%"))]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "trace verified: OK"


def test_an_unbacked_claim_is_a_labelled_heuristic_finding_with_exit_3(tmp_path, capsys) -> None:
    path = _trace(tmp_path / "t.jsonl", "I saved the report to report.md.")
    assert main(["trace", "verify", str(path)]) == 3
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("heuristic  the final answer claims an artifact was written")
    assert out[-1] == "trace verified: OK, but the narration check flagged the final answer"
    assert not any(line.startswith("PROBLEM") for line in out)


def test_no_narration_leaves_only_the_facts(tmp_path, capsys) -> None:
    path = _trace(tmp_path / "t.jsonl", "I saved the report to report.md.")
    assert main(["trace", "verify", str(path), "--no-narration", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {"ok": True, "problems": [], "warnings": [], "ungrounded": [], "narration": []}


def test_a_number_no_input_holds_is_an_ungrounded_finding_with_exit_4(tmp_path, capsys) -> None:
    path = _trace(tmp_path / "t.jsonl", "DONE 10.00%")
    assert main(["trace", "verify", str(path)]) == 4
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("UNGROUNDED the final answer's number '10.00'")
    assert out[-1] == "trace verified: the record is OK, but the final answer states what no input or tool result holds"


@pytest.mark.parametrize("narration", [[], ["--no-narration"]])
def test_a_fact_problem_fails_with_exit_1_whatever_the_narration(tmp_path, capsys, narration) -> None:
    path = _trace(tmp_path / "t.jsonl", "I saved the report to report.md.", terminal=False)
    assert main(["trace", "verify", str(path), "--json", *narration]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and any("no terminal event" in p for p in report["problems"])
