"""Perception of one scene: detect -> track -> segment -> visibility filter, into Arrow tables.

``detect_scene(scene, detector) -> Detections`` runs a built detector over the scene's frames;
``perceive_scene(scene, detections, cfg, segmenter=None) -> PerceptionResult`` tracks, segments and filters
them (pure of Ray; give it a built segmenter to reuse a model across scenes, else one is built from ``cfg``):

  * ``objects``: ``schemas.tables.OBJECTS``, one row per tracked box and frame, ego and global boxes;
  * ``projections``: ``schemas.tables.PROJECTIONS``, one row per (object, camera) with the projected box,
    the mask (COCO RLE) and the visibility decision; every dropped row names its reason
    (``generator.visibility.DROP_REASONS``);
  * ``drop_counts``: rows per drop reason; ``issues``: ``FrameIssue`` records of frame/camera-level problems
    that were skipped instead of stopping the scene (unreadable sweep, missing or wrong-sized image, detector
    failure), each with its file and message.

Cameras: ``segmentation.cameras`` that the frame has; when none of them exist in the log (AV2 names its
cameras ``ring_*``), all of the frame's cameras. Objects are segmented only in cameras where they pass the
geometric checks; a camera without an image decides by geometry only (see ``generator.visibility``).
LiDAR points per box are counted from the sweep only where the box's count is unknown (detector output)
or the cpu segmenter needs them (its masks are drawn from the object's own points). Images are decoded only
for a segmenter that reads their pixels (``actors.segment.reads_pixels``); for the cpu segmenter without
GrabCut, the default, perception reads each image's size from its header (``sources.io.image_shape``, after
the same checks): decoding took a quarter of its time.
"""
from __future__ import annotations

from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from actors.segment import build_segmenter, reads_pixels, rle
from actors.track.pubtracker import track_scene
from generator.geometry import box_corners, points_in_boxes_pairs, project_to_image
from generator.projection import corners_in_camera, project_corners
from generator.sources import io
from generator.types import Boxes3D, DrivegenError, Frame, FrameIssue, Scene
from generator.visibility import decide_visibility, geometric_reasons
from schemas.config import PipelineConfig
from schemas.errors import UnlabelledFrameError
from schemas.tables import OBJECTS, PROJECTIONS, RLE, check_schema
from schemas.vocab import UNLABELLED_ISSUE


@dataclass
class PerceptionResult:
    scene_id: str
    boxes: list[Boxes3D]  # tracked boxes per frame (ego frame), as in ``objects``
    objects: pa.Table
    projections: pa.Table
    drop_counts: dict[str, int] = field(default_factory=dict)
    issues: list[FrameIssue] = field(default_factory=list)


@dataclass
class Detections:
    """The detect stage's output: boxes per frame (ego frame, in the scene's frame order) and the frames
    the detector could not read."""

    boxes: list[Boxes3D]
    issues: list[FrameIssue] = field(default_factory=list)
    exact: bool = False
    """the detector's boxes are the truth (``Detector.exact``): tracking only gives them identities"""


def detect_scene(scene: Scene, detector) -> Detections:
    """Detections for every frame; a frame whose input cannot be read gets no boxes and an issue."""
    try:
        return Detections(list(detector(scene.frames)), exact=bool(getattr(detector, "exact", False)))
    except (DrivegenError, ValueError, OSError):
        pass  # find the bad frame(s): one at a time
    out, issues = [], []
    for fr in scene.frames:
        try:
            out.append(detector([fr])[0])
        except (DrivegenError, ValueError, OSError) as err:
            # the file the reader names (an earlier sweep the model stacks may be the unreadable one)
            reason = UNLABELLED_ISSUE if isinstance(err, UnlabelledFrameError) else "detector_input_unreadable"
            issues.append(FrameIssue.of(fr, "detect", reason, err, file=getattr(err, "file", None) or fr.lidar_path))
            out.append(Boxes3D.empty())
    return Detections(out, issues, exact=bool(getattr(detector, "exact", False)))


def _fsl(values: np.ndarray, width: int, valid: np.ndarray | None = None) -> pa.Array:
    """(N, width) float array -> fixed-size-list Arrow array, null where ``valid`` is False."""
    v = np.asarray(values, dtype=np.float64).reshape(-1, width)
    arr = pa.FixedSizeListArray.from_arrays(pa.array(v.ravel(), pa.float64()), width)
    if valid is None:
        return arr
    return pa.FixedSizeListArray.from_arrays(pa.array(v.ravel(), pa.float64()), width,
                                            mask=pa.array(~np.asarray(valid, dtype=bool)))


