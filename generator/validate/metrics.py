"""Detection and tracking metrics through nuscenes-devkit's own evaluation code.

The devkit's ``DetectionEval`` / ``TrackingEval`` load a result JSON and a NuScenes split in their
constructors. drivegen's logs are custom (generated nuScenes-format logs, Argoverse 2), so the two
evaluators are subclassed with a constructor that takes ready ``EvalBoxes`` (detection) or tracks
(tracking); their ``evaluate`` methods run unchanged: ``accumulate`` / ``calc_ap`` / ``calc_tp`` /
``DetectionMetrics`` with the cone/barrier NaN rules, and ``TrackingEvaluation`` over recall thresholds
with the AMOTA/AMOTP averaging and best-MOTA threshold pick.

Tracking lives in ``generator.validate.tracking`` (the devkit's TrackingEval imports motmetrics).

Two documented departures, both opt-in or only where the devkit's definition has no data:
- ``TrackingOptions.num_thresholds`` (default 40 = ``tracking_nips_2019``) sets the number of recall
  thresholds AMOTA averages over; the evaluation cost is linear in it (see ``evaluate_tracking``).
- NDS on logs without attributes (e.g. Argoverse 2): the devkit would count mAAE as 1 (``cummean`` of an
  all-NaN error is 1). ``_Metrics`` drops TP metrics that are NaN for every class, so NDS is then
  ``(5 mAP + sum of the four other TP scores) / 9``. With attributes it equals the devkit's NDS exactly.
"""
from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np
from nuscenes.eval.common.config import config_factory
from nuscenes.eval.common.data_classes import EvalBoxes
from nuscenes.eval.detection.constants import TP_METRICS
from nuscenes.eval.detection.data_classes import DetectionConfig, DetectionMetrics
from nuscenes.eval.detection.evaluate import DetectionEval
from nuscenes.eval.tracking.data_classes import TrackingConfig
from nuscenes.eval.tracking.loaders import interpolate_tracks

log = logging.getLogger(__name__)

DETECTION_CONFIG = "detection_cvpr_2019"
TRACKING_CONFIG = "tracking_nips_2019"
# Summary names as in the nuScenes leaderboard and STRIDE-QA Table 6.
TP_SUMMARY = {"trans_err": "mATE", "scale_err": "mASE", "orient_err": "mAOE", "vel_err": "mAVE", "attr_err": "mAAE"}
TRACKING_SUMMARY = ("amota", "amotp", "recall", "motar", "mota", "motp", "mt", "ml", "faf", "tp", "fp", "fn", "ids",
                    "frag", "tid", "lgd", "gt")
# the summary's counts (the devkit keeps them as floats): reported as integers
TRACKING_COUNTS = frozenset({"mt", "ml", "tp", "fp", "fn", "ids", "frag", "gt"})


def detection_config() -> DetectionConfig:
    return config_factory(DETECTION_CONFIG)


def tracking_config(num_thresholds: int | None = None) -> TrackingConfig:
    """``tracking_nips_2019``; ``num_thresholds`` overrides its 40 recall thresholds (must be >= 2)."""
    cfg = config_factory(TRACKING_CONFIG)
    if num_thresholds is not None and num_thresholds != cfg.num_thresholds:
        if num_thresholds < 2:
            raise ValueError(f"tracking needs at least 2 recall thresholds, got {num_thresholds}")
        cfg = TrackingConfig.deserialize({**cfg.serialize(), "num_thresholds": int(num_thresholds)})
    return cfg


# ----------------------------------------------------------------------------------------------- detection
class _Metrics(DetectionMetrics):
    """``DetectionMetrics`` summarised over a subset of classes, with NDS leaving out TP metrics that no
    summarised class has data for (see module doc). With all ten classes and attributes present this is
    the devkit's summary exactly.
    """

    def __init__(self, cfg: DetectionConfig, classes: list[str] | None = None):
        super().__init__(cfg)
        self.classes = list(cfg.class_names) if classes is None else list(classes)

    @property
    def mean_dist_aps(self) -> dict[str, float]:
        return {c: float(np.mean(list(self._label_aps[c].values()))) for c in self.classes}

    @property
    def mean_ap(self) -> float:
        return float(np.mean(list(self.mean_dist_aps.values()))) if self.classes else float("nan")

    @property
    def tp_errors(self) -> dict[str, float]:
        out = {}
        for name in TP_METRICS:
            vals = np.array([self.get_label_tp(c, name) for c in self.classes], dtype=float)
            out[name] = float(np.nanmean(vals)) if np.any(~np.isnan(vals)) else float("nan")
        return out

    @property
    def tp_scores(self) -> dict[str, float]:
        errors = self.tp_errors
        return {k: max(0.0, 1.0 - v) for k, v in errors.items() if not np.isnan(v)}


