"""The per-keyframe lateral offset of the ego from its logged path (a pure function of a scene's frames)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from generator.families.api import ego_states, interp_grouped

LANE_OFFSETS = pa.schema([
    pa.field("scene_id", pa.string(), False), pa.field("frame_index", pa.int32(), False),
    pa.field("timestamp_us", pa.int64(), False), pa.field("horizon_s", pa.float64(), False),
    pa.field("lateral_offset_m", pa.float64(), False),  # positive: left of the heading line at the keyframe
    pa.field("forward_m", pa.float64(), False),  # along it
], metadata={"drivegen.schema": "lane_offsets", "drivegen.schema_version": "1.0",
             "doc": "ego lane keeping: per keyframe, where the ego is horizon_s later in the keyframe's ego frame"})


def lane_offsets(frames: pa.Table, horizon_s: float) -> pa.Table:
    """One row per keyframe (``is_anchor``) whose log goes on ``horizon_s`` past it: the ego's position then
    (interpolated between frames) in the keyframe's ego frame, x forward and y left."""
    ego = ego_states(frames)
    o = ego.order
    later = interp_grouped(ego.scene_code[o], ego.t_s[o], ego.position_m[o, :2], ego.scene_code, ego.t_s + horizon_s)
    anchor = frames.column("is_anchor").fill_null(False).to_numpy(zero_copy_only=False)
    keep = np.flatnonzero(anchor & np.isfinite(later).all(axis=1))
    keep = keep[np.lexsort((ego.frame_index[keep], ego.scene_code[keep]))]
    d = later[keep] - ego.position_m[keep, :2]
    c, s = np.cos(ego.yaw_rad[keep]), np.sin(ego.yaw_rad[keep])
    return pa.Table.from_pydict({
        "scene_id": ego.scenes.take(pa.array(ego.scene_code[keep])),
        "frame_index": pa.array(ego.frame_index[keep], pa.int32()),
        "timestamp_us": pa.array(ego.timestamp_us[keep], pa.int64()),
        "horizon_s": pa.array(np.full(len(keep), float(horizon_s))),
        "lateral_offset_m": pa.array(-s * d[:, 0] + c * d[:, 1]),
        "forward_m": pa.array(c * d[:, 0] + s * d[:, 1]),
    }, schema=LANE_OFFSETS)