def _nullable(v: np.ndarray) -> pa.Array:
    v = np.asarray(v, dtype=np.float64)
    return pa.array(v, pa.float64(), mask=~np.isfinite(v))


def objects_table(scene: Scene, boxes: list[Boxes3D], source: str, tracker: str | None = None) -> pa.Table:
    """OBJECTS rows of the boxes (ego frame) with their global poses; ``tracker``: the ``tracking.mode`` that gave
    their track ids (None: boxes no tracker saw, such as raw detections or labels)."""
    counts = [len(b) for b in boxes]
    allb = Boxes3D.concat(boxes)
    n = len(allb)
    fi = np.repeat(np.arange(len(boxes)), counts)
    R = np.stack([f.city_SE3_ego.rotation for f in scene.frames]) if scene.frames else np.zeros((0, 3, 3))
    t = np.stack([f.city_SE3_ego.translation for f in scene.frames]) if scene.frames else np.zeros((0, 3))
    Rb = R[fi] if n else np.zeros((0, 3, 3))
    cg = np.einsum("nij,nj->ni", Rb, allb.center_m) + (t[fi] if n else np.zeros((0, 3)))
    yg = allb.yaw_rad + (np.arctan2(Rb[:, 1, 0], Rb[:, 0, 0]) if n else 0.0)
    vg = np.einsum("nij,nj->ni", Rb[:, :2, :2], allb.velocity_mps) if n else np.zeros((0, 2))
    frame_idx = np.array([f.frame_index for f in scene.frames], dtype=np.int32)
    ts = np.array([f.timestamp_us for f in scene.frames], dtype=np.int64)
    cols = {
        "scene_id": pa.array([scene.scene_id] * n, pa.string()),
        "frame_index": pa.array(frame_idx[fi] if n else np.zeros(0, np.int32), pa.int32()),
        "timestamp_us": pa.array(ts[fi] if n else np.zeros(0, np.int64), pa.int64()),
        "track_id": pa.array(allb.track_id, pa.int64()),
        "class_name": pa.array(allb.class_name.astype(str).tolist(), pa.string()),
        "score": pa.array(allb.score, pa.float64()),
        "center_ego_m": _fsl(allb.center_m, 3), "size_lwh_m": _fsl(allb.size_lwh_m, 3),
        "yaw_ego_rad": pa.array(allb.yaw_rad, pa.float64()),
        "center_global_m": _fsl(cg, 3), "yaw_global_rad": pa.array(np.arctan2(np.sin(yg), np.cos(yg)), pa.float64()),
        "velocity_ego_mps": _fsl(allb.velocity_mps, 2), "velocity_global_mps": _fsl(vg, 2),
        "num_lidar_pts": pa.array(allb.num_lidar_pts, pa.int32()),
        "instance_token": pa.array(allb.instance_token.astype(str).tolist(), pa.string()),
        "source": pa.array([source] * n, pa.string()),
        "tracker": pa.array([tracker] * n, pa.string()),
    }
    return check_schema(pa.table(cols), OBJECTS, f"objects of scene {scene.scene_id}")


def _cameras(frame: Frame, wanted: list[str]) -> list[str]:
    names = [c for c in wanted if c in frame.cameras]
    return names or list(frame.cameras)