class BoxesDetectionEval(DetectionEval):
    """``DetectionEval`` over ready, filtered ``EvalBoxes`` (no NuScenes split, no result file).

    ``gt_boxes``/``pred_boxes`` must share sample tokens, carry ``ego_translation`` and already have the
    devkit's ``filter_eval_boxes`` applied (``generator.validate.groundtruth`` does both).
    ``evaluate()`` is the devkit's. When ``has_attributes`` is False every class's attribute error is
    NaN instead of the devkit's 1 (the logs carry no attributes to compare against).
    """

    def __init__(self, gt_boxes: EvalBoxes, pred_boxes: EvalBoxes, config: DetectionConfig | None = None,
                 has_attributes: bool = True, verbose: bool = False):
        # DetectionEval.__init__ reads files and a NuScenes split; set exactly what evaluate() uses.
        self.cfg = config or detection_config()
        self.gt_boxes = gt_boxes
        self.pred_boxes = pred_boxes
        self.verbose = verbose
        self.has_attributes = has_attributes
        self.sample_tokens = gt_boxes.sample_tokens
        missing = set(gt_boxes.sample_tokens) ^ set(pred_boxes.sample_tokens)
        if missing:
            raise ValueError(f"GT and predictions cover different samples ({len(missing)} differ)")

    def evaluate(self, classes: list[str] | None = None):
        """The devkit's evaluation; the summary (``_Metrics``) covers ``classes`` (default: all ten)."""
        metrics, md_list = super().evaluate()
        out = _Metrics(self.cfg, classes)
        out._label_aps = metrics._label_aps
        out._label_tp_errors = metrics._label_tp_errors
        out.eval_time = metrics.eval_time
        if not self.has_attributes:
            for c in self.cfg.class_names:
                out.add_label_tp(c, "attr_err", np.nan)
        return out, md_list


def _f(x) -> float | None:
    x = float(x)
    return None if np.isnan(x) else x


def tracking_value(name: str, x) -> float | int | None:
    """A devkit tracking metric as reported: None for NaN, an int for a count (``TRACKING_COUNTS``)."""
    v = _f(x)
    return int(round(v)) if v is not None and name in TRACKING_COUNTS else v


def false_positives(gt_boxes: EvalBoxes, pred_boxes: EvalBoxes, classes, dist_th_m: float) -> dict[str, int]:
    """Predicted boxes per class that match no GT box: ``{class: count}`` over ``classes``.

    The devkit's matching rule (``nuscenes.eval.detection.algo.accumulate``): per class, predictions in
    descending score order (ties: the later box first) each take the nearest GT box of their sample and
    class not taken yet, by BEV centre distance; a prediction whose nearest free GT box is ``dist_th_m`` or
    farther (or that has none) is a false positive. A class without GT has all its predictions as false
    positives: the headline means (over classes with GT) do not see them at all. Both inputs must be the
    devkit-filtered boxes that ``evaluate_detection`` scores."""
    gt_xy: dict[tuple[str, str], np.ndarray] = defaultdict(list)
    for b in gt_boxes.all:
        gt_xy[(b.sample_token, b.detection_name)].append(b.translation[:2])
    gt_xy = {k: np.asarray(v, dtype=np.float64).reshape(-1, 2) for k, v in gt_xy.items()}
    preds: dict[str, list] = defaultdict(list)
    for b in pred_boxes.all:
        preds[b.detection_name].append(b)
    out = {}
    for c in classes:
        boxes = preds.get(c, [])
        score = np.array([b.detection_score for b in boxes], dtype=np.float64)
        order = np.lexsort((np.arange(len(boxes)), score))[::-1]  # the devkit's sort: score, then index, reversed
        taken = {k: np.zeros(len(v), dtype=bool) for k, v in gt_xy.items() if k[1] == c}
        fp = 0
        for i in order:  # greedy and sequential by definition: each match removes a GT box for the next ones
            key = (boxes[i].sample_token, c)
            if key not in taken:
                fp += 1
                continue
            d = np.hypot(*(gt_xy[key] - np.asarray(boxes[i].translation[:2], dtype=np.float64)).T)
            d[taken[key]] = np.inf
            j = int(np.argmin(d))
            if d[j] < dist_th_m:
                taken[key][j] = True
            else:
                fp += 1
        out[c] = fp
    return out


