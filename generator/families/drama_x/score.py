"""DRAMA-X scorer (``drivegen score drama-x --pred PRED.json TARGET``), the paper's metrics (App. A.4):

- **OD**: share of ground-truth objects localized by a predicted box with IoU >= ``drama_x.od_iou`` (0.5),
  one prediction per ground-truth object (Hungarian on 1 - IoU per sample);
- **LIP / VIP / combined**: share of ground-truth objects whose matched prediction (IoU >= ``match_iou``,
  0.3, the paper's matching threshold) has the right lateral / vertical / both intents; unmatched objects
  count as wrong (N = all ground-truth objects);
- **risk**: balanced accuracy and positive-class F1 of the per-sample ``Risk`` (scikit-learn); a sample
  without a usable prediction counts as the wrong answer;
- **action**: the paper scores free-form actions with BERTScore F1. Weights cannot be downloaded here, so
  by default two stand-ins, labelled as such: ``action_exact_vocab_accuracy`` (normalised text equal to the
  reference, the reference being one of ``schemas.vocab.DRAMA_ACTIONS``) and ``action_token_f1`` (bag-of-words
  F1, SQuAD-style). ``score(..., bertscore_model=PATH, bertscore_num_layers=N)`` adds ``action_bertscore_f1``
  through ``bert-score`` with a local model (skipped, with a note, when ``bert-score`` is not installed).

Predictions: a JSON object ``{sample_id: sample}`` (or an export folder), each sample in the export's format (App.
A.2: ``Risk``, ``suggested_action`` and ``Pedestrians`` / ``Cyclists`` objects each with ``Box`` and ``Intent``
([lateral, vertical])) or in App. B.1's, what the paper's prompt asks a model for (``_as_a2``). Keys read neither
way are listed as ignored. ``TARGET`` is a DRAMA-X export folder or a run folder (its samples are
built the way the export builds them). Malformed predictions (missing sample, unknown label, bad box) are
listed in ``result["problems"]``, never a crash.
"""
from __future__ import annotations

import math
import os
import re
from collections import Counter

import numpy as np

from generator.families.drama_x import score_public as pub
from generator.families.drama_x.attributes import iou_matrix, match_boxes
from generator.families.drama_x.config import DramaXConfig
from generator.families.drama_x.export import read_export, records_from_run
from generator.families.drama_x.score_public import SCRIPTS_MATCH_IOU, SCRIPTS_OD_IOU
from schemas.errors import InputError
from generator.families.drama_x.vocab import DRAMA_ACTION_A2_TEXT, DRAMA_ACTIONS
from generator.runfolder import RunReader, RunStore
from generator.validate.score import read_predictions
from schemas.vocab import INTENT_LATERAL, INTENT_VERTICAL

NAME = "drama-x"
HELP = "DRAMA-X: object detection, lateral/vertical intent, risk, suggested action"
MAX_PROBLEMS = 200  # listed in full up to this many; the count is always complete


def _target_samples(target: str):
    store = RunStore(target)
    try:
        samples = read_export(store)
    except (ValueError, OSError) as err:
        raise InputError(f"{target}: unreadable DRAMA-X export: {err}", file=target) from None
    if samples is not None:
        return samples, "export"
    reader = RunReader(store)  # raises RunFolderError (an InputError) for a folder that is neither
    out = {}
    for scene in records_from_run(reader).values():
        out.update(scene)
    return out, "run"


def _load_predictions(pred_path: str) -> dict:
    """{sample_id: sample} of a predictions file, or of an export folder (``export drama_x``'s: its samples, as the
    public scripts would read its merged ``drama_x.json``)."""
    if "://" not in str(pred_path) and os.path.isdir(pred_path):
        samples = read_export(RunStore(pred_path))
        if samples is None:
            raise InputError(f"{pred_path} is a folder but not a DRAMA-X export (no drama_x_export.json): give the "
                             "predictions' JSON file, or a folder drivegen export drama_x wrote", file=str(pred_path))
        return samples
    pred = read_predictions(pred_path)
    if not isinstance(pred, dict):
        raise InputError(f"{pred_path}: predictions must be a JSON object {{sample_id: sample}}, got "
                         f"{type(pred).__name__}", file=pred_path)
    return pred


def _box(v) -> np.ndarray | None:
    if not isinstance(v, (list, tuple)) or len(v) != 4:
        return None
    try:
        b = np.array([float(x) for x in v])
    except (TypeError, ValueError):
        return None
    if not np.all(np.isfinite(b)) or b[2] <= b[0] or b[3] <= b[1]:
        return None
    return b