def perceive_scene(scene: Scene, detections: Detections | list[Boxes3D], cfg: PipelineConfig,
                   segmenter=None) -> PerceptionResult:
    """Track, segment and filter one scene's detections; see the module docstring.

    Frames go through three steps, overlapped for a model segmenter (``MODEL_SEGMENTERS``) so that its GPU is
    not left waiting on the CPU:
    ``_frame_inputs`` (geometry, LiDAR counts, the images read) runs up to ``PREFETCH_FRAMES`` frames ahead
    on one thread, the segmenter runs on this one, and ``_frame_rows`` (visibility, RLE) on another. Each step
    is a function of its frame alone and the results are taken in frame order, so the output is the same as
    one frame after the other."""
    if not isinstance(detections, Detections):
        detections = Detections(list(detections))
    if len(detections.boxes) != len(scene.frames):
        raise ValueError(f"scene {scene.scene_id}: {len(detections.boxes)} frames of detections for "
                         f"{len(scene.frames)} frames")
    issues: list[FrameIssue] = list(scene.issues) + list(detections.issues)
    lidar_bad = {i.frame_index for i in scene.issues if i.reason == "lidar_unreadable"}  # recorded at load
    unseen = lidar_bad | {i.frame_index for i in detections.issues if i.stage == "detect"}
    tracked = track_scene(scene.timestamps_us, detections.boxes, cfg.tracking, [f.city_SE3_ego for f in scene.frames],
                          looked=[f.frame_index not in unseen for f in scene.frames], exact=detections.exact)
    work = [(fr, boxes) for fr, boxes in zip(scene.frames, tracked) if len(boxes)]
    proj_parts: list[dict] = []
    overlap = cfg.segmentation.backend in MODEL_SEGMENTERS
    with (ThreadPoolExecutor(1, thread_name_prefix="perceive-inputs") if overlap else _Inline()) as inputs, \
            (ThreadPoolExecutor(1, thread_name_prefix="perceive-rows") if overlap else _Inline()) as rows:
        ahead = [inputs.submit(_frame_inputs, fr, boxes, cfg, fr.frame_index in lidar_bad)
                 for fr, boxes in work[:PREFETCH_FRAMES]]
        done = []
        for k, (fr, boxes) in enumerate(work):
            per_cam, seg_items, seg_owner, frame_issues = ahead.pop(0).result()
            if k + PREFETCH_FRAMES < len(work):
                nxt = work[k + PREFETCH_FRAMES]
                ahead.append(inputs.submit(_frame_inputs, *nxt, cfg, nxt[0].frame_index in lidar_bad))
            issues.extend(frame_issues)
            if seg_items:
                if segmenter is None:
                    segmenter = build_segmenter(cfg.segmentation)
                for owner, (masks, scores) in zip(seg_owner, segmenter.segment_crops(seg_items)):
                    per_cam[owner]["masks"], per_cam[owner]["scores"] = masks, scores
            done.append(rows.submit(_frame_rows, fr, boxes, per_cam, cfg))
        for fut in done:
            proj_parts.extend(fut.result())
    projections = _projections_table(scene.scene_id, proj_parts)
    reasons = projections.column("drop_reason").drop_null().to_pylist()
    objects = objects_table(scene, tracked, cfg.detection.backend, cfg.tracking.mode)
    return PerceptionResult(scene.scene_id, tracked, objects, projections, dict(Counter(reasons)), issues)


PREFETCH_FRAMES = 2
"""frames whose inputs (geometry, images) are prepared ahead of the segmenter"""
MODEL_SEGMENTERS = ("sam2",)
"""segmentation backends whose frames overlap the CPU work (a model, on a GPU where there is one). The CPU
segmenter runs the three steps one after the other: its process has one core's work to do, and on a node
whose cores the stages already fill, threads only contend (``bench/pipeline.py --scenes 4``, 2 cores, two runs
the same day: with them two workers' speed-up 1.59x and streaming memory 1.31x, without them 1.99x and 1.14x)."""


_NO_PIXEL = np.zeros((1, 1, 3), dtype=np.uint8)


