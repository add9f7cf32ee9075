"""Arrow schemas for every table drivegen reads or writes. Declared once; readers and writers use these.

Units ride in column names (``_m``, ``_deg``, ``_mps``, ``_us``); frames too (``_ego`` = the ego frame of
that row's frame, x forward / y left / z up; ``_global`` = the log's city frame). Transforms are
row-major flattened 4x4 matrices named ``a_SE3_b``. Each schema carries ``drivegen.schema`` and
``drivegen.schema_version`` in its metadata; bump the version when a column changes meaning.
"""
from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = "1.0"

f64, f32, i64, i32, i8, s, b = pa.float64(), pa.float32(), pa.int64(), pa.int32(), pa.int8(), pa.string(), pa.bool_()
vec3 = pa.list_(f64, 3)
vec2 = pa.list_(f64, 2)
box2d = pa.list_(f64, 4)  # x1, y1, x2, y2 in pixels
mat4 = pa.list_(f64, 16)
mat3 = pa.list_(f64, 9)
RLE = pa.struct([("size", pa.list_(i32, 2)), ("counts", s)])  # COCO RLE (pycocotools), size = [height, width]


def _schema(name: str, fields: list[pa.Field], doc: str) -> pa.Schema:
    return pa.schema(fields, metadata={"drivegen.schema": name, "drivegen.schema_version": SCHEMA_VERSION,
                                       "doc": doc})


SCENES = _schema("scenes", [
    pa.field("scene_id", s, False), pa.field("source", s, False), pa.field("log_name", s),
    pa.field("num_frames", i32), pa.field("num_anchors", i32), pa.field("duration_s", f64),
    pa.field("frame_interval_s", f64),
], "one row per scene of the input logs")

CAMERA = pa.struct([("name", s), ("image_path", s), ("width_px", i32), ("height_px", i32),
                    ("K", mat3), ("ego_SE3_cam", mat4)])

FRAMES = _schema("frames", [
    pa.field("scene_id", s, False), pa.field("frame_index", i32, False), pa.field("timestamp_us", i64, False),
    pa.field("token", s), pa.field("is_anchor", b), pa.field("city_SE3_ego", mat4), pa.field("ego_SE3_lidar", mat4),
    pa.field("lidar_path", s), pa.field("lidar_format", s), pa.field("cameras", pa.list_(CAMERA)),
], "one row per frame: timestamps, sensor files, calibration and ego pose")

OBJECTS = _schema("objects", [
    pa.field("scene_id", s, False), pa.field("frame_index", i32, False), pa.field("timestamp_us", i64, False),
    pa.field("track_id", i64, False),  # -1 = untracked
    pa.field("class_name", s, False), pa.field("score", f64),
    pa.field("center_ego_m", vec3), pa.field("size_lwh_m", vec3), pa.field("yaw_ego_rad", f64),
    pa.field("center_global_m", vec3), pa.field("yaw_global_rad", f64),
    pa.field("velocity_ego_mps", vec2), pa.field("velocity_global_mps", vec2),  # NaN when unknown
    pa.field("num_lidar_pts", i32), pa.field("instance_token", s),
    pa.field("source", s),  # detection backend: 'lidar' | 'labels' | 'mmdet3d' | 'gt'
], "3D objects per frame after detection and tracking (also used for ground-truth labels)")

PROJECTIONS = _schema("projections", [
    pa.field("scene_id", s, False), pa.field("frame_index", i32, False), pa.field("track_id", i64, False),
    pa.field("camera", s, False), pa.field("box2d_proj_xyxy", box2d), pa.field("depth_m", f64),
    pa.field("mask_rle", RLE), pa.field("mask_box_xyxy", box2d), pa.field("mask_score", f64),
    pa.field("box_iou", f64), pa.field("coverage", f64),
    pa.field("visible", b, False), pa.field("drop_reason", s),  # null when visible
], "2D projections of 3D objects per camera with masks and the visibility filter's decision")

