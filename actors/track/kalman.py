"""The default online tracker: a constant-velocity Kalman filter per track, two-stage association, confirmation
and coasting. Pure core ``kalman_tracking(t_s, frame_start, boxes..., cfg) -> KalmanTracks`` over one scene's
boxes in a common (global) frame; ``actors.track.pubtracker.track_scene`` moves boxes to that frame, turns the
result into boxes and runs fragment linking, velocities and headings after it.

State of a track (all times in seconds, all noises per second, so 2 Hz and 10 Hz logs behave alike):
  * centre ``(x, y)`` and velocity ``(vx, vy)`` under a constant-velocity model with white-noise acceleration
    of power spectral density ``q`` (m^2/s^3, per class). The noises are isotropic, so the x and y axes are
    two independent filters with one shared 2x2 covariance ``[[Ppp, Ppv], [Ppv, Pvv]]``: predicting by ``dt``
    adds ``q [[dt^3/3, dt^2/2], [dt^2/2, dt]]``;
  * the measurement is the detected centre, std ``sqrt(position_std_m^2 + (position_std_size_frac * d)^2)``
    with ``d`` the box's BEV diagonal, and the detector's velocity where it gives one (std
    ``velocity_std_mps``). A track is born at its first detection with the detector's velocity, or zero
    velocity whose std lets the ``gate_chi2`` gate of its second detection just hold the class's plausible
    speed (``max_speed_mps``; at most ``birth_velocity_std_mps``, which alone applies where the frame moves
    with the ego): the gate grows with the time to the second detection and the class's speed;
  * log size (l, w, h) and yaw as random walks (scalar filters); the yaw innovation is taken modulo pi
    (L-shape fits know the box axis only); ``z`` is the last detection's.

Each frame (time order): every live track is predicted to the frame's time. Detections with score
``>= high_score`` are assigned to the live tracks of their class by minimum total cost (Hungarian,
``scipy.optimize.linear_sum_assignment``), first to the tracks matched in the previous frame, then what is
left to the tracks that are coasting (so a track that keeps missing never takes the detection of one that
does not, DeepSORT's cascade in two levels). The cost of a pair is the negative log-likelihood of the centre
innovation ``d^2 / S + 2 ln S`` with ``S = Ppp + r`` (track + detection variance: a distance normalised by
box size and state uncertainty), allowed only where ``d^2 / S <= gate_chi2``. The state's uncertainty grows
with every miss (after 1.5 s a static cone's gate spans metres), so where the frame is the ground (the
log's poses move) a coasting track also needs the detection within ``clip(gates_mps[class] x gap,
min_gate_m, linking.d_max_m)`` of its prediction (the limit of fragment linking) plus what the detection's
noise allows: two static cones 3 m apart, one vanishing as the other appears, stay two tracks. Then the lower-scored
detections are assigned the same way to the confirmed tracks left unmatched (ByteTrack's second stage).
Matched tracks are updated; unmatched high-score detections start tentative tracks; unmatched low-score
detections are dropped. A tentative track becomes confirmed at ``confirm_hits`` matches (all its boxes are
output, the early ones included) and is deleted, with its boxes, when unmatched for longer than
``tentative_max_age_s`` in a frame with detections of its class, or for longer than ``tentative_max_miss_s`` in
any frame (per-class management: another class's detections say nothing about it), counting only frames the
detector saw (``looked``: not a frame whose input could not be read); tentative tracks alive at the scene's end
are kept.
Boxes without a finite centre, size or yaw are output as one-box tracks and never matched. A confirmed track
is deleted when unmatched for longer than ``max_age_s``. While it coasts, boxes are output for misses up to
``coast_output_s``: when a later match bridges the gap, on the cubic Hermite path between the filtered
states (centre, velocity) at the gap's two ends (the constant-velocity model's smoothed path); after its last
match, for up to ``coast_trailing_s``, its prediction. Their score is the last matched score halved every
``coast_score_half_life_s`` since that match.

The per-frame work is a fixed number of numpy operations on the (tracks, columns) state matrix, whatever the
number of boxes: predicting is one matrix product, births copy rows prepared for all boxes at once.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from schemas.config import DETECTION_CLASSES, TrackingConfig

# Columns of the state matrix (one row per live track).
X, Y, VX, VY, PPP, PPV, PVV, PS, PY, Q, ONE = range(11)  # PPP..ONE: the columns the prediction step mixes
LS = slice(11, 14)  # log length, width, height
Z, YAW, YAW_DET, SCORE, T_MATCH, HITS, TID, CLS, BIRTH, LANE, STRAY = range(14, 25)
NCOL = 25  # CLS: the lane and class (kalman_lanes); STRAY: the class's gates_mps (how far a coasting track strays)
_NO_VELOCITY_VAR = 1e12  # variance of an absent velocity measurement: its Kalman gain is 0 to ~1e-12
_BIG = 1e9  # cost of a forbidden pair in the assignment


@dataclass
class KalmanTracks:
    """Result over the N input boxes of a scene. ``track_of_box`` (N,) raw track id, -1 for a box that is not
    output (unconfirmed track, or a low-score detection no track took). Coasted boxes (M of them, global frame):
    ``coast_frame`` (M,) frame index, ``coast_track`` (M,) raw track id, ``coast_xy`` (M, 2), ``coast_z`` (M,),
    ``coast_size`` (M, 3) lwh, ``coast_yaw`` (M,), ``coast_score`` (M,), ``coast_birth`` (M,) index of the box
    that started the track (its class is the track's)."""

    track_of_box: np.ndarray
    coast_frame: np.ndarray
    coast_track: np.ndarray
    coast_xy: np.ndarray
    coast_z: np.ndarray
    coast_size: np.ndarray
    coast_yaw: np.ndarray
    coast_score: np.ndarray
    coast_birth: np.ndarray


def class_table(values: dict[str, float]) -> np.ndarray:
    """(len(DETECTION_CLASSES) + 1,) per class index; the last entry (index -1, unknown classes) is the largest."""
    return np.array([values.get(c, 0.0) for c in DETECTION_CLASSES] + [max(values.values(), default=0.0)])


def gate_speeds(cfg: TrackingConfig, table: str = "gates_mps") -> np.ndarray:
    """(len(DETECTION_CLASSES) + 1,) gate speed per class index from ``cfg.<table>``; the last entry
    (index -1) is for unknown classes (the largest gate)."""
    return class_table(getattr(cfg, table))


def _wrap_half_pi(a: np.ndarray) -> np.ndarray:
    """Angles modulo pi, into [-pi/2, pi/2)."""
    return np.mod(a + np.pi / 2, np.pi) - np.pi / 2


def _transition(dt: float, size_q: float, yaw_q: float) -> np.ndarray:
    """(ONE + 1, PY + 1) matrix A with ``state[:, :PY+1] = state[:, :ONE+1] @ A`` = the prediction by dt."""
    A = np.zeros((ONE + 1, PY + 1))
    for c in (X, Y, VX, VY, PPP, PPV, PVV, PS, PY):
        A[c, c] = 1.0
    A[VX, X] = A[VY, Y] = dt  # x += vx dt
    A[PPV, PPP], A[PVV, PPP], A[Q, PPP] = 2 * dt, dt * dt, dt ** 3 / 3  # F P F^T + Q, isotropic
    A[PVV, PPV], A[Q, PPV] = dt, dt * dt / 2
    A[Q, PVV] = dt
    A[ONE, PS], A[ONE, PY] = size_q * dt, yaw_q * dt
    return A


def _cached_transition(cache: dict, dt_ns: int, size_q: float, yaw_q: float) -> np.ndarray:
    """``_transition`` over ``dt_ns`` nanoseconds, kept in ``cache`` (a log keeps a fixed rate: few distinct
    steps)."""
    A = cache.get(dt_ns)
    if A is None:
        A = cache[dt_ns] = _transition(dt_ns * 1e-9, size_q, yaw_q)
    return A


_DENSE_PAIRS = 1 << 20  # detections x tracks evaluated as dense arrays; a larger frame asks a KD-tree for candidates
_NEAREST = 16  # in a crowded frame, the tracks each detection is tested against: its nearest within the gate
_MAX_BLOCK = 1 << 22  # cells of one component's dense Hungarian block (32 MiB of costs); a larger one goes sparse
_ONE_BLOCK = 1 << 14  # a frame's conflicts up to this many cells: one dense block, no split into components


def _pairs(dets: np.ndarray, tracks: np.ndarray, meas: np.ndarray, cls: np.ndarray, state: np.ndarray, gate: float,
           reach_m: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The allowed (detection position, track position, cost) triples of ``_assign`` (positions into ``dets`` and
    ``tracks``). Up to ``_DENSE_PAIRS`` pairs every pair is tested, exactly as one dense problem. Above, in a
    crowded frame (100,000 pedestrians would need 74.5 GiB of dense arrays, and a new track's gate, widened by its
    unknown velocity, spans about 15 m: hundreds of tracks per detection), each detection is tested against its
    ``_NEAREST`` nearest tracks (a KD-tree) within the largest distance the gate allows, ``sqrt(gate (max Ppp +
    max r))``, a million pairs at a time: memory grows with the detections, and the assignment may differ from the
    exact one where the cheapest track of a detection is not among its nearest (a deviation only in such crowds)."""
    st = state[tracks][:, [X, Y, PPP, CLS]]  # (T, 4)
    md = meas[dets, :3]  # (D, 3): x, y, r
    dcls = cls[dets]
    if len(dets) * len(tracks) <= _DENSE_PAIRS:  # every pair, as (D, T) arrays
        m, s, ok = _tested(md[:, None], dcls[:, None], st[None], gate, None if reach_m is None else reach_m[None])
        di, ti = np.nonzero(ok)
        return di, ti, m[di, ti] + 2 * np.log(s[di, ti])
    from scipy.spatial import cKDTree  # here: only crowded frames need it

    radius = np.sqrt(gate * (st[:, 2].max() + md[:, 2].max()))
    if reach_m is not None:
        radius = min(radius, reach_m.max() + np.sqrt(gate * md[:, 2].max()))
    k = min(_NEAREST, len(tracks))
    _, near = cKDTree(st[:, :2]).query(md[:, :2], k=k, distance_upper_bound=radius * (1 + 1e-9))
    near = near.reshape(len(dets), k)
    found = near < len(tracks)  # a missing neighbour is reported as index T
    di_all = np.repeat(np.arange(len(dets)), found.sum(axis=1))
    ti_all = near[found].astype(np.int64)
    step = 1 << 20  # pairs tested at a time
    out_d, out_t, out_c = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0)]
    for i in range(0, len(di_all), step):
        di, ti = di_all[i:i + step], ti_all[i:i + step]
        m, s, ok = _tested(md[di], dcls[di], st[ti], gate, None if reach_m is None else reach_m[ti])
        out_d.append(di[ok])
        out_t.append(ti[ok])
        out_c.append((m + 2 * np.log(s))[ok])
    return np.concatenate(out_d), np.concatenate(out_t), np.concatenate(out_c)


def _tested(md: np.ndarray, dcls: np.ndarray, st: np.ndarray, gate: float, reach_m: np.ndarray | None):
    """Pairs of detections (``md`` [..., x, y, r], classes ``dcls``) and tracks (``st`` [..., x, y, Ppp, class],
    ``reach_m``), broadcast against each other: (squared Mahalanobis distance m, innovation variance s, allowed)."""
    dx, dy = md[..., 0] - st[..., 0], md[..., 1] - st[..., 1]
    d2, s = dx * dx + dy * dy, st[..., 2] + md[..., 2]
    m = d2 / s
    ok = (m <= gate) & (dcls == st[..., 3])
    if reach_m is not None:
        ok &= d2 <= (reach_m + np.sqrt(gate * md[..., 2])) ** 2
    return m, s, ok


def _match(di: np.ndarray, ti: np.ndarray, cost: np.ndarray, n_tracks: int) -> tuple[np.ndarray, np.ndarray]:
    """Minimum-cost assignment over the allowed pairs (at most one pair per detection and per track, as many
    pairs as can be, then the least total cost): each connected group of detections and tracks that share
    allowed pairs is one problem, solved by ``linear_sum_assignment`` on its dense block (forbidden cells at
    ``_BIG``), or, for a block of more than ``_MAX_BLOCK`` cells (a crowd), by
    ``scipy.sparse.csgraph.min_weight_full_bipartite_matching`` on its pairs alone (``_sparse_match``)."""
    rows, r = _labels(di)
    cols, k = _labels(ti)
    if len(rows) == len(di) and len(cols) == len(ti):
        return di, ti  # no conflicts: every allowed pair is the assignment
    if len(rows) * len(cols) <= _ONE_BLOCK:
        # A frame of a usual size: one dense problem. Its forbidden cells cost more than any allowed assignment,
        # so it makes as many allowed pairs as each group can, at each group's least cost: the groups' optimum.
        return _dense(rows, r, cols, k, cost)
    from scipy.sparse import coo_matrix  # scipy: over a second to import; only where this runs
    from scipy.sparse.csgraph import connected_components

    n_det = int(di.max()) + 1
    graph = coo_matrix((np.ones(len(di)), (di, n_det + ti)), shape=(n_det + n_tracks,) * 2)
    _, label = connected_components(graph, directed=False)
    comp = label[di]
    order = np.argsort(comp, kind="stable")
    bounds = np.flatnonzero(np.diff(comp[order])) + 1
    out_d, out_t = [], []
    for idx in np.split(order, bounds):
        d, t, c = di[idx], ti[idx], cost[idx]
        if len(idx) == 1:
            out_d.append(d)
            out_t.append(t)
            continue
        rows, r = np.unique(d, return_inverse=True)
        cols, k = np.unique(t, return_inverse=True)
        if len(rows) * len(cols) <= _MAX_BLOCK:
            a, b = _dense(rows, r, cols, k, c)
        else:
            a, b = _sparse_match(r, k, c, len(rows), len(cols))
            a, b = rows[a], cols[b]
        out_d.append(a)
        out_t.append(b)
    return np.concatenate(out_d), np.concatenate(out_t)


def _labels(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(idx, return_inverse=True)`` for small non-negative indices (a frame's detections or tracks), by a
    table instead of a sort: this runs for every conflicting assignment."""
    seen = np.zeros(int(idx.max()) + 1, dtype=bool)
    seen[idx] = True
    vals = seen.nonzero()[0]
    rank = np.empty(len(seen), dtype=np.intp)
    rank[vals] = np.arange(len(vals))
    return vals, rank[idx]


def _dense(rows: np.ndarray, r: np.ndarray, cols: np.ndarray, k: np.ndarray, c: np.ndarray):
    """``linear_sum_assignment`` on the dense block of pairs (r, k) with costs c, forbidden cells at ``_BIG``: the
    (row, column) labels of the allowed pairs it makes."""
    block = np.full((len(rows), len(cols)), _BIG)
    block[r, k] = c
    a, b = linear_sum_assignment(block)
    good = block[a, b] < _BIG
    return rows[a[good]], cols[b[good]]


def _sparse_match(r: np.ndarray, k: np.ndarray, c: np.ndarray, n_r: int, n_c: int) -> tuple[np.ndarray, np.ndarray]:
    """The same optimum as the dense block, from the pairs alone: every row and column gets a dummy partner at a
    cost above any matching's total (so as many real pairs as possible are made first), and each real pair its
    mirror between the dummies, which makes a full matching exist. The costs are shifted to >= 1 (a
    maximum matching has a fixed number of pairs: the shift does not change which is cheapest)."""
    from scipy.sparse import csr_matrix  # scipy: over a second to import; only where this runs
    from scipy.sparse.csgraph import min_weight_full_bipartite_matching

    w = c - c.min() + 1.0
    unmatched = w.sum() + 1.0
    rows = np.concatenate([r, np.arange(n_r), n_r + np.arange(n_c), n_r + k])
    cols = np.concatenate([k, n_c + np.arange(n_r), np.arange(n_c), n_c + r])
    cost = np.concatenate([w, np.full(n_r + n_c, unmatched), np.ones(len(r))])
    a, b = min_weight_full_bipartite_matching(csr_matrix((cost, (rows, cols)), shape=(n_r + n_c,) * 2))
    real = (a < n_r) & (b < n_c)
    return a[real], b[real]


def _assign(dets: np.ndarray, tracks: np.ndarray, meas: np.ndarray, cls: np.ndarray, state: np.ndarray,
            gate: float, reach_m: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Detections ``dets`` (D,) (indices into meas (N, 10) and cls (N,)) against live tracks ``tracks`` (T,) (rows
    of state (L, NCOL)). Returns (detection indices (K,), track rows (K,)) of the minimum-cost assignment among
    allowed pairs (same class, squared Mahalanobis distance within ``gate``, and, where ``reach_m`` (T,) is given,
    the centre within that reach of the track's prediction plus what the detection's own noise allows,
    ``sqrt(gate r)``). Memory and time grow with the allowed pairs, not with D x T (``_pairs``, ``_match``)."""
    if len(dets) == 0 or len(tracks) == 0:
        return dets[:0], tracks[:0]
    di, ti, cost = _pairs(dets, tracks, meas, cls, state, gate, reach_m)
    if len(di) == 0:
        return dets[:0], tracks[:0]
    a, b = _match(di, ti, cost, len(tracks))
    o = np.argsort(a, kind="stable")  # by detection, as the updates and gaps are recorded
    return dets[a[o]], tracks[b[o]]


def _measurements(xy, vel, size, yaw, cfg) -> np.ndarray:
    """Per box, what an update reads: (N, 10) [x, y, r, vx, vy, rv, log l, log w, log h, yaw] with r the centre
    variance and rv the velocity variance (huge where the detector gives none, velocity then 0)."""
    k = cfg.kalman
    has_v = np.isfinite(vel).all(axis=1)
    diag2 = size[:, 0] ** 2 + size[:, 1] ** 2
    out = np.empty((len(xy), 10))
    out[:, 0:2] = xy
    out[:, 2] = k.position_std_m ** 2 + k.position_std_size_frac ** 2 * diag2
    out[:, 3:5] = np.where(has_v[:, None], vel, 0.0)
    out[:, 5] = np.where(has_v, k.velocity_std_mps ** 2, _NO_VELOCITY_VAR)
    out[:, 6:9] = np.log(np.maximum(size, 1e-3))
    out[:, 9] = yaw
    return out


def birth_velocity_std(cls: np.ndarray, cfg: TrackingConfig, ground_frame: bool = True) -> np.ndarray:
    """(N,) velocity std (m/s) of a track born from a box of class index ``cls`` without a detector velocity:
    in the ground frame, the std whose ``gate_chi2`` gate just holds the class's plausible speed
    (``max_speed_mps``), at most ``birth_velocity_std_mps``; in a frame moving with the ego, relative speeds
    know no class limit: ``birth_velocity_std_mps``."""
    k = cfg.kalman
    if not ground_frame:
        return np.full(len(cls), k.birth_velocity_std_mps)
    return np.minimum(gate_speeds(cfg, "max_speed_mps")[cls] / np.sqrt(k.gate_chi2), k.birth_velocity_std_mps)


def _birth_rows(meas, z, score, t_box, cls, cfg, ground_frame: bool = True) -> np.ndarray:
    """(N, NCOL) the state row a track born from each box starts with (TID filled in at birth)."""
    k = cfg.kalman
    n = len(meas)
    rows = np.zeros((n, NCOL))
    rows[:, X:Y + 1] = meas[:, 0:2]
    rows[:, VX:VY + 1] = meas[:, 3:5]
    rows[:, PPP] = meas[:, 2]
    rows[:, PVV] = np.where(meas[:, 5] < _NO_VELOCITY_VAR, meas[:, 5], birth_velocity_std(cls, cfg, ground_frame) ** 2)
    rows[:, PS] = k.size_std_frac ** 2
    rows[:, PY] = k.yaw_std_rad ** 2
    rows[:, Q] = class_table(k.process_noise)[cls]
    rows[:, ONE] = 1.0
    rows[:, LS] = meas[:, 6:9]
    rows[:, Z] = z
    rows[:, YAW] = rows[:, YAW_DET] = meas[:, 9]
    rows[:, SCORE] = score
    rows[:, T_MATCH] = t_box
    rows[:, HITS] = 1
    rows[:, CLS] = cls
    rows[:, STRAY] = gate_speeds(cfg)[cls]
    return rows


def _update(g: np.ndarray, m: np.ndarray, mz: np.ndarray, mscore: np.ndarray, t: float, rs: float, ry: float,
            full: bool = True) -> None:
    """Kalman update of track rows ``g`` (K, NCOL) in place with their detections' measurements ``m`` (K, 10).
    Computed on transposed copies, one contiguous row per state column (a per-column op on (K, NCOL) rows is
    strided: this step was the tracker's largest cost per frame). ``full`` False: the motion alone (what the
    association reads), not the size, yaw, height or score."""
    if not full and m[:, 5].min() >= _NO_VELOCITY_VAR:
        _update_centre(g, m, t)
        return
    G, M = g.T.copy(), m.T.copy()  # (NCOL, K), (10, K)
    ppp, ppv, pvv = G[PPP].copy(), G[PPV].copy(), G[PVV].copy()
    r, rv = M[2], M[5]
    a = ppp + r
    yp = M[0:2] - G[X:Y + 1]  # innovations (2, K): position x, y ...
    if rv.min() >= _NO_VELOCITY_VAR:  # no detector velocity (a LiDAR detector, labels without): the centre alone
        k1, k2 = ppp / a, ppv / a  # K = P H^T / (H P H^T + r), H = [1, 0]
        G[X:Y + 1] += k1 * yp
        G[VX:VY + 1] += k2 * yp
        G[PPP] = (1 - k1) * ppp
        G[PPV] = (1 - k1) * ppv
        G[PVV] = pvv - k2 * ppv
    else:
        c = pvv + rv
        pp2 = ppv * ppv
        inv = 1.0 / (a * c - pp2)
        # the gain K (2x2 per track, shared by the x and y axes): K [yp; yv] updates x, v
        k11, k12 = (ppp * c - pp2) * inv, ppv * r * inv
        k21, k22 = ppv * rv * inv, (pvv * a - pp2) * inv
        yv = M[3:5] - G[VX:VY + 1]  # ... and velocity x, y (none where the detector gives no velocity)
        yv[:, rv >= _NO_VELOCITY_VAR] = 0.0
        G[X:Y + 1] += k11 * yp + k12 * yv
        G[VX:VY + 1] += k21 * yp + k22 * yv
        G[PPP] = (1 - k11) * ppp - k12 * ppv
        G[PPV] = (1 - k11) * ppv - k12 * pvv
        G[PVV] = (1 - k22) * pvv - k21 * ppv
    # size (log) and yaw: scalar random walks
    if full:
        ps, py = G[PS], G[PY]
        ks = ps / (ps + rs)
        G[LS] += ks * (M[6:9] - G[LS])
        ps *= 1 - ks
        ky = py / (py + ry)
        G[YAW] += ky * _wrap_half_pi(M[9] - G[YAW])
        py *= 1 - ky
        G[YAW_DET] = M[9]
        G[Z] = mz
        G[SCORE] = mscore
    G[T_MATCH] = t
    G[HITS] += 1
    g[:] = G.T


def _update_centre(g: np.ndarray, m: np.ndarray, t: float) -> None:
    """``_update`` of the motion alone from centres alone (no detector velocity), on the rows' columns in place:
    the few columns it touches cost less than ``_update``'s transposed copies (the offline passes' update)."""
    ppp, ppv, pvv = g[:, PPP], g[:, PPV], g[:, PVV]
    a = ppp + m[:, 2]
    k1, k2 = ppp / a, ppv / a  # K = P H^T / (H P H^T + r), H = [1, 0]
    yp = m[:, 0:2] - g[:, X:Y + 1]
    g[:, X:Y + 1] += k1[:, None] * yp
    g[:, VX:VY + 1] += k2[:, None] * yp
    g[:, PVV] = pvv - k2 * ppv
    g[:, PPV] = (1 - k1) * ppv
    g[:, PPP] = (1 - k1) * ppp
    g[:, T_MATCH] = t
    g[:, HITS] += 1


def kalman_tracking(t_s: np.ndarray, frame_start: np.ndarray, xy: np.ndarray, z: np.ndarray, vel: np.ndarray,
                    size: np.ndarray, yaw: np.ndarray, score: np.ndarray, cls: np.ndarray,
                    cfg: TrackingConfig, ground_frame: bool = True, looked: np.ndarray | None = None) -> KalmanTracks:
    """Track one scene. Frames: t_s (F,) seconds, increasing; frame_start (F + 1,) offsets of each frame's boxes.
    Boxes (N, sorted by frame), all in one common frame (global): centre xy (N, 2) and z (N,), velocity (N, 2)
    (NaN = the detector gives none), size (N, 3) lwh, yaw (N,), score (N,), class index (N,) (-1 = unknown).
    ``ground_frame``: the common frame is the ground (the log's poses move), so a class's plausible speed
    bounds how far a coasting track may stray; False for a frame that moves with the ego. ``looked`` (F,) bool:
    the frames the detector saw (None: all); a tentative track's misses count only there. See the module
    docstring."""
    t_s = np.asarray(t_s, dtype=np.float64)
    return kalman_lanes(t_s[None], frame_start, np.zeros(len(xy), dtype=np.int64), xy, z, vel, size, yaw, score, cls,
                        cfg, ground_frame, None if looked is None else np.asarray(looked, dtype=bool)[None])


def kalman_lanes(t_lane: np.ndarray, step_start: np.ndarray, lane: np.ndarray, xy: np.ndarray, z: np.ndarray,
                 vel: np.ndarray, size: np.ndarray, yaw: np.ndarray, score: np.ndarray, cls: np.ndarray,
                 cfg: TrackingConfig, ground_frame: bool = True, looked: np.ndarray | None = None,
                 ids_only: bool = False) -> KalmanTracks:
    """``kalman_tracking`` over L logs at once ("lanes", each tracked on its own), one loop step per frame index:
    step k takes frame k of every lane (the offline tracker's forward and backward passes run as one loop, half the
    per-frame work of two). ``t_lane`` (L, F) each lane's frame times; boxes sorted by step, ``step_start`` (F + 1,)
    offsets of each step's boxes, ``lane`` (N,) each box's lane; ``looked`` (L, F). A box's track is of its lane
    (track ids are unique over the lanes); coasted boxes carry their lane's frame index. ``ids_only``: the caller
    reads the track ids alone (the offline passes): the tracks' sizes, yaws, heights and scores, which no
    association reads, are not filtered."""
    k = cfg.kalman
    t_lane = np.asarray(t_lane, dtype=np.float64)
    n_lanes, f = t_lane.shape
    n = len(xy)
    lane = np.asarray(lane, dtype=np.int64)
    c1 = len(DETECTION_CLASSES) + 1
    group = lane * c1 + np.mod(cls, c1)  # a track takes detections of its lane and class only (CLS holds it)
    frame_of_box = np.repeat(np.arange(f), np.diff(step_start))
    t_box = t_lane[lane, frame_of_box]
    looked = np.ones((n_lanes, f), dtype=bool) if looked is None else np.asarray(looked, dtype=bool)
    # Boxes without a finite centre, size and yaw cannot be filtered: each is a track of its own, always output
    # (the pipeline records why it drops them), and never matched.
    valid = np.isfinite(xy).all(axis=1) & np.isfinite(z) & np.isfinite(size).all(axis=1) & np.isfinite(yaw)
    meas = _measurements(xy, vel, size, yaw, cfg)
    born = _birth_rows(meas, z, score, t_box, cls, cfg, ground_frame)
    born[:, CLS] = group
    born[:, LANE] = lane
    det_reach = np.sqrt(k.gate_chi2 * meas[:, 2])  # how far a detection's own noise may carry it (_reach)
    high = (score >= k.high_score) & valid
    low = (score < k.high_score) & valid
    rs, ry = k.size_std_frac ** 2, k.yaw_std_rad ** 2
    eps = 1e-6
    track_of_box = np.full(n, -1, dtype=np.int64)
    final_hits = np.zeros(n, dtype=np.int64)  # per raw track id, when it is deleted or the scene ends
    final_t_match = np.zeros(n)
    state = np.zeros((0, NCOL))
    transitions: dict = {}  # time step (ns) -> prediction matrix
    qs, qy = k.size_process_frac_per_s ** 2, k.yaw_process_rad_per_s ** 2
    coast = k.coast_output_s > 0  # coasted boxes are recorded (the offline passes output none)
    tentative = k.confirm_hits > 1  # with 1, every track is confirmed at birth
    coast_rows, coast_frames = [], []
    gaps = []  # per gap a track bridged: (track id, times of the matches before and after, x, y, vx, vy after)
    n_tracks = 0
    li = np.zeros(0, dtype=np.intp)
    # Each step's time step per lane in whole nanoseconds (a log's times are microseconds: exact), and whether the
    # lanes share it (a fixed rate, forwards and backwards): then one matrix product predicts every track.
    step_ns = np.rint(np.diff(t_lane, axis=1) * 1e9).astype(np.int64)
    shared = (step_ns == step_ns[:1]).all(axis=0).tolist()
    step0 = step_ns[0].tolist()
    for fi in range(f):
        tl = t_lane[:, fi]
        nr = len(state)  # (li: the lane of each row, kept with the rows)
        if fi and nr:
            if shared[fi - 1]:
                state[:, :PY + 1] = state[:, :ONE + 1] @ _cached_transition(transitions, step0[fi - 1], qs, qy)
            else:
                for d in np.unique(step_ns[:, fi - 1]).tolist():
                    m = step_ns[li, fi - 1] == d
                    state[m, :PY + 1] = state[m, :ONE + 1] @ _cached_transition(transitions, d, qs, qy)
        s, e = step_start[fi], step_start[fi + 1]
        if coast:
            matched = np.zeros(nr, dtype=bool)
        if e > s:
            hi_f = high[s:e]
            if nr:
                t_row = tl[0] if n_lanes == 1 else tl[li]
                t_prev = t_lane[0, fi - 1] if n_lanes == 1 else t_lane[li, fi - 1]
                # Stage 1, high-score detections: tracks matched in the previous frame first, then coasting ones (a
                # track that keeps missing must not take the detection of one that does not); stage 2: low-score
                # detections to confirmed tracks left over.
                fresh = state[:, T_MATCH] >= t_prev - eps
                assoc = _frame_dense if (e - s) * nr <= _DENSE_PAIRS else _frame_crowded
                di, ti = assoc(s, e, hi_f, low[s:e], meas, group, state, fresh,
                               (t_row, det_reach[s:e], cfg.min_gate_m, cfg.linking.d_max_m) if ground_frame else None,
                               k)
            else:
                di = ti = _NONE
            taken = np.zeros(e - s, dtype=bool)
            taken[di] = True
            if len(ti):
                di = di + s
                g = state[ti]
                if coast:
                    t_before = g[:, T_MATCH].copy()
                tk = t_row if n_lanes == 1 else t_row[ti]
                _update(g, meas[di], z[di], score[di], tk, rs, ry, not ids_only)
                state[ti] = g
                if coast and fi:
                    closed = t_before < (t_prev if n_lanes == 1 else t_prev[ti]) - eps  # it coasted: a gap closes
                    if closed.any():
                        gaps.append(np.column_stack([g[closed, TID], t_before[closed], g[closed, T_MATCH],
                                                     g[closed, X:VY + 1]]))
                if coast:
                    matched[ti] = True
                track_of_box[di] = g[:, TID]
            new = s + (hi_f & ~taken).nonzero()[0]
            if len(new):
                births = born[new]
                tid_new = np.arange(n_tracks, n_tracks + len(new))
                births[:, TID] = tid_new
                births[:, BIRTH] = new
                track_of_box[new] = tid_new
                n_tracks += len(new)
                state = np.concatenate([state, births])
                if coast:
                    matched = np.concatenate([matched, np.ones(len(new), dtype=bool)])
                if n_lanes > 1:
                    li = state[:, LANE].astype(np.intp)
        if not len(state):
            continue
        miss = (tl[0] if n_lanes == 1 else tl[li]) - state[:, T_MATCH]
        if coast or tentative:
            confirmed = state[:, HITS] >= k.confirm_hits
        if coast:
            coasting = ~matched & confirmed & (miss <= k.coast_output_s + eps)
            if k.coast_min_hit_ratio > 0:  # track quality: its hits over the frames it has lived through
                lived = fi + 1 - frame_of_box[state[:, BIRTH].astype(np.int64)]
                coasting &= state[:, HITS] >= k.coast_min_hit_ratio * lived
            if coasting.any():
                coast_rows.append(state[coasting])
                coast_frames.append(np.full(int(coasting.sum()), fi))
        if tentative:
            # A tentative track's misses count per class: in a frame with detections of its class at once, in any
            # other only after tentative_max_miss_s (issue #33: "a frame with any detection" made one class's
            # tracks depend on the others'); a frame the detector did not see (``looked`` False: an unreadable
            # sweep, a failed detector) never counts. Confirmed tracks age by time alone.
            seen = np.zeros(n_lanes * c1, dtype=bool)  # per lane and class
            seen[group[s:e]] = True
            own = seen[state[:, CLS].astype(np.intp)]
            dead = np.where(confirmed, miss > cfg.max_age_s + eps,
                            (looked[0, fi] if n_lanes == 1 else looked[li, fi])
                            & (((miss > k.tentative_max_age_s + eps) & own) | (miss > k.tentative_max_miss_s + eps)))
        else:
            dead = miss > cfg.max_age_s + eps
        if dead.any():
            tid = state[dead, TID].astype(np.int64)
            final_hits[tid] = state[dead, HITS]
            final_t_match[tid] = state[dead, T_MATCH]
            state = state[~dead]
            if n_lanes > 1:
                li = li[~dead]
    alive = state[:, TID].astype(np.int64)
    final_hits[alive] = np.maximum(state[:, HITS], k.confirm_hits)  # alive at the end: kept, even if tentative
    final_t_match[alive] = state[:, T_MATCH]
    kept = final_hits[:n_tracks] >= k.confirm_hits
    ok = track_of_box >= 0
    track_of_box[ok] = np.where(kept[track_of_box[ok]], track_of_box[ok], -1)
    track_of_box[~valid] = np.arange(n_tracks, n_tracks + int((~valid).sum()))
    return _coasted(track_of_box, coast_rows, coast_frames, gaps, t_lane, final_t_match, k)


_NONE = np.zeros(0, dtype=np.int64)


def _reach(state: np.ndarray, reach) -> tuple[np.ndarray, np.ndarray] | None:
    """How far each track may stray from its prediction (coasting tracks: the Mahalanobis gate widens with every
    miss, a static cone's after 1.5 s spans 11 m, so the detection must also lie where the class can stray in the
    gap, as fragment linking's limit: ``clip(gates_mps x gap, min_gate_m, linking.d_max_m)``), and each detection
    what its own noise allows, ``sqrt(gate_chi2 r)``; None where the frame moves with the ego. ``reach``: (the
    rows' times, the detections' reach, min_gate_m, d_max_m) or None."""
    if reach is None:
        return None
    t_row, det_reach, lo, hi = reach
    return np.minimum(np.maximum(state[:, STRAY] * (t_row - state[:, T_MATCH]), lo), hi), det_reach


def _frame_dense(s, e, hi, lo, meas, group, state, fresh, reach, k) -> tuple[np.ndarray, np.ndarray]:
    """One step's association (detections ``s:e``, the live tracks' rows of ``state``; ``hi`` / ``lo`` the
    detections of high / low score, ``fresh`` the tracks matched in the frame before, ``reach`` as ``_reach``
    reads it): every (detection, track) pair tested once as (D, T) arrays, then the three stages of the module
    docstring solved on them. Returns (detection positions in ``s:e``, track rows), by detection within each
    stage."""
    md = meas[s:e]
    dx = md[:, 0, None] - state[:, X]
    dy = md[:, 1, None] - state[:, Y]
    d2 = dx * dx + dy * dy
    sv = md[:, 2, None] + state[:, PPP]
    m = d2 / sv
    ok = (m <= k.gate_chi2) & (group[s:e, None] == state[:, CLS])
    cost = [m, sv]  # the pairs' costs, made by the first conflict (_solve)
    di, ti = _solve(ok & hi[:, None] & fresh, cost)
    n_tracks = len(fresh)
    if len(di) < hi.sum() and len(di) < n_tracks:
        free_d = hi.copy()
        free_d[di] = False
        allowed = ok & free_d[:, None] & ~fresh
        r = _reach(state, reach) if allowed.any() else None
        if r is not None:
            allowed &= d2 <= (r[0] + r[1][:, None]) ** 2
        d1, t1 = _solve(allowed, cost)
        if len(d1):
            di, ti = (d1, t1) if not len(di) else (np.concatenate([di, d1]), np.concatenate([ti, t1]))
    if len(ti) < n_tracks and lo.any():
        free_t = state[:, HITS] >= k.confirm_hits
        free_t[ti] = False
        d2_, t2 = _solve(ok & lo[:, None] & free_t, cost)
        if len(d2_):
            di, ti = (d2_, t2) if not len(di) else (np.concatenate([di, d2_]), np.concatenate([ti, t2]))
    return di, ti


def _solve(allowed: np.ndarray, cost: list) -> tuple[np.ndarray, np.ndarray]:
    """The minimum-cost assignment (``_match``) among the ``allowed`` cells of a step's (D, T) pairs, the cost of a
    pair its negative log-likelihood ``m + 2 ln S`` (``cost``: [m, S], or [that cost] once computed: the first
    conflict of a step computes it for the step's stages); (rows, columns) by row."""
    di, ti = allowed.nonzero()
    n = len(di)
    if n < 2:
        return di, ti
    in_rows, in_cols = set(di.tolist()), set(ti.tolist())
    if len(in_rows) == n and len(in_cols) == n:  # no conflict: every pair is taken
        return di, ti
    if len(cost) == 2:
        cost[:] = [cost[0] + 2 * np.log(cost[1])]
    c = cost[0]
    rows, cols = np.array(sorted(in_rows), dtype=np.intp), np.array(sorted(in_cols), dtype=np.intp)
    if len(rows) * len(cols) <= _ONE_BLOCK:  # one dense block of the rows and columns in conflict (_dense)
        sub = allowed[rows[:, None], cols]
        block = np.where(sub, c[rows[:, None], cols], _BIG)
        a, b = linear_sum_assignment(block)
        good = sub[a, b]
        return rows[a[good]], cols[b[good]]
    a, b = _match(di, ti, c[di, ti], c.shape[1])
    o = a.argsort(kind="stable")
    return a[o], b[o]


def _frame_crowded(s, e, hi, lo, meas, group, state, fresh, reach, k) -> tuple[np.ndarray, np.ndarray]:
    """``_frame_dense`` for a step of more than ``_DENSE_PAIRS`` pairs: each stage's pairs from ``_assign`` (a
    KD-tree's nearest tracks), in memory that grows with the detections."""
    rows = np.arange(len(state))
    hi_d, lo_d = s + np.flatnonzero(hi), s + np.flatnonzero(lo)
    di, ti = _assign(hi_d, rows[fresh], meas, group, state, k.gate_chi2)
    if len(di) < len(hi_d) and len(di) < len(rows):
        old = ~fresh
        r = _reach(state, reach)
        d1, t1 = _assign(hi_d[~np.isin(hi_d, di)], rows[old], meas, group, state, k.gate_chi2,
                         None if r is None else r[0][old])
        di, ti = np.concatenate([di, d1]), np.concatenate([ti, t1])
    if len(lo_d) and len(ti) < len(rows):
        free = state[:, HITS] >= k.confirm_hits
        free[ti] = False
        d2, t2 = _assign(lo_d, rows[free], meas, group, state, k.gate_chi2)
        di, ti = np.concatenate([di, d2]), np.concatenate([ti, t2])
    return di - s, ti


def _coasted(track_of_box, coast_rows, coast_frames, gaps, t_lane, final_t_match, k) -> KalmanTracks:
    """The result with the coasted boxes worth output: in gaps a later match bridged, the constant-velocity model's
    path between the filtered states at the gap's two ends (cubic Hermite in time: what a Rauch-Tung-Striebel
    smoother of white-noise acceleration gives with exact end states); after the last match, up to
    coast_trailing_s, the prediction."""
    rows = np.concatenate(coast_rows) if coast_rows else np.zeros((0, NCOL))
    frame = np.concatenate(coast_frames) if coast_frames else np.zeros(0, dtype=np.int64)
    tid = rows[:, TID].astype(np.int64)
    t = t_lane[rows[:, LANE].astype(np.int64), frame]
    miss = t - rows[:, T_MATCH]
    bridged = final_t_match[tid] > t
    keep = bridged | (miss <= k.coast_trailing_s + 1e-6)
    rows, frame, tid, miss, bridged = rows[keep], frame[keep], tid[keep], miss[keep], bridged[keep]
    xy = rows[:, X:Y + 1].copy()
    if bridged.any():
        # The gap a record lies in: the one its track closed after the match the record coasts from.
        ends = np.concatenate(gaps)
        span_t = t_lane.max() + 1.0  # one sortable key per (track, time)
        order = np.argsort(ends[:, 0] * span_t + ends[:, 1])
        ends = ends[order]
        b = np.nonzero(bridged)[0]
        t0 = rows[b, T_MATCH]
        j = np.searchsorted(ends[:, 0] * span_t + ends[:, 1], tid[b] * span_t + t0 - 1e-6)
        t1, x1, v1, v0 = ends[j, 2], ends[j, 3:5], ends[j, 5:7], rows[b, VX:VY + 1]
        x0 = xy[b] - v0 * (t[keep][b] - t0)[:, None]  # the filtered state at t0: the prediction run back
        d = (t1 - t0)[:, None]
        u = (t[keep][b] - t0)[:, None] / d
        xy[b] = ((2 * u ** 3 - 3 * u ** 2 + 1) * x0 + (u ** 3 - 2 * u ** 2 + u) * d * v0
                 + (3 * u ** 2 - 2 * u ** 3) * x1 + (u ** 3 - u ** 2) * d * v1)
    # Output yaw: the filtered axis, pointing the way the last matched detection did.
    yaw = rows[:, YAW_DET] + _wrap_half_pi(rows[:, YAW] - rows[:, YAW_DET])
    return KalmanTracks(track_of_box, frame, tid, xy, rows[:, Z].copy(), np.exp(rows[:, LS]),
                        yaw, rows[:, SCORE] * 0.5 ** (miss / k.coast_score_half_life_s),
                        rows[:, BIRTH].astype(np.int64))