# A.2 sample keys (the export's own, as read back); any other key of an A.2 prediction is listed as ignored
_A2_KEYS = frozenset({"scene_id", "frame_index", "timestamp_us", "image_path", "video_path", "camera", "split", "Risk",
                      "suggested_action", "Pedestrians", "Cyclists"})
# App. B.1: an object key naming its class; the public scripts' rule (a substring of the lower-cased key)
_B1_GROUPS = (("pedestrian", "Pedestrians"), ("person", "Pedestrians"), ("cyclist", "Cyclists"))
_B1_OBJECT_KEYS = frozenset({"Intent", "Bounding_box", "bounding_box", "Reason"})


def _as_a2(p: dict, sid: str, problem) -> dict:
    """A prediction sample in App. A.2's form. A B.1 sample (App. B.1, what the paper's prompt asks a model for:
    ``Risk``, ``Suggested_action`` and one key per object naming its class, each with ``Intent`` and
    ``Bounding_box``) is read as the public scripts read it: a key containing 'pedestrian' or 'person' is a
    pedestrian, one containing 'cyclist' a cyclist, a one-element ``Bounding_box`` list holds the box. A sample
    with ``Pedestrians`` or ``Cyclists`` is A.2 already. Every key read neither way is reported (``ignored key``),
    never dropped silently."""
    if not p:
        return p  # no prediction: counted as such by the caller
    if "Pedestrians" in p or "Cyclists" in p:
        for k in sorted(set(p) - _A2_KEYS):
            problem(sid, k, repr(p[k]), "ignored key")
        return p
    out = {"Risk": p.get("Risk"), "suggested_action": p.get("Suggested_action", p.get("suggested_action")),
           "Pedestrians": {}, "Cyclists": {}}
    for k, v in p.items():
        if k in ("Risk", "Suggested_action", "suggested_action"):
            continue
        group = next((g for sub, g in _B1_GROUPS if sub in str(k).lower()), None)
        if group is None or not isinstance(v, dict):
            problem(sid, k, repr(v), "ignored key")  # a vehicle, a free-text field: not a DRAMA-X object
            continue
        box = v.get("Bounding_box", v.get("bounding_box"))
        if isinstance(box, list) and len(box) == 1 and isinstance(box[0], (list, tuple)):
            box = box[0]
        out[group][k] = {"Box": box, "Intent": v.get("Intent")}
        for extra in sorted(set(v) - _B1_OBJECT_KEYS):
            problem(sid, f"{k}/{extra}", repr(v[extra]), "ignored key")
    return out


def _objects(sample: dict) -> list[tuple[str, dict]]:
    out = []
    for g, objs in sample.items():
        if g[:1].isupper() and g not in ("Risk",) and isinstance(objs, dict):
            out.extend((f"{g}/{k}", o) for k, o in objs.items())
    return out


def _norm(text) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^a-z0-9 ]", " ", str(text).lower())).strip()


def _action(text) -> str:
    """An action's normalised text, App. A.2's full form of an action read as its short vocabulary name."""
    n = _norm(text)
    return _SHORT_ACTION.get(n, n)


_SHORT_ACTION = {_norm(full): _norm(a) for a, full in DRAMA_ACTION_A2_TEXT.items()}
_FULL_ACTION = {_norm(a): full for a, full in DRAMA_ACTION_A2_TEXT.items()}
_VOCABULARY = frozenset(_norm(a) for a in DRAMA_ACTIONS)


def _token_f1(pred: str, ref: str) -> float:
    p, r = _norm(pred).split(), _norm(ref).split()
    if not p or not r:
        return float(p == r)
    common = sum((Counter(p) & Counter(r)).values())
    if common == 0:
        return 0.0
    prec, rec = common / len(p), common / len(r)
    return 2 * prec * rec / (prec + rec)


PROTOCOLS = ("paper", "public")
"""``paper`` (default): the paper's metrics (App. A.3-A.4), this module's docstring; ``public``: DRAMA-X's public
evaluation scripts, case for case (``generator.families.drama_x.score_public``)."""


