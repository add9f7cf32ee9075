"""Perception speed figures: tracker frames/s at nuScenes density, detection and segmentation backends.

    python bench/perception.py [--frames 2000] [--boxes 40] [--skip-models]

Tracker: one core (``OMP_NUM_THREADS=1`` etc. are set before numpy loads), synthetic 2 Hz and 10 Hz scenes of
``--boxes`` moving objects per frame (nuScenes keyframes average ~40 annotated boxes) with centre noise,
drop-outs and false positives, linking and velocity estimation included, both tracker modes; goals >= 2,000
frames/s for the Kalman tracker at 10 Hz with 40 boxes (issue #18), >= 1,000 for the greedy one.
Detection and segmentation: the backends that can run here, on the real nuScenes keyframe in
``../shared/data/nuscenes-demo`` (skipped when absent); mmdet3d/sam2 use random weights (speed only).
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEMO = REPO.parent / "shared" / "data" / "nuscenes-demo"


def synthetic_scene(n_frames: int, n_boxes: int, hz: float = 2.0, seed: int = 0):
    from generator.geometry import SE3
    from generator.types import Boxes3D
    from schemas.config import DETECTION_CLASSES

    rng = np.random.default_rng(seed)
    cls = rng.choice(np.array(DETECTION_CLASSES[:8], dtype=object), n_boxes)
    p0 = rng.uniform(-50, 50, (n_boxes, 2))
    v = rng.normal(0, 3, (n_boxes, 2)) * (cls != "pedestrian")[:, None]
    dets, poses = [], []
    for k in range(n_frames):
        t = k / hz
        poses.append(SE3(np.eye(3), np.array([5.0 * t, 0, 0])))
        keep = rng.random(n_boxes) > 0.05
        c = p0[keep] + v[keep] * t - [5.0 * t, 0] + rng.normal(0, 0.1, (keep.sum(), 2))
        n_fp = rng.poisson(1.0)
        c = np.vstack([c, rng.uniform(-50, 50, (n_fp, 2))])
        kc = np.concatenate([cls[keep], rng.choice(cls, n_fp)])
        m = len(c)
        dets.append(Boxes3D(np.column_stack([c, np.ones(m)]), np.tile([4.0, 2.0, 1.6], (m, 1)), np.zeros(m), kc,
                            velocity_mps=np.vstack([v[keep], np.zeros((n_fp, 2))]) + rng.normal(0, 0.2, (m, 2))))
    ts = (np.arange(n_frames) / hz * 1e6).astype(np.int64)
    return ts, dets, poses


def bench_tracker(n_frames: int, n_boxes: int) -> None:
    from actors.track.pubtracker import track_scene
    from schemas.config import TrackingConfig

    for hz, label in ((2.0, "2 Hz, detector velocities"), (10.0, "10 Hz, no velocities")):
        ts, dets, poses = synthetic_scene(n_frames, n_boxes, hz)
        if "no velocities" in label:
            for d in dets:
                d.velocity_mps[:] = np.nan
        scenes = [(ts[i:i + 40], dets[i:i + 40], poses[i:i + 40]) for i in range(0, n_frames, 40)]  # 40-frame scenes
        for mode, goal in (("kalman", 2000), ("greedy", 1000)):
            cfg = TrackingConfig(mode=mode)
            track_scene(scenes[0][0], scenes[0][1], cfg, scenes[0][2])  # warm-up
            t0 = time.perf_counter()
            for ts_s, dets_s, poses_s in scenes:
                track_scene(ts_s, dets_s, cfg, poses_s)
            dt = time.perf_counter() - t0
            print(f"tracker {mode} ({label}, {n_boxes} boxes/frame, scenes of 40 frames): {n_frames / dt:,.0f} "
                  f"frames/s on one core (goal >= {goal:,})")


def bench_models() -> None:
    if not DEMO.exists():
        print(f"model backends: skipped ({DEMO} absent)")
        return
    from actors.detect import build_detector
    from actors.segment import build_segmenter
    from generator.projection import project_boxes
    from generator.sources import io
    from generator.sources.mmdet_info import load_mmdet_info
    from schemas.config import DetectionConfig, SegmentationConfig

    scene = load_mmdet_info(DEMO / "n015-2018-07-24-11-22-45+0800.pkl")
    frame = scene.frames[0]

    def timed(fn, reps):
        fn()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps

    lidar = build_detector(DetectionConfig(backend="lidar"))
    print(f"detect lidar: {1 / timed(lambda: lidar([frame]), 5):.1f} frames/s (34,688-point sweep incl. reading it)")
    labels = build_detector(DetectionConfig(backend="labels", labels={"center_m": 0.1, "drop_prob": 0.1}))
    print(f"detect labels (with noise): {1 / timed(lambda: labels([frame]), 50):,.0f} frames/s")
    try:
        import mmdet3d

        cfg = Path(mmdet3d.__file__).parent / ".mim/configs/centerpoint/centerpoint_pillar02_second_secfpn_8xb4-cyclic-20e_nus-3d.py"
        mm = build_detector(DetectionConfig(backend="mmdet3d", mmdet3d={"config": str(cfg)}))
        print(f"detect mmdet3d CenterPoint pillar ({mm.device}, random weights): "
              f"{1 / timed(lambda: mm([frame]), 2):.2f} frames/s")
    except Exception as err:  # noqa: BLE001 - optional backend
        print(f"detect mmdet3d: not available ({type(err).__name__}: {err})")

    gt = frame.labels
    cam = frame.cameras["CAM_FRONT"]
    img = io.load_image(frame, "CAM_FRONT")
    box2d, _, ok = project_boxes(gt, cam)
    idx = np.nonzero(ok)[0]
    from generator.geometry import points_in_boxes, project_to_image

    pts = io.load_lidar_ego(frame)[:, :3]
    member = points_in_boxes(pts, gt.center_m, gt.size_lwh_m, gt.yaw_rad)
    uv = [project_to_image(cam.ego_SE3_cam.inverse().transform_points(pts[member[i]]), cam.K)[0] for i in idx]
    cpu = build_segmenter(SegmentationConfig(backend="cpu"))
    t = timed(lambda: cpu(img, box2d[idx], uv), 5)
    print(f"segment cpu: {1 / t:.1f} images/s ({len(idx)} boxes on a 1600x900 image)")
    try:
        sam = build_segmenter(SegmentationConfig(backend="sam2", sam2={
            "model_config_name": "configs/sam2.1/sam2.1_hiera_t.yaml", "checkpoint": None}))
        t = timed(lambda: sam(img, box2d[idx]), 1)
        print(f"segment sam2 hiera-t ({sam.device}, random weights): {1 / t:.2f} images/s ({len(idx)} boxes)")
    except Exception as err:  # noqa: BLE001 - optional backend
        print(f"segment sam2: not available ({type(err).__name__}: {err})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=2000)
    ap.add_argument("--boxes", type=int, default=40)
    ap.add_argument("--skip-models", action="store_true")
    a = ap.parse_args()
    bench_tracker(a.frames, a.boxes)
    if not a.skip_models:
        bench_models()
    return 0


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("perception"):
        sys.exit(main())
