"""``drivegen score pie --pred PRED EXPORT``: a pedestrian behaviour model's predictions on a PIE export
(``drivegen export pie``), or on a run folder (its samples built as ``export pie --run`` builds them), with the
benchmark paper's metrics (seed 001, §III-C..E).

Predictions: a Parquet file, or a JSON file holding a list of objects (or ``{"predictions": [...]}``), one
row per sample of the export:

- ``sample_id`` (string): the export's ``sample_id`` (``action/<video>/<ped>/<end_frame>`` or ``risk/...``);
- action samples: ``crossing_prob`` (float in [0, 1], the confidence of *crossing*) or ``crossing`` (0/1,
  taken as a confidence of 0 or 1);
- risk samples: ``risk_probs`` (6 floats >= 0 summing to 1 within 0.01, classes 0 = image centre ... 5 =
  edges) or ``risk_class`` (int 0-5, one-hot).

A task is scored when at least one of its samples has a prediction; its samples without one are then
"missing". Every malformed row (unknown id, duplicate, NaN, out of range, wrong length, missing sample) is
listed in ``result["problems"]`` as ``{"sample_id", "task", "kind", "problem"}`` (kind: unknown, duplicate,
invalid, missing, malformed) and left out of the metrics; ``result["problem_counts"]`` counts them by kind.

Metrics per task (binary for action, 6 classes for risk; the predicted class is the most confident one):

- ``base``: mAP (mean over the classes present of the one-vs-rest average precision; for action both
  classes, ``ap`` is the crossing class alone), bAcc, AUC (binary; one-vs-rest macro over the classes
  present for risk), Acc, Prec, F1 (binary for action, macro for risk);
- ``weighted``: Acc, Prec, F1 with per-sample weights: action ``w = exp(-1/2 (d_tte / 0.3)^2) / sum w``,
  ``d_tte = (max TTE - tte) / max TTE`` (max over the scored samples, 3 s); risk
  ``w = exp(-1/2 (d_cls / (m 0.5))^2)``, ``m = ceil(12 / 2)``, ``d_cls`` = the class (distance from the centre);
- ``soft`` / ``hard`` per pedestrian instance (samples of a pedestrian in the order they were extracted; for
  risk, whose class changes along a track, an instance is a run of consecutive samples of one pedestrian
  with the same class, so that perfect predictions score 1): the instance's label is its samples' label; soft
  prediction = the most confident class of the mean confidence; hard prediction = the samples' common
  predicted class, or a wrong one when they disagree (binary: the other class; risk: the most frequent
  wrong class predicted). bAcc, Acc, Prec, F1 over instances;
- ``conf_delta``: per instance with >= 2 samples, mean over consecutive samples of ``|conf_c^i -
  conf_c^(i+1)|`` (action: the crossing class; risk: averaged over the classes); ``max`` and ``avg`` over
  those instances.
"""
from __future__ import annotations

import math
import warnings
from collections import Counter
import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sklearn.metrics import (accuracy_score, average_precision_score, balanced_accuracy_score, f1_score,
                             precision_score, roc_auc_score)

from generator.families.pie.attributes import risk_classes, risk_weight, tte_weight
from generator.families.pie.config import PieConfig
from generator.families.pie.export import EXPORT_FORMAT, EXPORT_SUMMARY, samples_from_run
from generator.runfolder import RunReader, RunStore
from schemas.errors import InputError

NAME = "pie"
HELP = "PIE/JAAD pedestrian action prediction and event risk (export pie): base, weighted, per-pedestrian metrics"

TARGET_COLUMNS = ["sample_id", "task", "split", "video_id", "ped_id", "end_frame", "crossing", "tte_frames",
                  "risk_class"]


