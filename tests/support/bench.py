"""A small scripted run folder for the STRIDE-QA-Bench export tests.

One 20 s scene at 2 Hz: the ego drives straight along +x at 8 m/s (rear-axle origin on the ground, no
rotation), a forward camera sees 45 degrees either side. Agents act out the bench scenarios on analytic
trajectories (global frame = the ego's start pose):

    oncoming   car, lane y=+3.5 heading -x at 9 m/s, level with the ego origin at t=10.5 s
    overtaken  car, lane y=-3.5 heading +x at 4 m/s, level with the ego origin at t=7.5 s
    maintain   car, y=0, 25 m ahead at the ego's speed all along
    pulling    car, y=-1.5, 10 m ahead at the ego's speed, accelerating at 2.5 m/s^2 from t=12 s
    diverging  car, y=1, 12 m ahead at the ego's speed, turning left on a 15 m arc from t=14 s
    parked     car standing at x=100, y=-6
    crossing   pedestrian crossing the road at x=150 from y=-8 at 1.4 m/s from t=12 s

The run folder is written with the project's own table code: OBJECTS -> ``compute_attributes``,
``project_boxes`` for the camera, box-shaped COCO RLE masks (pycocotools), committed like a pipeline
scene (``generator.runfolder.commit_tables``). Expected values in the tests come from the analytic trajectories here.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from pycocotools import mask as mask_utils

from generator.attributes.compute import compute_attributes
from generator.geometry import SE3
from generator.projection import project_boxes
from generator.qa import scene_split
from generator.runfolder import RunStore, commit_tables
from generator.types import Boxes3D, CameraCalib
from generator.writers.parquet import scene_split_of
from schemas.tables import FRAMES, OBJECTS, PROJECTIONS, QA

SCENE = "bench-scene-1"
DT = 0.5
TIMES = np.round(np.arange(0.0, 20.0 + 1e-9, DT), 6)
EGO_V = 8.0
T0_US = 1_600_000_000_000_000
W, H = 320, 180
K = np.array([[160.0, 0, 160.0], [0, 160.0, 90.0], [0, 0, 1]])
CAM_R = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])  # columns: cam x, y, z in the ego frame
CAM_T = np.array([1.5, 0.0, 1.6])
SIZES = {"car": (4.6, 1.9, 1.7), "pedestrian": (0.7, 0.7, 1.8)}


def ego_xy(t):
    t = np.asarray(t, dtype=np.float64)
    return np.stack([EGO_V * t, np.zeros_like(t)], -1)


def _diverging(t):
    t = np.asarray(t, dtype=np.float64)
    R = 15.0
    th = np.clip(EGO_V * (t - 14.0) / R, 0.0, np.pi / 2)
    arc_end = 14.0 + (np.pi / 2) * R / EGO_V
    x14 = EGO_V * 14.0 + 12.0
    x = np.where(t < 14, EGO_V * t + 12.0, x14 + R * np.sin(th))
    y = np.where(t < 14, 1.0, 1.0 + R * (1 - np.cos(th)) + np.clip(t - arc_end, 0, None) * EGO_V)
    return np.stack([x, y], -1), th


AGENTS = {  # name -> (track_id, class, xy(t) (T,2), yaw(t) (T,))
    "oncoming": (1, "car", lambda t: np.stack([EGO_V * 10.5 - 9.0 * (t - 10.5), np.full_like(t, 3.5)], -1),
                 lambda t: np.full_like(t, np.pi)),
    "overtaken": (2, "car", lambda t: np.stack([EGO_V * 7.5 + 4.0 * (t - 7.5), np.full_like(t, -3.5)], -1),
                  lambda t: np.zeros_like(t)),
    "maintain": (3, "car", lambda t: np.stack([EGO_V * t + 25.0, np.zeros_like(t)], -1), lambda t: np.zeros_like(t)),
    "pulling": (4, "car", lambda t: np.stack([EGO_V * t + 10.0 + 1.25 * np.clip(t - 12.0, 0, None) ** 2,
                                              np.full_like(t, -1.5)], -1), lambda t: np.zeros_like(t)),
    "diverging": (5, "car", lambda t: _diverging(t)[0], lambda t: _diverging(t)[1]),
    "parked": (6, "car", lambda t: np.stack([np.full_like(t, 100.0), np.full_like(t, -6.0)], -1),
               lambda t: np.zeros_like(t)),
    "crossing": (7, "pedestrian", lambda t: np.stack([np.full_like(t, 150.0),
                                                      -8.0 + 1.4 * np.clip(t - 12.0, 0, None)], -1),
                 lambda t: np.full_like(t, np.pi / 2)),
}
NAME_OF_TRACK = {v[0]: k for k, v in AGENTS.items()}


def agent_state(name: str, t):
    """(xyz (T, 3) global box centre, yaw (T,), size lwh (3,), class) of an agent at times t (s)."""
    tid, cls, fxy, fyaw = AGENTS[name]
    t = np.atleast_1d(np.asarray(t, dtype=np.float64))
    xy = fxy(t)
    size = np.array(SIZES[cls])
    xyz = np.concatenate([xy, np.full((len(t), 1), size[2] / 2)], axis=1)
    return xyz, fyaw(t), size, cls


def camera() -> CameraCalib:
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = CAM_R, CAM_T
    return CameraCalib("CAM_FRONT", K, SE3.from_matrix(T), W, H)


@dataclass
class BenchRun:
    run: Path
    images: Path
    tables: dict  # what the run folder holds, by layout name (frames, objects, projections, attributes, qa)
    split: str = "train"  # the scene's split (its QA rows', else the config's hashed one): it names its files


def _box_rle(box):
    m = np.zeros((H, W), dtype=np.uint8, order="F")
    x1, y1, x2, y2 = np.floor(box[0]), np.floor(box[1]), np.ceil(box[2]), np.ceil(box[3])
    m[int(y1):int(y2), int(x1):int(x2)] = 1
    r = mask_utils.encode(np.asfortranarray(m))
    return {"size": [H, W], "counts": r["counts"].decode()}


def make_bench_run(root: Path, with_qa: bool | str = True, cfg=None) -> BenchRun:
    """Write the scripted run folder under ``root``. ``with_qa``: True = minimal hand-made QA rows (one
    ego_spatiotemporal row per anchor and visible target), "generated" = the project's QA generator
    (``generator.qa.generate.generate_qa``) over the tables, False = no QA shards. ``cfg``: the run's
    PipelineConfig (default: the defaults), written to its config.yaml and used by the QA generator."""
    import cv2

    store = RunStore(root / "run")
    img_dir = root / "logs" / "samples" / "CAM_FRONT"
    img_dir.mkdir(parents=True, exist_ok=True)
    cam = camera()
    cam_row = {"name": "CAM_FRONT", "width_px": W, "height_px": H, "K": K.ravel().tolist(),
               "ego_SE3_cam": cam.ego_SE3_cam.as_matrix().ravel().tolist()}
    rng = np.random.default_rng(0)
    frames, objects, projections = [], [], []
    ego = ego_xy(TIMES)
    agent_xyz = {n: agent_state(n, TIMES) for n in AGENTS}
    for k, t in enumerate(TIMES):
        ts = T0_US + int(round(t * 1e6))
        img_path = img_dir / f"{SCENE}_{k:03d}.jpg"
        cv2.imwrite(str(img_path), rng.integers(0, 255, (H, W, 3), dtype=np.uint8))
        pose = np.eye(4)
        pose[:2, 3] = ego[k]
        frames.append({"scene_id": SCENE, "frame_index": k, "timestamp_us": ts, "token": f"sample-{k:03d}",
                       "is_anchor": bool(2.0 <= t <= 17.0 and float(t).is_integer()),
                       "city_SE3_ego": pose.ravel().tolist(), "ego_SE3_lidar": np.eye(4).ravel().tolist(),
                       "lidar_path": "", "lidar_format": "nuscenes_bin",
                       "cameras": [{**cam_row, "image_path": str(img_path)}]})
        centers, sizes, yaws, tids = [], [], [], []
        for name, (xyz, yaw, size, cls) in agent_xyz.items():
            tid = AGENTS[name][0]
            c_ego = xyz[k] - np.array([ego[k, 0], ego[k, 1], 0.0])
            # velocities: central differences of the analytic positions (one-sided at the ends)
            v = np.gradient(xyz[:, :2], DT, axis=0)[k]
            objects.append({"scene_id": SCENE, "frame_index": k, "timestamp_us": ts, "track_id": tid,
                            "class_name": cls, "score": 1.0, "center_ego_m": c_ego.tolist(),
                            "size_lwh_m": size.tolist(), "yaw_ego_rad": float(yaw[k]),
                            "center_global_m": xyz[k].tolist(), "yaw_global_rad": float(yaw[k]),
                            "velocity_ego_mps": v.tolist(), "velocity_global_mps": v.tolist(),
                            "num_lidar_pts": 50, "instance_token": f"inst-{name}", "source": "gt"})
            centers.append(c_ego), sizes.append(size), yaws.append(yaw[k]), tids.append(tid)
        box2d, depth, inimg = project_boxes(Boxes3D(np.array(centers), np.array(sizes), np.array(yaws),
                                                    np.array(["car"] * len(tids), dtype=object)), cam)
        for j, tid in enumerate(tids):
            vis = bool(inimg[j])
            projections.append({"scene_id": SCENE, "frame_index": k, "track_id": tid, "camera": "CAM_FRONT",
                                "box2d_proj_xyxy": box2d[j].tolist() if vis else None, "depth_m": float(depth[j]),
                                "mask_rle": _box_rle(box2d[j]) if vis else None,
                                "mask_box_xyxy": box2d[j].tolist() if vis else None, "mask_score": 0.95 if vis else None,
                                "box_iou": 0.9 if vis else None, "coverage": 0.95 if vis else None,
                                "visible": vis, "drop_reason": None if vis else "out_of_image"})
    frames_t = pa.Table.from_pylist(frames, schema=FRAMES)
    objects_t = pa.Table.from_pylist(objects, schema=OBJECTS)
    proj_t = pa.Table.from_pylist(projections, schema=PROJECTIONS)
    att = compute_attributes(objects_t, frames_t)
    tables = {"frames": frames_t, "objects": objects_t, "projections": proj_t, "attributes": att}
    from schemas.config import PipelineConfig

    cfg = cfg or PipelineConfig()
    if with_qa == "generated":
        from generator.qa import generate_qa, load_templates

        tables["qa"] = generate_qa(frames_t, att, proj_t, cfg, load_templates(cfg))
    elif with_qa:
        qa = []
        vis_now = {(r["frame_index"], r["track_id"]) for r in projections if r["visible"]}
        for f in frames:
            if not f["is_anchor"]:
                continue
            for tid in sorted(NAME_OF_TRACK):
                if (f["frame_index"], tid) not in vis_now:
                    continue
                for fam in ("ego_spatiotemporal", "ego_spatial"):
                    qa.append({"qa_id": f"{SCENE}-{len(qa):06d}", "scene_id": SCENE, "split": "val",
                               "keyframe_index": f["frame_index"], "timestamp_us": f["timestamp_us"], "family": fam,
                               "kind": "quantitative", "question_type": "distance", "template_id": "t",
                               "question": "How far is Region [0]?", "answer": "x", "value": 1.0, "unit": "m",
                               "horizon_s": 1.0, "region_ids": [0], "track_ids": [tid],
                               "class_names": [AGENTS[NAME_OF_TRACK[tid]][1]], "out_of_view": False,
                               "grounding": []})
        tables["qa"] = pa.Table.from_pylist(qa, schema=QA)
    store.write_bytes("config.yaml", cfg.to_yaml().encode())
    split = (scene_split_of(tables["qa"], SCENE) if "qa" in tables else None) or \
        scene_split([SCENE], cfg.qa.val_fraction)[0]
    commit_tables(store, SCENE, tables, split=split)
    return BenchRun(Path(store.base), img_dir, tables, split)


def recommit(br: BenchRun, **changed: pa.Table) -> None:
    """Commit the bench scene again with some of its tables replaced (a run folder is only ever changed
    through a commit: its manifest lists the new files and row counts)."""
    br.tables.update(changed)
    commit_tables(RunStore(br.run), SCENE, br.tables, split=br.split)
