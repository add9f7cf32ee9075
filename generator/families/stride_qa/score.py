"""``drivegen score stride``: a model's answers on a STRIDE-QA-Bench export scored with the bench's metrics.

The rules are those of the public STRIDE-QA-Bench toolkit (``turingmotors/STRIDE-QA-Dataset``,
``benchmarks/STRIDE-QA-Bench``: ``benchmark.py``, ``utils/parser.py``, ``utils/metric_utils.py``,
``config/tolerance.yaml``), read and written again here; the figures are the ones its ``metrics_report.json``
holds for the same files.

Input. ``--pred``: the toolkit's inference output, a folder of ``*_t*.json`` files (each a JSON list of the
bench's questions with the model's ``pred`` text), or one such file. The target: a bench export (the
``bench/`` folder ``drivegen export stride_qa`` writes, or a run folder holding it); its ``annotation_sheet.csv``
gives each group's ``relation`` and its annotation files list the questions (a question without a prediction
is listed as missing; the toolkit, which scores only the rows it is given, does not count it either).

Per row: the group is ``g`` + what follows ``_g`` in ``question_id``; time (t0..t3) and subject (ego or target)
come from ``qa_category`` (``CATEGORIES``). Each quantity of ``gt_value`` is judged on its own, the same
``pred`` text parsed once per quantity, by the toolkit's parser and tolerances (``generator.qa.answers``: ±10
degrees wrapped, ±25 % distance, ±20 % speed or 0.1 m/s below 0.5 m/s); an answer that does not parse fails.

Metrics. Per quantity and time, the success rate (``target_distance``, ``target_direction``,
``ego_velocity``, ``target_velocity``) and a pooled ``avg`` over the times. ``lsr``: per (group, time,
subject) the distance and the direction both succeed (a missing one fails). Over the groups that have a
relation: ``MLSR`` = the mean over groups of their share of successful times, ``TLC@k`` = success at t0 and
at every time up to k, ``TLC`` = at all four, each overall and per relation.
"""
from __future__ import annotations

import csv
import io
from collections import defaultdict
from pathlib import Path, PurePosixPath

from generator.qa.answers import parse, success
from generator.runfolder import RunStore
from generator.validate.score import read_predictions as read_file
from schemas.errors import InputError, from_os_error
from schemas.files import file_problem

HELP = "STRIDE-QA-Bench answers (export stride_qa): per-quantity success, LSR, MLSR, TLC, as the bench's toolkit"

CATEGORIES = {"ego_distance_data": (0, "target"), "ego_speed_data": (0, "ego"), "target_speed_data": (0, "target"),
              "target_bearing_angle_data": (0, "target")}
CATEGORIES.update({f"{c}_4d_t{t}": (t, who) for t in (1, 2, 3)
                   for c, who in (("ego_distance_data", "target"), ("ego_speed_data", "ego"),
                                  ("target_speed_data", "target"))})
"""qa_category -> (time step, subject), the toolkit's ``TIME_BUCKET``"""

def group_of(question_id: str) -> str:
    return "g" + question_id.split("_g", 1)[1] if "_g" in question_id else question_id


SHEET = "annotation_files/annotation_sheet.csv"


def _bench_dir(target: str):
    """The bench export at ``target`` (a path or URI: the export, or a run folder holding it in ``bench/``) as a
    ``RunStore``. InputError when neither holds its annotation sheet; a refusal (403, permissions) or an
    unreachable store is said as such (``schemas.errors.from_os_error``), never "no export here"."""
    store = RunStore(target)
    for d in ("", "bench"):
        rel = f"{d}/{SHEET}" if d else SHEET
        try:
            found = store.exists(rel)
        except OSError as err:
            raise from_os_error(err) from None
        if not found and store.is_local:  # a folder this user may not read is no missing export either
            problem = file_problem(store.full(rel))
            if problem not in (None, "missing"):
                raise InputError(f"{store.uri_of(rel)} is {problem}", file=store.uri_of(rel))
        if found:
            return RunStore(store.uri_of(d)) if d else store
    raise InputError(f"{target}: no STRIDE-QA-Bench export here ({SHEET}; drivegen export stride_qa writes it)",
                     file=str(target))


def _question_list(path: Path | str) -> list:
    """One file of questions (the export's or the toolkit's output), a JSON list (``read_predictions``, the
    scorers' reader: a missing, unreadable or non-JSON file is an InputError naming it)."""
    rows = read_file(str(path))
    if not isinstance(rows, list):
        raise InputError(f"{path}: expected a JSON list of questions, got {type(rows).__name__}", file=str(path))
    return rows


def read_predictions(pred_path: str) -> list[dict]:
    """The rows of the toolkit's inference output: every ``*_t*.json`` of a folder (sorted), or one file."""
    p = Path(pred_path)
    files = sorted(p.glob("*_t*.json")) if p.is_dir() else [p]
    if not files or not files[0].exists():
        raise InputError(f"{pred_path}: no predictions (a *_t*.json file, or a folder of them)", file=pred_path)
    return [r for f in files for r in _question_list(f)]