class _Inline:
    """``ThreadPoolExecutor``'s ``submit`` run at once in this thread (the steps one after the other)."""

    def submit(self, fn, *args):
        fut = Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as err:  # noqa: BLE001 - given back by result(), as a pool's future does
            fut.set_exception(err)
        return fut

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _frame_inputs(fr: Frame, boxes: Boxes3D, cfg: PipelineConfig, lidar_bad: bool):
    """One frame's work before segmentation: per camera the projected boxes and geometric checks, LiDAR
    points per box where needed (``boxes.num_lidar_pts`` filled in), the images read.
    -> (per-camera records, segmenter items, the record each item belongs to, the frame's issues)."""
    vcfg = cfg.visibility
    cpu_seg = cfg.segmentation.backend == "cpu"
    pixels = reads_pixels(cfg.segmentation)
    issues: list[FrameIssue] = []
    cams = _cameras(fr, cfg.segmentation.cameras)
    has_images = any(fr.image_paths.get(c, "") for c in cams)
    size_ok = (np.isfinite(boxes.center_m).all(1) & np.isfinite(boxes.size_lwh_m).all(1) & np.isfinite(boxes.yaw_rad)
               & (boxes.size_lwh_m > 0).all(1))
    safe = boxes.copy()  # invalid boxes projected as tiny dummies (their row says zero_size_box)
    safe.center_m[~size_ok] = 0.0
    safe.size_lwh_m[~size_ok] = 1e-3
    safe.yaw_rad[~size_ok] = 0.0
    pts = member = None
    need_pts = (boxes.num_lidar_pts < 0).any() or (cpu_seg and has_images)
    if need_pts and not lidar_bad:
        try:
            pts = io.load_lidar_ego(fr)[:, :3]
        except DrivegenError as err:
            issues.append(FrameIssue.of(fr, "visibility", "lidar_unavailable", err, file=fr.lidar_path))
    if pts is not None:
        in_box, member = points_in_boxes_pairs(pts, safe.center_m, safe.size_lwh_m, safe.yaw_rad)
        keep = size_ok[in_box]
        in_box, member = in_box[keep], member[keep]  # box b's points: member[first[b]:first[b + 1]]
        first = np.searchsorted(in_box, np.arange(len(boxes) + 1))
        counted = np.diff(first).astype(np.int32)
        boxes.num_lidar_pts = np.where(boxes.num_lidar_pts >= 0, boxes.num_lidar_pts, counted).astype(np.int32)
    per_cam = []
    seg_items, seg_owner = [], []
    corners_ego = box_corners(safe.center_m, safe.size_lwh_m, safe.yaw_rad)  # the same in every camera
    for cam_name in cams:
        cam = fr.cameras[cam_name]
        pc = corners_in_camera(safe, cam, corners_ego)
        box2d, depth, in_image = project_corners(pc, safe.center_m, cam)
        front = (pc[..., 2] > vcfg.min_depth_m).any(axis=1)
        geo = geometric_reasons(size_ok, front, in_image, boxes.num_lidar_pts, box2d, vcfg)
        rec = dict(camera=cam_name, box2d=box2d, depth=depth, geo=geo, masks=None, scores=None, image_ok=True)
        path = fr.image_paths.get(cam_name, "")
        ok_idx = np.nonzero(geo == "")[0]
        if path:
            try:
                if pixels:
                    img = io.load_image(fr, cam_name)
                else:  # an image of the right size without pixels (a broadcast view): the segmenter reads no more
                    img = np.broadcast_to(_NO_PIXEL, (*io.image_shape(fr, cam_name), 3))
            except DrivegenError as err:
                issues.append(FrameIssue.of(fr, "segment", "image_unavailable", err, camera=cam_name, file=path))
                rec["image_ok"] = False
                img = None
            if img is not None:
                if cpu_seg:
                    if member is None:
                        uv = [np.zeros((0, 2))] * len(ok_idx)
                    else:
                        uv = [project_to_image(cam.cam_SE3_ego.transform_points(pts[member[first[i]:first[i + 1]]]),
                                               cam.K)[0] for i in ok_idx]
                else:
                    uv = None
                seg_items.append((img, box2d[ok_idx], uv))
                seg_owner.append(len(per_cam))
        per_cam.append(rec)
    return per_cam, seg_items, seg_owner, issues


def _frame_rows(fr: Frame, boxes: Boxes3D, per_cam: list[dict], cfg: PipelineConfig) -> list[dict]:
    """One frame's work after segmentation: the visibility decision and the masks' RLE, per camera."""
    parts = []
    for rec in per_cam:
        d = decide_visibility(rec["geo"], rec["box2d"], rec["masks"], rec["scores"], cfg.visibility, rec["image_ok"])
        rles = [None] * len(boxes)
        if rec["masks"] is not None:
            ok_idx = np.nonzero(rec["geo"] == "")[0]
            for i, r in zip(ok_idx, rle.encode(rec["masks"])):
                rles[i] = r
        parts.append(dict(frame_index=fr.frame_index, track_id=boxes.track_id, camera=rec["camera"],
                          box2d=rec["box2d"], depth=rec["depth"], rle=rles, **d))
    return parts


def _projections_table(scene_id: str, parts: list[dict]) -> pa.Table:
    if not parts:
        return PROJECTIONS.empty_table()
    cat = lambda k: np.concatenate([np.asarray(p[k]) for p in parts])
    box2d, mb = cat("box2d").reshape(-1, 4), cat("mask_box_xyxy").reshape(-1, 4)
    n = len(box2d)
    rles = [r for p in parts for r in p["rle"]]
    cols = {
        "scene_id": pa.array([scene_id] * n, pa.string()),
        "frame_index": pa.array(np.concatenate([np.full(len(p["box2d"]), p["frame_index"]) for p in parts]), pa.int32()),
        "track_id": pa.array(cat("track_id"), pa.int64()),
        "camera": pa.array([p["camera"] for p in parts for _ in range(len(p["box2d"]))], pa.string()),
        "box2d_proj_xyxy": _fsl(np.nan_to_num(box2d), 4, np.isfinite(box2d).all(1)),
        "depth_m": _nullable(cat("depth")),
        "mask_rle": pa.array(rles, RLE),
        "mask_box_xyxy": _fsl(np.nan_to_num(mb), 4, np.isfinite(mb).all(1)),
        "mask_score": _nullable(cat("mask_score")), "box_iou": _nullable(cat("box_iou")),
        "coverage": _nullable(cat("coverage")),
        "visible": pa.array(cat("visible").astype(bool), pa.bool_()),
        "drop_reason": pa.array(cat("drop_reason").tolist(), pa.string()),
    }
    return check_schema(pa.table(cols), PROJECTIONS, f"projections of scene {scene_id}")
