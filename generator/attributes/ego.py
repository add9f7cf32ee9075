"""Ego motion from the FRAMES table: positions, yaw, velocity and speed from ``city_SE3_ego`` over time.

All arrays are per FRAMES row in the table's own row order. Velocities are finite differences of the
ego origin's city-frame position over the frame timestamps (central inside a scene, one-sided at its ends),
so they do not depend on the log's frame rate (nuScenes keyframes at 2 Hz, AV2 sweeps at 10 Hz).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from generator.attributes.arrays import (KeyIndex, central_difference, column, fixed_list_to_numpy, to_numpy,
                                         unique_strings, codes)

_SPAN_S = 1.0e6  # time offset between scenes when several scenes share one interpolation axis (s)


@dataclass
class EgoStates:
    """Per-frame ego state (N = frames rows, table order).

    scenes: Arrow string array of scene ids (the universe ``scene_code`` indexes);
    scene_code (N,) int64; frame_index (N,) int64; t_s (N,) float64 seconds since the scene's first frame;
    timestamp_us (N,) int64; city_T_ego (N, 4, 4); position_m (N, 3) city frame; yaw_rad (N,) city yaw,
    unwrapped along each scene; velocity_mps (N, 2) city-frame planar velocity; speed_mps (N,) planar speed;
    order (N,) row positions sorted by (scene, time).
    """

    scenes: pa.Array
    scene_code: np.ndarray
    frame_index: np.ndarray
    timestamp_us: np.ndarray
    t_s: np.ndarray
    city_T_ego: np.ndarray
    position_m: np.ndarray
    yaw_rad: np.ndarray
    velocity_mps: np.ndarray
    speed_mps: np.ndarray
    order: np.ndarray

    @property
    def rotation(self) -> np.ndarray:
        return self.city_T_ego[:, :3, :3]

    def frame_key(self, scene_code: np.ndarray, frame_index: np.ndarray) -> np.ndarray:
        return (np.asarray(scene_code, np.int64) << 32) | np.asarray(frame_index, np.int64)

    def lookup(self, scene_code: np.ndarray, frame_index: np.ndarray) -> np.ndarray:
        """FRAMES row for each (scene_code, frame_index); -1 where absent."""
        if not hasattr(self, "_index"):
            self._index = KeyIndex(self.frame_key(self.scene_code, self.frame_index))
        return self._index.find(self.frame_key(scene_code, frame_index))

    def interp(self, values: np.ndarray, scene_code: np.ndarray, t_s: np.ndarray) -> np.ndarray:
        """Linear interpolation of per-frame ``values`` (N, ...) at times ``t_s`` in scenes ``scene_code``;
        NaN outside a scene's time range."""
        return interp_grouped(self.scene_code[self.order], self.t_s[self.order],
                              np.asarray(values)[self.order], scene_code, t_s)

    def scene_t_range(self) -> tuple[np.ndarray, np.ndarray]:
        """(t_min, t_max) per scene code."""
        n = len(self.scenes)
        lo = np.full(n, np.inf)
        hi = np.full(n, -np.inf)
        np.minimum.at(lo, self.scene_code, self.t_s)
        np.maximum.at(hi, self.scene_code, self.t_s)
        return lo, hi


def interp_grouped(group: np.ndarray, t: np.ndarray, values: np.ndarray, q_group: np.ndarray,
                   q_t: np.ndarray) -> np.ndarray:
    """Interpolate ``values`` (N, ...) given at rows sorted by (group, t) at queries (q_group, q_t).

    Each group is interpolated on its own (queries outside the group's [t_min, t_max] get NaN);
    vectorised by laying the groups end to end on one time axis.
    """
    values = np.asarray(values, dtype=np.float64)
    q_group = np.asarray(q_group, dtype=np.int64)
    q_t = np.asarray(q_t, dtype=np.float64)
    width = int(np.prod(values.shape[1:], dtype=np.int64))
    flat = values.reshape(len(values), width)
    out = np.full((len(q_t), width), np.nan)
    if len(group) == 0 or len(q_t) == 0:
        return out.reshape((len(q_t),) + values.shape[1:])
    axis = group.astype(np.float64) * _SPAN_S + t
    qa = q_group.astype(np.float64) * _SPAN_S + q_t
    # group bounds
    first = np.ones(len(group), dtype=bool)
    first[1:] = group[1:] != group[:-1]
    last = np.ones(len(group), dtype=bool)
    last[:-1] = group[:-1] != group[1:]
    g_ids = group[first]
    g_lo = dict_lookup(g_ids, t[first], q_group)
    g_hi = dict_lookup(g_ids, t[last], q_group)
    ok = np.isfinite(g_lo) & (q_t >= g_lo - 1e-9) & (q_t <= g_hi + 1e-9) & np.isfinite(q_t)
    for j in range(flat.shape[1]):  # columns of the value, not rows
        out[ok, j] = np.interp(qa[ok], axis, flat[:, j])
    return out.reshape((len(q_t),) + values.shape[1:])


def dict_lookup(keys_sorted: np.ndarray, vals: np.ndarray, q: np.ndarray) -> np.ndarray:
    """vals[keys_sorted == q] per query (keys unique, sorted); NaN where absent."""
    pos = np.searchsorted(keys_sorted, q)
    pos_c = np.minimum(pos, max(len(keys_sorted) - 1, 0))
    hit = (keys_sorted[pos_c] == q) if len(keys_sorted) else np.zeros(len(q), bool)
    return np.where(hit, vals[pos_c] if len(keys_sorted) else np.nan, np.nan)