# ------------------------------------------------------------------------------------------ metrics
def _f(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _quiet(fn):
    """sklearn's "y_pred contains classes not in y_true" is expected of a bad model: not a warning here."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return fn(*args, **kwargs)
    return wrapped


@_quiet
def base_metrics(y: np.ndarray, conf: np.ndarray) -> dict:
    """mAP, bAcc, AUC, Acc, Prec, F1 of labels ``y`` (n,) and per-class confidences ``conf`` (n, K)."""
    y = np.asarray(y, dtype=np.int64)
    k = conf.shape[1]
    pred = np.argmax(conf, axis=1)
    present = [c for c in range(k) if (y == c).any()]
    aps = [average_precision_score(y == c, conf[:, c]) for c in present]
    aucs = [roc_auc_score(y == c, conf[:, c]) for c in present if (y != c).any()]
    out = {"mAP": _f(np.mean(aps)) if aps else None,
           "bAcc": _f(balanced_accuracy_score(y, pred)),
           "AUC": None, "Acc": _f(accuracy_score(y, pred))}
    if k == 2:
        out["AUC"] = _f(roc_auc_score(y, conf[:, 1])) if len(present) == 2 else None
        out["ap"] = _f(average_precision_score(y == 1, conf[:, 1])) if 1 in present else None
    else:
        out["AUC"] = _f(np.mean(aucs)) if aucs else None
    out.update(_prf(y, pred, k))
    return out


def _prf(y, pred, k: int, weight=None) -> dict:
    avg = "binary" if k == 2 else "macro"  # multi-class: macro over the classes in the labels or predictions
    kw = {"labels": sorted(set(np.asarray(y).tolist()) | set(np.asarray(pred).tolist()))} if k > 2 else {}
    return {"Prec": _f(precision_score(y, pred, average=avg, zero_division=0, sample_weight=weight, **kw)),
            "F1": _f(f1_score(y, pred, average=avg, zero_division=0, sample_weight=weight, **kw))}


@_quiet
def weighted_metrics(y: np.ndarray, conf: np.ndarray, weight: np.ndarray) -> dict:
    """Acc, Prec, F1 with per-sample weights (§III-D)."""
    y = np.asarray(y, dtype=np.int64)
    pred = np.argmax(conf, axis=1)
    w = np.asarray(weight, dtype=np.float64)
    return {"Acc": _f(np.sum(w * (pred == y)) / np.sum(w)), **_prf(y, pred, conf.shape[1], w)}


def instance_keys(video_ids: list, ped_ids: list, y) -> list[tuple]:
    """The instance of each sample (samples in extraction order): its pedestrian, and for a label that changes
    along the track (risk) the run of consecutive samples with the same label."""
    keys, run, prev = [], 0, None
    for v, p, c in zip(video_ids, ped_ids, np.asarray(y).tolist()):
        if prev is not None and (v, p) == prev[:2] and c != prev[2]:
            run += 1
        elif prev is None or (v, p) != prev[:2]:
            run = 0
        keys.append((v, p, run))
        prev = (v, p, c)
    return keys


def instance_groups(keys: list) -> list[np.ndarray]:
    """Row indices of each instance (rows already in extraction order within an instance)."""
    groups: dict = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return [np.asarray(v) for v in groups.values()]


def _mode(values: np.ndarray) -> int:
    c = Counter(values.tolist())
    top = max(c.values())
    return min(v for v, n in c.items() if n == top)


@_quiet
def instance_metrics(y: np.ndarray, conf: np.ndarray, groups: list[np.ndarray]) -> dict:
    """Soft and hard per-pedestrian bAcc, Acc, Prec, F1 and the confidence delta (§III-E)."""
    k = conf.shape[1]
    gt, soft, hard, deltas = [], [], [], []
    for idx in groups:
        yi, ci = np.asarray(y)[idx], conf[idx]
        g = _mode(yi)
        gt.append(g)
        soft.append(int(np.argmax(ci.mean(axis=0))))
        p = np.argmax(ci, axis=1)
        if (p == p[0]).all():
            hard.append(int(p[0]))
        elif k == 2:
            hard.append(1 - g)
        else:
            hard.append(_mode(p[p != g]))
        if len(idx) >= 2:
            d = np.abs(np.diff(ci, axis=0)).mean(axis=0)  # per class: mean |conf^i - conf^(i+1)|
            deltas.append(float(d[1]) if k == 2 else float(d.mean()))
    gt_a = np.asarray(gt)

    def cls(pred):
        pred = np.asarray(pred)
        return {"bAcc": _f(balanced_accuracy_score(gt_a, pred)), "Acc": _f(accuracy_score(gt_a, pred)),
                **_prf(gt_a, pred, k)}

    return {"instances": len(groups), "soft": cls(soft), "hard": cls(hard),
            "conf_delta": {"max": max(deltas) if deltas else None,
                           "avg": float(np.mean(deltas)) if deltas else None,
                           "instances": len(deltas)}}


def task_metrics(task: str, y: np.ndarray, conf: np.ndarray, tte_frames: np.ndarray, rclass: np.ndarray,
                 keys: list, cfg: PieConfig | None = None) -> dict:
    """Every metric of one task's scored samples."""
    cfg = cfg or PieConfig()
    if task == "action":
        w = tte_weight(tte_frames, cfg.tte_sigma)
    else:
        w = risk_weight(rclass, cfg)
    return {"scored": int(len(y)), "base": base_metrics(y, conf), "weighted": weighted_metrics(y, conf, w),
            **instance_metrics(y, conf, instance_groups(keys))}


# ------------------------------------------------------------------------------------------ inputs
def read_target(target: str, splits: list[str] | None = None) -> tuple[pa.Table, dict]:
    store = RunStore(target)
    if not store.exists(EXPORT_SUMMARY):
        if RunReader(store, require=False).is_run_folder():  # its samples, as export pie --run would write them
            return _run_target(store, splits)
        raise InputError(f"{target} is not a PIE export (no {EXPORT_SUMMARY}) nor a run folder; make one with "
                         "drivegen export pie", file=store.uri_of(EXPORT_SUMMARY))
    try:
        summary = store.read_json(EXPORT_SUMMARY)
    except Exception as err:  # noqa: BLE001 - a torn or foreign file: name it
        raise InputError(f"cannot read {EXPORT_SUMMARY}: {err}", file=store.uri_of(EXPORT_SUMMARY)) from None
    if not isinstance(summary, dict) or summary.get("format") != EXPORT_FORMAT:
        raise InputError(f"{target}: {EXPORT_SUMMARY} is not a {EXPORT_FORMAT} export",
                         file=store.uri_of(EXPORT_SUMMARY))
    files = [f for f in summary.get("files", []) if f.endswith(".parquet")]
    chosen = [f for f in files if splits is None or f.rsplit("/", 1)[-1][:-len(".parquet")] in splits]
    if not chosen:
        raise InputError(f"{target}: no samples{' of splits ' + str(splits) if splits else ''} in the export",
                         file=store.uri_of(EXPORT_SUMMARY))
    t = pa.concat_tables([store.read_parquet(f, columns=TARGET_COLUMNS) for f in chosen])
    others = set()
    for f in sorted(set(files) - set(chosen)):
        others.update(store.read_parquet(f, columns=["sample_id"]).column("sample_id").to_pylist())
    summary = {**summary, "_other_split_ids": others}
    return t, summary


def _run_target(store, splits: list[str] | None) -> tuple[pa.Table, dict]:
    """The samples of a run folder (``export.samples_from_run``, built in memory) and their summary."""
    samples, info = samples_from_run(RunReader(store))
    split = samples.column("split")
    keep = pc.is_in(split, pa.array(splits, pa.string())) if splits else pa.array([True] * samples.num_rows)
    keep = pc.fill_null(keep, False)
    others = set(samples.filter(pc.invert(keep)).column("sample_id").to_pylist())
    t = samples.filter(keep).select(TARGET_COLUMNS)
    if t.num_rows == 0:
        raise InputError(f"{store.uri}: no PIE samples{' of splits ' + str(splits) if splits else ''} in the run "
                         f"({info.get('why_empty') or 'no tracked pedestrian has a window'})", file=store.uri)
    return t, {**info, "format": EXPORT_FORMAT, "_other_split_ids": others}


def read_predictions(path: str) -> list[dict]:
    """Rows of a Parquet or JSON prediction file (a list, or ``{"predictions": [...]}``); ``InputError`` naming
    the file when unreadable (``generator.validate.score.read_predictions``)."""
    from generator.validate import score  # its name is taken at module level

    obj = score.read_predictions(path)
    if isinstance(obj, dict) and isinstance(obj.get("predictions"), list):
        obj = obj["predictions"]
    if not isinstance(obj, list):
        raise InputError("JSON predictions must be a list of objects or {\"predictions\": [...]}", file=str(path))
    return obj


def _num(v) -> float | None:
    if isinstance(v, bool) or v is None:
        return None if v is None else float(v)
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x


def _confidence(task: str, row: dict, k: int) -> tuple[np.ndarray | None, str | None]:
    """The per-class confidences of one prediction row, or the problem with it."""
    if task == "action":
        if row.get("crossing_prob") is not None:
            p = _num(row["crossing_prob"])
            if p is None or math.isnan(p):
                return None, f"crossing_prob is not a number ({str(row['crossing_prob'])[:40]})"
            if not 0.0 <= p <= 1.0:
                return None, f"crossing_prob {p:g} outside [0, 1]"
            return np.array([1.0 - p, p]), None
        if row.get("crossing") is not None:
            v = _num(row["crossing"])
            if v not in (0.0, 1.0):
                return None, f"crossing must be 0 or 1, got {str(row['crossing'])[:40]}"
            return np.array([1.0 - v, v]), None
        return None, "no crossing_prob or crossing"
    if row.get("risk_probs") is not None:
        raw = row["risk_probs"]
        if not isinstance(raw, (list, tuple, np.ndarray)) or len(raw) != k:
            return None, f"risk_probs must be a list of {k} numbers"
        vals = [_num(v) for v in raw]
        if any(v is None or math.isnan(v) for v in vals):
            return None, "risk_probs holds a value that is not a number"
        p = np.asarray(vals, dtype=np.float64)
        if (p < 0).any() or (p > 1).any() or abs(p.sum() - 1.0) > 0.01:
            return None, f"risk_probs must be in [0, 1] and sum to 1 (sum {p.sum():.3g})"
        return p, None
    if row.get("risk_class") is not None:
        v = _num(row["risk_class"])
        if v is None or math.isnan(v) or v != int(v) or not 0 <= v < k:
            return None, f"risk_class must be an integer 0-{k - 1}, got {str(row['risk_class'])[:40]}"
        return np.eye(k)[int(v)], None
    return None, "no risk_probs or risk_class"


def score(pred_path: str, target: str, splits: list[str] | None = None, cfg: PieConfig | None = None) -> dict:
    """The metrics of the predictions in ``pred_path`` on the PIE export ``target`` (docs/families/pie.md)."""
    samples, summary = read_target(target, splits)
    if cfg is None:
        try:
            cfg = PieConfig.model_validate(summary.get("config") or {})
        except Exception:  # noqa: BLE001 - an older export: the defaults
            cfg = PieConfig()
    rows = read_predictions(pred_path)
    other_ids = summary.pop("_other_split_ids", set())
    n_cls = {"action": 2, "risk": risk_classes(cfg)}
    sid = samples.column("sample_id").to_pylist()
    task_of = dict(zip(sid, samples.column("task").to_pylist()))
    problems: list[dict] = []
    conf: dict[str, np.ndarray] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            problems.append({"sample_id": None, "task": None, "kind": "malformed",
                             "problem": f"row {i} is not an object"})
            continue
        s = row.get("sample_id")
        if isinstance(s, str) and s in other_ids:  # a sample of a split not scored now
            continue
        if not isinstance(s, str) or s not in task_of:
            problems.append({"sample_id": str(s)[:120] if s is not None else None, "task": None,
                             "kind": "unknown" if s is not None else "malformed",
                             "problem": "unknown sample_id" if s is not None else f"row {i} has no sample_id"})
            continue
        if s in conf:
            problems.append({"sample_id": s, "task": task_of[s], "kind": "duplicate",
                             "problem": "duplicate prediction (first kept)"})
            continue
        c, why = _confidence(task_of[s], row, n_cls[task_of[s]])
        if why:
            problems.append({"sample_id": s, "task": task_of[s], "kind": "invalid", "problem": why})
            conf[s] = None  # seen: not "missing", not scored
            continue
        conf[s] = c
    tasks_pred = {task_of[s] for s in conf}
    result: dict = {"target": str(target), "predictions": str(pred_path), "splits": splits, "tasks": {}}
    for task in sorted(set(task_of.values())):
        t = samples.filter(pc.equal(samples.column("task"), task))
        t = t.sort_by([("video_id", "ascending"), ("ped_id", "ascending"), ("end_frame", "ascending")])
        ids = t.column("sample_id").to_pylist()
        if task not in tasks_pred:
            result["tasks"][task] = {"samples": len(ids), "scored": 0, "skipped": "no prediction for this task"}
            continue
        keep = []
        for j, s in enumerate(ids):
            if s not in conf:
                problems.append({"sample_id": s, "task": task, "kind": "missing", "problem": "missing prediction"})
            elif conf[s] is not None:
                keep.append(j)
        if not keep:
            result["tasks"][task] = {"samples": len(ids), "scored": 0, "skipped": "no valid prediction"}
            continue
        keep_a = np.asarray(keep)
        y = np.asarray(t.column("crossing" if task == "action" else "risk_class").to_pylist())[keep_a]
        c = np.stack([conf[ids[j]] for j in keep])
        tte = np.asarray(t.column("tte_frames").to_pylist())[keep_a]
        rc = np.asarray(t.column("risk_class").to_pylist())[keep_a]
        vid, pid = t.column("video_id").to_pylist(), t.column("ped_id").to_pylist()
        keys = instance_keys([vid[j] for j in keep], [pid[j] for j in keep], y)
        result["tasks"][task] = {"samples": len(ids), **task_metrics(task, y, c, tte, rc, keys, cfg)}
    result["problems"] = problems
    result["problem_counts"] = dict(Counter(p["kind"] for p in problems).most_common())
    return result


def to_text(result: dict) -> str:
    lines = [f"PIE scores: {result['predictions']} on {result['target']}"]
    for task, m in result["tasks"].items():
        if not m.get("scored"):
            lines.append(f"  {task}: {m['samples']} samples, not scored ({m.get('skipped')})")
            continue
        fmt = lambda d: "  ".join(f"{k} {'-' if v is None else f'{v:.3f}'}" for k, v in d.items())  # noqa: E731
        lines.append(f"  {task}: {m['scored']}/{m['samples']} samples, {m['instances']} instances")
        lines.append(f"    base      {fmt(m['base'])}")
        lines.append(f"    weighted  {fmt(m['weighted'])}")
        lines.append(f"    soft      {fmt(m['soft'])}")
        lines.append(f"    hard      {fmt(m['hard'])}")
        lines.append(f"    conf_delta  {fmt({k: m['conf_delta'][k] for k in ('max', 'avg')})}")
    probs = result.get("problems", [])
    lines.append(f"  problems: {len(probs)}" + ("" if not probs else " (" + ", ".join(
        f"{k}: {n}" for k, n in result.get("problem_counts", {}).items()) + ")"))
    for p in probs[:10]:
        lines.append(f"    {p['sample_id']}: {p['problem']}")
    if len(probs) > 10:
        lines.append(f"    ... and {len(probs) - 10} more (see score.json)")
    return "\n".join(lines)