def score(pred_path: str, target: str, splits: list[str] | None = None) -> dict:
    """The bench's metrics of the answers in ``pred_path`` on the bench export ``target``."""
    bench = _bench_dir(target)
    try:
        sheet = bench.read_bytes(SHEET).decode("utf-8")
        files = [f for f in bench.list("annotation_files") if PurePosixPath(f).match("strideqa_bench*.json")]
    except OSError as err:
        raise from_os_error(err) from None
    except UnicodeDecodeError as err:
        raise InputError(f"{bench.uri_of(SHEET)}: not UTF-8 text ({err})", file=bench.uri_of(SHEET)) from None
    relation = {r["group_id"]: (r.get("relation") or None) for r in csv.DictReader(io.StringIO(sheet, newline=""))}
    questions = {q["question_id"]: q for f in files for q in _question_list(bench.uri_of(f))
                 if not splits or q.get("split") in splits}
    problems: list[str] = []
    records = []  # (group, time, subject, qa_type, success)
    seen = set()
    lsr: dict[tuple, dict] = defaultdict(dict)
    for row in read_predictions(pred_path):
        qid = str(row.get("question_id", ""))
        if splits and qid not in questions:
            continue
        cat = row.get("qa_category")
        if cat not in CATEGORIES or not isinstance(row.get("gt_value"), dict):
            problems.append(f"{qid or '?'}: qa_category {cat!r} or gt_value unusable: row ignored")
            continue
        seen.add(qid)
        t, who = CATEGORIES[cat]
        g = group_of(qid)
        pred = row.get("pred", "")
        for qa_type, gt in row["gt_value"].items():
            value = parse(qa_type, pred)
            if value is None:
                problems.append(f"{qid}: no {qa_type} in the answer {str(pred)[:80]!r}")
            ok = success(qa_type, float(gt), value)
            records.append((g, t, who, qa_type, ok))
            if qa_type in ("distance", "direction"):
                lsr[(g, t, who)][qa_type] = ok
    missing = sorted(set(questions) - seen)
    problems += [f"{q}: no prediction" for q in missing[:50]]
    if len(missing) > 50:
        problems.append(f"... {len(missing) - 50} more questions without a prediction")
    lsr_ok = {k: bool(v.get("distance") and v.get("direction")) for k, v in lsr.items()}
    rates: dict[str, dict] = {}
    for name, rows in (*((n, [(t, ok) for g, t, who, q, ok in records if f"{who}_{q}" == n])
                         for n in ("target_distance", "target_direction", "ego_velocity", "target_velocity")),
                       ("lsr", [(t, ok) for (g, t, who), ok in lsr_ok.items()])):
        if rows:
            per = {t: [ok for tt, ok in rows if tt == t] for t in sorted({t for t, _ in rows})}
            rates[name] = {**{str(t): {"success_rate": sum(v) / len(v), "sample_size": len(v)} for t, v in per.items()},
                           "avg": {"success_rate": sum(ok for _, ok in rows) / len(rows), "sample_size": len(rows)}}
    return {"predictions": str(pred_path), "target": bench.uri, "rows": len(records), "questions": len(questions),
            "missing": len(missing), "metrics": rates, "temporal_consistency": temporal(lsr_ok, relation),
            "problems": problems}


def temporal(lsr_ok: dict[tuple, bool], relation: dict[str, str | None]) -> list[dict]:
    """MLSR and TLC@k over the groups with a relation: overall first, then per relation by TLC (descending)."""
    times = sorted({t for _, t, _ in lsr_ok})
    groups: dict[str, dict[int, bool]] = defaultdict(dict)
    for (g, t, _), ok in lsr_ok.items():
        groups[g].setdefault(t, ok)  # one subject (the target) per group and time
    rows = {g: [groups[g].get(t, False) for t in times] for g in groups if relation.get(g)}

    def figures(name: str, members: list[list[bool]]) -> dict:
        out = {"relation": name}
        for k in (1, 2, 3):
            out[f"TLC@{k}"] = sum(all(r[:k + 1]) for r in members) / len(members)
        out["TLC"] = sum(all(r) for r in members) / len(members)
        out["MLSR"] = sum(sum(r) / len(r) for r in members) / len(members)
        return out

    if not rows or times != [0, 1, 2, 3]:
        return []
    per = defaultdict(list)
    for g, r in rows.items():
        per[relation[g]].append(r)
    return [figures("Overall", list(rows.values()))] + sorted(
        (figures(name, members) for name, members in per.items()), key=lambda d: -d["TLC"])


def to_text(result: dict) -> str:
    lines = [f"STRIDE-QA-Bench scores: {result['predictions']} on {result['target']} ({result['rows']} judged "
             f"quantities; {result['missing']} of {result['questions']} questions without a prediction)"]
    for name, per in result["metrics"].items():
        cells = "  ".join(f"{t if t == 'avg' else 't' + t} {100 * v['success_rate']:.1f} % (n={v['sample_size']})"
                          for t, v in per.items())
        lines.append(f"  {name:<17s} {cells}")
    for r in result["temporal_consistency"]:
        lines.append(f"  {r['relation']:<34s} " + "  ".join(f"{k} {100 * r[k]:.1f} %"
                                                           for k in ("TLC@1", "TLC@2", "TLC@3", "TLC", "MLSR")))
    if result["problems"]:
        lines.append(f"  {len(result['problems'])} problem(s), e.g. {result['problems'][0]}")
    return "\n".join(lines)
