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


# ------------------------------------------------------------------------ as a careful annotator (issue 55)
def _table_rows() -> list[tuple[str, str, str, float | None, list[str], str]]:
    """The rows of docs/scoring.md's "Accepted answer forms" table: (family, type, the row's answer, value,
    accepted answers, a wrong answer)."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "scoring.md").read_text()
    table = text.split("### Accepted answer forms", 1)[1]
    out = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("`"):
            continue
        fam, qt = (c.strip(" `") for c in cells[0].split("/"))
        accepted = [a.strip().strip("`") for a in cells[3].split(" · ")]
        out.append((fam, qt, cells[1], float(cells[2]) if cells[2] else None, accepted, cells[4].strip("`")))
    return out


def _pred(form: str) -> dict:
    if form.startswith("value="):
        v = form.split("=", 1)[1]
        return {"value": {"true": True, "false": False}.get(v, v)}
    return {"answer": form}


def test_the_accepted_forms_table():
    """Every accepted answer of the docs' table is right, every wrong one wrong, each judged by its question
    type's own reading (``QuestionType.reading``)."""
    from generator.qa.families import question_types

    rows = _table_rows()
    assert len(rows) >= 20 and {(f, t) for f, t, *_ in rows} <= set(question_types())
    for fam, qt, answer, value, accepted, wrong in rows:
        kind = question_types()[(fam, qt)].kind
        unit = {"distance": "m", "vertical_distance": "m", "direction": "degrees",
                "target_speed": "m/s"}.get(qt) if kind == "quantitative" else question_types()[(fam, qt)].unit
        truth = {"family": fam, "question_type": qt, "kind": kind, "unit": "bool" if unit == "bool" else unit,
                 "question": "", "answer": answer, "value": value}
        for form in accepted:
            assert judge(truth, _pred(form)) == (True, None), (fam, qt, answer, form)
        assert judge(truth, _pred(wrong))[0] is False, (fam, qt, answer, wrong)


_WORDS_OF = {  # the predicate's words (true, false) of each two-sided question type, for the styles below
    "left_of": ("to the left of", "to the right of"), "in_front_of": ("in front of", "behind"),
    "bigger": ("bigger than", "smaller than"), "taller": ("taller than", "shorter than"),
    "wider": ("wider than", "thinner than"), "above": ("above", "below"),
    "closer": ("closer to the ego vehicle than", "farther from the ego vehicle than"),
    "left_right": ("to the left of", "to the right of"), "front_behind": ("in front of", "behind")}
_SYNONYM = {"left_of": ("left", "right"), "in_front_of": ("ahead", "behind"), "bigger": ("larger", "smaller"),
            "taller": ("taller", "shorter"), "wider": ("broader", "narrower"), "above": ("higher", "lower"),
            "closer": ("nearer", "further"), "left_right": ("left", "right"), "front_behind": ("ahead", "behind")}
_LAT = ("to the left", "to the right", "")
_VER = ("towards the ego vehicle", "away from the ego vehicle", "")


