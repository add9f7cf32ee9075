"""Tracking of one scene, ``track_scene(timestamps_us, detections, cfg, city_SE3_ego) -> list[Boxes3D]`` (pure
core), with any of the trackers: ``cfg.mode`` 'offline' (the default, ``actors.track.offline``: the whole log in
both directions, smoothed and scored tracks), 'kalman' (``actors.track.kalman``, online: constant-velocity Kalman
filters, confirmation, coasting) or 'greedy', CenterPoint's greedy closest-point tracker (PubTracker), vectorised,
here. Both are followed by the same steps: fragment linking, ``min_hits``, track ids, velocities
and headings from the tracks.

What the greedy tracker does, frame by frame in time order (one scene at a time):
  * every box is moved to the global (city) frame with its frame's ``city_SE3_ego``;
  * a detection is compared with each live track's last position, the detection moved *back* by its
    velocity times the time since that track was last seen (CenterPoint); when the detector gives no
    velocity the track's own velocity moves the track forward instead (same geometry, other source);
  * a pair is allowed only within the class's gate: ``max(min_gate_m, gates_mps[class] * dt)`` with
    ``dt`` the time since the previous frame (the per-second gates of the config scaled to the log's
    frame interval: 2 Hz nuScenes keyframes, 10 Hz AV2) and only between equal classes;
  * greedy assignment, closest pair first. It is computed in vectorised rounds of mutual nearest
    neighbours: the closest remaining pair is always mutually nearest, and every mutually nearest pair is
    one the sequential greedy would pick, so the result equals CenterPoint's greedy loop;
  * unmatched detections start tracks (birth); unmatched tracks coast and die when unseen for longer
    than ``max_age_s``; coasted positions are not emitted as boxes (CenterPoint emits active tracks only);
  * fragments are then linked (DRAMA-X, ``actors.track.linking``), tracks shorter than ``min_hits`` are
    dropped, and every box gets a velocity from its track (``velocity_from_track``): the least-squares
    slope of its global centre over its track's boxes within ``+-velocity_window_s``;
  * with ``heading_from_motion``, yaws a detector left ambiguous by pi (no velocity, no instance token)
    are turned to the track's direction of travel, or kept in one orientation per static track
    (``actors.track.heading``).
"""
from __future__ import annotations

import numpy as np

from actors.track.heading import apply_flips, heading_flips
from actors.track.kalman import gate_speeds, kalman_tracking
from actors.track.linking import link_fragments
from actors.track.offline import offline_tracking
from generator.geometry import SE3
from generator.types import Boxes3D
from schemas.config import DETECTION_CLASSES, TrackingConfig

_CLASS_INDEX = {c: i for i, c in enumerate(DETECTION_CLASSES)}


def class_indices(class_name: np.ndarray) -> np.ndarray:
    """(N,) class names -> (N,) int indices into DETECTION_CLASSES (-1 for anything else)."""
    if len(class_name) == 0:
        return np.zeros(0, dtype=np.int64)
    names, inv = np.unique(np.asarray(class_name, dtype=object).astype(str), return_inverse=True)
    return np.array([_CLASS_INDEX.get(c, -1) for c in names], dtype=np.int64)[inv.reshape(-1)]


def greedy_match(dist: np.ndarray) -> np.ndarray:
    """Greedy closest-pair assignment. dist (N, T) with ``inf`` where a pair is not allowed.

    Returns (N,) int: the column matched to each row, -1 for none. Equal to sorting all finite pairs
    and taking each whose row and column are still free.
    """
    n, t = dist.shape
    out = np.full(n, -1, dtype=np.int64)
    if n == 0 or t == 0:
        return out
    d = dist.copy()
    rows = np.arange(n)
    while True:
        best_col = d.argmin(axis=1)
        best_row = d.argmin(axis=0)
        dmin = d[rows, best_col]
        mutual = np.isfinite(dmin) & (best_row[best_col] == rows)
        if not mutual.any():
            return out
        r, c = rows[mutual], best_col[mutual]
        out[r] = c
        d[r, :] = np.inf
        d[:, c] = np.inf


def _stack_poses(poses: list[SE3]) -> tuple[np.ndarray, np.ndarray]:
    R = np.stack([p.rotation for p in poses]) if poses else np.zeros((0, 3, 3))
    t = np.stack([p.translation for p in poses]) if poses else np.zeros((0, 3))
    return R, t


