"""Ego-centric object attributes (STRIDE-QA §4.2 "Attributes Extractor") and pairwise relations.

Conventions (the ego frame of the row's own frame: x forward, y left, z up; origin = the log's ego origin,
the centre of the rear axle for nuScenes and Argoverse 2):

- ``distance_m``: 3D Euclidean distance from the ego origin to the box's geometric centre.
- ``bearing_deg``: ``atan2(y, x)`` of the box centre in degrees: 0 = straight ahead, counter-clockwise
  positive (left = +90, right = -90), range [-180, 180] (straight behind = +180).
- ``clock``: 12 = ahead, 3 = right, 6 = behind, 9 = left; each hour covers 30 degrees centred on it.
  A bearing exactly between two hours goes to the hour nearer the front (|bearing| 15 -> 12,
  +45 -> 11, +135 (behind-left) -> 8, -135 (behind-right) -> 4), so the labels are mirror-symmetric.
- ``side``: 'left' when y >= 0 else 'right'.
- ``front_back``: where the box lies along the ego's length (``along_ego``; the ego's body: the config's
  ``ego`` section, which a run takes from its logs' vehicle): 'front' when it lies wholly ahead of the ego's
  front bumper, 'behind' when wholly behind its rear bumper, 'beside' when it overlaps the ego's length (a
  pedestrian level with the driver's door is beside the ego, not in front of its rear axle).
- ``speed_mps``/``velocity_ego_mps``: the object's own (ground) velocity, not relative to the ego, in
  the ego axes. From the track's ``velocity_global_mps`` when known, else the ego-frame velocity rotated
  to the city frame, else finite differences of the track's global centres over time (§4.2: "from the
  change in the center position of its bounding box over time"); NaN for a single-observation object.
- ``heading_ego_deg``: box yaw in the ego frame, degrees in [-180, 180).
- ``ego_speed_mps``: planar speed of the ego origin from finite differences of ``city_SE3_ego``.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import (central_difference, codes, column, fixed_list_to_numpy,
                                         numpy_to_fixed_list, to_numpy)
from generator.attributes.ego import ego_states
from schemas.config import EgoBodyConfig
from schemas.tables import ATTRIBUTES
from schemas.vocab import EGO_LONGITUDINAL


def bearing_deg(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Bearing of ego-frame points (N,) x, y -> degrees, 0 = forward, CCW positive, in [-180, 180]."""
    return np.degrees(np.arctan2(np.asarray(y, np.float64), np.asarray(x, np.float64)))


def clock_from_bearing(bearing: np.ndarray) -> np.ndarray:
    """Clock position (int8, 1..12) of bearings in degrees (0 = ahead, CCW positive). See module doc."""
    b = np.asarray(bearing, dtype=np.float64)
    hours_off = np.round(np.abs(b) / 30.0, 9)  # hours away from 12, 0..6 (rounded to make exact ties stable)
    n = np.ceil(hours_off - 0.5).astype(np.int64)  # ties go towards the front
    n = np.clip(n, 0, 6)
    clock = np.where(b >= 0, 12 - n, n)  # left side counts back from 12, right side forward from 12
    clock = np.where(n == 0, 12, clock)
    return clock.astype(np.int8)


BEHIND, IN_FRONT, BESIDE = range(3)  # codes of along_ego, indices into schemas.vocab.EGO_LONGITUDINAL


def along_ego(x: np.ndarray, length: np.ndarray, width: np.ndarray, heading_deg: np.ndarray,
              body: EgoBodyConfig) -> tuple[np.ndarray, np.ndarray]:
    """Where boxes lie along the ego's length: (code (N,) int8: ``BEHIND``, ``IN_FRONT`` or ``BESIDE``, margin
    (N,) metres).

    ``x`` (N,) box centres along the ego's x axis (ego frame, origin at the rear axle), ``length``/``width``
    (N,) box sizes, ``heading_deg`` (N,) box yaw in the ego frame (NaN: taken along the ego's axis); ``body``:
    the ego's body (``front_m`` ahead of the origin to the front bumper, ``rear_m`` behind it to the rear
    bumper). The box's extent along x is its footprint's: centre +- (|l/2 cos h| + |w/2 sin h|). In front: the
    box's nearest end is ahead of the front bumper; behind: its far end is behind the rear bumper; beside: it
    overlaps the ego's length. The margin is how far the box would have to move along x to change its answer
    (the distance of its ends from the bumpers): a question whose margin is within detection noise is not
    asked (``qa.relation_margins.ego_longitudinal_m``). A box of unknown size counts as its centre."""
    x = np.asarray(x, np.float64)
    h = np.radians(np.nan_to_num(np.asarray(heading_deg, np.float64)))
    ext = np.abs(np.asarray(length, np.float64) / 2 * np.cos(h)) + np.abs(np.asarray(width, np.float64) / 2 * np.sin(h))
    ext = np.where(np.isfinite(ext), ext, 0.0)
    ahead = (x - ext) - body.front_m  # > 0: wholly ahead of the front bumper, by this much
    behind = -body.rear_m - (x + ext)  # > 0: wholly behind the rear bumper
    code = np.where(ahead > 0, IN_FRONT, np.where(behind > 0, BEHIND, BESIDE)).astype(np.int8)
    return code, np.minimum(np.abs(ahead), np.abs(behind))


