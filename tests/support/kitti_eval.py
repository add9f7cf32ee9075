"""The KITTI 3D MOT evaluation of the AB3DMOT paper (Weng et al., IROS 2020), written here from the rules of its
released evaluator (``scripts/KITTI/evaluate.py``: KITTI's CLEAR MOT devkit with 3D IoU), for tracking benches;
and HOTA (Luiten et al., IJCV 2021) on the same boxes.

Per class (Car, Pedestrian, Cyclist), over all sequences together:

* ground truth of the class and of its *neighbour* class (Van for Car, Person_sitting for Pedestrian), and DontCare
  areas; rows with track id -1 other than DontCare are dropped. A ground-truth box is *ignored* when it is of the
  neighbour class, truncated (truncation > 0) or of unknown occlusion (> 2): matched, it is neither a true positive
  nor a false positive; unmatched, not a miss;
* each frame, ground truth and the tracker's boxes are matched by the Hungarian method on ``1 - IoU3D``, pairs
  below IoU 0.25 forbidden. An unmatched tracker box is ignored (not a false positive) when its 2D box is at most
  25 px high or lies more than half inside a DontCare area;
* ID switches along each ground-truth trajectory (the frames it is annotated in, in order): a frame tracked with
  another id than the frame before it, both frames tracked and not ignored (the frame before may be the
  trajectory's first, ignored or not). AB3DMOT's evaluator adds "the frame before was tracked" to KITTI's rule,
  so a new id after a miss is no switch;
* MOTA = 1 - (FN + FP + IDS) / GT (GT without ignored boxes); recall = TP / (TP + FN) with the ignored true
  positives in TP;
* scores: every box of a track takes the track's mean score, and a threshold drops whole tracks. From the true
  positives' scores (all tracks kept), sorted, the thresholds whose recall is nearest to r = 1/40, 2/40, ... are
  taken (as far as the tracker's recall reaches); at each, sMOTA_r = clip(1 - (FN + FP + IDS - (1 - r) GT) /
  (r GT), 0, 1); sAMOTA and AMOTA are the sums of sMOTA_r and MOTA_r over these thresholds divided by 40 (recall
  points never reached count 0). The MOTA and IDS reported are those at the threshold with the best MOTA.

HOTA: per sequence, the boxes the CLEAR evaluation ignores are removed first (ignored ground truth with the tracker
box matched to it, ignored tracker boxes), every remaining pair's 3D IoU is the similarity, and HOTA is computed over
all of the tracker's boxes (no score threshold) as ``trackeval.metrics.HOTA`` computes it (``hota_sequence``,
``hota_combined``; written here: trackeval 1.3.0 requires numpy >= 2.3 on Python 3.11, and drivegen keeps numpy
1.26.4; tests/actors/test_track_kitti.py compares the two where trackeval is importable).

The Hungarian method is ``scipy.optimize.linear_sum_assignment`` on the same cost matrix as the released
evaluator's Munkres (equal optima; among equal-cost assignments either may pick another).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import shapely
from scipy.optimize import linear_sum_assignment

from generator.geometry import box_corners
from support.kitti import Annotations, Results

MIN_IOU = 0.25
MIN_HEIGHT_PX = 25.0
MAX_TRUNCATION, MAX_OCCLUSION = 0, 2
RECALL_POINTS = 40
_NEIGHBOUR = {"car": "van", "pedestrian": "person_sitting", "cyclist": None}


def iou3d_pairs(c1, s1, y1, c2, s2, y2) -> np.ndarray:
    """3D IoU of paired yaw-only boxes (centre (P, 3), size lwh (P, 3), yaw (P,) each; z up) -> (P,)."""
    if not len(c1):
        return np.zeros(0)
    p1 = shapely.polygons(box_corners(c1, s1, y1)[:, :4, :2])
    p2 = shapely.polygons(box_corners(c2, s2, y2)[:, :4, :2])
    inter = shapely.area(shapely.intersection(p1, p2))
    dz = np.clip(np.minimum(c1[:, 2] + s1[:, 2] / 2, c2[:, 2] + s2[:, 2] / 2)
                 - np.maximum(c1[:, 2] - s1[:, 2] / 2, c2[:, 2] - s2[:, 2] / 2), 0, None)
    vi = inter * dz
    return vi / (np.prod(s1, axis=1) + np.prod(s2, axis=1) - vi)


def _frame_pairs(frame_a: np.ndarray, frame_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (a, b) row pairs of equal frame (rows of each sorted by frame)."""
    ia, ib = [], []
    order_b = np.argsort(frame_b, kind="stable")
    fb = frame_b[order_b]
    lo, hi = np.searchsorted(fb, frame_a, "left"), np.searchsorted(fb, frame_a, "right")
    n = hi - lo
    ia = np.repeat(np.arange(len(frame_a)), n)
    ib = order_b[np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])] if n.sum() else np.zeros(0, np.int64)
    return ia, ib.astype(np.int64)


