"""Tracking metrics: the devkit's ``TrackingEval`` over ready tracks, one class per worker process.

Importing this module needs ``motmetrics`` (nuscenes-devkit's tracking evaluation imports it);
``TrackingUnavailable`` says so when it is missing.
"""
from __future__ import annotations

import copy
import multiprocessing as mp
import os
import time

from generator.types import DrivegenError
from generator.validate.metrics import TRACKING_CONFIG, TRACKING_SUMMARY, Tracks, tracking_config, tracking_value


class TrackingUnavailable(DrivegenError):
    """motmetrics (needed by nuscenes-devkit's TrackingEval) is not installed."""


try:
    from nuscenes.eval.tracking.data_classes import TrackingConfig, TrackingMetrics
    from nuscenes.eval.tracking.evaluate import TrackingEval
except ModuleNotFoundError as _err:  # pragma: no cover - depends on the environment
    raise TrackingUnavailable(
        f"tracking metrics need nuscenes-devkit's TrackingEval, which imports {_err.name!r} (not installed): "
        f"install motmetrics==1.4.0 (the devkit's pin; numpy 1 compatible), or pass --no-tracking") from None


class TracksTrackingEval(TrackingEval):
    """``TrackingEval`` over ready tracks (``build_tracks``); ``evaluate()`` is the devkit's.

    ``class_names`` restricts the evaluated classes (the config's ``class_names`` on a shallow copy), which
    is how ``evaluate_tracking`` runs one class per worker process.
    """

    def __init__(self, tracks_gt: Tracks, tracks_pred: Tracks, config: TrackingConfig,
                 class_names: list[str] | None = None, verbose: bool = False):
        # TrackingEval.__init__ loads NuScenes + a split; set exactly what evaluate() uses.
        self.cfg = copy.copy(config)
        if class_names is not None:
            self.cfg.class_names = list(class_names)
        self.tracks_gt = tracks_gt
        self.tracks_pred = tracks_pred
        self.verbose = verbose
        self.output_dir = None
        self.render_classes = None
        missing = set(tracks_gt) ^ set(tracks_pred)
        if missing:
            raise ValueError(f"GT and predicted tracks cover different scenes: {sorted(missing)}")


# Inputs for forked workers: set just before the pool forks, so tracks are inherited, never pickled.
_WORK: dict = {}


def _eval_class(class_name: str) -> tuple[str, dict, float]:
    import sklearn  # scikit-learn: seconds to import; only the scorers need it

    t0 = time.perf_counter()
    ev = TracksTrackingEval(_WORK["gt"], _WORK["pred"], _WORK["cfg"], class_names=[class_name])
    # The devkit calls sklearn's euclidean_distances once per frame and threshold; its input validation
    # is a third of the time on small frames. Inputs are finite box centres, so skip it (same numbers).
    with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
        metrics, _ = ev.evaluate()
    return class_name, {m: metrics.label_metrics[m][class_name] for m in metrics.label_metrics}, \
        time.perf_counter() - t0


def evaluate_tracking(tracks_gt: Tracks, tracks_pred: Tracks, config: TrackingConfig | None = None,
                      workers: int | None = None) -> dict:
    """AMOTA, AMOTP, recall, MOTA, MOTP, IDSW (``ids``), fragmentations (``frag``) and the other devkit
    tracking metrics, overall (devkit's ``compute_metric('all')``: mean over classes, sums for counts)
    and per class.

    Cost: per class, one matching pass to find the recall thresholds plus one motmetrics pass per
    threshold, each over every evaluated frame: O(classes x (num_thresholds + 1) x frames x boxes^2).
    Classes run in parallel in forked processes (``workers``, default min(classes, cpu count)); the
    classes are independent so this is exact. ``workers=1`` runs in-process.
    """
    cfg = config or tracking_config()
    classes = [c for c in cfg.class_names]
    gt_present = set()
    for scene in tracks_gt.values():
        for frame in scene.values():
            gt_present.update(b.tracking_name for b in frame)
    todo = [c for c in classes if c in gt_present]  # classes without GT are all-NaN in the devkit anyway
    if workers is None:
        workers = min(len(todo), os.cpu_count() or 1)
    t0 = time.perf_counter()
    _WORK.update(gt=tracks_gt, pred=tracks_pred, cfg=cfg)
    try:
        if workers > 1 and len(todo) > 1 and "fork" in mp.get_all_start_methods():
            with mp.get_context("fork").Pool(min(workers, len(todo))) as pool:
                # Largest classes first so the slowest worker starts early.
                order = sorted(todo, key=lambda c: -_count(tracks_gt, c))
                results = pool.map(_eval_class, order, chunksize=1)
        else:
            results = [_eval_class(c) for c in todo]
    finally:
        _WORK.clear()
    merged = TrackingMetrics(cfg)
    class_time = {}
    for c, values, dt in results:
        class_time[c] = dt
        for m, v in values.items():
            merged.add_label_metric(m, c, v)
    wall = time.perf_counter() - t0
    merged.add_runtime(wall)
    per_class = {c: {m: tracking_value(m, merged.label_metrics[m][c]) for m in TRACKING_SUMMARY} for c in classes}
    for c in classes:
        per_class[c]["has_gt"] = c in gt_present
        per_class[c]["num_gt_tracks"] = _count_tracks(tracks_gt, c)
    out = {m.upper() if m in ("amota", "amotp", "mota", "motp") else m: tracking_value(m, merged.compute_metric(m))
           for m in TRACKING_SUMMARY}
    out.update({
        "IDSW": out.pop("ids"), "FRAG": out.pop("frag"),
        "per_class": per_class,
        "num_scenes": len(tracks_gt),
        "num_frames": sum(len(s) for s in tracks_gt.values()),
        "num_gt_tracks": sum(_count_tracks(tracks_gt, c) for c in classes),
        "num_thresholds": int(cfg.num_thresholds),
        "workers": int(workers),
        "eval_time_s": wall,
        "class_time_s": class_time,
        "config": TRACKING_CONFIG,
    })
    return out


def _count(tracks: Tracks, class_name: str) -> int:
    return sum(1 for s in tracks.values() for f in s.values() for b in f if b.tracking_name == class_name)


def _count_tracks(tracks: Tracks, class_name: str) -> int:
    return len({(k, b.tracking_id) for k, s in tracks.items() for f in s.values() for b in f
                if b.tracking_name == class_name})
