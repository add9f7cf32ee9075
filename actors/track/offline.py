"""The offline tracker, the default for generating datasets: association over the whole log in both directions,
one robust size per rigid track, a fixed-interval (Rauch-Tung-Striebel) smoother over each track's motion,
whole-track scoring and pruning, and gap filling only where the motion across the gap is consistent. Pure core
``offline_tracking(t_s, frame_start, boxes..., cfg) -> OfflineTracks`` over one scene's boxes in a common frame,
called by ``actors.track.pubtracker.track_scene`` (``tracking.mode: offline``), which moves boxes to that frame
and turns the result into boxes; its settings are ``tracking.offline`` (``schemas.config.OfflineTrackerConfig``).
A dataset generator always has the whole log: each box's track is decided with the frames after it as well as
those before (offboard trackers: 3DAL, CTRL, DetZero; PC3T's global association).

Steps (every time in seconds and every noise per second, so 2 Hz and 10 Hz logs behave alike):

1. **Two passes.** The online tracker (``actors.track.kalman``, with its settings, every track kept) runs over the
   log forwards and over the log played backwards. Two boxes consecutive in a track of *both* passes are linked:
   the chains of such links are the *tracklets*. Where the passes disagree (a newborn track's wide gate took the
   wrong second box in one direction; a coasting track took a neighbour's box) the tracklets break there. A link
   across missed frames stands only with ``link_min_boxes`` boxes of the tracklet on each side (``_known_gaps``):
   with fewer, one side's motion is a guess, as step 3 has it.
2. **Smoothed ends.** Each tracklet's motion is smoothed (step 3's smoother); its first and last states
   (position, velocity and their covariance) are what the linking compares.
3. **Global linking.** A tracklet ``i`` ending before a tracklet ``j`` of its class starts (gap ``g <=
   link_max_gap_s``) may continue in it: the cost is the squared Mahalanobis distance between ``i``'s last state
   predicted over the gap and ``j``'s first state (position and velocity in x and y: 4 degrees of freedom, the
   covariance both states' plus the class's process noise over the gap), plus the log-size difference (3 more,
   std ``kalman.size_std_frac``); a pair is allowed where the cost is within the chi-square quantile
   ``link_gate_prob`` of its 7 degrees of freedom, and, where the frame is the ground (the log's poses move),
   where the distance between the two ends is within what the class can cover in the gap
   (``tracking.max_speed_mps``). Between two *static* ends (smoothed speed under ``static_speed_mps`` at both),
   motion is no explanation: the two positions must agree within their own uncertainty alone (no process noise),
   so two parked bicycles 0.75 m apart, one seen as the other vanishes, stay two tracks. Every tracklet gets at
   most one successor and one predecessor, the set of links of least total ``cost - gate``
   (``scipy.optimize.linear_sum_assignment``): a global assignment over the whole log, a min-cost flow over
   tracklets. The same static rule cuts a tracklet of the online passes where it bridged a gap between two static
   places.
4. **Smoother.** Per track, a constant-velocity model (white-noise acceleration of the class's
   ``kalman.process_noise``) over every frame of its span, the detected centres measured with
   ``kalman.position_std_m`` and ``kalman.position_std_size_frac``: the Rauch-Tung-Striebel smoother's estimate
   (a Kalman filter forwards, its recursion backwards), computed as the one banded linear system it solves, all
   tracks at once (``_smooth``). The bottom of the box (z - h/2) is smoothed with the centre.
5. **Size.** A track of a rigid class (``rigid_classes``) takes one size, the median of its detections' lengths,
   widths and heights; its boxes keep their bottoms where the smoother put them.
6. **Whole-track score and pruning.** A track's score is ``mean detection score x n / (n + length_hits) x
   (hits / frames spanned) ^ hit_ratio_power`` (n its detections): a detector's ghosts that come and go, with
   middling scores, score low as tracks, and tracks under ``min_track_score`` are dropped. Every box of a
   track takes the track's score.
7. **Gaps.** A missed frame inside a track gets a box on the smoothed path (the centre of the smoothed state,
   the track's size, the yaw interpolated between the detections either side), for gaps up to
   ``fill_max_gap_s``; never across a cut of step 3.

The detections' scores are read through ``tracking.score_map`` (mapped once, for every tracker). Heading from
motion (``actors.track.heading``) and velocities from the track follow in ``track_scene``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import solveh_banded
from scipy.optimize import linear_sum_assignment
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.special import chdtri

from actors.track.kalman import class_table, gate_speeds, kalman_lanes, kalman_tracking
from schemas.config import DETECTION_CLASSES, TrackingConfig


@dataclass
class OfflineTracks:
    """Result over the N input boxes of a scene, all in the common (global) frame. Input boxes: ``track_of_box``
    (N,) raw track id, -1 for a box that is not output; where it is output, ``center`` (N, 3) its smoothed centre,
    ``size`` (N, 3) lwh, ``score`` (N,) its track's score (rows of boxes not output are NaN). Filled boxes (M of
    them): ``fill_frame`` (M,), ``fill_track``, ``fill_center`` (M, 3), ``fill_size`` (M, 3), ``fill_yaw``,
    ``fill_score``, ``fill_birth`` (M,) an input box of the same track (its class is the track's)."""

    track_of_box: np.ndarray
    center: np.ndarray
    size: np.ndarray
    score: np.ndarray
    fill_frame: np.ndarray
    fill_track: np.ndarray
    fill_center: np.ndarray
    fill_size: np.ndarray
    fill_yaw: np.ndarray
    fill_score: np.ndarray
    fill_birth: np.ndarray


# ----------------------------------------------------------------------------------------------- the two passes
def _pass_config(cfg: TrackingConfig) -> TrackingConfig:
    """The online tracker as a pass runs it: every track kept from its first box (no confirmation: the whole-track
    score decides later), no coasted boxes."""
    return cfg.model_copy(update={"kalman": cfg.kalman.model_copy(update={"confirm_hits": 1, "coast_output_s": 0.0,
                                                                          "coast_trailing_s": 0.0})})


def _neighbours(track_of_box: np.ndarray, frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(successor (N,), predecessor (N,)) of each box in its track (-1: none, or untracked)."""
    n = len(track_of_box)
    succ, pred = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    idx = np.flatnonzero(track_of_box >= 0)
    o = idx[np.lexsort((frame[idx], track_of_box[idx]))]
    same = track_of_box[o[1:]] == track_of_box[o[:-1]]
    succ[o[:-1][same]] = o[1:][same]
    pred[o[1:][same]] = o[:-1][same]
    return succ, pred


def _two_pass_links(t_s, frame_start, frame, xy, z, vel, size, yaw, score, cls, cfg, ground_frame, looked):
    """(a, b) arrays of the links of step 1, and the boxes it keeps (bool (N,)). The two passes run as the two lanes
    of one ``kalman_lanes`` loop: step k tracks frame k forwards and frame F - 1 - k backwards."""
    pcfg = _pass_config(cfg)
    n, f = len(xy), len(t_s)
    if not cfg.offline.both_directions:
        fwd = kalman_tracking(t_s, frame_start, xy, z, vel, size, yaw, score, cls, pcfg, ground_frame, looked)
        succ, _ = _neighbours(fwd.track_of_box, frame)
        a = np.flatnonzero(succ >= 0)
        return a, succ[a], fwd.track_of_box >= 0
    # the virtual boxes: each box forwards (lane 0) and backwards (lane 1, frames from last to first, velocities
    # reversed), by step, lane 0 first, each frame's boxes in input order
    src = np.concatenate([np.arange(n), np.arange(n)])
    lane = np.repeat(np.array([0, 1]), n)
    step = np.concatenate([frame, f - 1 - frame])
    order = np.lexsort((np.arange(2 * n), lane, step))
    src, lane = src[order], lane[order]
    step_start = np.searchsorted(step[order], np.arange(f + 1))
    t_lane = np.stack([t_s, t_s[-1] - t_s[::-1]])
    lk = None if looked is None else np.stack([np.asarray(looked, dtype=bool), np.asarray(looked, dtype=bool)[::-1]])
    sign = np.where(lane == 0, 1.0, -1.0)[:, None]
    res = kalman_lanes(t_lane, step_start, lane, xy[src], z[src], sign * vel[src], size[src], yaw[src], score[src],
                       cls[src], pcfg, ground_frame, lk, ids_only=True)
    fwd = np.full(n, -1, dtype=np.int64)
    back = np.full(n, -1, dtype=np.int64)
    fwd[src[lane == 0]] = res.track_of_box[lane == 0]
    back[src[lane == 1]] = res.track_of_box[lane == 1]
    # a box is kept where both passes track it; two boxes are linked where both make them consecutive in a track
    s1, _ = _neighbours(fwd, frame)
    s2, _ = _neighbours(back, frame)
    both = np.flatnonzero((s1 >= 0) & (s1 == s2))
    return both, s1[both], (fwd >= 0) & (back >= 0)


# ------------------------------------------------------------------------------------------------- the smoother
@dataclass
class _Smoothed:
    """Per step of every track (rows in ``_grid`` order): smoothed position (R, 3) and velocity (R, 3); per track
    (by id), the smoothed covariance of its first and of its last step, (T, 3) [pp, pv, vv] per axis (the three
    axes share it), where asked for."""

    pos: np.ndarray
    vel: np.ndarray
    cov_first: np.ndarray | None = None
    cov_last: np.ndarray | None = None


@dataclass
class _Grid:
    """Rows of the tracks' frame grids: each track from its first to its last frame, one row per frame, the rows of
    a track consecutive (tracks laid out longest first). ``start`` (T,) first row of each track (by track id),
    ``length`` (T,), ``order`` (T,) track ids longest first, ``row_track`` / ``row_frame`` (R,), ``row_of_box``
    (N,) the row of each box."""

    start: np.ndarray
    length: np.ndarray
    order: np.ndarray
    row_track: np.ndarray
    row_frame: np.ndarray
    row_of_box: np.ndarray


def _grid(track: np.ndarray, frame: np.ndarray, n_tracks: int) -> _Grid:
    first = np.full(n_tracks, np.iinfo(np.int64).max)
    last = np.full(n_tracks, -1)
    np.minimum.at(first, track, frame)
    np.maximum.at(last, track, frame)
    length = last - first + 1
    order = np.argsort(-length, kind="stable")
    start = np.zeros(n_tracks, dtype=np.int64)
    start[order] = np.concatenate([[0], np.cumsum(length[order])[:-1]])
    row_track = np.repeat(order, length[order])
    row_frame = first[row_track] + (np.arange(int(length.sum())) - start[row_track])
    return _Grid(start, length, order, row_track, row_frame, start[track] + (frame - first[track]))


_DIFFUSE_VELOCITY_VAR = 1e6  # the smoother's prior on a track's first velocity: none (it has the whole track)
_MIN_Q = 1e-9  # m^2/s^3: a process noise of 0 (a class configured so) as a tiny one, so the model stays proper


def _smooth(track, frame, meas_pos, meas_var, t_s, q_track, n_tracks, ends: bool = True) -> tuple[_Smoothed, _Grid]:
    """Fixed-interval smoothing of a constant-velocity model per track, over every frame of its span;
    ``meas_pos`` (N, 3) measured at the boxes' rows (``meas_var`` (N,) per axis), white-noise acceleration
    ``q_track`` (T,) m^2/s^3, a diffuse prior on the first velocity (a constant-velocity path is reproduced
    exactly); with ``ends``, the smoothed covariances of each track's first and last steps.

    What the Rauch-Tung-Striebel recursion (a Kalman filter forwards, its backward pass) computes is the mean of
    the whole path given every measurement: the solution of one linear system in information form, whose matrix
    (the path's precision) is block-tridiagonal, 2x2 blocks (position, velocity) per step: per measured step
    ``1 / r`` on the position; between consecutive steps ``d`` apart, the transition's ``[F, -I]^T Q^-1 [F, -I]``
    (F = [[1, d], [0, 1]], Q = q [[d^3/3, d^2/2], [d^2/2, d]]); ``1 / _DIFFUSE_VELOCITY_VAR`` on each track's first
    velocity. Every track of the scene is one banded symmetric positive-definite system (bandwidth 3 over the
    interleaved position and velocity unknowns; tracks do not touch), solved at once by LAPACK's banded Cholesky
    (``scipy.linalg.solveh_banded``) with the three axes (they share the covariance: isotropic noises) as three
    right-hand sides, and the covariances of the ends as four more: the columns of the inverse at each track's
    first and last position and velocity (one unit vector per track in each column: the tracks' blocks are
    independent). No loop over steps."""
    grid = _grid(track, frame, n_tracks)
    rows = len(grid.row_frame)
    same = grid.row_track[1:] == grid.row_track[:-1]  # row r and r + 1 are consecutive steps of one track
    d = np.where(same, t_s[grid.row_frame[1:]] - t_s[grid.row_frame[:-1]], 1.0)
    iq = np.where(same, 1.0 / (np.maximum(q_track[grid.row_track[1:]], _MIN_Q) * d), 0.0)  # 1 / (q d)
    a, b, c = 12 * iq / (d * d), 6 * iq / d, 4 * iq  # Q^-1 = [[a, -b], [-b, c]]
    jpp, jpv, jvv = np.zeros(rows), np.zeros(rows), np.zeros(rows)
    jpp[:-1] += a  # F^T Q^-1 F = [[a, b], [b, c]] on step r
    jpv[:-1] += b
    jvv[:-1] += c
    jpp[1:] += a  # Q^-1 on step r + 1
    jpv[1:] -= b
    jvv[1:] += c
    jpp[grid.row_of_box] += 1.0 / meas_var
    jvv[grid.start] += 1.0 / _DIFFUSE_VELOCITY_VAR
    # upper band storage: ab[3 + i - j, j] = J[i, j] (i <= j), unknowns (p_0, v_0, p_1, v_1, ...);
    # -F^T Q^-1 between r and r + 1: [[-a, b], [-b, 2 / (q d)]]
    ab = np.zeros((4, 2 * rows))
    ab[3, 0::2], ab[3, 1::2] = jpp, jvv
    ab[2, 1::2] = jpv
    ab[2, 2::2] = -b
    ab[1, 2::2] = -a
    ab[1, 3::2] = 2 * iq
    ab[0, 3::2] = b
    rhs = np.zeros((2 * rows, 7 if ends else 3))
    rhs[2 * grid.row_of_box, :3] = meas_pos / meas_var[:, None]
    first, last = 2 * grid.start, 2 * (grid.start + grid.length - 1)
    if ends:
        rhs[last, 3] = rhs[last + 1, 4] = rhs[first, 5] = rhs[first + 1, 6] = 1.0
    x = solveh_banded(ab, rhs, check_finite=False) if rows else rhs
    sm = _Smoothed(x[0::2, :3], x[1::2, :3])
    if ends:
        sm.cov_last = np.column_stack([x[last, 3], x[last + 1, 3], x[last + 1, 4]])
        sm.cov_first = np.column_stack([x[first, 5], x[first + 1, 5], x[first + 1, 6]])
    return sm, grid


# ------------------------------------------------------------------------------------------------------ linking
def _link(end_row, start_row, sm: _Smoothed, row_frame, t_s, t_cls, log_size, cfg, ground_frame, linkable):
    """Step 3: successor (T,) of each tracklet (-1 none). ``end_row``/``start_row`` (T,) its last / first grid row
    (``sm`` with the ends' covariances), ``t_cls`` (T,) class index, ``log_size`` (T, 3) mean log lwh."""
    off = cfg.offline
    n = len(end_row)
    succ = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return succ
    te, ts_ = t_s[row_frame[end_row]], t_s[row_frame[start_row]]
    q = class_table(cfg.kalman.process_noise)[t_cls]
    max_speed = gate_speeds(cfg, "max_speed_mps")[t_cls]
    gate = chdtri(7, 1 - off.link_gate_prob)
    static_gate = chdtri(2, 1 - off.link_gate_prob)
    rs = cfg.kalman.size_std_frac ** 2
    pe, ve, ce = sm.pos[end_row, :2], sm.vel[end_row, :2], sm.cov_last
    ps, vs, cs = sm.pos[start_row, :2], sm.vel[start_row, :2], sm.cov_first
    static_e = np.hypot(*ve.T) < off.static_speed_mps
    static_s = np.hypot(*vs.T) < off.static_speed_mps
    known_e = (ce[:, 2] <= off.link_velocity_std_mps ** 2) & linkable  # ends whose motion is known well enough
    known_s = (cs[:, 2] <= off.link_velocity_std_mps ** 2) & linkable
    rows, cols, vals = [], [], []
    order = np.argsort(ts_, kind="stable")
    ts_sorted = ts_[order]
    step = max(1, (1 << 20) // n)  # ends per block: the block's pairs stay under a million
    for lo in range(0, n, step):
        e = np.arange(lo, min(n, lo + step))
        a_, b_ = np.searchsorted(ts_sorted, te[e], "right"), np.searchsorted(ts_sorted, te[e] + off.link_max_gap_s,
                                                                              "right")
        cnt = b_ - a_
        if not cnt.sum():
            continue
        i = np.repeat(e, cnt)
        j = order[np.concatenate([np.arange(x, y) for x, y in zip(a_, b_)])]
        ok = (t_cls[i] == t_cls[j]) & (i != j) & known_e[i] & known_s[j]
        i, j = i[ok], j[ok]
        g = ts_[j] - te[i]
        # i's last state predicted over the gap, against j's first state: x and y independent, each a 2-state
        # (position, velocity) difference with covariance P_i(predicted) + Q(g) + P_j
        a = ce[i, 0] + 2 * g * ce[i, 1] + g * g * ce[i, 2] + q[i] * g ** 3 / 3 + cs[j, 0]
        b = ce[i, 1] + g * ce[i, 2] + q[i] * g * g / 2 + cs[j, 1]
        c = ce[i, 2] + q[i] * g + cs[j, 2]
        dp = ps[j] - (pe[i] + ve[i] * g[:, None])
        dv = vs[j] - ve[i]
        det = a * c - b * b
        m = ((c[:, None] * dp * dp - 2 * b[:, None] * dp * dv + a[:, None] * dv * dv) / det[:, None]).sum(axis=1)
        m += ((log_size[j] - log_size[i]) ** 2).sum(axis=1) / (2 * rs)
        allowed = m <= gate
        dist = np.hypot(*(ps[j] - pe[i]).T)
        both_static = static_e[i] & static_s[j]
        if ground_frame:
            allowed &= dist <= max_speed[i] * g + 3 * np.sqrt(ce[i, 0] + cs[j, 0])
            # two static ends: the same place within the two positions' own uncertainty, or no link
            allowed &= ~both_static | (dist * dist / (ce[i, 0] + cs[j, 0]) <= static_gate)
        rows.append(i[allowed])
        cols.append(j[allowed])
        vals.append(m[allowed] - gate)  # negative: a link is better than none
    if not rows:
        return succ
    i, j, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    if not len(i):
        return succ
    a, b = _min_assignment(i, j, v, n)
    succ[a] = b
    return succ


def _min_assignment(i: np.ndarray, j: np.ndarray, v: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The set of pairs (at most one per i and per j) of least total ``v`` (all negative; no pair is 0): each
    connected group of the pairs is one dense ``linear_sum_assignment`` with absent pairs at 0."""
    graph = coo_matrix((np.ones(len(i)), (i, n + j)), shape=(2 * n, 2 * n))
    _, label = connected_components(graph, directed=False)
    comp = label[i]
    o = np.argsort(comp, kind="stable")
    out_i, out_j = [], []
    for idx in np.split(o, np.flatnonzero(np.diff(comp[o])) + 1):
        if len(idx) == 1:
            out_i.append(i[idx])
            out_j.append(j[idx])
            continue
        ri, r = np.unique(i[idx], return_inverse=True)
        cj, c = np.unique(j[idx], return_inverse=True)
        m = np.zeros((len(ri), len(cj)))
        m[r, c] = v[idx]
        a, b = linear_sum_assignment(m)
        good = m[a, b] < 0
        out_i.append(ri[a[good]])
        out_j.append(cj[b[good]])
    return np.concatenate(out_i), np.concatenate(out_j)


def _components(n: int, a: np.ndarray, b: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Labels (n,) of the chains that the links (a, b) make over the nodes ``members`` (bool (n,)); -1 elsewhere;
    labels numbered in order of each chain's first node."""
    graph = coo_matrix((np.ones(len(a)), (a, b)), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    out = np.full(n, -1, dtype=np.int64)
    lab = label[members]
    _, first, inv = np.unique(lab, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    out[members] = rank[inv]
    return out


# --------------------------------------------------------------------------------------------------- the tracker
def offline_tracking(t_s: np.ndarray, frame_start: np.ndarray, xy: np.ndarray, z: np.ndarray, vel: np.ndarray,
                     size: np.ndarray, yaw: np.ndarray, score: np.ndarray, cls: np.ndarray, cfg: TrackingConfig,
                     ground_frame: bool = True, looked: np.ndarray | None = None,
                     exact: bool = False) -> OfflineTracks:
    """Track one scene offline; the arguments are ``actors.track.kalman.kalman_tracking``'s (``score`` already
    mapped by ``tracking.score_map``). See the module docstring.

    ``exact``: the boxes are the truth (a noise-free ``labels`` detector: the log's own annotations). The tracker
    then only gives identities: every box is output as given (centre, size, score), none is pruned and no gap is
    filled, since an exact box needs no smoothing and a frame without it is one where the object was not seen."""
    off, k = cfg.offline, cfg.kalman
    n, f = len(xy), len(t_s)  # noqa: F841
    frame = np.repeat(np.arange(f), np.diff(frame_start))
    a, b, tracked = _two_pass_links(t_s, frame_start, frame, xy, z, vel, size, yaw, score, cls, cfg, ground_frame,
                                    looked)
    # Boxes without a finite centre, size or yaw cannot be smoothed: each is output as a track of its own (the
    # pipeline records why it drops them), as the online tracker does.
    valid = np.isfinite(xy).all(axis=1) & np.isfinite(z) & np.isfinite(size).all(axis=1) & np.isfinite(yaw)
    tracked = valid.copy() if exact else tracked & valid  # exact boxes: each one output, in a track of its own at worst
    # Step 1: tracklets; boxes the passes do not both track are not output.
    tracklet = _components(n, a, b, tracked) if n else np.zeros(0, dtype=np.int64)
    if n and len(a):
        a, b = _known_gaps(a, b, tracklet, frame, tracked, off.link_min_boxes)
        tracklet = _components(n, a, b, tracked)
    nt = int(tracklet.max(initial=-1)) + 1
    if nt == 0:
        return _with_invalid(_finish(tracklet, 0, frame, t_s, np.zeros((n, 3)), np.ones(n), size, yaw, score, cls,
                                     cfg, np.zeros(0), exact), valid, xy, z, size, score, 0)
    boxes = np.flatnonzero(tracked)
    t_cls = np.zeros(nt, dtype=np.int64)
    t_cls[tracklet[boxes]] = cls[boxes]
    bottom = np.column_stack([xy, z - size[:, 2] / 2])
    meas_var = k.position_std_m ** 2 + k.position_std_size_frac ** 2 * (size[:, 0] ** 2 + size[:, 1] ** 2)
    q_of_class = class_table(k.process_noise)

    # Step 2: smoothed tracklets; their ends.
    tb = tracklet[boxes]
    sm, grid = _smooth(tb, frame[boxes], bottom[boxes], meas_var[boxes], t_s, q_of_class[t_cls], nt)
    log_size = np.zeros((nt, 3))
    np.add.at(log_size, tb, np.log(np.maximum(size[boxes], 1e-3)))
    log_size /= np.bincount(tb, minlength=nt)[:, None]
    n_boxes = np.bincount(tb, minlength=nt)
    succ = _link(grid.start + grid.length - 1, grid.start, sm, grid.row_frame, t_s, t_cls, log_size, cfg,
                 ground_frame, n_boxes >= off.link_min_boxes)

    # The static rule inside the passes' tracklets: a gap (missed frames) between two static places is cut.
    box_row = np.full(n, -1, dtype=np.int64)
    box_row[boxes] = grid.row_of_box
    ea, eb = a, b
    if len(a):
        gap = frame[b] - frame[a] > 1
        if gap.any() and ground_frame:
            ra, rb = box_row[a], box_row[b]
            sa = np.hypot(*sm.vel[ra, :2].T) < off.static_speed_mps
            sb = np.hypot(*sm.vel[rb, :2].T) < off.static_speed_mps
            d2 = ((bottom[b, :2] - bottom[a, :2]) ** 2).sum(axis=1)
            far = d2 / (2 * meas_var[a] + 1e-12) > chdtri(2, 1 - off.link_gate_prob)
            cut = gap & sa & sb & far
            ea, eb = a[~cut], b[~cut]
    # Tracks: tracklet chains; a link joins the last box of i to the first box of its successor.
    last_box = np.full(nt, -1, dtype=np.int64)
    first_box = np.full(nt, -1, dtype=np.int64)
    o = boxes[np.lexsort((frame[boxes], tb))]
    tbo = tracklet[o]
    head = np.r_[True, tbo[1:] != tbo[:-1]]
    tail = np.r_[tbo[1:] != tbo[:-1], True]
    first_box[tbo[head]] = o[head]
    last_box[tbo[tail]] = o[tail]
    linked = np.flatnonzero(succ >= 0)
    la, lb = last_box[linked], first_box[succ[linked]]
    track = _components(n, np.concatenate([ea, la]), np.concatenate([eb, lb]), tracked)
    n_tracks = int(track.max(initial=-1)) + 1
    res = _finish(track, n_tracks, frame, t_s, bottom, meas_var, size, yaw, score, cls, cfg, q_of_class, exact)
    return _with_invalid(res, valid, xy, z, size, score, n_tracks)


def _known_gaps(a, b, tracklet, frame, tracked, min_boxes: int) -> tuple[np.ndarray, np.ndarray]:
    """The links of step 1 less those that bridge missed frames with fewer than ``min_boxes`` boxes of the tracklet
    on one side (``offline.link_min_boxes``): a track's motion is a guess there (a newborn track coasting on its
    birth velocity's wide gate, or a track about to take its first box after the gap), and step 3 links a gap only
    between ends whose motion is known. Links between consecutive frames stand."""
    boxes = np.flatnonzero(tracked)
    o = boxes[np.lexsort((frame[boxes], tracklet[boxes]))]
    to = tracklet[o]
    size = np.bincount(to)
    start = np.searchsorted(to, np.arange(len(size)))
    rank = np.zeros(len(tracklet), dtype=np.int64)
    rank[o] = np.arange(len(o)) - start[to]  # each box's place in its tracklet, in frame order
    gap = frame[b] - frame[a] > 1
    short = (rank[a] + 1 < min_boxes) | (size[tracklet[b]] - rank[b] < min_boxes)
    keep = ~(gap & short)
    return a[keep], b[keep]


def _with_invalid(res: OfflineTracks, valid, xy, z, size, score, n_tracks: int) -> OfflineTracks:
    """The boxes that are not ``valid`` as tracks of their own, as given."""
    bad = np.flatnonzero(~valid)
    res.track_of_box[bad] = n_tracks + np.arange(len(bad))
    res.center[bad] = np.column_stack([xy[bad], z[bad]])
    res.size[bad], res.score[bad] = size[bad], score[bad]
    return res


def _finish(track, n_tracks, frame, t_s, bottom, meas_var, size, yaw, score, cls, cfg, q_of_class,
            exact: bool = False) -> OfflineTracks:
    """Steps 4-7 over the final tracks; with ``exact`` (see ``offline_tracking``) the boxes as given, none filled."""
    off = cfg.offline
    n = len(track)
    boxes = np.flatnonzero(track >= 0)
    tb = track[boxes]
    t_cls = np.zeros(n_tracks, dtype=np.int64)
    t_cls[tb] = cls[boxes]
    if exact:  # the boxes are output as given: no smoothed path is needed (nor filled)
        sm, grid = None, _grid(tb, frame[boxes], n_tracks)
    else:
        sm, grid = _smooth(tb, frame[boxes], bottom[boxes], meas_var[boxes], t_s, q_of_class[t_cls], n_tracks,
                           ends=False)
    row_frame, row_of_box, row_track = grid.row_frame, grid.row_of_box, grid.row_track
    # Step 6: whole-track score, in log-odds: the mean log-odds of the detections' scores, times (as odds) the share
    # n / (n + length_hits) and the hit ratio to the power hit_ratio_power.
    hits = np.bincount(tb, minlength=n_tracks).astype(np.float64)
    p = np.clip(score[boxes], 1e-9, 1 - 1e-9)
    mean_logit = np.bincount(tb, weights=np.log(p / (1 - p)), minlength=n_tracks) / np.maximum(hits, 1)
    log_odds = (mean_logit + np.log(hits / (hits + off.length_hits))
                + off.hit_ratio_power * np.log(hits / np.maximum(grid.length, 1)))
    t_score = 1 / (1 + np.exp(-log_odds))
    # too few detections drop a track unless it reaches the log's first or last frame (it may go on outside the log)
    first_f = row_frame[grid.start]
    last_f = row_frame[grid.start + grid.length - 1]
    at_edge = (first_f == 0) | (last_f == len(t_s) - 1)
    keep_track = (t_score >= off.min_track_score) & ((hits >= off.min_track_hits) | at_edge)
    if exact:
        keep_track[:] = True
    # Step 5: one size per rigid track (median of its detections), others keep their boxes' sizes.
    rigid = np.isin(np.array(DETECTION_CLASSES + ("",), dtype=object)[t_cls], list(off.rigid_classes))
    med = np.zeros((n_tracks, 3))
    for ax in range(3):  # the median per track by one sort per axis
        so = boxes[np.lexsort((size[boxes, ax], tb))]
        tso = track[so]
        lo = np.searchsorted(tso, np.arange(n_tracks), "left")
        hi = np.searchsorted(tso, np.arange(n_tracks), "right")
        mid = (lo + hi - 1) / 2
        med[:, ax] = np.where(hi > lo, (size[so[np.floor(mid).astype(np.int64).clip(0, max(len(so) - 1, 0))], ax]
                                        + size[so[np.ceil(mid).astype(np.int64).clip(0, max(len(so) - 1, 0))], ax])
                              / 2, 0.0)
    out_size = size[boxes] if exact else np.where(rigid[tb][:, None], med[tb], size[boxes])
    centre = sm.pos[row_of_box].copy() if off.smooth_centres and not exact else bottom[boxes].copy()
    centre[:, 2] += out_size[:, 2] / 2  # smoothed bottom -> centre of the output size
    kept = keep_track[tb]
    res_track = np.full(n, -1, dtype=np.int64)
    res_track[boxes[kept]] = tb[kept]
    res_center = np.full((n, 3), np.nan)
    res_center[boxes] = centre
    res_size = np.full((n, 3), np.nan)
    res_size[boxes] = out_size
    res_score = np.full(n, np.nan)
    res_score[boxes] = score[boxes] if exact else t_score[tb]
    # Step 7: missed frames inside kept tracks, up to fill_max_gap_s, never across a cut (a cut splits tracks,
    # so a gap inside one track was bridged by a link or a pass that the static rule let stand).
    rows = len(row_frame)
    detected = np.zeros(rows, dtype=bool)
    detected[row_of_box] = True
    # the detection rows before and after each row
    idx = np.arange(rows)
    prev = np.maximum.accumulate(np.where(detected, idx, -1))
    nxt = np.minimum.accumulate(np.where(detected, idx, rows)[::-1])[::-1]
    fill = ~detected & keep_track[row_track] & (not exact)
    if fill.any():
        fr = np.flatnonzero(fill)
        gap_s = t_s[row_frame[nxt[fr]]] - t_s[row_frame[prev[fr]]]
        fr = fr[gap_s <= off.fill_max_gap_s + 1e-6]
    else:
        fr = np.zeros(0, dtype=np.int64)
    box_of_row = np.full(rows, -1, dtype=np.int64)
    box_of_row[row_of_box] = boxes
    bp, bn = box_of_row[prev[fr]], box_of_row[nxt[fr]]
    u = (t_s[row_frame[fr]] - t_s[row_frame[prev[fr]]]) / (t_s[row_frame[nxt[fr]]] - t_s[row_frame[prev[fr]]])
    dyaw = np.mod(yaw[bn] - yaw[bp] + np.pi / 2, np.pi) - np.pi / 2  # modulo pi: a flipped yaw is fixed later
    tr = row_track[fr]
    f_size = np.where(rigid[tr][:, None], med[tr], (1 - u)[:, None] * size[bp] + u[:, None] * size[bn])
    f_center = sm.pos[fr].copy() if sm is not None else np.zeros((0, 3))
    f_center[:, 2] += f_size[:, 2] / 2
    return OfflineTracks(res_track, res_center, res_size, res_score, row_frame[fr], tr, f_center, f_size,
                         yaw[bp] + u * dyaw, t_score[tr], bp)
