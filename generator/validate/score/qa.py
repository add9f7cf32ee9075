"""``drivegen score qa --pred ANSWERS RUN [--split test]``: a model's answers to drivegen's own QA shards.

``ANSWERS`` (JSON list, JSON Lines or Parquet; ``generator.validate.score.read_predictions``): one row per
question, ``qa_id`` plus the model's ``answer`` text, or its ``value`` (a number; for yes/no questions also
true/false or "yes"/"no"); a JSON object ``{qa_id: answer text}`` is read the same way. ``RUN``: the run folder
(or a regenerated QA folder) whose ``qa`` rows are the truth.

- **Quantitative** questions (``kind``: distance, bearing, size, speed...) are judged with the STRIDE-QA-Bench
  tolerances for the quantity their ``unit`` states (``generator.qa.answers``: m -> distance ±25 %, degrees ->
  direction ±10° wrapped, m/s -> speed ±20 % or 0.1 m/s below 0.5 m/s); a ``value`` is taken as it is, an
  ``answer`` text is parsed as the bench parses it. The truth is the number the row's answer states (its
  ``qa.decimals`` digits, as the bench export's ``gt_value``), so that the row's own sentence is right.
- **Yes/no** questions (unit ``bool``): a ``value`` (1/0, true/false, yes/no) against the row's value; an
  ``answer`` text by its first word (yes / no), else, for the either-or questions ("above or below?"), by the
  text as a whole.
- **Categorical** questions (o'clock, maneuver, speed status, intent, action, trajectory, risk class): the
  ``answer`` text against the row's answer, compared without case, spaces and punctuation, or a numeric
  ``value`` against the row's value.

Per family and question type: questions, answered, correct and the accuracy over the answered ones; questions
without an answer are listed (up to 50) and enter no rate, answers that cannot be read (no number, a value that
is no number) are listed and count as wrong.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterator

from generator.qa.answers import DISTANCE_REL, QUANTITY_OF_UNIT, parse, success
from schemas.errors import InputError

HELP = "answers to drivegen's own QA shards: numbers within STRIDE-QA's tolerances, yes/no and categories"

_WORDS = re.compile(r"[^a-z0-9.\-]+")


def _norm(text) -> str:
    return _WORDS.sub(" ", str(text).lower()).strip(" .")


def _answers(raw, problems: list[str], wanted: set[str], unknown: list[str]) -> dict[str, dict]:
    """{qa_id: {"answer": ..., "value": ...}} of what ``read_predictions`` read, for the ids in ``wanted`` (the
    questions scored: an answer to no such question is not kept, so a stream of answers costs the memory of the
    questions, not of the file; the first 50 such ids go to ``unknown``); rows without a ``qa_id`` and repeated
    ids (the last one counts) are listed in ``problems``."""
    if isinstance(raw, dict):
        raw = ({**(v if isinstance(v, dict) else {"answer": v}), "qa_id": k} for k, v in raw.items())
    elif not isinstance(raw, (list, Iterator)):  # (JSON Lines and Parquet: streamed, a record at a time)
        raise InputError(f"answers: expected a list of rows with qa_id, or an object {{qa_id: answer}}, got "
                         f"{type(raw).__name__}")
    out: dict[str, dict] = {}
    for k, r in enumerate(raw):
        if not isinstance(r, dict) or "qa_id" not in r:
            problems.append(f"row {k}: no qa_id: ignored")
            continue
        qid = str(r["qa_id"])
        if qid not in wanted:
            if len(unknown) < 50 and qid not in unknown:
                unknown.append(qid)
            continue
        if qid in out:
            problems.append(f"{r['qa_id']}: answered twice: the last answer counts")
        out[qid] = {"answer": r.get("answer"), "value": r.get("value")}
    return out


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
            return float(s)
        except ValueError:
            return None
    return None


def judge(truth: dict, pred: dict) -> tuple[bool, str | None]:
    """(correct, why it could not be read or None) of one answer ``pred`` to the QA row ``truth``."""
    unit, value, has_value = truth["unit"], pred.get("value"), pred.get("value") is not None
    if truth["kind"] == "quantitative":
        q = QUANTITY_OF_UNIT.get(unit)
        if q is None:  # a unit of no bench quantity: its value, within the distance tolerance
            num = _number(value) if has_value else None
            return (num is not None and abs(num - truth["value"]) <= DISTANCE_REL * abs(truth["value"]),
                    None if num is not None else "no number")
        got = _number(value) if has_value else parse(q, pred.get("answer"))
        stated = parse(q, truth["answer"])  # the truth as its sentence states it, as the bench export's gt_value
        gt = float(truth["value"]) if stated is None else stated
        return success(q, gt, got), None if got is not None else f"no {q} in the answer"
    if unit == "bool":
        if has_value:
            got = _number(value)
        else:
            first = _norm(pred.get("answer", "")).split(" ")[0]
            got = {"yes": 1.0, "no": 0.0}.get(first)
            if got is None:  # an either-or question: the statement as a whole
                return _norm(pred.get("answer", "")) == _norm(truth["answer"]), None
        return (got is not None and got == float(truth["value"])), None if got is not None else "not yes or no"
    if has_value and truth["value"] is not None and _number(value) is not None:
        return _number(value) == float(truth["value"]), None
    return _norm(pred.get("answer", "")) == _norm(truth["answer"]), None


def score(pred_path: str, target: str, splits: list[str] | None = None) -> dict:
    from generator.runfolder import RunReader
    from generator.validate.score import read_predictions

    table = RunReader(target).read_table("qa")
    if table is None:
        raise InputError(f"{target}: the run folder has no QA rows", file=str(target))
    rows = table.select(["qa_id", "split", "family", "kind", "question_type", "answer", "value", "unit"]).to_pylist()
    if splits:
        rows = [r for r in rows if r["split"] in splits]
    problems: list[str] = []
    known, unknown = {r["qa_id"] for r in rows}, []
    answers = _answers(read_predictions(pred_path, stream=True), problems, known, unknown)
    cells: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])  # questions, answered, correct
    missing = []
    for r in rows:
        c = cells[(r["family"], r["question_type"])]
        c[0] += 1
        pred = answers.get(r["qa_id"])
        if pred is None:
            missing.append(r["qa_id"])
            continue
        ok, why = judge(r, pred)
        c[1] += 1
        c[2] += int(ok)
        if why:
            problems.append(f"{r['qa_id']} ({r['family']}/{r['question_type']}): {why}")
    problems += [f"{q}: no such question{' in the split(s)' if splits else ''}: ignored" for q in unknown]
    problems += [f"{q}: no answer" for q in missing[:50]]
    if len(missing) > 50:
        problems.append(f"... {len(missing) - 50} more questions without an answer")
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
            "answered": len(rows) - len(missing), "families": families, "problems": problems}


def to_text(result: dict) -> str:
    pct = lambda v: "-" if v is None else f"{100 * v:.1f} %"  # noqa: E731
    lines = [f"QA scores: {result['predictions']} on {result['target']}: {result['answered']} of "
             f"{result['questions']} questions answered"]
    for fam, f in result["families"].items():
        lines.append(f"  {fam:<20s} {pct(f['accuracy'])} of {f['answered']}")
        for qt, c in f["types"].items():
            lines.append(f"    {qt:<22s} {pct(c['accuracy'])} of {c['answered']}")
    if result["problems"]:
        lines.append(f"  {len(result['problems'])} problem(s), e.g. {result['problems'][0]}")
    return "\n".join(lines)
