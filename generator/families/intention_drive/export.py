"""Intention-Drive export: planning samples a trajectory planner can be trained and scored on.

Two Parquet files (schemas in ``schemas.tables``) plus ``export_summary.json``:

- ``planning_samples.parquet`` (INTENTION_SAMPLES): one row per instruction, i.e. per QA row of the
  ``ego_intention`` family (``sample_id`` = its ``qa_id``): the instruction text a model reads, the keyframe's
  atomic instruction, the target's ``Region [X]``, every camera image at the keyframe, the past ego states,
  the logged K waypoints and the success predicate (``generator.families.intention_drive.attributes``);
- ``objects.parquet`` (INTENTION_OBJECTS): the tracked objects at each keyframe with their logged future,
  what ``drivegen score intention`` sweeps the ego's box against for the collision rate.

Road edges: each sample carries the ego's pose in the log's map frame and, where the logs have one, the map of
their paved surface (``LogSource.drivable_map``: nuScenes' semantic-prior mask, which generated logs carry too;
``road_maps`` asks the run's source for it); ``road_lookup`` turns the files back into the check's
``PlanningSamples.road`` (the devkit's ``MapMask``).

``tables(...)`` is the pure part (one scene or many at once); ``generator.pipeline.exports.export_intention``
reads a run folder and writes the files; ``read_samples`` turns the files back into the arrays the checks use.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import KeyIndex, codes, column, fixed_list_to_numpy, numpy_to_fixed_list, to_numpy
from generator.families.intention_drive.attributes import GOALS, Instructions, PlanningSamples
from generator.families.intention_drive.attributes import instructions, planning_samples
from generator.families.intention_drive.tables import INTENTION_OBJECTS, INTENTION_SAMPLES
from generator.families.intention_drive.vocab import INSTRUCTION_KINDS
from generator.sources import source_from_description
from generator.sources.remote import cached_object, is_remote
from schemas.vocab import INTENT_LATERAL, MANEUVERS, SPEED_STATUS

EXPORT_FORMAT = "drivegen-intention-drive"
EXPORT_SUMMARY = "export_summary.json"
SAMPLES_FILE = "planning_samples.parquet"
OBJECTS_FILE = "objects.parquet"
FAMILY = "ego_intention"


def _lists(values: np.ndarray, width: int) -> pa.Array:
    """(N, K, width) -> list<fixed_size_list<float64, width>> with K entries per row."""
    n, k = values.shape[:2]
    inner = numpy_to_fixed_list(values.reshape(-1, width), width)
    return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * k), inner)


def _vocab(names, idx: np.ndarray) -> pa.Array:
    idx = np.asarray(idx, np.int64)
    out = pc.take(pa.array(list(names), pa.string()), pa.array(np.maximum(idx, 0)))
    return pc.if_else(pa.array(idx < 0), pa.scalar(None, pa.string()), out)


def qa_ids(s: PlanningSamples, ins: Instructions) -> pa.Array:
    """The ``qa_id`` the ego_intention family gives each instruction (``generator.qa.generate``'s rule:
    scene:keyframe_index:family:type:track, 'ego' for a question about the ego)."""
    track = np.where(ins.target >= 0, s.obj_track[np.maximum(ins.target, 0)] if len(s.obj_track) else -1, -1)
    who = pc.if_else(pa.array(track < 0), "ego", pc.cast(pa.array(track), pa.string()))
    return pc.binary_join_element_wise(pc.take(s.scene_id, pa.array(ins.sample)),
                                       pc.cast(pa.array(s.frame_index[ins.sample]), pa.string()),
                                       FAMILY, _vocab(INSTRUCTION_KINDS, ins.kind), who, ":")


def road_maps(source, scene_ids: list[str]) -> tuple[dict[str, dict], str | None]:
    """{scene: drivable map} from the run's logs: an opened ``LogSource``, or its description (``source.json``)
    to open them with; and a note when the logs could not be opened (then no road edges are checked). Scenes
    without a map are left out."""
    if not source:
        return {}, "the run folder has no source.json: road edges are not checked"
    try:
        src = source_from_description(source) if isinstance(source, dict) else source
    except Exception as err:  # noqa: BLE001 - the export goes on without road edges, and says so
        return {}, f"the logs could not be opened ({type(err).__name__}: {err}): road edges are not checked"
    out = {}
    for sid in scene_ids:
        m = src.drivable_map(sid)
        if m is not None:
            out[sid] = m
    return out, None


def tables(s: PlanningSamples, ins: Instructions, qa: pa.Table, frames: pa.Table,
           maps: dict[str, dict] | None = None) -> tuple[pa.Table, pa.Table]:
    """(INTENTION_SAMPLES, INTENTION_OBJECTS) for the instructions that are QA rows of ``qa`` (its
    ego_intention rows: qa_id, question, split, region_ids) over the samples of ``frames``; ``maps``: each
    scene's drivable map (``road_maps``)."""
    ids = qa_ids(s, ins)
    qa = qa.filter(pc.equal(qa.column("family"), FAMILY)) if qa.num_rows else qa
    q_ids = column(qa, "qa_id") if qa.num_rows else pa.array([], pa.string())
    row = to_numpy(pc.index_in(ids, value_set=q_ids), np.int64, fill=-1)
    keep = np.flatnonzero(row >= 0)
    ins, ids, row = ins.take(keep), ids.take(pa.array(keep)), row[keep]
    smp = ins.sample
    take = lambda name: pc.take(column(qa, name), pa.array(row))  # noqa: E731
    low = pc.binary_join_element_wise(_vocab(MANEUVERS, s.maneuver[smp]), _vocab(SPEED_STATUS, s.speed_status[smp]),
                                      ", ")
    regions = take("region_ids") if len(row) else pa.array([], pa.list_(pa.int32()))
    first_region = pc.list_element(pc.if_else(pc.greater(pc.fill_null(pc.list_value_length(regions), 0), 0), regions,
                                              pa.scalar([-1], regions.type)), 0)
    region = pc.if_else(pc.equal(first_region, -1), pa.scalar(None, pa.int32()), first_region)
    t = np.maximum(ins.target, 0)
    has_t = ins.target >= 0
    cls = pc.if_else(pa.array(has_t), pc.take(s.obj_class, pa.array(t)) if len(s.obj_track) else
                     pa.nulls(len(t), pa.string()), pa.scalar(None, pa.string()))
    # every camera at the keyframe
    cams = column(frames, "cameras")
    images = pc.take(cams, pa.array(s.frame_row[smp]))
    flat = pc.list_flatten(images)
    img = pa.StructArray.from_arrays([pc.struct_field(flat, "name"), pc.struct_field(flat, "image_path")],
                                     names=["camera", "image_path"])
    lengths = to_numpy(pc.list_value_length(images), np.int64, fill=0)
    images = pa.ListArray.from_arrays(pa.array(np.r_[0, np.cumsum(lengths)], pa.int32()), img)
    k = s.future_xy.shape[1]
    scene_of = pc.take(s.scene_id, pa.array(smp))
    map_of = [(maps or {}).get(sid) for sid in scene_of.to_pylist()]
    pose = s.map_pose[smp] if s.map_pose is not None else np.full((len(smp), 3), np.nan)
    samples = pa.table({
        "sample_id": ids, "scene_id": pc.take(s.scene_id, pa.array(smp)),
        "frame_index": pa.array(s.frame_index[smp], pa.int32()), "timestamp_us": pa.array(s.timestamp_us[smp]),
        "split": take("split"), "level": pc.if_else(pa.array(ins.kind == 0), "low", "high"),
        "kind": _vocab(INSTRUCTION_KINDS, ins.kind), "instruction": take("question"), "instruction_low": low,
        "region_id": region,
        "target_track_id": pa.array(np.where(has_t, s.obj_track[t] if len(s.obj_track) else -1, -1)),
        "target_class": cls, "images": images, "ego_speed_mps": pa.array(s.speed_mps[smp]),
        "past_states": _lists(s.past[smp], 4), "future_xy_ego_m": _lists(s.future_xy[smp], 2),
        "waypoint_step_s": pa.array(np.full(len(smp), s.step_s)),
        "maneuver": _vocab(MANEUVERS, ins.maneuver), "speed_status": _vocab(SPEED_STATUS, ins.speed_status),
        "slow": pa.array(ins.slow), "goal": _vocab(GOALS, ins.goal),
        "gap_min_m": pa.array(ins.gap_min_m), "gap_max_m": pa.array(ins.gap_max_m),
        "lateral_max_m": pa.array(ins.lateral_max_m), "clearance_m": pa.array(ins.clearance_m),
        "end_speed_max_ratio": pa.array(ins.end_speed_max_ratio),
        "ego_pose_map": numpy_to_fixed_list(pose, 3),
        "map_path": pa.array([m["path"] if m else None for m in map_of], pa.string()),
        "map_resolution_m": pa.array([m["resolution_m"] if m else None for m in map_of], pa.float64()),
    })
    # objects of the samples that have an instruction
    used = np.unique(smp)
    _, obj = s.objects_of(used)
    m = len(obj)
    objects = pa.table({
        "scene_id": pc.take(s.scene_id, pa.array(s.obj_sample[obj])),
        "frame_index": pa.array(s.frame_index[s.obj_sample[obj]], pa.int32()),
        "track_id": pa.array(s.obj_track[obj]), "class_name": pc.take(s.obj_class, pa.array(obj)),
        "xy_ego_m": numpy_to_fixed_list(s.obj_xy[obj], 2), "heading_ego_rad": pa.array(s.obj_heading[obj]),
        "size_lw_m": numpy_to_fixed_list(s.obj_size_lw[obj], 2),
        "future_xy_ego_m": _lists(s.obj_future_xy[obj], 2),
        "future_heading_ego_rad": pa.ListArray.from_arrays(pa.array(np.arange(m + 1, dtype=np.int32) * k),
                                                           pa.array(s.obj_future_heading[obj].reshape(-1))),
        "intent_lateral": _vocab(INTENT_LATERAL, s.obj_intent_lateral[obj]),
    })
    return samples.cast(INTENTION_SAMPLES), objects.cast(INTENTION_OBJECTS)


