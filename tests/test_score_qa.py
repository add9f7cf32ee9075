"""``drivegen score qa``: a model's answers to a run's own QA shards, judged by kind (numbers within the
STRIDE-QA-Bench tolerances, yes/no, categories), hand-made cases, the run's own answers at 100 % and one
corruption per kind lowering exactly its question type."""
from __future__ import annotations

import json

import pytest

from generator.cli import main as cli
from generator.validate.score.qa import judge, score


def _row(kind, unit, answer, value, qt="q"):
    return {"qa_id": "x", "kind": kind, "unit": unit, "answer": answer, "value": value, "question_type": qt,
            "family": "f", "split": "test"}


def test_each_kind_judged_by_hand():
    dist = _row("quantitative", "m", "Region [1] is 20.00 m away.", 20.004)
    assert judge(dist, {"answer": "About 24.9 meters."}) == (True, None)  # within 25 % of the stated 20.00
    assert judge(dist, {"answer": "About 25.1 meters."})[0] is False
    assert judge(dist, {"value": 15.0}) == (True, None) and judge(dist, {"value": 14.9})[0] is False
    assert judge(dist, {"answer": "far away"}) == (False, "no distance in the answer")
    bearing = _row("quantitative", "degrees", "-175.00 degrees.", -175.0)
    assert judge(bearing, {"answer": "178 degrees"})[0] and not judge(bearing, {"answer": "160 degrees"})[0]
    speed = _row("quantitative", "m/s", "It moves at 0.30 m/s.", 0.3)
    assert judge(speed, {"answer": "0.39 m/s"})[0] and not judge(speed, {"answer": "0.41 m/s"})[0]  # 0.1 m/s
    yes = _row("qualitative", "bool", "Yes, Region [0] is closer.", 1.0)
    assert judge(yes, {"answer": "yes."})[0] and judge(yes, {"value": True})[0] and judge(yes, {"value": "yes"})[0]
    assert not judge(yes, {"answer": "No, it is not."})[0] and not judge(yes, {"value": 0})[0]
    either = _row("qualitative", "bool", "The car Region [1] is above the cone Region [3].", 1.0)
    assert judge(either, {"answer": "the car region [1] is above the cone region [3]"})[0]
    assert not judge(either, {"answer": "The car Region [1] is below the cone Region [3]."})[0]
    clock = _row("qualitative", "o'clock", "Region [2] is at 11 o'clock.", 11.0)
    assert judge(clock, {"answer": "region [2] is at 11 o'clock"})[0] and judge(clock, {"value": 11})[0]
    assert not judge(clock, {"answer": "Region [2] is at 1 o'clock."})[0]


def _answers(run, change=None):
    from generator.runfolder import RunReader

    rows = RunReader(str(run)).read_table("qa").to_pylist()
    return rows, [{"qa_id": r["qa_id"], "answer": (change or {}).get(r["qa_id"], r["answer"])} for r in rows]


def test_the_runs_own_answers_score_100_and_each_corruption_its_type(labelled_run, tmp_path):
    rows, oracle = _answers(labelled_run)
    pred = tmp_path / "oracle.json"
    pred.write_text(json.dumps(oracle))
    r = score(str(pred), str(labelled_run))
    assert r["problems"] == [] and r["answered"] == r["questions"] == len(rows) > 100
    assert {f: v["accuracy"] for f, v in r["families"].items()} == {f: 1.0 for f in r["families"]}
    pick = {}
    for row in rows:  # one question of each kind
        key = ("quantitative" if row["kind"] == "quantitative" else row["unit"] == "bool")
        pick.setdefault(key, row)
    for row in pick.values():
        wrong = {"quantitative": "It is 9999 m, at 123 degrees, moving at 99 m/s.", True: "Unsure."}.get(
            "quantitative" if row["kind"] == "quantitative" else row["unit"] == "bool", "something else")
        _, answers = _answers(labelled_run, {row["qa_id"]: wrong})
        pred.write_text(json.dumps(answers))
        r = score(str(pred), str(labelled_run))
        lowered = {(f, t) for f, v in r["families"].items() for t, c in v["types"].items() if c["accuracy"] < 1}
        assert lowered == {(row["family"], row["question_type"])}, (row["qa_id"], lowered)
    # the command: exit 0, the figures printed; a missing answer is listed and enters no rate
    pred.write_text(json.dumps(oracle[1:]))
    assert cli(["score", "qa", "--pred", str(pred), str(labelled_run)]) == 0
    r = score(str(pred), str(labelled_run))
    assert r["answered"] == r["questions"] - 1 and f"{oracle[0]['qa_id']}: no answer" in r["problems"]
    assert all(v["accuracy"] == 1.0 for v in r["families"].values())
    # malformed rows are listed, not dropped silently
    pred.write_text(json.dumps(oracle + [{"answer": "yes"}, oracle[0]]))
    r = score(str(pred), str(labelled_run))
    assert "row %d: no qa_id: ignored" % len(oracle) in r["problems"]
    assert f"{oracle[0]['qa_id']}: answered twice: the last answer counts" in r["problems"]


def test_unusable_answers_are_input_errors(labelled_run, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    assert cli(["score", "qa", "--pred", str(bad), str(labelled_run)]) == 2
    with pytest.raises(Exception, match="no QA rows|not a run folder|run folder"):
        score(str(bad), str(tmp_path))