def wrap_deg(a: np.ndarray) -> np.ndarray:
    """Wrap degrees to [-180, 180)."""
    return (np.asarray(a, np.float64) + 180.0) % 360.0 - 180.0


def _rotate_xy(R: np.ndarray, v_xy: np.ndarray, inverse: bool) -> np.ndarray:
    """Rotate planar vectors by the yaw part of (N, 3, 3) rotations (inverse = city -> ego)."""
    v3 = np.concatenate([v_xy, np.zeros((len(v_xy), 1))], axis=1)
    out = np.einsum("nji,nj->ni", R, v3) if inverse else np.einsum("nij,nj->ni", R, v3)
    return out[:, :2]


def compute_attributes(objects: pa.Table, frames: pa.Table, body: EgoBodyConfig | None = None) -> pa.Table:
    """Per object and frame, ego-centric attributes (schemas.tables.ATTRIBUTES), one row per OBJECTS row in order.

    objects: OBJECTS rows (any number of scenes); frames: FRAMES rows covering every (scene_id, frame_index)
    the objects use (poses give the ego speed and rotate global velocities into the ego frame); body: the ego's
    body (the run config's ``ego``; default: ``EgoBodyConfig()``, the generated logs' ego) for ``front_back``.
    Raises ValueError naming the scene and frame when an object refers to a frame that is absent.
    """
    n = objects.num_rows
    ego = ego_states(frames)
    sc = codes(column(objects, "scene_id"), ego.scenes)
    fi = to_numpy(column(objects, "frame_index"), np.int64)
    row = ego.lookup(sc, fi) if n else np.zeros(0, np.int64)
    missing = row < 0
    if missing.any():
        i = int(np.nonzero(missing)[0][0])
        raise ValueError(f"scene {objects.column('scene_id')[i].as_py()}: objects refer to frame {fi[i]} "
                         f"which is not in the frames table ({int(missing.sum())} rows affected)")
    center = fixed_list_to_numpy(objects.column("center_ego_m"), 3)
    size = fixed_list_to_numpy(objects.column("size_lwh_m"), 3)
    yaw = to_numpy(column(objects, "yaw_ego_rad"), np.float64, fill=np.nan)
    x, y, z = center[:, 0], center[:, 1], center[:, 2]
    dist = np.sqrt(x * x + y * y + z * z)
    bear = bearing_deg(x, y)
    R = ego.rotation[row] if n else np.zeros((0, 3, 3))

    # object velocity in the city frame: tracker's value, else rotated ego-frame value, else track differences
    v_glob = fixed_list_to_numpy(objects.column("velocity_global_mps"), 2)
    v_ego_in = fixed_list_to_numpy(objects.column("velocity_ego_mps"), 2)
    need = ~np.isfinite(v_glob).all(axis=1)
    if need.any():
        from_ego = _rotate_xy(R[need], v_ego_in[need], inverse=False)
        v_glob[need] = from_ego
    need = ~np.isfinite(v_glob).all(axis=1)
    track = to_numpy(column(objects, "track_id"), np.int64)
    if need.any():
        v_glob[need] = _track_velocity(objects, sc, track, ego, row, center)[need]
    v_ego = _rotate_xy(R, v_glob, inverse=True) if n else np.zeros((0, 2))
    speed = np.hypot(v_glob[:, 0], v_glob[:, 1])

    side = pc.if_else(pa.array(y >= 0), "left", "right")
    heading = wrap_deg(np.degrees(yaw))
    along, _ = along_ego(x, size[:, 0], size[:, 1], heading, body or EgoBodyConfig())
    front_back = pc.take(pa.array(EGO_LONGITUDINAL), pa.array(along.astype(np.int32)))
    table = pa.table({
        "scene_id": column(objects, "scene_id"),
        "frame_index": column(objects, "frame_index"),
        "timestamp_us": column(objects, "timestamp_us"),
        "track_id": column(objects, "track_id"),
        "class_name": column(objects, "class_name"),
        "instance_token": column(objects, "instance_token"),
        "x_ego_m": x, "y_ego_m": y, "z_ego_m": z,
        "distance_m": dist, "bearing_deg": bear, "clock": clock_from_bearing(bear),
        "side": side, "front_back": front_back,
        "length_m": size[:, 0], "width_m": size[:, 1], "height_m": size[:, 2],
        "speed_mps": speed, "velocity_ego_mps": numpy_to_fixed_list(v_ego, 2),
        "heading_ego_deg": heading,
        "ego_speed_mps": ego.speed_mps[row] if n else np.zeros(0),
    })
    return table.cast(ATTRIBUTES)