def scene_tables(frames: pa.Table, attributes: pa.Table, labels: pa.Table | None, qa: pa.Table, cfg,
                 maps: dict[str, dict] | None = None) -> tuple[pa.Table, pa.Table]:
    """One scene's (or several scenes') export tables from its run tables, with the run's config ``cfg``:
    the planning samples and instructions (``generator.families.intention_drive.attributes``, the rule the QA family used)
    of its ego_intention QA rows ``qa``."""
    s = planning_samples(frames, attributes, labels, cfg.labels, cfg.intention, cfg.ego)
    return tables(s, instructions(s, cfg.intention), qa, frames, maps)


def read_run_scene(reader, scene_id: str, cfg, splits: list[str] | None = None, maps: dict[str, dict] | None = None
                   ) -> tuple[pa.Table, pa.Table] | None:
    """``scene_tables`` of one finished scene of a run folder (``reader``: a ``generator.runfolder.RunReader``);
    None when the scene has no ego_intention QA rows (in ``splits``)."""
    qa = reader.read_scene("qa", scene_id, columns=["qa_id", "family", "question", "split", "region_ids"])
    if qa is None:
        return None
    keep = pc.equal(qa.column("family"), FAMILY)
    if splits:
        keep = pc.and_(keep, pc.is_in(qa.column("split"), value_set=pa.array(splits)))
    qa = qa.filter(keep)
    frames, attributes = reader.read_scene("frames", scene_id), reader.read_scene("attributes", scene_id)
    if qa.num_rows == 0 or frames is None or attributes is None:
        return None
    return scene_tables(frames, attributes, reader.read_scene("labels", scene_id), qa, cfg, maps)