def thresholds(protocol: str, od_iou: float | None, match_iou: float | None, cfg) -> tuple[float, float]:
    """The (OD, intent-matching) IoU thresholds of ``protocol``, unless given: the paper's ``drama_x.od_iou`` /
    ``match_iou`` (0.5 / 0.3) or the scripts' (0.25 / 0.6). InputError for an unknown protocol or a threshold
    outside (0, 1]."""
    if protocol not in PROTOCOLS:
        raise InputError(f"unknown DRAMA-X protocol {protocol!r} (known: {', '.join(PROTOCOLS)})")
    paper = protocol == "paper"
    od = (cfg.od_iou if paper else SCRIPTS_OD_IOU) if od_iou is None else od_iou
    match = (cfg.match_iou if paper else SCRIPTS_MATCH_IOU) if match_iou is None else match_iou
    for name, v in (("--od-iou", od), ("--match-iou", match)):
        if not (isinstance(v, (int, float)) and 0 < v <= 1):
            raise InputError(f"{name} must be an IoU in (0, 1], got {v!r}")
    return float(od), float(match)


def score(pred_path: str, target: str, splits: list[str] | None = None, *, protocol: str = "paper",
          od_iou: float | None = None, match_iou: float | None = None, bertscore_model: str | None = None,
          bertscore_num_layers: int | None = None, cfg=None) -> dict:
    """The metrics of the module docstring (``protocol`` 'paper') or of the public scripts ('public',
    ``score_public``); ``od_iou`` / ``match_iou`` replace the protocol's thresholds. ``splits`` keeps samples
    whose ``split`` field is listed (samples without one are kept: the export does not split frames of one
    scene)."""
    cfg = cfg or DramaXConfig()
    od_thr, match_thr = thresholds(protocol, od_iou, match_iou, cfg)
    gt, kind = _target_samples(target)
    if splits:
        gt = {k: v for k, v in gt.items() if v.get("split") in (None, *splits)}
    pred = _load_predictions(pred_path)
    problems: list[dict] = []
    n_problems = Counter()

    def problem(sample: str, item: str, what: str, reason: str) -> None:
        n_problems[reason] += 1
        if len(problems) < MAX_PROBLEMS:
            problems.append({"sample": sample, "item": item, "problem": reason, "detail": what[:200]})

    for sid in sorted(set(pred) - set(gt)):
        problem(sid, "", "no such sample in the target", "unknown sample")
    head = {"family": NAME, "target": target, "target_kind": kind, "protocol": protocol,
            "od_iou": od_thr, "match_iou": match_thr}
    if protocol == "public":
        result = _score_public(gt, pred, od_thr, match_thr, problem, bertscore_model, bertscore_num_layers)
        return {**head, **result, "problems": problems, "problem_counts": dict(n_problems),
                "num_problems": sum(n_problems.values())}
    n_gt = od = lip = vip = both = 0
    risk_true, risk_pred = [], []
    cands, refs = [], []
    for sid in sorted(gt):
        g = gt[sid]
        p = pred.get(sid)
        if not isinstance(p, dict):
            problem(sid, "", "no prediction for this sample" if p is None else f"not an object: {p!r}",
                    "missing sample" if p is None else "malformed sample")
            p = {}
        p = _as_a2(p, sid, problem)
        gts = _objects(g)
        n_gt += len(gts)
        pboxes, pobjs = [], []
        for key, o in _objects(p):
            b = _box(o.get("Box")) if isinstance(o, dict) else None
            if b is None:
                problem(sid, key, repr(o.get("Box") if isinstance(o, dict) else o), "bad box")
                continue
            if (b <= 1.0).all() and (b >= 0.0).all():  # the public scripts would rescale it by their image size
                problem(sid, key, repr(o.get("Box")), "normalised box (pixels expected: scored as pixels)")
            intent = o.get("Intent")
            if not (isinstance(intent, (list, tuple)) and len(intent) == 2 and intent[0] in INTENT_LATERAL
                    and intent[1] in INTENT_VERTICAL):
                problem(sid, key, repr(intent), "unknown intent label")
                intent = (None, None)
            pboxes.append(b)
            pobjs.append(intent)
        if gts and pboxes:
            gb = np.array([o["Box"] for _, o in gts], dtype=np.float64)
            pb = np.array(pboxes)
            iou = iou_matrix(gb, pb)
            od_pairs, _ = match_boxes(gb, pb, od_thr, cost=1.0 - iou)
            od += len(od_pairs)
            for i, j in match_boxes(gb, pb, match_thr, cost=1.0 - iou)[0]:
                gl, gv = gts[i][1]["Intent"]
                pl, pv = pobjs[j]
                lip += pl == gl
                vip += pv == gv
                both += (pl == gl) and (pv == gv)
        gr = g["Risk"] == "Yes"
        pr = p.get("Risk")
        if pr not in ("Yes", "No"):
            if p:
                problem(sid, "Risk", repr(pr), "unknown risk label")
            pr_b = not gr  # no usable answer: wrong
        else:
            pr_b = pr == "Yes"
        risk_true.append(gr)
        risk_pred.append(pr_b)
        pa_ = p.get("suggested_action")
        if not isinstance(pa_, str):
            if p:
                problem(sid, "suggested_action", repr(pa_), "missing action")
            pa_ = ""
        elif _action(pa_) not in _VOCABULARY:
            problem(sid, "suggested_action", pa_, "action outside the vocabulary (scored by token F1 only)")
        cands.append(pa_)
        refs.append(g["suggested_action"])

    result = {
        **head, "samples": len(gt), "objects": n_gt,
        "OD": _share(od, n_gt), "LIP": _share(lip, n_gt), "VIP": _share(vip, n_gt),
        "intent_combined": _share(both, n_gt),
        **_risk_metrics(risk_true, risk_pred), **_action_metrics(cands, refs, bertscore_model, bertscore_num_layers),
        "problems": problems, "problem_counts": dict(n_problems), "num_problems": sum(n_problems.values()),
    }
    return result


