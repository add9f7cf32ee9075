"""``drivegen score stride``: STRIDE-QA-Bench's metrics, worked by hand from the toolkit's rules, the oracle at
100 % on a real export, and one corruption per quantity lowering exactly its metrics."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from generator.families.stride_qa.score import parse, score, success


def _q(n: int, g: str, cat: str, gt: dict, pred: str | None) -> dict:
    row = {"question_id": f"q{n:08d}_{g}", "group_id": g, "qa_category": cat, "gt_value": gt, "split": "test",
           "unit": {k: {"distance": "meters", "direction": "degrees", "velocity": "m/s"}[k] for k in gt}}
    if pred is not None:
        row["pred"] = pred
    return row


def _bench(tmp: Path, rows: list[dict], relations: dict[str, str]) -> tuple[Path, Path]:
    ann = tmp / "bench" / "annotation_files"
    ann.mkdir(parents=True)
    with open(ann / "annotation_sheet.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["group_id", "object_type", "relation"])
        w.writerows([g, "vehicle", r] for g, r in relations.items())
    preds = tmp / "preds"
    preds.mkdir()
    for t in range(4):
        mine = [r for r in rows if r["qa_category"].endswith(f"_t{t}") == (t > 0) and (t > 0 or "_4d_" not in
                                                                                       r["qa_category"])]
        (ann / f"strideqa_bench_t{t}.json").write_text(json.dumps([{k: v for k, v in r.items() if k != "pred"}
                                                                   for r in mine]))
        (preds / f"model_20261127_000000_t{t}.json").write_text(json.dumps([r for r in mine if "pred" in r]))
    return preds, tmp / "bench"


def _worked_rows() -> list[dict]:
    """Group g00018 (Overtake) and g00020 (Oncoming_Pass), as worked in the module's rules."""
    a = [  # g00018
        _q(1, "g00018", "ego_distance_data", {"distance": 20.0}, "24.0 meters"),  # in [15, 25]
        _q(2, "g00018", "target_bearing_angle_data", {"direction": -5.0}, "4 degrees"),  # 9 deg
        _q(3, "g00018", "ego_speed_data", {"velocity": 0.3}, "0.42 m/s"),  # below the floor: 0.12 > 0.1
        _q(4, "g00018", "target_speed_data", {"velocity": 8.0}, "9.5 m/s"),  # in [6.4, 9.6]
        _q(5, "g00018", "ego_distance_data_4d_t1", {"distance": 18.0, "direction": 175.0},
           "14.0 meters at -178 degrees"),  # 14 in [13.5, 22.5]; wrapped difference 7
        _q(6, "g00018", "ego_speed_data_4d_t1", {"velocity": 10.0}, "36 km/h"),
        _q(7, "g00018", "target_speed_data_4d_t1", {"velocity": 0.0}, "0.1 m/s"),  # 0.1 <= 0.1
        _q(8, "g00018", "ego_distance_data_4d_t2", {"distance": 16.0, "direction": 30.0},
           "12 meters at 41 degrees"),  # 12 = 0.75 x 16 (inclusive); 11 deg fails
        _q(9, "g00018", "ego_speed_data_4d_t2", {"velocity": 10.0}, "12.5m/s"),  # no space: no parse
        _q(10, "g00018", "target_speed_data_4d_t2", {"velocity": 5.0}, "6 m/s"),  # 6 <= 6.0
        _q(11, "g00018", "ego_distance_data_4d_t3", {"distance": 15.0, "direction": 45.0}, "15 meters at 45 degrees"),
        _q(12, "g00018", "ego_speed_data_4d_t3", {"velocity": 10.0}, "I cannot tell."),
        _q(13, "g00018", "target_speed_data_4d_t3", {"velocity": 7.0}, None),  # no prediction: not counted
    ]
    b = [  # g00020
        _q(21, "g00020", "ego_distance_data", {"distance": 30.0}, "30 meters"),
        _q(22, "g00020", "target_bearing_angle_data", {"direction": 20.0}, "slightly left"),  # no parse
    ] + [_q(22 + t, "g00020", f"ego_distance_data_4d_t{t}", {"distance": 30.0, "direction": 20.0},
            "31 meters at 25 degrees") for t in (1, 2, 3)]
    return a + b


