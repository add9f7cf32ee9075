"""``drivegen score qa --pred ANSWERS RUN [--split test]``: a model's answers to drivegen's own QA shards, judged
as a careful annotator would judge them.

``ANSWERS`` (JSON list, JSON Lines or Parquet; ``generator.validate.score.read_predictions``): one row per
question, ``qa_id`` plus the model's ``answer`` text, or its ``value`` (a number; for yes/no questions also
true/false or "yes"/"no"); a JSON object ``{qa_id: answer text}`` is read the same way. ``RUN``: the run folder
(or a regenerated QA folder) whose ``qa`` rows are the truth.

- A ``value`` equal to the row's own stored ``value`` is always right.
- **Quantitative** questions (unit m, degrees, m/s): the number is read with the STRIDE-QA-Bench parser
  (``generator.qa.answers.parse``: its units, other units converted), else as a careful reader would
  (``parse_lenient``: radians, or the answer's one bare number in the question's unit). The truth is the number
  the row's sentence states (its ``qa.decimals`` digits, as the bench export's ``gt_value``); an answer is right
  within the bench's tolerance of it (distance ±25 %, direction ±10° wrapped, speed ±20 % or 0.1 m/s below
  0.5 m/s) or when it equals it at the precision the sentence states ("0.0006 m" for "0.00 m").
- **Choices** are read by the question type's own reading (``QuestionType.reading``, ``generator.qa.answers``):
  yes/no as the first 'yes' or 'no' word ("Yes. Its path crosses ..."), else the words of its predicate in
  any order ("Above.", "On the right.", "Region [3] is below Region [1]"); clock positions ("At 1 o'clock.");
  a vocabulary's choice by any of its phrases ("Slow down.", "turning left"); DRAMA-X's intent by its lateral and
  vertical words; a trajectory by its numbers at the truth's precision. An answer that names no choice, or two,
  is wrong and listed. A type without a reading: yes/no for unit ``bool``, else the text compared without case,
  spaces and punctuation, or a numeric ``value`` against the row's value.

Per family and question type: questions, answered, correct and the accuracy over the answered ones; questions
without an answer enter no rate, answers that cannot be read count as wrong; both are listed (up to
``MAX_LISTED``) and counted in full, and so are answers to ids the run does not have.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterator

from generator.qa.answers import (DISTANCE_REL, QUANTITY_OF_UNIT, Numbers, equal_at_precision, parse,
                                  parse_lenient, same_at_precision, stated_decimals, success, tokens, yes_no)
from generator.qa.families import question_types
from generator.runfolder import RunReader
from generator.validate.score import read_predictions
from schemas.errors import InputError

HELP = "answers to drivegen's own QA shards, judged as a careful annotator would: numbers, yes/no and choices"
MAX_LISTED = 50  # problems listed per kind; their counts are always complete

_WORDS = re.compile(r"[^a-z0-9.\-]+")


def _norm(text) -> str:
    return _WORDS.sub(" ", str(text).lower()).strip(" .")


def _answers(raw, problems: list[str], wanted: set[str]) -> tuple[dict[str, dict], list[str], int]:
    """({qa_id: {"answer": ..., "value": ...}}, unknown ids, how many) of what ``read_predictions`` read, for the
    ids in ``wanted`` (the questions scored: an answer to no such question is not kept, so a stream of answers
    costs the memory of the questions, not of the file; the first ``MAX_LISTED`` such ids are listed, all are
    counted); rows without a ``qa_id`` and repeated ids (the last one counts) are listed in ``problems``."""
    if isinstance(raw, dict):
        raw = ({**(v if isinstance(v, dict) else {"answer": v}), "qa_id": k} for k, v in raw.items())
    elif not isinstance(raw, (list, Iterator)):  # (JSON Lines and Parquet: streamed, a record at a time)
        raise InputError(f"answers: expected a list of rows with qa_id, or an object {{qa_id: answer}}, got "
                         f"{type(raw).__name__}")
    out: dict[str, dict] = {}
    unknown: list[str] = []
    n_unknown = 0
    for k, r in enumerate(raw):
        if not isinstance(r, dict) or "qa_id" not in r:
            problems.append(f"row {k}: no qa_id: ignored")
            continue
        qid = str(r["qa_id"])
        if qid not in wanted:
            n_unknown += 1
            if len(unknown) < MAX_LISTED:
                unknown.append(qid)
            continue
        if qid in out:
            problems.append(f"{r['qa_id']}: answered twice: the last answer counts")
        out[qid] = {"answer": r.get("answer"), "value": r.get("value")}
    return out, unknown, n_unknown


def _number(v) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("yes", "true"):
            return 1.0
        if s in ("no", "false"):
            return 0.0
        try:
            f = float(s)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def _regions(truth: dict) -> tuple[str | None, str | None]:
    """(A, B) of a question about two regions as ``tokens`` writes them (``region3``): A is the first region of
    the truth's answer (every template names A first), B the question's other region."""
    ans = [w for w in tokens(truth.get("answer", "")) if w.startswith("region")]
    a = ans[0] if ans else None
    other = [w for w in tokens(truth.get("question") or "") if w.startswith("region") and w != a]
    return a, (other[0] if other else None)


def _reading(truth: dict):
    qt = question_types().get((truth.get("family"), truth.get("question_type")))
    return None if qt is None else qt.reading


def judge(truth: dict, pred: dict, reading=False) -> tuple[bool, str | None]:
    """(correct, why it could not be read or None) of one answer ``pred`` to the QA row ``truth`` (its
    ``question`` text helps read answers about two regions). ``reading``: the question type's
    (``QuestionType.reading``; default: looked up from the row's family and type)."""
    unit, value = truth["unit"], pred.get("value")
    got_value = _number(value) if value is not None else None
    if value is not None and got_value is None:
        return False, f"the value {value!r} is no number"
    stored = truth.get("value")
    if got_value is not None and stored is not None and math.isfinite(stored) and \
            abs(got_value - stored) <= 1e-9 * max(1.0, abs(stored)):
        return True, None  # the row's own value
    answer = pred.get("answer")
    if got_value is None and not isinstance(answer, str):
        return False, "no answer text and no value"
    if truth["kind"] == "quantitative":
        return _judge_quantity(truth, got_value, answer)
    if reading is False:
        reading = _reading(truth)
    if reading is None:
        if unit == "bool":
            got = got_value if got_value is not None else yes_no(answer)
            if got is None:  # an either-or question of a type without a reading: the statement as a whole
                return _norm(answer) == _norm(truth["answer"]), None
            return got == float(stored), None
        if got_value is not None:
            return stored is not None and got_value == float(stored), None
        return _norm(answer) == _norm(truth["answer"]), None
    if isinstance(reading, Numbers):
        if got_value is not None:
            return False, "a trajectory needs its waypoints as text"
        got = reading.read(answer)
        return same_at_precision(got, reading.read(truth["answer"])), None if got else "no numbers in the answer"
    if got_value is not None:
        return stored is not None and got_value == float(stored), None
    a, b = _regions(truth)
    got = reading.read(answer, a, b)
    if got is None:
        return False, f"no {reading.kind} (or two) in the answer"
    if unit == "bool" or reading.kind == "clock":
        return got == float(stored), None
    want = reading.read(truth["answer"], a, b)  # a choice is compared as the truth's answer states it
    if want is None:
        want = None if stored is None else int(stored)
    return got == want, None


def _judge_quantity(truth: dict, got_value: float | None, answer) -> tuple[bool, str | None]:
    unit = truth["unit"]
    q = QUANTITY_OF_UNIT.get(unit)
    if q is None:  # a unit of no bench quantity: its value, within the distance tolerance
        got = got_value if got_value is not None else _number(answer)
        return (got is not None and abs(got - truth["value"]) <= DISTANCE_REL * abs(truth["value"]),
                None if got is not None else "no number")
    got = got_value if got_value is not None else parse_lenient(q, answer)
    if got is None:
        return False, f"no {q} in the answer"
    stated = parse(q, truth["answer"])  # the truth as its sentence states it, as the bench export's gt_value
    if stated is None:
        return success(q, float(truth["value"]), got), None
    d = stated_decimals(q, truth["answer"])
    return success(q, stated, got) or (d is not None and equal_at_precision(q, stated, got, d)), None


def score(pred_path: str, target: str, splits: list[str] | None = None) -> dict:
    table = RunReader(target).read_table("qa")
    if table is None:
        raise InputError(f"{target}: the run folder has no QA rows", file=str(target))
    rows = table.select(["qa_id", "split", "family", "kind", "question_type", "question", "answer", "value",
                         "unit"]).to_pylist()
    if splits:
        rows = [r for r in rows if r["split"] in splits]
    problems: list[str] = []
    answers, unknown, n_unknown = _answers(read_predictions(pred_path, stream=True), problems,
                                           {r["qa_id"] for r in rows})
    cells: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])  # questions, answered, correct
    missing, unreadable = [], []
    readings: dict = {}
    for r in rows:
        key = (r["family"], r["question_type"])
        c = cells[key]
        c[0] += 1
        pred = answers.get(r["qa_id"])
        if pred is None:
            missing.append(r["qa_id"])
            continue
        if key not in readings:
            readings[key] = _reading(r)
        ok, why = judge(r, pred, readings[key])
        c[1] += 1
        c[2] += int(ok)
        if why:
            unreadable.append(f"{r['qa_id']} ({r['family']}/{r['question_type']}): {why}")
    where = " in the split(s)" if splits else ""
    for items, total, more in (
            (unreadable, len(unreadable), "answers that could not be read"),
            ([f"{q}: no such question{where}: ignored" for q in unknown], n_unknown,
             f"answers to ids the run does not have{where}"),
            ([f"{q}: no answer" for q in missing], len(missing), "questions without an answer")):
        problems += items[:MAX_LISTED]
        if total > MAX_LISTED:
            problems.append(f"... {total - MAX_LISTED} more {more} ({total} in all)")
    families: dict[str, dict] = {}
    for (fam, qt), (n, answered, correct) in sorted(cells.items()):
        f = families.setdefault(fam, {"questions": 0, "answered": 0, "correct": 0, "types": {}})
        f["types"][qt] = {"questions": n, "answered": answered, "correct": correct,
                          "accuracy": correct / answered if answered else None}
        f["questions"] += n
        f["answered"] += answered
        f["correct"] += correct
    for f in families.values():
        f["accuracy"] = f["correct"] / f["answered"] if f["answered"] else None
    return {"predictions": str(pred_path), "target": str(target), "questions": len(rows),
            "answered": len(rows) - len(missing), "unreadable": len(unreadable), "unknown_ids": n_unknown,
            "families": families, "problems": problems}


def to_text(result: dict) -> str:
    pct = lambda v: "-" if v is None else f"{100 * v:.1f} %"  # noqa: E731
    lines = [f"QA scores: {result['predictions']} on {result['target']}: {result['answered']} of "
             f"{result['questions']} questions answered"]
    for fam, f in result["families"].items():
        lines.append(f"  {fam:<20s} {pct(f['accuracy'])} of {f['answered']}")
        for qt, c in f["types"].items():
            lines.append(f"    {qt:<22s} {pct(c['accuracy'])} of {c['answered']}")
    if result.get("unreadable") or result.get("unknown_ids"):
        lines.append(f"  {result.get('unreadable', 0)} answer(s) could not be read (wrong); "
                     f"{result.get('unknown_ids', 0)} answer(s) to ids the run does not have (ignored)")
    if result["problems"]:
        lines.append(f"  {len(result['problems'])} problem(s) listed, e.g. {result['problems'][0]}")
    return "\n".join(lines)