def _track_velocity(objects: pa.Table, sc: np.ndarray, track: np.ndarray, ego, row: np.ndarray,
                    center_ego: np.ndarray) -> np.ndarray:
    """City-frame velocity (N, 2) by central differences of each track's global centre over time.

    Global centres come from ``center_global_m`` where present, else from the ego centre and the pose.
    Untracked objects (track_id -1) get NaN.
    """
    cg = fixed_list_to_numpy(objects.column("center_global_m"), 3)
    bad = ~np.isfinite(cg).all(axis=1)
    if bad.any():
        T = ego.city_T_ego[row[bad]]
        cg[bad] = np.einsum("nij,nj->ni", T[:, :3, :3], center_ego[bad]) + T[:, :3, 3]
    t = ego.t_s[row]
    order = np.lexsort((t, track, sc))
    grp = np.stack([sc[order], track[order]], axis=1)
    g = np.zeros(len(order), dtype=np.int64)
    if len(order) > 1:
        g[1:] = np.cumsum(np.any(grp[1:] != grp[:-1], axis=1))
    v_sorted = central_difference(g, t[order], cg[order][:, :2])
    v = np.empty((len(order), 2))
    v[order] = v_sorted
    v[track < 0] = np.nan
    return v


def pair_relations(attributes: pa.Table, a_idx: np.ndarray, b_idx: np.ndarray) -> pa.Table:
    """Relations between object A and object B for candidate pairs (rows of one frame of ``attributes``).

    a_idx, b_idx (P,) row positions into ``attributes`` (ATTRIBUTES schema). Columns, all vectorised over pairs
    and stated in the shared ego frame of the pair's frame:
    ``a_left_of_b`` (y_A > y_B), ``a_in_front_of_b`` (x_A > x_B), ``a_bigger_than_b`` (box volume),
    ``a_taller_than_b`` (height), ``a_wider_than_b`` (width), the margins behind them
    (``lateral_gap_m`` = y_A - y_B, ``longitudinal_gap_m`` = x_A - x_B, ``volume_ratio`` = V_A / V_B,
    ``height_diff_m``, ``width_diff_m``), ``distance_m`` between the two box centres (3D) and
    ``direction_deg``: the bearing of B as seen from A in ego axes (atan2(y_B - y_A, x_B - x_A); 0 = B lies
    ahead of A along the ego's forward axis, CCW positive, [-180, 180]) with its ``direction_clock``.
    SpatialRGPT's other object-centric quantities, from the same box centres: ``horizontal_distance_m``
    (in the ground plane, hypot(x_B - x_A, y_B - y_A)), ``vertical_distance_m`` (|z_A - z_B|) with
    ``a_above_b`` (z_A > z_B) and its margin ``vertical_gap_m`` = z_A - z_B, and ``a_closer_than_b`` (A's
    centre nearer the ego origin) with ``range_gap_m`` = |A| - |B|.
    """
    a_idx = np.asarray(a_idx, dtype=np.int64)
    b_idx = np.asarray(b_idx, dtype=np.int64)
    get = {k: to_numpy(column(attributes, k), np.float64)
           for k in ("x_ego_m", "y_ego_m", "z_ego_m", "length_m", "width_m", "height_m")}
    xa, ya, za = (get[k][a_idx] for k in ("x_ego_m", "y_ego_m", "z_ego_m"))
    xb, yb, zb = (get[k][b_idx] for k in ("x_ego_m", "y_ego_m", "z_ego_m"))
    vol_a = get["length_m"][a_idx] * get["width_m"][a_idx] * get["height_m"][a_idx]
    vol_b = get["length_m"][b_idx] * get["width_m"][b_idx] * get["height_m"][b_idx]
    dh = get["height_m"][a_idx] - get["height_m"][b_idx]
    dw = get["width_m"][a_idx] - get["width_m"][b_idx]
    direction = bearing_deg(xb - xa, yb - ya)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = vol_a / vol_b
    horizontal = np.hypot(xb - xa, yb - ya)
    range_gap = np.sqrt(xa * xa + ya * ya + za * za) - np.sqrt(xb * xb + yb * yb + zb * zb)
    return pa.table({
        "a_row": a_idx, "b_row": b_idx,
        "a_left_of_b": ya > yb, "a_in_front_of_b": xa > xb, "a_bigger_than_b": vol_a > vol_b,
        "a_taller_than_b": dh > 0, "a_wider_than_b": dw > 0, "a_above_b": za > zb, "a_closer_than_b": range_gap < 0,
        "lateral_gap_m": ya - yb, "longitudinal_gap_m": xa - xb, "volume_ratio": ratio,
        "height_diff_m": dh, "width_diff_m": dw, "vertical_gap_m": za - zb, "range_gap_m": range_gap,
        "distance_m": np.sqrt(horizontal ** 2 + (zb - za) ** 2), "horizontal_distance_m": horizontal,
        "vertical_distance_m": np.abs(za - zb),
        "direction_deg": direction, "direction_clock": clock_from_bearing(direction),
    })