def _nested(arr, width: int, k: int) -> np.ndarray:
    """list<fixed_size_list<float64, width>> with k entries per row -> (N, k, width)."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    lengths = to_numpy(pc.list_value_length(arr), np.int64, fill=-1)
    if len(arr) and (lengths != k).any():
        i = int(np.flatnonzero(lengths != k)[0])
        raise ValueError(f"row {i}: {lengths[i]} entries, expected {k}")
    return fixed_list_to_numpy(pc.list_flatten(arr), width).reshape(len(arr), k, width)


def road_lookup(map_path: list[str | None], resolution_m: np.ndarray, dilation_m: float = 0.0):
    """``PlanningSamples.road`` over samples whose maps are ``map_path`` (N,: a path, or the URI of a map on object
    storage; None: no map, always on road), read with the devkit's ``MapMask`` (255 = paved; points off the image
    are off the road). Returns
    (road callable or None when no sample has a map, (N,) bool: the sample's map was read, problems: list of
    maps that could not be read)."""
    # nuscenes-devkit: seconds to import (it pulls matplotlib); only to read or score nuScenes
    from nuscenes.utils.map_mask import MapMask

    paths = np.asarray([p or "" for p in map_path], dtype=object)
    uniq = [p for p in dict.fromkeys(paths.tolist()) if p]
    masks, problems = {}, []
    for p in uniq:
        res = float(resolution_m[np.flatnonzero(paths == p)[0]])
        try:  # a map on object storage (its URI) is read through the node cache
            m = MapMask(str(cached_object(p)) if is_remote(p) else p, resolution=res)
            m.mask()  # read now: a missing or broken file is a problem here, not an exception mid-check
            masks[p] = m
        except Exception as err:  # noqa: BLE001
            problems.append(f"map {p} unreadable ({type(err).__name__}: {err}): its samples get no road edges")
    index = {p: j for j, p in enumerate(uniq) if p in masks}
    code = np.array([index.get(p, -1) for p in paths.tolist()], np.int64)
    if not masks:
        return None, code >= 0, problems

    def road(sample: np.ndarray, xy: np.ndarray) -> np.ndarray:
        on = np.ones(len(sample), bool)
        which = code[sample]
        for j in np.unique(which[which >= 0]):
            sel = np.flatnonzero(which == j)
            on[sel] = masks[uniq[j]].is_on_mask(xy[sel, 0], xy[sel, 1], dilation=dilation_m)
        return on

    return road, code >= 0, problems


def read_samples(samples: pa.Table, objects: pa.Table, body, dilation_m: float = 0.0
                 ) -> tuple[PlanningSamples, Instructions, pa.Array]:
    """The export's files -> (PlanningSamples with one sample per keyframe, Instructions in the files' row
    order, sample_id per instruction); ``body``: the ego body they were made with (``EgoBodyConfig``);
    ``dilation_m``: the road mask's margin (``intention.road_dilation_m``). Samples whose map was read are
    ``PlanningSamples.road_checked``; maps that cannot be read are listed in ``road_problems``."""
    key = pc.binary_join_element_wise(column(samples, "scene_id"), pc.cast(column(samples, "frame_index"),
                                                                        pa.string()), "\x1f")
    uniq = pc.unique(key)
    code = codes(key, uniq)
    first = np.unique(code, return_index=True)[1]
    step = float(column(samples, "waypoint_step_s")[0].as_py()) if samples.num_rows else 0.5
    k = int(pc.list_value_length(column(samples, "future_xy_ego_m"))[0].as_py()) if samples.num_rows else 0
    h = int(pc.list_value_length(column(samples, "past_states"))[0].as_py()) if samples.num_rows else 0
    rows = first  # one instruction row per sample carries the sample's columns
    okey = pc.binary_join_element_wise(column(objects, "scene_id"), pc.cast(column(objects, "frame_index"),
                                                                         pa.string()), "\x1f")
    o_sample = codes(okey, uniq)
    keep = np.flatnonzero(o_sample >= 0)
    keep = keep[np.argsort(o_sample[keep], kind="stable")]
    objects = objects.take(pa.array(keep))
    o_sample = o_sample[keep]
    fut = _nested(column(objects, "future_xy_ego_m"), 2, k)
    fh = to_numpy(pc.list_flatten(column(objects, "future_heading_ego_rad")), np.float64).reshape(len(keep), k)
    s = PlanningSamples(
        scene_id=pc.take(column(samples, "scene_id"), pa.array(rows)),
        frame_index=to_numpy(column(samples, "frame_index"), np.int64)[rows],
        timestamp_us=to_numpy(column(samples, "timestamp_us"), np.int64, fill=0)[rows],
        frame_row=np.arange(len(rows)), future_xy=_nested(column(samples, "future_xy_ego_m"), 2, k)[rows],
        past=_nested(column(samples, "past_states"), 4, h)[rows],
        speed_mps=to_numpy(column(samples, "ego_speed_mps"), np.float64, fill=np.nan)[rows],
        maneuver=np.full(len(rows), -1), speed_status=np.full(len(rows), -1),
        stopped=np.zeros(len(rows), bool),  # (the files' instructions are read, not derived again)
        obj_sample=o_sample, obj_track=to_numpy(column(objects, "track_id"), np.int64),
        obj_class=column(objects, "class_name"), obj_xy=fixed_list_to_numpy(objects.column("xy_ego_m"), 2),
        obj_heading=to_numpy(column(objects, "heading_ego_rad"), np.float64, fill=np.nan),
        obj_size_lw=fixed_list_to_numpy(objects.column("size_lw_m"), 2), obj_future_xy=fut, obj_future_heading=fh,
        obj_intent_lateral=codes(column(objects, "intent_lateral"), pa.array(INTENT_LATERAL)), step_s=step, ego=body)
    if "ego_pose_map" in samples.column_names and samples.num_rows:
        s.map_pose = fixed_list_to_numpy(samples.column("ego_pose_map"), 3)[rows]
        paths = pc.take(column(samples, "map_path"), pa.array(rows)).to_pylist()
        res = to_numpy(column(samples, "map_resolution_m"), np.float64, fill=np.nan)[rows]
        s.road, s.road_checked, problems = road_lookup(paths, res, dilation_m)
        s.road_problems = tuple(problems)
    # instruction targets: object index by (sample, track)
    tgt_track = to_numpy(column(samples, "target_track_id"), np.int64, fill=-1)
    obj_of = KeyIndex((o_sample << 32) | (s.obj_track & 0xFFFFFFFF))
    target = np.where(tgt_track >= 0, obj_of.find((code << 32) | (tgt_track & 0xFFFFFFFF)), -1)
    ins = Instructions(
        sample=code, kind=codes(column(samples, "kind"), pa.array(INSTRUCTION_KINDS)), target=target,
        maneuver=codes(column(samples, "maneuver"), pa.array(MANEUVERS)),
        speed_status=codes(column(samples, "speed_status"), pa.array(SPEED_STATUS)),
        slow=to_numpy(column(samples, "slow"), bool, fill=False), goal=codes(column(samples, "goal"), pa.array(GOALS)),
        gap_min_m=to_numpy(column(samples, "gap_min_m"), np.float64, fill=np.nan),
        gap_max_m=to_numpy(column(samples, "gap_max_m"), np.float64, fill=np.nan),
        lateral_max_m=to_numpy(column(samples, "lateral_max_m"), np.float64, fill=np.nan),
        clearance_m=to_numpy(column(samples, "clearance_m"), np.float64, fill=np.nan),
        end_speed_max_ratio=to_numpy(column(samples, "end_speed_max_ratio"), np.float64, fill=np.nan))
    return s, ins, column(samples, "sample_id")