def _overlapping(g_center, g_size, t_center, t_size, gi, ti):
    """The pairs whose BEV circumcircles overlap (the only ones with IoU > 0)."""
    r = lambda s: np.hypot(s[:, 0], s[:, 1]) / 2  # noqa: E731
    d = np.hypot(*(g_center[gi, :2] - t_center[ti, :2]).T)
    return d < r(g_size)[gi] + r(t_size)[ti]


@dataclass
class _Prepared:
    """One class over all sequences: ground-truth rows (frames numbered uniquely over the sequences), tracker
    rows, the pairs that may match (IoU >= 0.25) with their cost, and the static ignore flags."""

    g_frame: np.ndarray
    g_track: np.ndarray  # unique over sequences
    g_ignored: np.ndarray
    t_frame: np.ndarray
    t_track: np.ndarray  # unique over sequences
    t_score: np.ndarray  # the track's mean score
    t_ignorable: np.ndarray  # ignored if unmatched: <= 25 px high or inside DontCare
    pg: np.ndarray
    pt: np.ndarray
    cost: np.ndarray
    n_frames: int


def _area(b):
    return np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)


def _prepare(pairs: list[tuple[Annotations, Results]], cls: str) -> tuple[_Prepared, list]:
    kinds = {cls} | ({_NEIGHBOUR[cls]} if _NEIGHBOUR[cls] else set())
    acc = {k: [] for k in ("gf", "gt", "gi", "tf", "tt", "ts", "ti", "pg", "pt", "cost")}
    per_seq = []
    f_off, g_off, t_off, g_id_off, t_id_off = 0, 0, 0, 0, 0
    for lab, res in pairs:
        g = np.flatnonzero(np.isin(lab.kind, list(kinds)) & (lab.track >= 0))
        dc = np.flatnonzero(lab.kind == "dontcare")
        t = np.flatnonzero(res.kind == cls)
        g_ign = ((lab.kind[g] == _NEIGHBOUR[cls]) | (lab.truncation[g] > MAX_TRUNCATION)
                 | (lab.occlusion[g] > MAX_OCCLUSION))
        b2 = res.box2d[t]
        small = (b2[:, 3] - b2[:, 1]) <= MIN_HEIGHT_PX
        in_dc = np.zeros(len(t), dtype=bool)
        ti_, di_ = _frame_pairs(res.frame[t], lab.frame[dc])
        if len(ti_):
            a, d = b2[ti_], lab.box2d[dc[di_]]
            inter = _area(np.column_stack([np.maximum(a[:, 0], d[:, 0]), np.maximum(a[:, 1], d[:, 1]),
                                           np.minimum(a[:, 2], d[:, 2]), np.minimum(a[:, 3], d[:, 3])]))
            w, h = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
            inside = (inter > 0) & (inter / np.where((w > 0) & (h > 0), w * h, np.inf) > 0.5)
            in_dc[np.unique(ti_[inside])] = True
        gi, ti = _frame_pairs(lab.frame[g], res.frame[t])
        keep = _overlapping(lab.center[g], lab.size[g], res.center[t], res.size[t], gi, ti)
        gi, ti = gi[keep], ti[keep]
        iou = iou3d_pairs(lab.center[g][gi], lab.size[g][gi], lab.yaw[g][gi], res.center[t][ti], res.size[t][ti],
                          res.yaw[t][ti])
        per_seq.append((lab, res, g, t, g_ign, small | in_dc, gi, ti, iou))
        ok = iou >= MIN_IOU
        _, t_inv = np.unique(res.track[t], return_inverse=True)
        mean = (np.bincount(t_inv, weights=res.score[t]) / np.bincount(t_inv))[t_inv] if len(t) else np.zeros(0)
        _, g_inv = np.unique(lab.track[g], return_inverse=True)
        acc["gf"].append(lab.frame[g] + f_off)
        acc["gt"].append(g_inv + g_id_off)
        acc["gi"].append(g_ign)
        acc["tf"].append(res.frame[t] + f_off)
        acc["tt"].append(t_inv + t_id_off)
        acc["ts"].append(mean)
        acc["ti"].append(small | in_dc)
        acc["pg"].append(gi[ok] + g_off)
        acc["pt"].append(ti[ok] + t_off)
        acc["cost"].append(1.0 - iou[ok])
        n_frames = int(max(lab.frame.max(initial=-1), res.frame.max(initial=-1))) + 1
        f_off += n_frames
        g_off += len(g)
        t_off += len(t)
        g_id_off += int(g_inv.max(initial=-1)) + 1
        t_id_off += int(t_inv.max(initial=-1)) + 1
    cat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in acc.items()}
    prep = _Prepared(cat["gf"].astype(np.int64), cat["gt"].astype(np.int64), cat["gi"].astype(bool),
                     cat["tf"].astype(np.int64), cat["tt"].astype(np.int64), cat["ts"], cat["ti"].astype(bool),
                     cat["pg"].astype(np.int64), cat["pt"].astype(np.int64), cat["cost"], f_off)
    return prep, per_seq