def _share(k, n) -> float:
    return float(k / n) if n else float("nan")


def _risk_metrics(risk_true: list[bool], risk_pred: list[bool]) -> dict:
    """Balanced accuracy and positive-class F1 of the per-sample risk (scikit-learn)."""
    # scikit-learn: seconds to import; only the scorers need it
    from sklearn.metrics import balanced_accuracy_score, f1_score

    out = {"risk_balanced_accuracy": float("nan"), "risk_f1": float("nan")}
    if risk_true:
        yt, yp = np.array(risk_true), np.array(risk_pred)
        if len(set(yt.tolist())) > 1:
            out["risk_balanced_accuracy"] = float(balanced_accuracy_score(yt, yp))
        else:  # one class present: balanced accuracy is that class's recall
            out["risk_balanced_accuracy"] = float(np.mean(yp == yt))
        out["risk_f1"] = float(f1_score(yt, yp, pos_label=True, zero_division=1.0 if not yt.any() else 0.0))
    return out


def _action_metrics(cands: list[str], refs: list[str], bertscore_model, bertscore_num_layers) -> dict:
    """Exact-vocabulary accuracy and token F1 of the actions, each text read as its action (App. A.2's full
    form and the short vocabulary name are one answer: an export scored against its own run is 100 %), and
    BERTScore F1 with a local model, on App. A.2's full form of a vocabulary action."""
    exact = [_action(c) == _action(r) for c, r in zip(cands, refs)]
    tok = [_token_f1(_action(c), _action(r)) for c, r in zip(cands, refs)]
    out = {"action_exact_vocab_accuracy": _share(sum(exact), len(exact)),
           "action_token_f1": float(np.mean(tok)) if tok else float("nan"),
           "action_metric_note": "exact-vocabulary accuracy and token F1 (stand-ins for the paper's BERTScore F1)"}
    if bertscore_model:
        out.update(_bertscore([_a2_text(c) for c in cands], [_a2_text(r) for r in refs], bertscore_model,
                              bertscore_num_layers))
    return out


def _a2_text(text: str) -> str:
    """App. A.2's full form of a vocabulary action (either spelling), other text as it is."""
    return _FULL_ACTION.get(_action(text), text)