def to_global(frame_of_box: np.ndarray, center_m: np.ndarray, velocity_mps: np.ndarray, yaw_rad: np.ndarray,
              R: np.ndarray, t: np.ndarray):
    """Ego-frame boxes -> global. frame_of_box (N,), center (N,3), velocity (N,2), yaw (N,), poses R (F,3,3), t (F,3).

    Returns (center_global (N,3), velocity_global (N,2), yaw_global (N,))."""
    Rb = R[frame_of_box]
    c = np.einsum("nij,nj->ni", Rb, center_m) + t[frame_of_box]
    v = np.einsum("nij,nj->ni", Rb[:, :2, :2], velocity_mps)
    yaw = yaw_rad + np.arctan2(Rb[:, 1, 0], Rb[:, 0, 0])
    return c, v, yaw


def track_velocity(track_id: np.ndarray, t_s: np.ndarray, xy: np.ndarray, window_s: float) -> np.ndarray:
    """Per-box velocity (N, 2) from its track: least-squares slope of ``xy`` (N, 2) over time ``t_s`` (N,)
    using the boxes of the same track within ``+-window_s``. NaN for a box alone in its window.
    Boxes with track_id < 0 get NaN. Vectorised with cumulative sums over (track, time)-sorted boxes."""
    n = len(track_id)
    out = np.full((n, 2), np.nan)
    ok = track_id >= 0
    if not ok.any():
        return out
    idx = np.nonzero(ok)[0]
    order = idx[np.lexsort((t_s[idx], track_id[idx]))]
    tid, tt, p = track_id[order], t_s[order], xy[order]
    # A single sortable key: tracks far apart in "time" so windows never cross tracks.
    span = float(tt.max() - tt.min()) + 4 * window_s + 1.0
    _, rank = np.unique(tid, return_inverse=True)
    key = rank * span + (tt - tt.min())
    lo = np.searchsorted(key, key - window_s - 1e-9, side="left")
    hi = np.searchsorted(key, key + window_s + 1e-9, side="right")
    tc = tt - tt.mean()
    cs = lambda a: np.concatenate([np.zeros((1,) + a.shape[1:]), np.cumsum(a, axis=0)])
    S1, St, Stt = cs(np.ones_like(tc)), cs(tc), cs(tc * tc)
    Sp, Stp = cs(p), cs(tc[:, None] * p)
    cnt = S1[hi] - S1[lo]
    st, stt = St[hi] - St[lo], Stt[hi] - Stt[lo]
    sp, stp = Sp[hi] - Sp[lo], Stp[hi] - Stp[lo]
    den = cnt * stt - st * st
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = (cnt[:, None] * stp - st[:, None] * sp) / den[:, None]
    slope[(cnt < 2) | (np.abs(den) < 1e-12)] = np.nan
    out[order] = slope
    return out