def test_the_bench_metrics_worked_by_hand(tmp_path):
    preds, bench = _bench(tmp_path, _worked_rows(), {"g00018": "Overtake", "g00020": "Oncoming_Pass"})
    r = score(str(preds), str(bench))
    rate = {m: {t: v["success_rate"] for t, v in per.items()} for m, per in r["metrics"].items()}
    assert rate["target_distance"] == {"0": 1, "1": 1, "2": 1, "3": 1, "avg": 1}
    assert rate["target_direction"] == {"0": 0.5, "1": 1, "2": 0.5, "3": 1, "avg": 0.75}
    assert rate["ego_velocity"] == {"0": 0, "1": 1, "2": 0, "3": 0, "avg": 0.25}
    assert rate["target_velocity"] == {"0": 1, "1": 1, "2": 1, "avg": 1}
    assert r["metrics"]["target_velocity"]["avg"]["sample_size"] == 3  # the row without a prediction is not counted
    assert rate["lsr"] == {"0": 0.5, "1": 1, "2": 0.5, "3": 1, "avg": 0.75}
    tc = {row["relation"]: row for row in r["temporal_consistency"]}
    assert tc["Overall"] == {"relation": "Overall", "TLC@1": 0.5, "TLC@2": 0, "TLC@3": 0, "TLC": 0, "MLSR": 0.75}
    assert tc["Overtake"]["TLC@1"] == 1 and tc["Oncoming_Pass"]["TLC@1"] == 0
    assert r["missing"] == 1 and any("q00000013_g00018: no prediction" in p for p in r["problems"])
    assert any("q00000022_g00020: no direction" in p for p in r["problems"])


def test_parsers_and_tolerances_at_their_edges():
    assert parse("direction", "at 270 degrees") == -90 and parse("direction", "-190°") == 170
    assert parse("direction", "a 79-degree turn") == 79 and parse("direction", "180 deg") == 180
    assert parse("distance", "3 in front, 20 meters") == pytest.approx(0.0762)  # inches are tried first
    assert parse("distance", "10 m/s") is None and parse("distance", "2 km") == 2000
    assert parse("velocity", "36 km/h (10 m/s)") == 10 and parse("velocity", "11.77m/s") is None
    assert parse("velocity", "10 miles per hour") == pytest.approx(10 * 1609.34 / 3600)  # the toolkit's mile
    assert success("direction", 175, -178) and not success("direction", 30, 41)
    assert success("distance", 16, 12) and not success("distance", 16, 11.99)
    assert success("velocity", 0.0, 0.1) and not success("velocity", 0.3, 0.42)
    assert success("velocity", 5, 6) and not success("velocity", 5, 6.01) and not success("velocity", 5, None)


def test_unusable_inputs_are_input_errors(tmp_path):
    from schemas.errors import InputError

    with pytest.raises(InputError, match="no STRIDE-QA-Bench export"):
        score(str(tmp_path), str(tmp_path))
    preds, bench = _bench(tmp_path, _worked_rows(), {"g00018": "Overtake"})
    (preds / "broken_t9.json").write_text("{not json")
    with pytest.raises(InputError, match="broken_t9.json"):
        score(str(preds), str(bench))


def test_the_answer_parsers_stay_linear_on_long_answers():
    """Issue 57 item 11: the toolkit's number pattern (``\\d+\\.?\\d*`` before a unit) backtracks in cubic time
    (800 digits: 25 s as a distance, 125 s as a velocity); drivegen's is linear. 20,000-digit answers (and
    long runs of spaces, signs and dots) are read within a generous bound in a child process, which the cubic
    form would take ages over; the readings of ``score qa`` (tokens, choices, lenient numbers) too."""
    import subprocess
    import sys

    code = """
from generator.qa.answers import parse, parse_lenient, tokens, Clock, Choice, Relation, Numbers
n = 20_000
for text in ("1" * n, "1" * n + " x", "1." * (n // 2), " " * n + "1", "-" * n + "1", "1" + " " * n + "k",
             "1.1" * (n // 3), "region [" * (n // 8)):
    for q in ("distance", "direction", "velocity"):
        parse(q, text)
        parse_lenient(q, text)
    tokens(text)
    Clock().read(text)
    Relation(("left",), ("right",), "pair").read(text, "region1", "region2")
    Choice((("slow down",), ("stop",))).read(text)
    Numbers().read(text)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
    # the linear forms read what the toolkit's read
    assert parse("distance", "It is 12.5 m away.") == 12.5 and parse("distance", "1.2.3 m") == 2.3
    assert parse("direction", "3-5 degrees") == -5.0 and parse("velocity", "5. m/s") == 5.0
