"""Arrow schemas for every table drivegen reads or writes. Declared once; readers and writers use these.

Units ride in column names (``_m``, ``_deg``, ``_mps``, ``_us``); frames too (``_ego`` = the ego frame of
that row's frame, x forward / y left / z up; ``_global`` = the log's city frame). Transforms are
row-major flattened 4x4 matrices named ``a_SE3_b``. Each schema carries ``drivegen.schema`` and
``drivegen.schema_version`` in its metadata; bump the version when a column changes meaning.

Parquet storage (``write_parquet`` / ``read_parquet``, the one pair every drivegen file goes through):
pyarrow 25.0.1 writes a fixed-size list column that holds a null (a projection without a mask box, a
grounding without a box) but cannot read it back ("Expected all lists to be of size=4 but index 1 had
size=0"), top level or nested in structs. So files store every fixed-size list as a variable-size list
(``storage_schema``; names, nullability and metadata kept, so the files stay plain Parquet for pandas or
``datasets``), and reading casts back to the exact declared schema (``from_storage``), found from the
file's ``drivegen.schema`` metadata when not given. ``tests/schemas/test_schemas_storage.py`` notices when a
pyarrow release fixes the bug.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from schemas.vocab import JAAD_BEHAVIOUR_TAGS, NO_DETECTION_ISSUES

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
    pa.field("tracker", s),  # the tracker that gave the track ids: 'offline' | 'kalman' | 'greedy'; null: untracked
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
    pa.field("instance_token", s),  # the source's identity of the object (OBJECTS.instance_token; '' / null: none)
    pa.field("x_ego_m", f64), pa.field("y_ego_m", f64), pa.field("z_ego_m", f64),
    pa.field("distance_m", f64), pa.field("bearing_deg", f64),  # 0 = forward, CCW positive, [-180, 180]
    pa.field("clock", i8),  # 1..12 o'clock, 12 = straight ahead
    pa.field("side", s), pa.field("front_back", s),  # 'left'|'right', 'front'|'behind'|'beside' (the ego's length)
    pa.field("length_m", f64), pa.field("width_m", f64), pa.field("height_m", f64),
    pa.field("speed_mps", f64), pa.field("velocity_ego_mps", vec2), pa.field("heading_ego_deg", f64),
    pa.field("ego_speed_mps", f64),
], "per object and frame, ego-centric attributes used by QA")

# Grounding strings are dictionary-encoded (categorical): many QA rows ground on the same image and mask,
# so a table holds int32 indices and a shard stores each image path and mask once (``write_parquet``
# compacts dictionaries to the values a file uses). pandas, ``datasets`` and plain pyarrow readers see
# the string values; only pyarrow shows the ``dictionary<int32, string>`` type.
dstr = pa.dictionary(i32, s)
QA_RLE = pa.struct([("size", pa.list_(i32, 2)), ("counts", dstr)])  # RLE with dictionary-encoded counts
QA_GROUNDING = pa.struct([
    ("role", dstr),  # 'context' | 'current' | 'future'
    ("frame_index", i32), ("timestamp_us", i64), ("camera", dstr), ("image_path", dstr), ("track_id", i64),
    ("region_id", i32), ("box_xyxy", box2d), ("mask_rle", QA_RLE),
])

QA = _schema("qa", [
    pa.field("qa_id", s, False), pa.field("scene_id", s, False), pa.field("split", s),
    pa.field("keyframe_index", i32), pa.field("timestamp_us", i64),
    pa.field("family", s, False),  # 'object_spatial' | 'ego_spatial' | 'ego_spatiotemporal'
    pa.field("kind", s, False),  # 'qualitative' | 'quantitative'
    pa.field("question_type", s, False), pa.field("template_id", s),
    pa.field("question", s, False), pa.field("answer", s, False),
    pa.field("value", f64), pa.field("unit", s), pa.field("horizon_s", f64),
    pa.field("region_ids", pa.list_(i32)), pa.field("track_ids", pa.list_(i64)),
    # beside each track id, the source's own identity of that target at the keyframe (nuScenes instance token,
    # AV2 track UUID; '' where the detector gives none), dictionary-encoded like the grounding strings
    pa.field("instance_tokens", pa.list_(dstr)), pa.field("class_names", pa.list_(s)),
    pa.field("out_of_view", b), pa.field("grounding", pa.list_(QA_GROUNDING)),
], "one question-answer pair with its exact value and visual grounding")

LABELS = _schema("labels", [
    pa.field("scene_id", s, False), pa.field("frame_index", i32, False), pa.field("timestamp_us", i64),
    pa.field("subject", s, False),  # 'ego' or 'agent'
    pa.field("track_id", i64),  # -1 for the ego
    pa.field("class_name", s),
    pa.field("maneuver", s),  # ego: Straight / Turn Left / Turn Right / Change Lane Left / Change Lane Right / Stop
    pa.field("speed_status", s),  # Accelerate / Decelerate / Maintain Speed
    pa.field("intent_lateral", s), pa.field("intent_vertical", s),  # VRU intent (DRAMA-X)
    pa.field("future_xy_ego_m", pa.list_(vec2)),  # future waypoints in this frame's ego frame
], "behaviour labels: ego maneuvers and speed status, VRU intent, future waypoints")


VIDEO_BOXES = _schema("video_boxes", [
    pa.field("video_id", s), pa.field("ped_id", s), pa.field("label", s), pa.field("frame", i32),
    pa.field("x1_px", f32), pa.field("y1_px", f32), pa.field("x2_px", f32), pa.field("y2_px", f32),
    pa.field("occluded", b),
] + [pa.field(t, s) for t in JAAD_BEHAVIOUR_TAGS],
    "the 2D boxes of a camera-only video (JAAD annotations: pedestrian | ped | people tracks, frames 0-based at the "
    "video's rate, pixels of its own image), read by generator.sources.jaad and kept by drivegen run --source jaad")


# Intention-Drive export (``generator.families.intention_drive.export``): one row per instruction (a QA row of the
# ego_intention family) and one row per object at each keyframe sample (what the collision check sweeps).
vec4 = pa.list_(f64, 4)
IMAGE = pa.struct([("camera", s), ("image_path", s)])


# PIE/JAAD benchmark samples (``generator.families.pie.attributes``; exported per task and split by
# ``generator.families.pie.export``): one observation window of a pedestrian track, pixels in the video's frame.
# List items are named as Parquet names them ('element'), so the files read back exactly with plain pyarrow too.
def _plist(t: pa.DataType) -> pa.DataType:
    return pa.list_(pa.field("element", t))


ISSUES = _schema("issues", [
    pa.field("scene_id", s, False), pa.field("frame_index", i32, False), pa.field("stage", s, False),
    pa.field("reason", s, False), pa.field("camera", s), pa.field("file", s), pa.field("message", s, False),
], "frame-level problems a stage skipped without failing the scene (unreadable sweep or image, detector "
   "failure, a frame outside its log's annotations under the labels backend), one row per frame and camera")


def no_detection_rows(issues: pa.Table) -> pa.Array:
    """Which ``issues`` rows leave their frame without detector output (``schemas.vocab.NO_DETECTION_ISSUES``):
    its objects are unknown there, not absent."""
    out = pa.array(np.zeros(issues.num_rows, bool))
    for stage, reason in NO_DETECTION_ISSUES:
        m = pc.equal(issues.column("stage"), stage)
        if reason is not None:
            m = pc.and_(m, pc.equal(issues.column("reason"), reason))
        out = pc.or_(out, m)
    return out

ERRORS = _schema("errors", [
    pa.field("scene_id", s), pa.field("stage", s, False), pa.field("file", s),
    pa.field("error_type", s, False), pa.field("message", s, False), pa.field("attempt", i32),
], "one row per scene and stage that failed; the run goes on")

ALL = {sch.metadata[b"drivegen.schema"].decode(): sch
       for sch in (SCENES, FRAMES, OBJECTS, PROJECTIONS, ATTRIBUTES, QA, LABELS, ISSUES, ERRORS,
                   VIDEO_BOXES)}


# The unit and frame suffixes of column names (module docstring): the last matching part of a name decides.
UNIT_SUFFIXES = {"m": "m", "mps": "m/s", "deg": "deg", "rad": "rad", "us": "µs", "s": "s", "px": "px",
                 "xyxy": "px (x1, y1, x2, y2)"}
FRAME_SUFFIXES = {"ego": "ego (x forward, y left, z up)", "global": "city (the log's global frame)",
                  "cam": "camera", "lidar": "LiDAR"}


def column_unit(name: str) -> tuple[str | None, str | None]:
    """(unit, frame) a column's name declares (``center_ego_m`` -> ('m', 'ego ...'); ``a_SE3_b`` -> a 4x4
    transform taking ``b`` coordinates to ``a``, translations in m); None where the name declares none."""
    parts = name.split("_")
    if "SE3" in parts:
        i = parts.index("SE3")
        return "4x4 row-major, translation m", f"{'_'.join(parts[i + 1:])} -> {'_'.join(parts[:i])}"
    unit = next((UNIT_SUFFIXES[p] for p in reversed(parts[1:]) if p in UNIT_SUFFIXES), None)
    frame = next((FRAME_SUFFIXES[p] for p, q in zip(parts[1:], parts[2:]) if p in FRAME_SUFFIXES and q in UNIT_SUFFIXES),
                 None)
    return unit, frame


def check_schema(table: pa.Table, schema: pa.Schema, where: str = "") -> pa.Table:
    """Cast ``table`` to ``schema`` (same columns, same order), raising a clear error on mismatch."""
    missing = [n for n in schema.names if n not in table.column_names]
    extra = [n for n in table.column_names if n not in schema.names]
    if missing or extra:
        name = schema.metadata[b"drivegen.schema"].decode()
        raise ValueError(f"{where or 'table'} does not match schema '{name}': missing {missing}, unexpected {extra}")
    if table.schema.equals(schema, check_metadata=True):
        return table  # already conforming: no copy on the hot path (QA shards, regeneration)
    return table.select(schema.names).cast(schema)


def empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


# ------------------------------------------------------------------------------------------ Parquet storage
def _map_type(t: pa.DataType, fn) -> pa.DataType:
    """``t`` rebuilt bottom-up through lists and structs (names, nullability and field metadata kept), with
    ``fn`` applied to every type once its children are mapped."""
    def field(f: pa.Field) -> pa.Field:
        return pa.field(f.name, _map_type(f.type, fn), f.nullable, f.metadata)

    if pa.types.is_fixed_size_list(t):
        t = pa.list_(field(t.value_field), t.list_size)
    elif pa.types.is_large_list(t):
        t = pa.large_list(field(t.value_field))
    elif pa.types.is_list(t):
        t = pa.list_(field(t.value_field))
    elif pa.types.is_struct(t):
        t = pa.struct([field(f) for f in t])
    return fn(t)


def _map_schema(schema: pa.Schema, fn) -> pa.Schema:
    return pa.schema([pa.field(f.name, _map_type(f.type, fn), f.nullable, f.metadata) for f in schema],
                     metadata=schema.metadata)


def _variable_list(t: pa.DataType) -> pa.DataType:
    """A fixed-size list type as the variable-size list of the same values; other types as they are."""
    return pa.list_(t.value_field) if pa.types.is_fixed_size_list(t) else t


def storage_schema(schema: pa.Schema) -> pa.Schema:
    """The schema a table is stored with: ``schema`` with fixed-size lists as variable-size lists (see the
    module docstring); field names, nullability, field and schema metadata kept."""
    # memoised (a shard write asks for it on every file), keyed by the serialized schema: Schema equality
    # ignores metadata, which the storage schema keeps
    key = schema.serialize().to_pybytes()
    hit = _STORAGE_SCHEMAS.get(key)
    if hit is None:
        if len(_STORAGE_SCHEMAS) > 256:
            _STORAGE_SCHEMAS.clear()
        hit = _STORAGE_SCHEMAS[key] = _storage_schema(schema)
    return hit


_STORAGE_SCHEMAS: dict[bytes, pa.Schema] = {}


def _storage_schema(schema: pa.Schema) -> pa.Schema:
    return _map_schema(schema, _variable_list)  # fixed-size lists at any depth made variable-size lists


def to_storage(table: pa.Table) -> pa.Table:
    """``table`` cast to ``storage_schema(table.schema)`` (returned as is when it has no fixed-size list)."""
    target = storage_schema(table.schema)
    return table if target.equals(table.schema, check_metadata=True) else table.cast(target)


@functools.lru_cache(maxsize=1)
def _family_schemas() -> dict[str, pa.Schema]:
    """The schemas of the registered paper families' tables (``schemas.families``), by schema name."""
    from schemas.families import families  # the registry reads schemas.layout, which imports this module

    out = {}
    for fam in families().values():
        for sch in fam.schemas():
            out[sch.metadata[b"drivegen.schema"].decode()] = sch
    return out