def _online_tracking(t_s: np.ndarray, frame_start: np.ndarray, pos: np.ndarray, vel: np.ndarray, cls: np.ndarray,
                     cfg: TrackingConfig) -> np.ndarray:
    """The online greedy tracker over all boxes of one scene (sorted by frame). Returns (N,) raw track ids."""
    n_total = len(pos)
    gates = gate_speeds(cfg)
    birth_gates = gate_speeds(cfg, "max_speed_mps")
    has_vel = np.all(np.isfinite(vel), axis=1)
    track_of_box = np.full(n_total, -1, dtype=np.int64)
    # Track state, capacity = every box could start a track.
    last_pos = np.zeros((n_total, 2))
    last_t = np.zeros(n_total)
    t_vel = np.zeros((n_total, 2))
    t_vel_known = np.zeros(n_total, dtype=bool)
    t_cls = np.zeros(n_total, dtype=np.int64)
    live = np.zeros(0, dtype=np.int64)
    n_tracks = 0
    a_gain, b_gain = cfg.filter_position_gain, cfg.filter_velocity_gain
    prev_t = None
    for k in range(len(frame_start) - 1):
        s, e = frame_start[k], frame_start[k + 1]
        tk = t_s[k]
        dt_frame = (tk - prev_t) if prev_t is not None else 0.0
        prev_t = tk
        if len(live):
            live = live[tk - last_t[live] <= cfg.max_age_s + 1e-6]
        if e == s:
            continue
        p, v, c, hv = pos[s:e], vel[s:e], cls[s:e], has_vel[s:e]
        if len(live):
            lp, tvk, tc = last_pos[live], t_vel_known[live], t_cls[live]
            gap = tk - last_t[live]  # (T,)
            # Predicted offsets: detection velocity where given (CenterPoint back-projection), else the track's.
            if hv.all():
                pred = lp[None] + v[:, None, :] * gap[None, :, None]
            else:
                vt = np.where(tvk[:, None], t_vel[live], 0.0)
                pred = lp + vt * gap[:, None]  # (T,2)
                if hv.any():
                    pred = np.where(hv[:, None, None], lp[None] + v[:, None, :] * gap[None, :, None], pred[None])
                else:
                    pred = pred[None]
            diff = p[:, None, :] - pred
            dist2 = np.einsum("ntk,ntk->nt", diff, diff)
            # Gate: the class's per-second gate over the frame interval; while neither the detection nor the
            # track has a velocity, the class's top speed over the time since the track was seen.
            gate = np.maximum(cfg.min_gate_m, gates[c] * dt_frame)[:, None]
            if not (hv.all() or tvk.all()):
                no_vel = ~hv[:, None] & ~tvk[None, :]
                gate = np.where(no_vel, np.maximum(gate, birth_gates[c][:, None] * gap[None, :]), gate)
            allowed = (c[:, None] == tc[None, :]) & (dist2 <= gate * gate)
            m = greedy_match(np.where(allowed, dist2, np.inf))  # squared distances: same order
        else:
            m = np.full(e - s, -1, dtype=np.int64)
        matched = m >= 0
        if matched.any():
            tr = live[m[matched]]
            di = np.nonzero(matched)[0]
            gap = tk - last_t[tr]
            gap_c = np.maximum(gap, 1e-6)[:, None]
            known = t_vel_known[tr, None]
            # No detector velocity: an alpha-beta filter on the track (position gain a, velocity gain b);
            # the first match initialises the velocity with the finite difference.
            resid = p[di] - (last_pos[tr] + t_vel[tr] * gap_c)
            ab_pos = np.where(known, p[di] - (1 - a_gain) * resid, p[di])
            ab_vel = np.where(known, t_vel[tr] + b_gain * resid / gap_c, (p[di] - last_pos[tr]) / gap_c)
            # Detector velocity (CenterPoint): the track takes the detection's velocity.
            t_vel[tr] = np.where(hv[di, None], v[di], ab_vel)
            t_vel_known[tr] = True
            last_pos[tr] = np.where(hv[di, None] & (not cfg.filter_positions), p[di], ab_pos)
            last_t[tr] = tk
            track_of_box[s + di] = tr
        born = np.nonzero(~matched)[0]
        if len(born):
            new = np.arange(n_tracks, n_tracks + len(born))
            n_tracks += len(born)
            last_pos[new] = p[born]
            last_t[new] = tk
            t_vel[new] = np.where(hv[born, None], v[born], 0.0)
            t_vel_known[new] = hv[born]
            t_cls[new] = c[born]
            track_of_box[s + born] = new
            live = np.concatenate([live, new])
    return track_of_box


