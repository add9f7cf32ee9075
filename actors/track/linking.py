"""Fragment linking after tracking (DRAMA-X §3.2 and App. A.3), for 3D tracks in the global frame.

For a track ``i`` that ends before a track ``j`` of the same class starts (gap ``dt`` in seconds):

    d     = || end_xy_i + v_i * dt - start_xy_j ||      (the predicted end of i against the start of j)
    S     = (1 - d / D_max) * w_s + (1 - dt / T_max) * w_t
    S_hat = S * (0.5 + 0.5 * alpha)

* ``alpha`` (DRAMA-X: appearance similarity) is here the *size similarity* of the two fragments: the IoU
  of their mean boxes when centred and aligned, ``prod_k min(s_ik, s_jk) / max(s_ik, s_jk)`` over
  length, width and height. 1 for identical sizes, lower for e.g. a car against a van.
* ``D_max`` adapts to the gap: ``clip(gate_mps[class] * dt, min_gate_m, d_max_m)`` (how far the class
  can plausibly stray from the constant-velocity prediction during the gap); ``T_max = t_max_s``.
  Pairs with ``d >= D_max`` or ``dt > T_max`` are not candidates.
* A link is accepted when ``S_hat`` exceeds 0.2 for gaps of at most ``short_gap_frames`` (3) frames
  and 0.3 otherwise (a gap in frames = ``round(dt / frame_interval_s)``).
* Each fragment gets at most one successor and one predecessor: maximum-weight matching of S_hat
  (``scipy.optimize.linear_sum_assignment``); chains of links then share the first fragment's id.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from actors.track.kalman import gate_speeds
from schemas.config import TrackingConfig


def link_scores(end_t, end_xy, end_v, start_t, start_xy, size_i, size_j, gate_i, cfg: TrackingConfig,
                frame_interval_s: float):
    """All-pairs linking scores between fragment ends (I) and fragment starts (J).

    end_t (I,), end_xy (I,2), end_v (I,2) (NaN = 0), start_t (J,), start_xy (J,2), size_i (I,3),
    size_j (J,3) mean lwh, gate_i (I,) gate speed of i's class. Returns (S_hat (I,J), threshold (I,J),
    candidate (I,J) bool) — candidates respect the gap and distance limits only (the caller adds classes).
    """
    lk = cfg.linking
    dt = start_t[None, :] - end_t[:, None]
    v = np.nan_to_num(end_v)
    pred = end_xy[:, None, :] + v[:, None, :] * dt[..., None]
    d = np.linalg.norm(pred - start_xy[None, :, :], axis=-1)
    d_max = np.clip(gate_i[:, None] * dt, cfg.min_gate_m, lk.d_max_m)
    cand = (dt > 0) & (dt <= lk.t_max_s) & (d < d_max)
    S = (1 - d / d_max) * lk.w_spatial + (1 - dt / lk.t_max_s) * lk.w_temporal
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.minimum(size_i[:, None, :], size_j[None, :, :]) / np.maximum(size_i[:, None, :], size_j[None, :, :])
    alpha = np.nan_to_num(np.prod(ratio, axis=-1), nan=0.0)
    s_hat = S * (0.5 + 0.5 * alpha)
    gap_frames = np.rint(dt / max(frame_interval_s, 1e-6))
    thr = np.where(gap_frames <= lk.short_gap_frames, lk.threshold_short_gap, lk.threshold_long_gap)
    return s_hat, thr, cand


def link_fragments(track_id: np.ndarray, t_s: np.ndarray, xy: np.ndarray, vel: np.ndarray, size_lwh: np.ndarray,
                   cls: np.ndarray, cfg: TrackingConfig, frame_interval_s: float) -> np.ndarray:
    """Merge fragmented tracks. Per box: track_id (N,) (>= 0), t_s (N,), global xy (N,2), velocity (N,2)
    (NaN allowed), size (N,3), class index (N,). Returns (N,) track ids where linked fragments carry the
    id of the chain's first fragment."""

    tid = np.asarray(track_id, dtype=np.int64)
    if len(tid) == 0:
        return tid.copy()
    uniq, inv = np.unique(tid, return_inverse=True)
    k = len(uniq)
    if k < 2:
        return tid.copy()
    order = np.lexsort((t_s, inv))
    inv_s = inv[order]
    first = order[np.r_[0, np.nonzero(np.diff(inv_s))[0] + 1]]
    last = order[np.r_[np.nonzero(np.diff(inv_s))[0], len(order) - 1]]
    cnt = np.bincount(inv, minlength=k).astype(np.float64)
    mean_size = np.stack([np.bincount(inv, weights=size_lwh[:, a], minlength=k) for a in range(3)], axis=1) / cnt[:, None]
    t_cls = cls[first]
    gates = gate_speeds(cfg)[t_cls]
    s_hat, thr, cand = link_scores(t_s[last], xy[last], vel[last], t_s[first], xy[first], mean_size, mean_size,
                                   gates, cfg, frame_interval_s)
    ok = cand & (t_cls[:, None] == t_cls[None, :]) & (s_hat > thr)
    if not ok.any():
        return tid.copy()
    rows = np.nonzero(ok.any(axis=1))[0]
    cols = np.nonzero(ok.any(axis=0))[0]
    w = np.where(ok[np.ix_(rows, cols)], s_hat[np.ix_(rows, cols)], 0.0)
    r, c = linear_sum_assignment(w, maximize=True)
    good = w[r, c] > 0
    parent = np.arange(k)
    parent[cols[c[good]]] = rows[r[good]]
    while True:  # pointer jumping: every fragment points at the first fragment of its chain
        nxt = parent[parent]
        if np.array_equal(nxt, parent):
            break
        parent = nxt
    return uniq[parent[inv]]
