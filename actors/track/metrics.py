"""CLEAR-MOT tracking metrics (MOTA, ID switches) for validating the tracker against labelled scenes.

py-motmetrics is the reference implementation but is not in this environment; this follows its
definition (Bernardin & Stiefelhagen 2008, as motmetrics' ``MOTAccumulator``):
  * per frame, a ground-truth object keeps last frame's hypothesis when that pair is still within
    ``max_dist_m``; the others are matched by minimum total distance (``scipy.optimize.linear_sum_assignment``)
    among pairs within ``max_dist_m``;
  * an ID switch is a ground-truth object matched to a hypothesis other than the one it was last matched to;
  * MOTA = 1 - (misses + false positives + ID switches) / number of ground-truth boxes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment


@dataclass
class MotResult:
    num_gt: int
    num_matches: int
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
    last_match: dict = {}  # gt id -> hyp id it was last matched to
    n_gt = n_match = n_fp = n_sw = 0
    dist_sum = 0.0
    for g_id, g_xy, h_id, h_xy in zip(gt_ids, gt_xy, hyp_ids, hyp_xy):
        g_id, h_id = np.asarray(g_id), np.asarray(h_id)
        g_xy, h_xy = np.asarray(g_xy, dtype=np.float64).reshape(-1, 2), np.asarray(h_xy, dtype=np.float64).reshape(-1, 2)
        n_gt += len(g_id)
        d = np.linalg.norm(g_xy[:, None, :] - h_xy[None, :, :], axis=-1) if len(g_id) and len(h_id) else np.zeros((len(g_id), len(h_id)))
        valid = d <= max_dist_m
        pairs = []
        g_free = np.ones(len(g_id), dtype=bool)
        h_free = np.ones(len(h_id), dtype=bool)
        if len(h_id):
            h_index = {h: j for j, h in enumerate(h_id.tolist())}
            for i, g in enumerate(g_id.tolist()):
                j = h_index.get(last_match.get(g, None), None)
                if j is not None and h_free[j] and valid[i, j]:
                    pairs.append((i, j))
                    g_free[i] = False
                    h_free[j] = False
        gi, hj = np.nonzero(g_free)[0], np.nonzero(h_free)[0]
        if len(gi) and len(hj):
            sub = np.where(valid[np.ix_(gi, hj)], d[np.ix_(gi, hj)], 1e9)
            r, c = linear_sum_assignment(sub)
            for a, b in zip(r, c):
                if sub[a, b] < 1e9:
                    pairs.append((gi[a], hj[b]))
        for i, j in pairs:
            g, h = g_id.tolist()[i], h_id.tolist()[j]
            if g in last_match and last_match[g] != h:
                n_sw += 1
            last_match[g] = h
            dist_sum += d[i, j]
        n_match += len(pairs)
        n_fp += len(h_id) - len(pairs)
    n_miss = n_gt - n_match
    mota = 1.0 - (n_miss + n_fp + n_sw) / n_gt if n_gt else float("nan")
    return MotResult(n_gt, n_match, n_miss, n_fp, n_sw, mota, dist_sum / n_match if n_match else float("nan"))