def _filtered_boxes(t_s, frame_start, frame_of_box, allb: Boxes3D, cg, vg, yawg, cls, R, tr, cfg: TrackingConfig,
                    static_ego: bool, looked=None, exact: bool = False):
    """Kalman and offline modes (``actors.track.kalman``, ``actors.track.offline``): the boxes to output, sorted by
    frame (each frame's kept input boxes in input order, then the boxes the tracker made: coasted or filled), as
    (boxes (ego frames), frame_of_box, centre (global), velocity (global), yaw (global), class index, raw track
    ids). Made boxes carry no velocity, no LiDAR count, no instance token. The offline tracker's input boxes take
    its smoothed centres, track sizes and track scores."""
    # Without ego motion in the poses (a log without poses gives identity poses) the tracking frame moves with
    # the ego, while detectors give velocities over the ground (what they are trained on): no measurement of the
    # tracked state then, so the filter uses centres only.
    v_meas = np.full_like(vg, np.nan) if static_ego else vg
    score = allb.score
    if cfg.score_map is not None:  # the detector's scores as the trackers read them
        knots = np.asarray(cfg.score_map, dtype=np.float64)
        score = np.interp(score, knots[:, 0], knots[:, 1])
    if cfg.mode == "offline":
        res = offline_tracking(t_s, frame_start, cg[:, :2], cg[:, 2], v_meas, allb.size_lwh_m, yawg, score, cls, cfg,
                               ground_frame=not static_ego, looked=looked, exact=exact)
    else:
        res = kalman_tracking(t_s, frame_start, cg[:, :2], cg[:, 2], v_meas, allb.size_lwh_m, yawg, score, cls, cfg,
                              ground_frame=not static_ego, looked=looked)
    keep = np.nonzero(res.track_of_box >= 0)[0]
    kept = allb.subset(keep)
    c_keep = cg[keep]
    if cfg.mode == "offline":
        if not exact:  # exact boxes are returned as given (their centres not round-tripped through the city frame)
            c_keep = res.center[keep]
            Rb, tb = R[frame_of_box[keep]], tr[frame_of_box[keep]]
            kept.center_m = np.einsum("nji,nj->ni", Rb, c_keep - tb)  # city_SE3_ego^-1: R^T (c - t)
            kept.size_lwh_m, kept.score = res.size[keep], res.score[keep]
        made = (res.fill_frame, res.fill_track, res.fill_center, res.fill_size, res.fill_yaw, res.fill_score,
                res.fill_birth)
    else:
        made = (res.coast_frame, res.coast_track, np.column_stack([res.coast_xy, res.coast_z]), res.coast_size,
                res.coast_yaw, res.coast_score, res.coast_birth)
    m_frame, m_track, m_center, m_size, m_yaw, m_score, m_birth = made
    m = len(m_frame)
    Rk, tk = R[m_frame], tr[m_frame]
    c_ego = np.einsum("nji,nj->ni", Rk, m_center - tk)
    made_boxes = Boxes3D(c_ego, m_size, m_yaw - np.arctan2(Rk[:, 1, 0], Rk[:, 0, 0]), allb.class_name[m_birth],
                         score=m_score, track_id=m_track)
    boxes = Boxes3D.concat([kept, made_boxes])
    fob = np.concatenate([frame_of_box[keep], m_frame])
    order = np.argsort(fob, kind="stable")
    return (boxes.subset(order), fob[order], np.concatenate([c_keep, m_center])[order],
            np.concatenate([vg[keep], np.full((m, 2), np.nan)])[order],
            np.concatenate([yawg[keep], m_yaw])[order],
            np.concatenate([cls[keep], cls[m_birth]])[order],
            np.concatenate([res.track_of_box[keep], m_track])[order])