def evaluate_detection(gt_boxes: EvalBoxes, pred_boxes: EvalBoxes, has_attributes: bool = True,
                       config: DetectionConfig | None = None) -> dict:
    """mAP (AP averaged over the 0.5/1/2/4 m centre-distance thresholds, then over classes), mATE, mASE,
    mAOE, mAVE, mAAE and NDS, overall and per class, as JSON-able numbers (None = no data).

    Headline figures average over the classes that have GT in the evaluated samples (a small log set
    rarely holds all ten; the devkit would count an absent class as AP 0 and TP errors 1, and gives NaN
    for an absent class in tracking). ``all_classes`` holds the devkit's literal ten-class summary.
    Because boxes of a class without GT cost those means nothing, false positives are counted apart
    (``false_positives``; per class ``num_fp``, ``fp_rate`` = share of the class's predictions,
    ``fp_per_sample``): predictions matching no GT box of their class within the devkit's TP distance
    (``dist_th_tp``, 2 m), every prediction of a class without GT included.
    """
    ev = BoxesDetectionEval(gt_boxes, pred_boxes, config, has_attributes=has_attributes)
    gt_count = defaultdict(int)
    for b in gt_boxes.all:
        gt_count[b.detection_name] += 1
    pred_count = defaultdict(int)
    for b in pred_boxes.all:
        pred_count[b.detection_name] += 1
    present = [c for c in ev.cfg.class_names if gt_count[c] > 0]
    metrics, _ = ev.evaluate(classes=present)
    every = _Metrics(ev.cfg)
    every._label_aps, every._label_tp_errors = metrics._label_aps, metrics._label_tp_errors

    def summary(m: _Metrics) -> dict:
        errors = m.tp_errors
        return {"mAP": _f(m.mean_ap), **{TP_SUMMARY[k]: _f(errors[k]) for k in TP_METRICS},
                "NDS": _f(m.nd_score) if m.classes else None,
                "nds_terms": ["mAP"] + [TP_SUMMARY[k] for k in TP_METRICS if k in m.tp_scores]}

    fp = false_positives(gt_boxes, pred_boxes, ev.cfg.class_names, ev.cfg.dist_th_tp)
    n_samples = len(ev.sample_tokens)
    per_class = {}
    for c in ev.cfg.class_names:
        per_class[c] = {
            "AP": _f(np.mean([metrics.get_label_ap(c, d) for d in ev.cfg.dist_ths])),
            "AP_by_dist": {str(d): _f(metrics.get_label_ap(c, d)) for d in ev.cfg.dist_ths},
            **{TP_SUMMARY[m][1:]: _f(metrics.get_label_tp(c, m)) for m in TP_METRICS},  # ATE, ASE, ...
            "num_gt": int(gt_count[c]), "num_pred": int(pred_count[c]), "has_gt": gt_count[c] > 0,
            "num_fp": fp[c], "fp_rate": fp[c] / pred_count[c] if pred_count[c] else None,
            "fp_per_sample": fp[c] / n_samples if n_samples else None,
        }
    absent = {c: fp[c] for c in ev.cfg.class_names if not gt_count[c] and fp[c]}
    n_fp = sum(fp.values())
    return {
        **summary(metrics),
        "classes": present,
        "all_classes": summary(every),
        "has_attributes": has_attributes,
        "per_class": per_class,
        "false_positives": {
            "dist_th_m": float(ev.cfg.dist_th_tp), "num_fp": n_fp,
            "fp_rate": n_fp / len(pred_boxes.all) if len(pred_boxes.all) else None,
            "fp_per_sample": n_fp / n_samples if n_samples else None,
            "classes_without_gt": absent, "num_fp_classes_without_gt": sum(absent.values()),
        },
        "num_samples": len(ev.sample_tokens),
        "num_gt": len(gt_boxes.all),
        "num_pred": len(pred_boxes.all),
        "eval_time_s": float(metrics.eval_time),
        "config": DETECTION_CONFIG,
    }


# ------------------------------------------------------------------------------------------------ tracking
Tracks = dict  # {scene: {timestamp_us: [TrackingBox, ...]}}


def build_tracks(boxes: EvalBoxes, sample_scene: dict[str, str], sample_time_us: dict[str, int],
                 gt: bool) -> Tracks:
    """Group filtered ``TrackingBox``es into the devkit's track layout and fill holes.

    This is what ``nuscenes.eval.tracking.loaders.create_tracks`` does once it has the split's scenes:
    every evaluated sample gets an entry (possibly empty), predicted boxes take their track's mean score
    (the devkit's rule, applied before interpolation), then the devkit's ``interpolate_tracks`` fills
    frames a track skips (e.g. GT boxes removed by the zero-points filter).
    """
    tracks: dict = defaultdict(lambda: defaultdict(list))
    for tok in sorted(sample_scene, key=lambda t: (sample_scene[t], sample_time_us[t])):
        tracks[sample_scene[tok]][sample_time_us[tok]] = list(boxes[tok]) if tok in boxes.boxes else []
    if not gt:
        for scene_tracks in tracks.values():
            scores = defaultdict(list)
            for frame in scene_tracks.values():
                for b in frame:
                    scores[b.tracking_id].append(b.tracking_score)
            mean = {k: float(np.mean(v)) for k, v in scores.items()}
            for frame in scene_tracks.values():
                for b in frame:
                    b.tracking_score = mean[b.tracking_id]
    for scene in list(tracks):
        filled = interpolate_tracks(tracks[scene])
        tracks[scene] = defaultdict(list, sorted(filled.items(), key=lambda kv: kv[0]))
    return tracks