ATTRIBUTES = _schema("attributes", [
    pa.field("scene_id", s, False), pa.field("frame_index", i32, False), pa.field("timestamp_us", i64, False),
    pa.field("track_id", i64, False), pa.field("class_name", s),
    pa.field("x_ego_m", f64), pa.field("y_ego_m", f64), pa.field("z_ego_m", f64),
    pa.field("distance_m", f64), pa.field("bearing_deg", f64),  # 0 = forward, CCW positive, [-180, 180]
    pa.field("clock", i8),  # 1..12 o'clock, 12 = straight ahead
    pa.field("side", s), pa.field("front_back", s),  # 'left'|'right', 'front'|'behind'
    pa.field("length_m", f64), pa.field("width_m", f64), pa.field("height_m", f64),
    pa.field("speed_mps", f64), pa.field("velocity_ego_mps", vec2), pa.field("heading_ego_deg", f64),
    pa.field("ego_speed_mps", f64),
], "per object and frame, ego-centric attributes used by QA")

QA_GROUNDING = pa.struct([
    ("role", s),  # 'context' | 'current' | 'future'
    ("frame_index", i32), ("timestamp_us", i64), ("camera", s), ("image_path", s), ("track_id", i64),
    ("region_id", i32), ("box_xyxy", box2d), ("mask_rle", RLE),
])

QA = _schema("qa", [
    pa.field("qa_id", s, False), pa.field("scene_id", s, False), pa.field("split", s),
    pa.field("keyframe_index", i32), pa.field("timestamp_us", i64),
    pa.field("family", s, False),  # 'object_spatial' | 'ego_spatial' | 'ego_spatiotemporal'
    pa.field("kind", s, False),  # 'qualitative' | 'quantitative'
    pa.field("question_type", s, False), pa.field("template_id", s),
    pa.field("question", s, False), pa.field("answer", s, False),
    pa.field("value", f64), pa.field("unit", s), pa.field("horizon_s", f64),
    pa.field("region_ids", pa.list_(i32)), pa.field("track_ids", pa.list_(i64)), pa.field("class_names", pa.list_(s)),
    pa.field("out_of_view", b), pa.field("grounding", pa.list_(QA_GROUNDING)),
], "one question-answer pair with its exact value and visual grounding")

LABELS = _schema("labels", [
    pa.field("scene_id", s, False), pa.field("frame_index", i32, False), pa.field("timestamp_us", i64),
    pa.field("subject", s, False),  # 'ego' or 'agent'
    pa.field("track_id", i64),  # -1 for the ego
    pa.field("class_name", s),
    pa.field("maneuver", s),  # ego: Straight / Turn Left / Turn Right / Change Lane Left / Change Lane Right / Stop
    pa.field("speed_status", s),  # Accelerate / Decelerate / Maintain
    pa.field("intent_lateral", s), pa.field("intent_vertical", s),  # VRU intent (DRAMA-X)
    pa.field("future_xy_ego_m", pa.list_(vec2)),  # future waypoints in this frame's ego frame
], "behaviour labels: ego maneuvers and speed status, VRU intent, future waypoints")

ERRORS = _schema("errors", [
    pa.field("scene_id", s), pa.field("stage", s, False), pa.field("file", s),
    pa.field("error_type", s, False), pa.field("message", s, False), pa.field("attempt", i32),
], "one row per scene and stage that failed; the run goes on")

ALL = {sch.metadata[b"drivegen.schema"].decode(): sch
       for sch in (SCENES, FRAMES, OBJECTS, PROJECTIONS, ATTRIBUTES, QA, LABELS, ERRORS)}


def check_schema(table: pa.Table, schema: pa.Schema, where: str = "") -> pa.Table:
    """Cast ``table`` to ``schema`` (same columns, same order), raising a clear error on mismatch."""
    missing = [n for n in schema.names if n not in table.column_names]
    extra = [n for n in table.column_names if n not in schema.names]
    if missing or extra:
        name = schema.metadata[b"drivegen.schema"].decode()
        raise ValueError(f"{where or 'table'} does not match schema '{name}': missing {missing}, unexpected {extra}")
    return table.select(schema.names).cast(schema)


def empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()