def track_scene(timestamps_us, detections: list[Boxes3D], cfg: TrackingConfig,
                city_SE3_ego: list[SE3], looked=None, exact: bool = False) -> list[Boxes3D]:
    """Track one scene's detections.

    timestamps_us (F,) strictly increasing; detections: F Boxes3D in each frame's ego frame;
    city_SE3_ego: F ego poses (identity poses when a log has none: tracks are then ego-relative).
    looked: F bools, the frames the detector saw (None: all); Kalman mode counts a tentative track's misses there.
    exact: the detections are the truth (``Detector.exact``); offline mode then gives identities only (every box
    returned as given, none filled).
    Returns F Boxes3D with ``track_id`` >= 0 (consecutive from 0 in order of first appearance, unique within the
    scene) and ``velocity_mps`` (ego frame of each frame) set by ``cfg.velocity_from_track``: 'missing' fills NaN
    velocities from the track, 'always' replaces all, 'never' keeps the detector's.

    ``cfg.mode`` 'greedy': copies of the inputs, same order, minus boxes of tracks shorter than ``cfg.min_hits``.
    'kalman' (``actors.track.kalman``): each frame holds copies of the input boxes its confirmed tracks took, in
    input order (unconfirmed tracks and low-score detections no track took are dropped), then the track's
    predicted boxes where a confirmed track coasted (score decayed, ``velocity_mps`` NaN before the velocity
    policy, ``num_lidar_pts`` -1, ``instance_token`` '').
    'offline' (``actors.track.offline``): each frame holds copies of the input boxes its kept tracks took, in input
    order, with the smoothed centre, the track's size (rigid classes) and the track's score, then the boxes filled
    where a track missed the frame (as coasted boxes above, with the track's score).
    Headings come from motion only where the poses move (without poses a track's motion is the ego's too).
    With ``cfg.heading_from_motion`` the yaws of boxes without detector velocity and without ``instance_token``
    may be turned by pi (``actors.track.heading``); all other yaws of input boxes are returned unchanged.
    """
    ts = np.asarray(timestamps_us, dtype=np.int64).reshape(-1)
    f = len(ts)
    if len(detections) != f or len(city_SE3_ego) != f:
        raise ValueError(f"track_scene: {f} timestamps, {len(detections)} detection sets and "
                         f"{len(city_SE3_ego)} poses; they must be equal")
    if f > 1 and np.any(np.diff(ts) <= 0):
        raise ValueError("track_scene: timestamps_us must be strictly increasing (one scene, in time order)")
    if f == 0:
        return []
    counts = np.array([len(d) for d in detections], dtype=np.int64)
    frame_start = np.concatenate([[0], np.cumsum(counts)])
    allb = Boxes3D.concat(list(detections))
    frame_of_box = np.repeat(np.arange(f), counts)
    t_s = (ts - ts[0]) / 1e6
    R, tr = _stack_poses(list(city_SE3_ego))
    cg, vg, yawg = to_global(frame_of_box, allb.center_m, allb.velocity_mps, allb.yaw_rad, R, tr)
    cls = class_indices(allb.class_name)
    static_ego = bool(np.all(R == R[:1]) and np.all(tr == tr[:1]))
    if cfg.mode == "greedy":
        raw = _online_tracking(t_s, frame_start, cg[:, :2], vg, cls, cfg)
    else:
        allb, frame_of_box, cg, vg, yawg, cls, raw = _filtered_boxes(t_s, frame_start, frame_of_box, allb, cg, vg,
                                                                     yawg, cls, R, tr, cfg, static_ego, looked,
                                                                     exact)
        counts = np.bincount(frame_of_box, minlength=f)
        frame_start = np.concatenate([[0], np.cumsum(counts)])
    n = len(allb)
    tb = t_s[frame_of_box]
    if cfg.linking.enabled and n:
        v_tr = track_velocity(raw, tb, cg[:, :2], cfg.velocity_window_s)
        v_end = np.where(np.isfinite(vg), vg, v_tr)
        raw = link_fragments(raw, tb, cg[:, :2], v_end, allb.size_lwh_m, cls, cfg,
                             frame_interval_s=float(np.median(np.diff(t_s))) if f > 1 else 0.5)
    keep = np.ones(n, dtype=bool)
    if cfg.min_hits > 1 and n:
        _, inv, hits = np.unique(raw, return_inverse=True, return_counts=True)
        keep = hits[inv] >= cfg.min_hits
    # Consecutive ids in order of first appearance.
    tid = np.full(n, -1, dtype=np.int64)
    if keep.any():
        uniq, first = np.unique(raw[keep], return_index=True)
        order = np.argsort(first)
        remap = np.empty(len(uniq), dtype=np.int64)
        remap[order] = np.arange(len(uniq))
        tid[keep] = remap[np.searchsorted(uniq, raw[keep])]
    vel = allb.velocity_mps.copy()
    v_tr_g = None
    if (cfg.velocity_from_track != "never" or cfg.heading_from_motion) and n:
        v_tr_g = track_velocity(np.where(keep, tid, -1), tb, cg[:, :2], cfg.velocity_window_s)
    if cfg.velocity_from_track != "never" and n:
        Rb = R[frame_of_box][:, :2, :2]
        v_tr_e = np.einsum("nji,nj->ni", Rb, v_tr_g)  # global -> ego: R^T v
        if cfg.velocity_from_track == "always":
            vel = v_tr_e
        else:
            vel = np.where(np.isfinite(vel).all(axis=1)[:, None], vel, v_tr_e)
    yaw = allb.yaw_rad
    if cfg.heading_from_motion and n and not static_ego:
        # Yaw known modulo pi only where the detector gives no velocity; annotations (instance_token) are exact.
        # Without poses a track's motion is relative to the ego (a parked car "drives" backwards): no heading.
        eligible = ~np.isfinite(allb.velocity_mps).all(axis=1) & (allb.instance_token == "")
        flip = heading_flips(np.where(keep, tid, -1), tb, yawg, v_tr_g, eligible,
                             cfg.heading_from_motion_min_speed_mps, cfg.heading_from_motion_min_duration_s)
        yaw = apply_flips(yaw, flip)
    fields = {k: getattr(allb, k) for k in Boxes3D.fields()}
    fields.update(track_id=tid, velocity_mps=vel, yaw_rad=yaw)
    out = Boxes3D(**fields).subset(np.nonzero(keep)[0])  # still sorted by frame: each frame is a slice
    bounds = np.concatenate([[0], np.cumsum(np.bincount(frame_of_box[keep], minlength=f))])
    return [out.subset(slice(bounds[k], bounds[k + 1])) for k in range(f)]
