"""CLEAR-MOT tracking metrics (MOTA, ID switches) for validating the tracker against labelled scenes.

A thin wrapper over py-motmetrics (pinned ``motmetrics==1.4.0``, the version nuscenes-devkit's tracking
evaluation uses): one ``MOTAccumulator`` per sequence fed with centre distances, summarised by
``motmetrics.metrics.create()``. The definitions are motmetrics' (Bernardin & Stiefelhagen 2008):
  * per frame, a ground-truth object keeps last frame's hypothesis when that pair is still within
    ``max_dist_m``; the others are matched by minimum total distance among pairs within ``max_dist_m``;
  * an ID switch is a ground-truth object matched to a hypothesis other than the one it was last matched to;
  * MOTA = 1 - (misses + false positives + ID switches) / number of ground-truth boxes.
"""
from __future__ import annotations

from dataclasses import dataclass

import motmetrics as mm
import numpy as np

_SUMMARY = ("num_objects", "num_matches", "num_misses", "num_false_positives", "num_switches", "mota", "motp")


@dataclass
class MotResult:
    num_gt: int
    num_matches: int  # matched (ground truth, hypothesis) pairs, switches included (motmetrics counts those apart)
    num_misses: int
    num_false_positives: int
    num_switches: int
    mota: float
    motp_m: float  # mean centre distance of matches


def clear_mot(gt_ids: list[np.ndarray], gt_xy: list[np.ndarray], hyp_ids: list[np.ndarray], hyp_xy: list[np.ndarray],
              max_dist_m: float = 2.0) -> MotResult:
    """Per frame: ground-truth ids (G,) and xy (G,2), hypothesis ids (H,) and xy (H,2), one frame per list entry,
    in time order, all in one frame of reference (e.g. global or each frame's ego frame)."""
    if not (len(gt_ids) == len(gt_xy) == len(hyp_ids) == len(hyp_xy)):
        raise ValueError("clear_mot: the four per-frame lists must have the same length")
    acc = mm.MOTAccumulator(auto_id=True)
    # motmetrics 1.4.0 stores ids in float columns under pandas 2: give it integers, one per distinct id
    g_num: dict = {}
    h_num: dict = {}
    for g_id, g_xy, h_id, h_xy in zip(gt_ids, gt_xy, hyp_ids, hyp_xy):
        g_xy = np.asarray(g_xy, dtype=np.float64).reshape(-1, 2)
        h_xy = np.asarray(h_xy, dtype=np.float64).reshape(-1, 2)
        d = np.linalg.norm(g_xy[:, None, :] - h_xy[None, :, :], axis=-1)
        d[d > max_dist_m] = np.nan  # motmetrics: NaN = the pair may not be matched
        acc.update([g_num.setdefault(g, len(g_num)) for g in np.asarray(g_id).tolist()],
                   [h_num.setdefault(h, len(h_num)) for h in np.asarray(h_id).tolist()], d)
    s = mm.metrics.create().compute(acc, metrics=list(_SUMMARY), return_dataframe=False)
    n_gt = int(s["num_objects"])
    return MotResult(n_gt, int(s["num_matches"]) + int(s["num_switches"]), int(s["num_misses"]),
                     int(s["num_false_positives"]), int(s["num_switches"]), float(s["mota"]) if n_gt else float("nan"),
                     float(s["motp"]))