def declared_schema(table_or_schema: pa.Table | pa.Schema) -> pa.Schema | None:
    """The ``ALL`` schema named by ``drivegen.schema`` metadata; None when there is no such metadata.
    Raises ValueError for a name ``ALL`` does not know."""
    meta = table_or_schema.schema.metadata if isinstance(table_or_schema, pa.Table) else table_or_schema.metadata
    name = (meta or {}).get(b"drivegen.schema")
    if name is None:
        return None
    try:
        return ALL[name.decode()] if name.decode() in ALL else _family_schemas()[name.decode()]
    except KeyError:
        raise ValueError(f"unknown drivegen.schema {name.decode()!r} in table metadata; known: "
                         f"{sorted(ALL) + sorted(_family_schemas())}") from None


def from_storage(table: pa.Table, schema: pa.Schema | None = None, where: str = "") -> pa.Table:
    """A stored table (variable-size lists in place of fixed-size ones) cast back to ``schema``: the
    schema's columns in its order, with its exact types and metadata (``check_schema``; a missing or
    unexpected column raises ValueError naming ``where``).

    ``schema=None``: the schema the table's ``drivegen.schema`` metadata names (``ALL``); a table without
    that metadata is not a drivegen table and comes back unchanged. A table read with a subset of columns
    is cast to that subset of ``schema`` (``read_parquet(columns=...)`` does that).
    """
    if schema is None:
        schema = declared_schema(table)
        if schema is None:
            return table
    try:
        return check_schema(table, schema, where=where)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as err:
        name = (schema.metadata or {}).get(b"drivegen.schema", b"?").decode()
        raise ValueError(f"{where or 'table'}: stored columns do not cast to schema '{name}': {err}") from None


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every dictionary column, at any depth, as its value type (``table.cast(plain_schema(
    table.schema))`` decodes the grounding strings, e.g. to compare tables value by value: ``Table.equals``
    compares dictionaries and indices, so equal values under different dictionaries differ)."""
    return _map_schema(schema, lambda x: x.value_type if pa.types.is_dictionary(x) else x)


@functools.lru_cache(maxsize=256)
def _has_dictionary(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_dictionary(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_dictionary(f.type) for f in t)
    return False


def _compact_array(arr: pa.Array) -> pa.Array:
    t = arr.type
    if not _has_dictionary(t):
        return arr
    if pa.types.is_dictionary(t):
        if arr.null_count:
            valid = ~arr.is_null().to_numpy(zero_copy_only=False)
            idx = arr.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)  # nulls: masked below
            used_idx = idx[valid]
        else:  # the common case: the indices as they are (zero copy), no fill and no widening
            valid = None
            idx = used_idx = arr.indices.to_numpy()
        if len(used_idx) == 0:  # empty or all null: no value is used
            return pa.DictionaryArray.from_arrays(pa.nulls(len(arr), t.index_type), arr.dictionary[:0],
                                                  ordered=t.ordered)
        # only the range of values this (sliced) array uses is looked at: O(its length), not O(dictionary).
        # The values are put in the order the rows first use them, each once: the file's bytes then depend on
        # the rows alone, not on how the dictionary was built (a Ray block's unified dictionary, per-frame ones
        # concatenated), and a file read back (Parquet's reader builds dictionaries so) is written again byte
        # for byte. A dictionary holding a value twice must not reach pq.write_table at all: pyarrow 25 sizes
        # the dictionary page by the values given and writes the distinct ones, the rest of the page is
        # whatever the memory held (measured: 855 bytes of a QA shard, different in every process).
        lo = int(used_idx.min())
        values_idx = pc.unique(pa.array(used_idx - lo)).to_numpy()  # window positions in first-use order (hashed)
        if (lo == 0 and len(values_idx) == len(arr.dictionary) and (values_idx == np.arange(len(values_idx))).all()
                and pc.count_distinct(arr.dictionary).as_py() == len(arr.dictionary)):
            return arr  # the common case: every value used, once, already in first-use order
        span = int(values_idx.max()) + 1
        distinct = arr.dictionary.slice(lo, span).take(pa.array(values_idx)).dictionary_encode()
        rank = np.zeros(span, np.int64)
        rank[values_idx] = distinct.indices.to_numpy()  # the first of equal values stands for them
        new_idx = rank[np.clip(idx - lo, 0, span - 1)]
        values = distinct.dictionary
        mask = None if valid is None else ~valid
        return pa.DictionaryArray.from_arrays(
            pa.array(new_idx.astype(t.index_type.to_pandas_dtype()), t.index_type, mask=mask), values,
            ordered=t.ordered)
    null = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(t):  # flatten(): children restricted to this (possibly sliced) array
        return pa.StructArray.from_arrays([_compact_array(c) for c in arr.flatten()], fields=list(t), mask=null)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offs = arr.offsets.to_numpy(zero_copy_only=False)
        values = _compact_array(arr.values.slice(int(offs[0]), int(offs[-1] - offs[0])))
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        return cls.from_arrays(pa.array(offs - offs[0], arr.offsets.type), values, type=t, mask=null)
    if pa.types.is_fixed_size_list(t):
        return pa.FixedSizeListArray.from_arrays(_compact_array(arr.flatten()), type=t, mask=null)
    return arr


def compact_dictionaries(table: pa.Table) -> pa.Table:
    """``table`` with every dictionary column, at any depth of lists and structs, holding only the values
    its rows use, each once, in the order the rows first use them (indices remapped: the same rows give the
    same dictionaries however they were built). A slice of a table shares its
    parent's dictionaries and Parquet writes a dictionary whole, so each file is compacted before it is
    written. Columns without dictionaries are returned as they are (zero copy)."""
    if not any(_has_dictionary(f.type) for f in table.schema):
        return table
    cols = []
    for name, col in zip(table.column_names, table.columns):
        if _has_dictionary(col.type):
            col = pa.chunked_array([_compact_array(c) for c in col.chunks], col.type)
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=table.schema)


def write_parquet(where, table: pa.Table, compression: str = "zstd", filesystem=None, compact: bool = True,
                  **kwargs) -> None:
    """``pq.write_table`` of ``to_storage(table)`` to a path (on ``filesystem`` if given) or a writable
    sink, in one chunk per column with dictionaries compacted to the values the rows use in the order they use
    them (``compact_dictionaries``): the bytes depend on the rows alone (``compact=False``: the caller already
    did both). ``kwargs`` go to ``pq.write_table``. Read it back with ``read_parquet``."""
    table = to_storage(table)
    if compact:  # one chunk per column: Parquet pages and dictionaries depend on the chunks, the bytes must not
        table = compact_dictionaries(table.combine_chunks())
    pq.write_table(table, where, compression=compression,
                   filesystem=filesystem, **kwargs)


class ParquetStream:
    """One Parquet file written like ``write_parquet`` from tables added one at a time (one declared schema), a row
    group per about ``rows_per_group`` rows: memory holds one row group, never the file's rows. ``empty``: that
    schema's empty table, written when no rows came. ``close()`` (or the ``with`` block's end) finishes the file;
    ``rows``: how many were written.

    Tables of a few rows each (one scene's part) come by the thousand: every ``MERGE_EVERY`` of them waiting for
    their row group are merged into one table, whose buffers replace their many small ones (each buffer of
    each column of each small table kept about a kilobyte of allocator pages: 4,000 parts of 10 and 29 columns
    held 150 MiB for 22 MiB of rows). The bytes written do not change: a row group is its rows, one chunk per
    column, dictionaries compacted (``compact_dictionaries``), however they were buffered."""

    MERGE_EVERY = 64

    def __init__(self, where, empty: pa.Table, compression: str = "zstd", rows_per_group: int = 1 << 17):
        self.where, self.empty, self.compression, self.rows_per_group = where, empty, compression, rows_per_group
        self._writer = None
        self._buf: list[pa.Table] = []
        self._unmerged = 0  # the last tables of _buf, as they were added
        self._pending = 0
        self.rows = 0

    def add(self, table: pa.Table) -> None:
        if table.num_rows:
            self._buf.append(to_storage(table))
            self._unmerged += 1
            self._pending += table.num_rows
            self.rows += table.num_rows
            if self._pending >= self.rows_per_group:
                self._flush()
            elif self._unmerged >= self.MERGE_EVERY:
                self._buf[-self._unmerged:] = [pa.concat_tables(self._buf[-self._unmerged:]).combine_chunks()]
                self._unmerged = 0

    def _flush(self) -> None:
        t = compact_dictionaries(pa.concat_tables(self._buf).combine_chunks())
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.where, t.schema, compression=self.compression)
        assert self._writer is not None  # (for the type checker: set just above)
        self._writer.write_table(t, row_group_size=max(t.num_rows, 1))
        self._buf, self._pending, self._unmerged = [], 0, 0

    def close(self) -> None:
        if self._buf:
            self._flush()
        if self._writer is not None:
            self._writer.close()
        else:
            write_parquet(self.where, self.empty, compression=self.compression)

    def __enter__(self) -> "ParquetStream":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        elif self._writer is not None:
            self._writer.close()


def _is_path(src) -> bool:
    return isinstance(src, (str, os.PathLike))


def _describe(src) -> str:
    if isinstance(src, list):
        return f"{src[0]} and {len(src) - 1} more files" if len(src) > 1 else str(src[0]) if src else "no files"
    return str(src) if _is_path(src) else "Parquet buffer"


def read_parquet(path, schema: pa.Schema | None = None, columns: Sequence[str] | None = None,
                 filesystem=None) -> pa.Table:
    """A drivegen table written by ``write_parquet``, with the exact declared types (``from_storage``).

    ``path``: a file, a folder (its ``*.parquet``-style files, skipping names starting with '.' or '_',
    i.e. temporary files) or a list of files, all read as one table, on ``filesystem`` if given; or a
    readable buffer/file object. ``schema``: the declared schema (default: from the file metadata).
    ``columns``: read only these, in this order, cast to those columns of the schema. Files of one list
    whose stored types differ (e.g. written before this storage convention) are read one by one.
    """
    cols = list(columns) if columns is not None else None
    if _is_path(path) or isinstance(path, (list, tuple)):
        src = [str(p) for p in path] if isinstance(path, (list, tuple)) else str(path)
        try:
            if isinstance(src, list) and src:  # file by file: a quarter cheaper than a dataset scan of a list
                table = pa.concat_tables([pq.ParquetFile(p, filesystem=filesystem).read(columns=cols,
                                                                                        use_threads=False)
                                          for p in src])
            else:
                table = pads.dataset(src, format="parquet", filesystem=filesystem).to_table(columns=cols)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as err:
            if isinstance(src, list) and len(src) > 1:
                return pa.concat_tables([read_parquet(p, schema, cols, filesystem) for p in src])
            raise type(err)(f"{_describe(src)}: {err}") from err
    else:
        src = path
        table = pq.read_table(path, columns=cols)
    where = _describe(src)
    if schema is None:
        schema = declared_schema(table)
        if schema is None:
            return table
    if cols is not None:
        unknown = [c for c in cols if c not in schema.names]
        if unknown:
            raise ValueError(f"{where}: columns {unknown} are not in schema "
                             f"'{schema.metadata[b'drivegen.schema'].decode()}'")
        schema = pa.schema([schema.field(c) for c in cols], metadata=schema.metadata)
    if table.num_columns == 0:  # an empty folder or list
        return schema.empty_table()
    return from_storage(table, schema, where=where)