def ego_states(frames: pa.Table, scenes: pa.Array | None = None) -> EgoStates:
    """Ego states of every FRAMES row. ``scenes`` fixes the scene universe (default: the frames' scenes)."""
    scenes = unique_strings(frames.column("scene_id")) if scenes is None else scenes
    sc = codes(column(frames, "scene_id"), scenes)
    fi = to_numpy(column(frames, "frame_index"), np.int64)
    ts = to_numpy(column(frames, "timestamp_us"), np.int64)
    T = fixed_list_to_numpy(frames.column("city_SE3_ego"), 16).reshape(-1, 4, 4)
    bad = ~np.isfinite(T).all(axis=(1, 2))
    if bad.any():
        i = int(np.nonzero(bad)[0][0])
        raise ValueError(f"scene {frames.column('scene_id')[i].as_py()}: frame {fi[i]} has no valid city_SE3_ego pose")
    order = np.lexsort((ts, sc))
    t0 = np.full(len(scenes), np.iinfo(np.int64).max, dtype=np.int64)
    if len(sc):
        np.minimum.at(t0, sc, ts)
    t_s = (ts - t0[sc]) / 1e6 if len(sc) else np.zeros(0)
    pos = T[:, :3, 3]
    yaw = np.arctan2(T[:, 1, 0], T[:, 0, 0])
    yaw_sorted = yaw[order]
    # unwrap within scenes: cumulative wrapped differences restart at each scene's first frame
    d = np.diff(yaw_sorted, prepend=yaw_sorted[:1] if len(yaw_sorted) else yaw_sorted)
    d = (d + np.pi) % (2 * np.pi) - np.pi
    sc_sorted = sc[order]
    first = np.ones(len(sc_sorted), dtype=bool)
    first[1:] = sc_sorted[1:] != sc_sorted[:-1]
    d[first] = 0.0
    cum = np.cumsum(d)
    base = np.maximum.accumulate(np.where(first, np.arange(len(cum)), 0)) if len(cum) else np.zeros(0, np.int64)
    unwrapped_sorted = yaw_sorted[base] + (cum - cum[base])
    yaw_unwrapped = np.empty_like(yaw)
    yaw_unwrapped[order] = unwrapped_sorted
    vel_sorted = central_difference(sc_sorted, t_s[order], pos[order][:, :2])
    vel = np.empty((len(sc), 2))
    vel[order] = vel_sorted
    return EgoStates(scenes=scenes, scene_code=sc, frame_index=fi, timestamp_us=ts, t_s=t_s, city_T_ego=T,
                     position_m=pos, yaw_rad=yaw_unwrapped, velocity_mps=vel,
                     speed_mps=np.hypot(vel[:, 0], vel[:, 1]), order=order)


@dataclass
class TrackRows:
    """OBJECTS rows (N, table order) placed on their frames and grouped into tracks: ``row`` (N,) FRAMES row of
    each, ``track`` (N,), ``t_s`` (N,) scene time, ``city_T_ego`` (N, 4, 4) that frame's pose, ``center_ego_m`` and
    ``center_city_m`` (N, 3), ``order`` rows sorted by (scene, track, time), ``group`` (N,) dense (scene, track)
    group of each row and ``group_sorted`` the same in ``order`` (what ``interp_grouped`` takes)."""

    scene_code: np.ndarray
    row: np.ndarray
    track: np.ndarray
    t_s: np.ndarray
    city_T_ego: np.ndarray
    center_ego_m: np.ndarray
    center_city_m: np.ndarray
    order: np.ndarray
    group: np.ndarray
    group_sorted: np.ndarray

    def interp(self, values: np.ndarray, group: np.ndarray, t_s: np.ndarray) -> np.ndarray:
        """Per-row ``values`` (N, ...) interpolated along each row's track at (group, t_s) queries; NaN outside
        the track's time range."""
        return interp_grouped(self.group_sorted, self.t_s[self.order], np.asarray(values)[self.order], group, t_s)


def track_rows(objects: pa.Table, ego: EgoStates) -> TrackRows:
    """``TrackRows`` of OBJECTS rows (centres in the city frame through their own frame's pose). ValueError names
    the scene and frame of an object whose frame is not in the frames ``ego`` was built from."""
    n = objects.num_rows
    sc = codes(column(objects, "scene_id"), ego.scenes)
    fi = to_numpy(column(objects, "frame_index"), np.int64)
    row = ego.lookup(sc, fi)
    if (row < 0).any():
        i = int(np.nonzero(row < 0)[0][0])
        raise ValueError(f"scene {objects.column('scene_id')[i].as_py()}: objects refer to frame {fi[i]} "
                         "which is not in the frames table")
    track = to_numpy(column(objects, "track_id"), np.int64)
    t = ego.t_s[row]
    T = ego.city_T_ego[row]
    center_ego = fixed_list_to_numpy(objects.column("center_ego_m"), 3)
    cg = np.einsum("nij,nj->ni", T[:, :3, :3], center_ego) + T[:, :3, 3]
    order = np.lexsort((t, track, sc))
    keys = np.stack([sc[order], track[order]], axis=1)
    g_sorted = np.zeros(n, dtype=np.int64)
    if n > 1:
        g_sorted[1:] = np.cumsum(np.any(keys[1:] != keys[:-1], axis=1))
    g = np.empty(n, dtype=np.int64)
    g[order] = g_sorted
    return TrackRows(scene_code=sc, row=row, track=track, t_s=t, city_T_ego=T, center_ego_m=center_ego,
                     center_city_m=cg, order=order, group=g, group_sorted=g_sorted)
