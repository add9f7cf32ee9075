"""This family's run tables (Arrow schemas, units in column names as in ``schemas.tables``)."""
from __future__ import annotations

import pyarrow as pa

from schemas.tables import IMAGE, _schema, b, f64, i32, i64, s, vec2, vec3, vec4


INTENTION_SAMPLES = _schema("intention_samples", [
    pa.field("sample_id", s, False),  # = the QA row's qa_id
    pa.field("scene_id", s, False), pa.field("frame_index", i32, False), pa.field("timestamp_us", i64),
    pa.field("split", s), pa.field("level", s, False),  # 'low' (atomic) | 'high'
    pa.field("kind", s, False),  # schemas.vocab.INSTRUCTION_KINDS
    pa.field("instruction", s, False),  # the QA question: the instruction as a model reads it
    pa.field("instruction_low", s),  # the same keyframe's atomic instruction, e.g. 'Turn Left, Decelerate'
    pa.field("region_id", i32), pa.field("target_track_id", i64), pa.field("target_class", s),
    pa.field("images", pa.list_(IMAGE)),  # every camera at the keyframe
    pa.field("ego_speed_mps", f64),
    pa.field("past_states", pa.list_(vec4)),  # x_m, y_m, yaw_rad, speed_mps, BEV ego frame, oldest first (NaN: none)
    pa.field("future_xy_ego_m", pa.list_(vec2)),  # the logged K waypoints (ground truth), BEV ego frame
    pa.field("waypoint_step_s", f64),
    # success predicate: maneuver / speed status (null: any); slow: Decelerate or Stop; goal 'none' |
    # 'behind' (bumper gap in [gap_min_m, gap_max_m], |lateral| <= lateral_max_m) | 'ahead' (target's centre
    # at least -gap_max_m behind the ego's) | 'clear' (distance to the target >= clearance_m), about target |
    # 'left' / 'right' (pull over: not turning, ends >= gap_min_m to that side, end speed (last waypoint step)
    # <= end_speed_max_ratio x ego_speed_mps)
    pa.field("maneuver", s), pa.field("speed_status", s), pa.field("slow", b, False), pa.field("goal", s, False),
    pa.field("gap_min_m", f64), pa.field("gap_max_m", f64), pa.field("lateral_max_m", f64),
    pa.field("clearance_m", f64), pa.field("end_speed_max_ratio", f64),
    # road edges: the ego's pose in the log's map frame (x_m, y_m, yaw_rad) and the map of its paved surface
    # (a nuScenes semantic-prior mask PNG, absolute path, and its metres per pixel); null map: no road edges
    pa.field("ego_pose_map", vec3), pa.field("map_path", s), pa.field("map_resolution_m", f64),
], "Intention-Drive planning samples: instruction, images, past states, waypoints and success predicate")


INTENTION_OBJECTS = _schema("intention_objects", [
    pa.field("scene_id", s, False), pa.field("frame_index", i32, False), pa.field("track_id", i64, False),
    pa.field("class_name", s), pa.field("xy_ego_m", vec2), pa.field("heading_ego_rad", f64),
    pa.field("size_lw_m", vec2), pa.field("future_xy_ego_m", pa.list_(vec2)),  # NaN after the track ends
    pa.field("future_heading_ego_rad", pa.list_(f64)), pa.field("intent_lateral", s),
], "tracked objects at each Intention-Drive sample and their logged future (BEV ego frame of the sample)")