def _score_public(gt: dict, pred: dict, od_thr: float, match_thr: float, problem, bertscore_model,
                  bertscore_num_layers) -> dict:
    """The public scripts' figures (``score_public``): OD, LIP, VIP and their overall intent accuracy over the
    window of the first ``len(pred)`` ground-truth samples; risk and action over the window's predicted
    samples."""
    win = pub.window(gt, pred)
    for sid, p in pred.items():
        if isinstance(p, dict) and ("Pedestrians" in p or "Cyclists" in p):
            problem(sid, "", "an App. A.2 sample: the public scripts read only B.1 objects (Bounding_box)",
                    "A.2 sample (no box for the public scripts)")
    stopped: set = set()
    n_obj, n_det = pub.detection(win, pred, od_thr, stopped)
    c = pub.intents(win, pred, match_thr, stopped)
    for sid in sorted(stopped):
        problem(sid, "", "a prediction the scripts fail on: the rest of the sample is not counted",
                "the public scripts stop on this sample")
    risk_true, risk_pred, cands, refs = [], [], [], []
    for sid, g in win:
        p = pred.get(sid)
        if not isinstance(p, dict):
            if p is None:
                problem(sid, "", "no prediction for this sample", "missing sample")
            continue
        r = pub.risk_label(p.get("Risk"))
        if r is not None:
            risk_true.append(str(g.get("Risk", "")).lower() == "yes")
            risk_pred.append(r == "Yes")
        ref, act = str(g.get("suggested_action") or "").strip(), p.get("Suggested_action", p.get("suggested_action"))
        if ref and ref.upper() != "N/A" and isinstance(act, str) and act:
            cands.append(act)
            refs.append(ref)
    return {"samples": len(gt), "samples_evaluated": len(win), "objects": n_obj, "intent_objects": c["lateral"],
            "OD": _share(n_det, n_obj), "LIP": _share(c["lateral_right"], c["lateral"]),
            "VIP": _share(c["vertical_right"], c["vertical"]), "intent_overall": _share(c["right"], c["intents"]),
            **_risk_metrics(risk_true, risk_pred), "risk_samples": len(risk_true),
            **_action_metrics(cands, refs, bertscore_model, bertscore_num_layers), "action_samples": len(cands)}


def _bertscore(cands: list[str], refs: list[str], model: str, num_layers: int | None) -> dict:
    try:
        from bert_score import score as bscore  # optional (extra 'bertscore'), only for --bertscore-model
    except ImportError:
        return {"action_bertscore_note": "bert-score is not installed: pip install bert-score"}
    if not cands:
        return {"action_bertscore_f1": float("nan")}
    _, _, f1 = bscore([c or " " for c in cands], refs, model_type=model, num_layers=num_layers or 2,
                      verbose=False, batch_size=64)
    return {"action_bertscore_f1": float(f1.mean()), "action_bertscore_model": model}


def to_text(result: dict) -> str:
    def pct(v):
        return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f} %"

    public = result.get("protocol") == "public"
    lines = [f"DRAMA-X on {result['target']} ({result['target_kind']}): {result['samples']} samples, "
             f"{result['objects']} objects"]
    if public:
        lines += [f"  protocol: public (DRAMA-X's evaluation scripts, od_intent_eval.py): the first "
                  f"{result['samples_evaluated']} of {result['samples']} ground-truth samples, one predicted box "
                  f"may detect several objects, OD IoU >= {result['od_iou']:g}, intents at IoU >= "
                  f"{result['match_iou']:g}",
                  f"  OD                         {pct(result['OD'])} of {result['objects']} objects",
                  f"  intent LIP / VIP / overall {pct(result['LIP'])} / {pct(result['VIP'])} / "
                  f"{pct(result['intent_overall'])} of {result['intent_objects']} objects"]
    else:
        lines += [f"  protocol: paper (App. A.3-A.4: every sample, one-to-one Hungarian matching), OD IoU >= "
                  f"{result['od_iou']:g}, intents at IoU >= {result['match_iou']:g}",
                  f"  OD                         {pct(result['OD'])}",
                  f"  intent LIP / VIP / both    {pct(result['LIP'])} / {pct(result['VIP'])} / "
                  f"{pct(result['intent_combined'])}"]
    lines += [
              f"  risk balanced acc. / F1    {pct(result['risk_balanced_accuracy'])} / {pct(result['risk_f1'])}",
              f"  action exact-vocab acc.    {pct(result['action_exact_vocab_accuracy'])}",
              f"  action token F1            {pct(result['action_token_f1'])}"]
    if "action_bertscore_f1" in result:
        lines.append(f"  action BERTScore F1        {pct(result['action_bertscore_f1'])} "
                     f"({result.get('action_bertscore_model')})")
    if "action_bertscore_note" in result:
        lines.append(f"  action BERTScore F1        not computed: {result['action_bertscore_note']}")
    lines.append(f"  ({result['action_metric_note']})")
    if result["num_problems"]:
        lines.append(f"  {result['num_problems']} malformed prediction item(s): "
                     + ", ".join(f"{k}={v}" for k, v in sorted(result["problem_counts"].items())))
    return "\n".join(lines)