def _assign(pg: np.ndarray, pt: np.ndarray, cost: np.ndarray, frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per frame, the Hungarian assignment over the allowed pairs (pg, pt, cost; ``frame`` of each pair): the most
    pairs, then the least total cost. Pairs without a conflict (their gt and tracker box in no other pair) are
    matched directly; only frames with conflicts are solved."""
    if not len(pg):
        return pg, pt
    ng = np.bincount(pg)[pg]
    nt = np.bincount(pt)[pt]
    free = (ng == 1) & (nt == 1)
    out_g, out_t = [pg[free]], [pt[free]]
    busy = np.flatnonzero(~free)
    if len(busy):
        fb = frame[busy]
        order = busy[np.argsort(fb, kind="stable")]
        bounds = np.flatnonzero(np.diff(frame[order])) + 1
        for idx in np.split(order, bounds):
            rows, r = np.unique(pg[idx], return_inverse=True)
            cols, c = np.unique(pt[idx], return_inverse=True)
            m = np.full((len(rows), len(cols)), 1e9)
            m[r, c] = cost[idx]
            a, b = linear_sum_assignment(m)
            ok = m[a, b] < 1e9
            out_g.append(rows[a[ok]])
            out_t.append(cols[b[ok]])
    return np.concatenate(out_g), np.concatenate(out_t)


@dataclass
class Clear:
    """CLEAR figures at one score threshold."""

    tp: int  # with the ignored true positives (the evaluator's recall counts them)
    fn: int
    fp: int
    ids: int
    n_gt: int
    mota: float
    recall: float
    tp_scores: np.ndarray


def _clear(p: _Prepared, threshold: float = -np.inf) -> Clear:
    active = p.t_score >= threshold
    sel = active[p.pt]
    mg, mt = _assign(p.pg[sel], p.pt[sel], p.cost[sel], p.g_frame[p.pg[sel]])
    g_match = np.full(len(p.g_frame), -1, dtype=np.int64)
    g_match[mg] = p.t_track[mt]
    t_matched = np.zeros(len(p.t_frame), dtype=bool)
    t_matched[mt] = True
    tp = len(mg)
    ign_tp = int(p.g_ignored[mg].sum())
    fn = int((~p.g_ignored & (g_match < 0)).sum())
    ign_fn = int((p.g_ignored & (g_match < 0)).sum())
    fp = int((active & ~t_matched & ~p.t_ignorable).sum())
    n_gt = len(p.g_frame) - ign_fn - ign_tp
    # ID switches along each ground-truth trajectory (rows in frame order)
    o = np.lexsort((p.g_frame, p.g_track))
    g, ign, trk = g_match[o], p.g_ignored[o], p.g_track[o]
    same = np.r_[False, trk[1:] == trk[:-1]]
    first_prev = np.r_[False, ~same[:-1]] & same  # the row before is the trajectory's first
    prev_ok = np.r_[False, ~ign[:-1]] | first_prev
    sw = same & (g >= 0) & (np.r_[-1, g[:-1]] >= 0) & (g != np.r_[-1, g[:-1]]) & ~ign & prev_ok
    ids = int(sw.sum())
    mota = 1 - (fn + fp + ids) / n_gt if n_gt else -np.inf
    recall = tp / (tp + fn) if tp + fn else 0.0
    return Clear(tp, fn, fp, ids, n_gt, mota, recall, p.t_score[mt])


def recall_thresholds(scores: np.ndarray, num_gt: int, points: int = RECALL_POINTS) -> tuple[list, list]:
    """The released evaluator's ``getThresholds``: scores (descending) whose recall is nearest to each r in 0, 1/40,
    2/40, ..., the first (r = 0) left out."""
    s = np.sort(np.asarray(scores, dtype=np.float64))[::-1]
    current, thresholds, recalls = 0.0, [], []
    for i, score in enumerate(s):
        left = (i + 1) / num_gt
        right = (i + 2) / num_gt if i < len(s) - 1 else left
        if (right - current) < (current - left) and i < len(s) - 1:
            continue
        thresholds.append(float(score))
        recalls.append(current)
        current += 1 / points
    return thresholds[1:], recalls[1:]


def evaluate_class(pairs: list[tuple[Annotations, Results]], cls: str, hota: bool = True) -> dict:
    """sAMOTA, AMOTA, MOTA, IDS (at the best-MOTA threshold), FP, FN, recall and (``hota``) HOTA, DetA, AssA of
    the KITTI class ``cls`` ('car', 'pedestrian', 'cyclist') over the (labels, results) of each sequence; figures
    as fractions."""
    p, per_seq = _prepare(pairs, cls)
    full = _clear(p)
    thresholds, recalls = recall_thresholds(full.tp_scores, full.tp + full.fn)
    s_sum, m_sum, best, best_thr = 0.0, 0.0, 0.0, -np.inf
    for thr, r in zip(thresholds, recalls):
        c = _clear(p, thr)
        s_sum += min(1.0, max(0.0, 1 - (c.fn + c.fp + c.ids - (1 - r) * c.n_gt) / (r * c.n_gt)))
        m_sum += c.mota
        if c.mota > best:
            best, best_thr = c.mota, thr
    at_best = _clear(p, best_thr)
    out = {"sAMOTA": s_sum / RECALL_POINTS, "AMOTA": m_sum / RECALL_POINTS, "MOTA": at_best.mota,
           "IDS": at_best.ids, "FP": at_best.fp, "FN": at_best.fn, "recall": full.recall, "gt": full.n_gt}
    if hota:
        out.update(_hota(per_seq))
    return out


ALPHAS = np.arange(0.05, 0.99, 0.05)  # HOTA's localisation thresholds


def hota_sequence(gt_ids: list, tr_ids: list, sims: list) -> dict:
    """HOTA's sums over one sequence (Luiten et al. 2021, as ``trackeval.metrics.HOTA.eval_sequence`` computes
    them): per frame ground-truth ids, tracker ids (0-based) and their similarity matrix. Returns TP, FN, FP per
    alpha and the association sum (the matched pairs' association accuracy, summed)."""
    n_g = 1 + max((int(g.max()) for g in gt_ids if len(g)), default=-1)
    n_t = 1 + max((int(t.max()) for t in tr_ids if len(t)), default=-1)
    out = {"TP": np.zeros(len(ALPHAS)), "FN": np.zeros(len(ALPHAS)), "FP": np.zeros(len(ALPHAS)),
           "AssA_sum": np.zeros(len(ALPHAS))}
    potential = np.zeros((n_g, n_t))
    g_count, t_count = np.zeros((n_g, 1)), np.zeros((1, n_t))
    for g, t, sim in zip(gt_ids, tr_ids, sims):
        if len(g) and len(t):
            denom = sim.sum(0)[None] + sim.sum(1)[:, None] - sim
            potential[g[:, None], t[None]] += np.divide(sim, denom, out=np.zeros_like(sim), where=denom > 1e-10)
        g_count[g] += 1
        t_count[0, t] += 1
    alignment = potential / (g_count + t_count - potential + 1e-300)
    matches = np.zeros((len(ALPHAS), n_g, n_t))
    for g, t, sim in zip(gt_ids, tr_ids, sims):
        if not len(g) or not len(t):
            out["FN"] += len(g)
            out["FP"] += len(t)
            continue
        a, b = linear_sum_assignment(-(alignment[g[:, None], t[None]] * sim))
        for k, alpha in enumerate(ALPHAS):
            ok = sim[a, b] >= alpha - np.finfo(float).eps
            m = int(ok.sum())
            out["TP"][k] += m
            out["FN"][k] += len(g) - m
            out["FP"][k] += len(t) - m
            matches[k, g[a[ok]], t[b[ok]]] += 1
    for k in range(len(ALPHAS)):
        ass = matches[k] / np.maximum(1, g_count + t_count - matches[k])
        out["AssA_sum"][k] = (matches[k] * ass).sum()
    return out


def hota_combined(parts: list[dict]) -> dict:
    """HOTA, DetA, AssA (means over the alphas) of sequences' ``hota_sequence`` sums taken together."""
    tp, fn, fp = (sum(p[k] for p in parts) for k in ("TP", "FN", "FP"))
    ass = sum(p["AssA_sum"] for p in parts) / np.maximum(1, tp)
    det = tp / np.maximum(1, tp + fn + fp)
    return {"HOTA": float(np.mean(np.sqrt(det * ass))), "DetA": float(np.mean(det)), "AssA": float(np.mean(ass))}


def _hota(per_seq) -> dict:
    """HOTA over the sequences, on the boxes the CLEAR evaluation counts (all scores)."""
    parts = []
    for lab, r, g, t, g_ign, t_ignorable, gi, ti, iou in per_seq:
        ok = iou >= MIN_IOU
        n_frames = int(max(lab.frame.max(initial=-1), r.frame.max(initial=-1))) + 1
        mg, mt = _assign(gi[ok], ti[ok], 1 - iou[ok], lab.frame[g][gi[ok]])
        t_matched = np.zeros(len(t), dtype=bool)
        t_matched[mt] = True
        drop_t = t_ignorable & ~t_matched
        drop_t[mt[g_ign[mg]]] = True  # matched to ignored ground truth: neither TP nor FP
        keep_g, keep_t = np.flatnonzero(~g_ign), np.flatnonzero(~drop_t)
        g_ids = np.unique(lab.track[g][keep_g], return_inverse=True)[1]
        t_ids = np.unique(r.track[t][keep_t], return_inverse=True)[1]
        g_pos = np.full(len(g), -1)
        g_pos[keep_g] = np.arange(len(keep_g))
        t_pos = np.full(len(t), -1)
        t_pos[keep_t] = np.arange(len(keep_t))
        gf, tf = lab.frame[g][keep_g], r.frame[t][keep_t]
        valid = (g_pos[gi] >= 0) & (t_pos[ti] >= 0)
        pgi, pti, piou = g_pos[gi[valid]], t_pos[ti[valid]], iou[valid]
        pf = gf[pgi]
        gids, tids, sims = [], [], []
        for f in range(n_frames):
            gs, ts = np.flatnonzero(gf == f), np.flatnonzero(tf == f)
            sim = np.zeros((len(gs), len(ts)))
            here = pf == f
            if here.any():
                sim[np.searchsorted(gs, pgi[here]), np.searchsorted(ts, pti[here])] = piou[here]
            gids.append(g_ids[gs])
            tids.append(t_ids[ts])
            sims.append(sim)
        parts.append(hota_sequence(gids, tids, sims))
    return hota_combined(parts)
