"""Behaviour labels (schemas.tables.LABELS): ego maneuver and speed status (Intention-Drive's atomic
vocabulary), VRU intent (DRAMA-X's lateral x vertical taxonomy) and future waypoints.

Ego maneuver at frame time t, from the ego poses in the window [t - W/2, t + W/2] (clipped to the scene;
W = ``maneuver_window_s``; no label when less than ``min_window_s`` of it is available):

- ``Stop``: planar ego speed at t below ``stop_speed_mps``;
- ``Turn Left`` / ``Turn Right``: the ego is turning now — mean yaw rate over [t - T/2, t + T/2]
  (T = ``turn_window_s``) at least ``turn_rate_deg_s`` — and the heading changes by at least
  ``turn_min_heading_deg`` over the whole window W (a lane change turns out and back: its net change is
  small); sign: left = counter-clockwise;
- ``Change Lane Left`` / ``Change Lane Right``: otherwise, when the window's end point lies at least
  ``lane_change_m`` to the left (right) both of the chord direction (start heading + half the heading
  change) and of the start heading, drawn through the start point, and the heading changes by at most
  ``lane_change_max_heading_deg`` over the window (a lane change turns out and back). A constant-curvature arc (a curved road)
  has zero offset from its chord; a lane change does not. Requiring the same side of the start heading too
  rejects windows that only reach into the beginning of a turn or of a lane change (their chord offset has
  the opposite sign);
- ``Straight`` otherwise.

Speed status at t: a = (v(t + h) - v(t - h)) / 2h with h = ``accel_half_window_s`` (clipped to the scene):
``Accelerate`` if a >= ``accel_mps2``, ``Decelerate`` if a <= -``accel_mps2``, else ``Maintain Speed``.

VRU intent (pedestrian, bicycle, motorcycle) at t, from the track's road-relative (city-frame) displacement
over the next ``intent_horizon_s`` (at least half of it must be tracked, else no label), expressed at the
object's position as seen from the ego (DRAMA-X: camera motion removed, direction referred to the ego):
lateral = component across the ego->object line of sight (+ = to the ego's left as seen from the ego),
vertical = component along it (- = towards the ego). A component whose mean rate exceeds
``intent_speed_mps`` gives ``goes to the left``/``goes to the right`` and ``moves towards ego vehicle``/
``moves away from ego vehicle``; otherwise ``stationary``.

Future waypoints: K = ``num_waypoints`` points ``waypoint_step_s`` apart (t + step, ..., t + K step), the
ego origin (ego rows) or the box centre (agent rows), as (x, y) in the CURRENT frame's ego frame; NaN
beyond the end of the log or the track.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import column, to_numpy
from generator.attributes.ego import EgoStates, ego_states, interp_grouped, track_rows
from schemas.config import LabelsConfig
from schemas.tables import LABELS
from schemas.vocab import INTENT_LATERAL, INTENT_VERTICAL, MANEUVERS, SPEED_STATUS, VRU_CLASSES


def _take_labels(names: tuple[str, ...], idx: np.ndarray) -> pa.Array:
    """Vocabulary strings by index; -1 -> null."""
    arr = pa.array(np.where(idx < 0, 0, idx), pa.int32())
    out = pc.take(pa.array(names, pa.string()), arr)
    return pc.if_else(pa.array(idx < 0), pa.scalar(None, pa.string()), out)


def _waypoint_column(xy: np.ndarray) -> pa.Array:
    """(N, K, 2) -> list<fixed_size_list<float64, 2>> with K entries per row."""
    n, k = xy.shape[:2]
    pts = pa.FixedSizeListArray.from_arrays(pa.array(xy.reshape(-1)), 2)
    return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * k), pts)


def ego_labels(ego: EgoStates, th: LabelsConfig) -> dict[str, np.ndarray]:
    """Maneuver and speed-status codes (indices into MANEUVERS / SPEED_STATUS, -1 = none) and (N, K, 2)
    ego waypoints for every FRAMES row."""
    n = len(ego.scene_code)
    lo, hi = ego.scene_t_range()
    s_lo, s_hi = lo[ego.scene_code], hi[ego.scene_code]
    t = ego.t_s
    t0 = np.maximum(t - th.maneuver_window_s / 2, s_lo)
    t1 = np.minimum(t + th.maneuver_window_s / 2, s_hi)
    dur = t1 - t0
    yaw0 = ego.interp(ego.yaw_rad, ego.scene_code, t0)
    yaw1 = ego.interp(ego.yaw_rad, ego.scene_code, t1)
    p0 = ego.interp(ego.position_m[:, :2], ego.scene_code, t0)
    p1 = ego.interp(ego.position_m[:, :2], ego.scene_code, t1)
    dyaw = yaw1 - yaw0
    d = p1 - p0
    chord = yaw0 + dyaw / 2
    off_chord = -np.sin(chord) * d[:, 0] + np.cos(chord) * d[:, 1]  # left of the chord direction
    off_start = -np.sin(yaw0) * d[:, 0] + np.cos(yaw0) * d[:, 1]  # left of the start heading
    off_end = -np.sin(yaw1) * d[:, 0] + np.cos(yaw1) * d[:, 1]  # left of the end heading
    same = (off_chord * off_start > 0) & (off_chord * off_end > 0)
    # a lane change turns out and back: a window whose heading changes more reaches into a turn
    same &= np.abs(np.degrees(dyaw)) <= th.lane_change_max_heading_deg
    lateral = np.where(same, np.sign(off_chord) * np.minimum(np.abs(off_chord), np.abs(off_start)), 0.0)
    tt0 = np.maximum(t - th.turn_window_s / 2, s_lo)
    tt1 = np.minimum(t + th.turn_window_s / 2, s_hi)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.degrees(ego.interp(ego.yaw_rad, ego.scene_code, tt1)
                          - ego.interp(ego.yaw_rad, ego.scene_code, tt0)) / (tt1 - tt0)
    turning = np.abs(np.degrees(dyaw)) >= th.turn_min_heading_deg
    man = np.zeros(n, dtype=np.int64)  # Straight
    man = np.where(lateral >= th.lane_change_m, 3, man)
    man = np.where(lateral <= -th.lane_change_m, 4, man)
    man = np.where(turning & (rate >= th.turn_rate_deg_s), 1, man)
    man = np.where(turning & (rate <= -th.turn_rate_deg_s), 2, man)
    man = np.where(ego.speed_mps < th.stop_speed_mps, 5, man)
    man = np.where((dur >= th.min_window_s) & np.isfinite(ego.speed_mps), man, -1)

    h = th.accel_half_window_s
    ta = np.maximum(t - h, s_lo)
    tb = np.minimum(t + h, s_hi)
    va = ego.interp(ego.speed_mps, ego.scene_code, ta)
    vb = ego.interp(ego.speed_mps, ego.scene_code, tb)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = (vb - va) / (tb - ta)
    spd = np.where(acc >= th.accel_mps2, 0, np.where(acc <= -th.accel_mps2, 1, 2))
    spd = np.where(np.isfinite(acc) & (tb - ta > 0), spd, -1)

    steps = th.waypoint_step_s * np.arange(1, th.num_waypoints + 1)
    qt = (t[:, None] + steps[None, :]).reshape(-1)
    qs = np.repeat(ego.scene_code, th.num_waypoints)
    fut = ego.interp(ego.position_m, qs, qt).reshape(n, th.num_waypoints, 3)
    rel = fut - ego.position_m[:, None, :]
    wp = np.einsum("nji,nkj->nki", ego.rotation, rel)[..., :2]  # R^T (p - t): city -> current ego frame
    return {"maneuver": man, "speed_status": spd, "waypoints": wp, "accel_mps2": acc, "yaw_rate_deg_s": rate,
            "lateral_offset_m": lateral}


def agent_labels(objects: pa.Table, ego: EgoStates, th: LabelsConfig) -> dict[str, np.ndarray]:
    """Intent codes and (N, K, 2) waypoints for every OBJECTS row (untracked rows get none)."""
    n = objects.num_rows
    tr = track_rows(objects, ego)  # centres in the city frame, consistent with each frame's pose
    track, t, center_ego, T, cg = tr.track, tr.t_s, tr.center_ego_m, tr.city_T_ego, tr.center_city_m
    order, g, g_sorted = tr.order, tr.group, tr.group_sorted
    t_sorted, cg_sorted = t[order], cg[order]
    # track end time per row
    last = np.ones(n, dtype=bool)
    if n > 1:
        last[:-1] = g_sorted[:-1] != g_sorted[1:]
    g_end = np.empty(int(g_sorted.max()) + 1 if n else 0)
    g_end[g_sorted[last]] = t_sorted[last]
    t_end = g_end[g] if n else np.zeros(0)

    H = np.minimum(th.intent_horizon_s, t_end - t)
    future = interp_grouped(g_sorted, t_sorted, cg_sorted, g, t + H)
    d_city = (future - cg)[:, :2]
    R = T[:, :3, :3]
    d3 = np.concatenate([d_city, np.zeros((n, 1))], axis=1)
    d_ego = np.einsum("nji,nj->ni", R, d3)[:, :2]
    p = center_ego[:, :2]
    r = np.linalg.norm(p, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        u = p / r[:, None]
        lat = (-u[:, 1] * d_ego[:, 0] + u[:, 0] * d_ego[:, 1]) / H
        rad = (u[:, 0] * d_ego[:, 0] + u[:, 1] * d_ego[:, 1]) / H
    v = th.intent_speed_mps
    lat_code = np.where(lat >= v, 0, np.where(lat <= -v, 1, 2))
    ver_code = np.where(rad <= -v, 0, np.where(rad >= v, 1, 2))
    cls = column(objects, "class_name")
    is_vru = to_numpy(pc.is_in(cls, value_set=pa.array(VRU_CLASSES)), bool, fill=False)
    ok = is_vru & (track >= 0) & (H >= 0.5 * th.intent_horizon_s) & (r > 0) & np.isfinite(lat)
    lat_code = np.where(ok, lat_code, -1)
    ver_code = np.where(ok, ver_code, -1)

    steps = th.waypoint_step_s * np.arange(1, th.num_waypoints + 1)
    qt = (t[:, None] + steps[None, :]).reshape(-1)
    qg = np.repeat(g, th.num_waypoints)
    fut = interp_grouped(g_sorted, t_sorted, cg_sorted, qg, qt).reshape(n, th.num_waypoints, 3)
    rel = fut - T[:, None, :3, 3]
    wp = np.einsum("nji,nkj->nki", R, rel)[..., :2]
    wp[track < 0] = np.nan
    return {"intent_lateral": lat_code, "intent_vertical": ver_code, "waypoints": wp,
            "lateral_rate_mps": lat, "radial_rate_mps": rad}


def compute_labels(objects: pa.Table, frames: pa.Table, attributes: pa.Table | None = None,
                   thresholds: LabelsConfig | None = None) -> pa.Table:
    """LABELS rows: one 'ego' row per FRAMES row (maneuver, speed status, ego waypoints) followed by one
    'agent' row per tracked OBJECTS row (track_id >= 0): VRU intent (null for other classes) and the
    object's future centre waypoints. ``attributes`` (ATTRIBUTES for ``objects``) is accepted for symmetry
    with the pipeline stage; labels are derived from objects and poses directly.
    """
    th = thresholds or LabelsConfig()
    ego = ego_states(frames, scenes=None)
    el = ego_labels(ego, th)
    n_f = frames.num_rows
    null_s = pa.nulls(n_f, pa.string())
    ego_tab = pa.table({
        "scene_id": column(frames, "scene_id"), "frame_index": column(frames, "frame_index"),
        "timestamp_us": column(frames, "timestamp_us"), "subject": pa.array(["ego"] * 1, pa.string()).take(
            pa.array(np.zeros(n_f, np.int32))),
        "track_id": pa.array(np.full(n_f, -1, np.int64)), "class_name": null_s,
        "maneuver": _take_labels(MANEUVERS, el["maneuver"]),
        "speed_status": _take_labels(SPEED_STATUS, el["speed_status"]),
        "intent_lateral": null_s, "intent_vertical": null_s,
        "future_xy_ego_m": _waypoint_column(el["waypoints"]),
    })
    tracked = objects.filter(pc.greater_equal(objects.column("track_id"), 0)) if objects.num_rows else objects
    al = agent_labels(tracked, ego, th)
    n_a = tracked.num_rows
    null_a = pa.nulls(n_a, pa.string())
    agent_tab = pa.table({
        "scene_id": column(tracked, "scene_id"), "frame_index": column(tracked, "frame_index"),
        "timestamp_us": column(tracked, "timestamp_us"),
        "subject": pa.array(["agent"], pa.string()).take(pa.array(np.zeros(n_a, np.int32))),
        "track_id": column(tracked, "track_id"), "class_name": column(tracked, "class_name"),
        "maneuver": null_a, "speed_status": null_a,
        "intent_lateral": _take_labels(INTENT_LATERAL, al["intent_lateral"]),
        "intent_vertical": _take_labels(INTENT_VERTICAL, al["intent_vertical"]),
        "future_xy_ego_m": _waypoint_column(al["waypoints"]),
    })
    return pa.concat_tables([ego_tab.cast(LABELS), agent_tab.cast(LABELS)])