def _styles(r: dict) -> tuple[list[dict], dict]:
    """Ten answers to the QA row ``r`` in ten styles (its own, its value, terse, yes/no or "the answer is"
    with punctuation, lower case, other units or synonyms, reordered, verbose, more digits or number words,
    bare), each right, and one wrong answer."""
    import math
    import re

    from generator.qa.answers import parse, tokens
    from generator.qa.families import question_types

    fam, qt, ans, v = r["family"], r["question_type"], r["answer"], r["value"]
    reading = question_types()[(fam, qt)].reading
    regions = [w for w in tokens(ans) if w.startswith("region")]
    others = [w for w in tokens(r["question"]) if w.startswith("region") and w not in regions[:1]]
    reg = lambda w: f"Region [{w[6:]}]"  # noqa: E731
    own = {"answer": ans}
    value = {"value": v} if v is not None else own
    lower = {"answer": ans.lower().rstrip(".")}
    verbose = {"answer": f"Looking at the images carefully, I would say: {ans} That is all."}
    if r["kind"] == "quantitative":
        q = {"m": "distance", "degrees": "direction", "m/s": "velocity"}[r["unit"]]
        x = parse(q, ans)
        num = re.search(r"-?\d+\.\d+", ans.split("degrees")[0] if q == "direction" else ans).group(0)
        unit = {"distance": "m", "direction": "degrees", "velocity": "m/s"}[q]
        other = {"distance": f"{x / 0.3048:.3f} feet", "direction": f"{math.radians(x):.4f} rad",
                 "velocity": f"{x * 3.6:.3f} km/h"}[q]
        styles = [own, value, {"answer": f"{num} {unit}"}, {"answer": f"The answer is: {num} {unit}!"}, lower,
                  {"answer": other}, {"answer": f"{num} {unit} is what I measure."}, verbose,
                  {"answer": f"{v:.4f} {unit}"}, {"answer": f"{num}."}]
        wrong = {"answer": f"{(abs(x) + 1) * 3 + 10:.2f} {unit}" if q != "direction" else f"{x + 90:.2f} degrees"}
        return styles, wrong
    if reading is None or reading.kind == "numbers":
        nums = re.findall(r"-?\d+\.\d+", ans)
        styles = [own, own, {"answer": "[PT, " + ", ".join(f"({a}, {b})" for a, b in zip(nums[::2], nums[1::2]))
                             + "]"}, {"answer": "The answer is: " + ans}, lower, {"answer": " ".join(nums)},
                  {"answer": "Waypoints " + "; ".join(nums)}, verbose,
                  {"answer": " ".join(f"{float(n) + 0.001:.3f}" for n in nums)},
                  {"answer": ", ".join(f"{float(n):g}" for n in nums)}]
        return styles, {"answer": " ".join(f"{float(n) + 1:.2f}" for n in nums)}
    if reading.kind == "relation":
        t = v == 1.0
        yn = "Yes" if t else "No"
        if qt in _WORDS_OF:
            said, opposite = _WORDS_OF[qt][0 if t else 1], _WORDS_OF[qt][1 if t else 0]
            word = said.split(" than")[0].replace("to the ", "").replace(" of", "").replace(" to the ego vehicle", "")
            syn = _SYNONYM[qt][0 if t else 1]
            if fam == "ego_spatial":
                reordered = f"The ego vehicle is {opposite} {reg(regions[0]) if regions else 'it'}."
            elif others:
                reordered = f"{reg(others[0])} is {opposite} {reg(regions[0])}."
            else:
                reordered = f"{word.capitalize()} is what it is."
            not_other = f"It is not {_SYNONYM[qt][1 if t else 0]}."
        else:  # yes/no questions with their own phrases (risk, crossing)
            word = syn = "crosses" if t else "stays clear"
            reordered = f"Its path {'crosses' if t else 'stays clear of'} the ego path, so {yn.lower()}."
            not_other = "It will cross." if t else "It does not cross."
        styles = [own, value, {"answer": f"{word.capitalize()}."}, {"answer": f"{yn}. It is so."}, lower,
                  {"answer": f"{syn}!"}, {"answer": reordered}, verbose, {"answer": not_other},
                  {"answer": f"Definitely {yn.lower()}!"}]
        return styles, {"answer": f"{'No' if t else 'Yes'}."}
    if reading.kind == "clock":
        h = int(v)
        words = ("one two three four five six seven eight nine ten eleven twelve").split()
        styles = [own, value, {"answer": f"At {h} o'clock."}, {"answer": f"The answer is: {h} o\u2019clock!"}, lower,
                  {"answer": f"{words[h - 1]} o'clock"}, {"answer": f"{h} o'clock is where it is."}, verbose,
                  {"answer": f"{h} oclock"}, {"answer": str(h)}]
        return styles, {"answer": f"At {h % 12 + 1} o'clock."}
    if reading.kind == "pair":
        lat, ver = divmod(int(v), 3)
        parts = [p for p in (_LAT[lat], _VER[ver]) if p]
        phrase = ", ".join(parts) if parts else "standing still"
        styles = [own, value, {"answer": f"{phrase.capitalize()}."}, {"answer": f"The answer is: {phrase}!"}, lower,
                  {"answer": " and ".join(p.replace("to the ", "moving ").replace("towards the ego vehicle",
                                                                                 "approaching")
                                          for p in parts) or "not moving"},
                  {"answer": (", ".join(reversed(parts)) if parts else "still") + "."}, verbose,
                  {"answer": f"It is going {phrase}." if parts else "Stationary."},
                  {"answer": phrase.upper()}]
        wrong_lat = (lat + 1) % 3
        wparts = [p for p in (_LAT[wrong_lat], _VER[ver]) if p]
        return styles, {"answer": ", ".join(wparts) if wparts else "standing still"}
    # a choice from a vocabulary: its phrases, longest first
    options = reading.options
    truth = reading.read(ans)
    first, last = options[truth][0], options[truth][-1]
    styles = [own, value, {"answer": f"{first.capitalize()}."}, {"answer": f"The answer is: {first}!"}, lower,
              {"answer": last}, {"answer": f"{last.capitalize()}, that is it."}, verbose,
              {"answer": first.upper()}, {"answer": f"I suggest: {first}"}]
    return styles, {"answer": options[(truth + 1) % len(options)][0]}


def test_answers_in_ten_styles_get_the_right_verdict(labelled_run, tmp_path):
    """Issue 55, must show: every question of a generated run answered in ten styles (its own answer, its
    value, terse, a yes/no or "the answer is" sentence with punctuation, lower case, other units or synonyms,
    reordered, verbose, more digits or number words, bare) is right, and a wrong answer of each question
    wrong; unknown ids are counted in full."""
    from generator.runfolder import RunReader

    rows = RunReader(str(labelled_run)).read_table("qa").to_pylist()
    styled = [_styles(r) for r in rows]
    for k in range(10):
        answers = [{"qa_id": r["qa_id"], **s[k]} for r, (s, _) in zip(rows, styled)]
        pred = tmp_path / f"style{k}.json"
        pred.write_text(json.dumps(answers))
        res = score(str(pred), str(labelled_run))
        wrong = {(f, t): c["answered"] - c["correct"] for f, v in res["families"].items()
                 for t, c in v["types"].items() if c["correct"] < c["answered"]}
        assert res["answered"] == len(rows) and not wrong and res["unreadable"] == 0, (k, wrong, res["problems"][:3])
    pred = tmp_path / "wrong.json"
    pred.write_text(json.dumps([{"qa_id": r["qa_id"], **w} for r, (_, w) in zip(rows, styled)]
                               + [{"qa_id": f"nope-{i}", "answer": "yes"} for i in range(120)]))
    res = score(str(pred), str(labelled_run))
    assert all(c["correct"] == 0 for v in res["families"].values() for c in v["types"].values()), res["families"]
    assert res["unknown_ids"] == 120
    assert "... 70 more answers to ids the run does not have (120 in all)" in res["problems"]
