"""Detection backends: labels (seeded noise), lidar (geometric), on sweeps ray-cast here, generated logs and
the real nuScenes keyframe."""
from __future__ import annotations

import numpy as np
import pytest

from actors.detect import build_detector
from actors.detect.labels import frame_rng, noisy_labels
from actors.detect.lidar import detect_points
from generator.geometry import SE3
from generator.types import Boxes3D, Frame
from schemas.config import DETECTION_CLASSES, DetectionConfig, LabelNoiseConfig, LidarDetectorConfig

SENSOR_Z = 1.8


def raycast_sweep(boxes: Boxes3D, n_beams=32, n_az=1200, max_range=80.0, seed=0) -> np.ndarray:
    """A spinning LiDAR at (0, 0, SENSOR_Z) over flat ground z=0 and the boxes: (N, 3) ego-frame hits."""
    el = np.deg2rad(np.linspace(-30.0, 10.0, n_beams))
    az = np.linspace(-np.pi, np.pi, n_az, endpoint=False)
    E, A = np.meshgrid(el, az, indexing="ij")
    d = np.stack([np.cos(E) * np.cos(A), np.cos(E) * np.sin(A), np.sin(E)], -1).reshape(-1, 3)
    o = np.array([0, 0, SENSOR_Z])
    t = np.full(len(d), np.inf)
    down = d[:, 2] < -1e-6
    t[down] = -SENSOR_Z / d[down, 2]
    for c, s, y in zip(boxes.center_m, boxes.size_lwh_m, boxes.yaw_rad):  # slab test in the box frame
        R = np.array([[np.cos(y), np.sin(y), 0], [-np.sin(y), np.cos(y), 0], [0, 0, 1]])
        lo_, ld = (o - c) @ R.T, d @ R.T
        with np.errstate(divide="ignore", invalid="ignore"):
            t1 = (-s / 2 - lo_) / ld
            t2 = (s / 2 - lo_) / ld
        tn = np.nanmax(np.minimum(t1, t2), axis=1)
        tf = np.nanmin(np.maximum(t1, t2), axis=1)
        hit = (tn <= tf) & (tn > 0)
        t = np.where(hit & (tn < t), tn, t)
    ok = t < max_range
    pts = o + d[ok] * t[ok, None]
    rng = np.random.default_rng(seed)
    return pts + rng.normal(0, 0.02, pts.shape)


def street_boxes(seed=0) -> Boxes3D:
    """A street: parked and moving cars, a truck, a bus, pedestrians, a cyclist."""
    rng = np.random.default_rng(seed)
    rows = []
    for x in np.arange(-35, 40, 7.0):  # parked cars on both sides
        for side in (-6.0, 7.0):
            if rng.random() < 0.6:
                rows.append(("car", x + rng.normal(0, 0.5), side, rng.normal(0, 0.05), (4.5, 1.9, 1.6)))
    rows += [("car", 15.0, 0.0, 0.0, (4.6, 1.9, 1.5)), ("car", -12.0, 2.8, np.pi, (4.3, 1.8, 1.6)),
             ("truck", 28.0, 3.0, np.pi, (8.0, 2.5, 3.2)), ("bus", -25.0, -2.5, 0.02, (11.5, 2.9, 3.3)),
             ("pedestrian", 9.0, -9.5, 0.0, (0.7, 0.7, 1.75)), ("pedestrian", -6.0, 10.0, 1.0, (0.6, 0.7, 1.7)),
             ("bicycle", 20.0, -3.5, 0.0, (1.8, 0.6, 1.5))]
    c = np.array([[x, y, s[2] / 2] for _, x, y, _, s in rows])
    return Boxes3D(c, np.array([r[4] for r in rows]), np.array([r[3] for r in rows]),
                   np.array([r[0] for r in rows], dtype=object))


def _recall(gt: Boxes3D, det: Boxes3D, classes, max_range=40.0, max_dist=2.0):
    sel = np.isin(gt.class_name.astype(str), classes) & (np.linalg.norm(gt.center_m[:, :2], axis=1) <= max_range)
    if not sel.any():
        return np.nan, 0
    if len(det) == 0:
        return 0.0, int(sel.sum())
    d = np.linalg.norm(gt.center_m[sel, None, :2] - det.center_m[None, :, :2], axis=-1)
    return float((d.min(axis=1) <= max_dist).mean()), int(sel.sum())


def _frame(labels=None, scene="s", index=0) -> Frame:
    return Frame(scene, index, 1_000_000 * (index + 1), f"t{index}", SE3.identity(), SE3.identity(), "", "av2_feather",
                 labels=labels)


# ------------------------------------------------------------------------------------------ labels backend

def test_labels_backend_zero_noise_reproduces_ground_truth():
    gt = street_boxes()
    gt.velocity_mps = np.random.default_rng(1).normal(size=(len(gt), 2))
    gt.instance_token = np.array([f"i{k}" for k in range(len(gt))], dtype=object)
    det = build_detector(DetectionConfig(backend="labels"))
    out = det([_frame(gt)])[0]
    for f in Boxes3D.fields():
        if f != "track_id":
            assert np.array_equal(getattr(out, f), getattr(gt, f)), f
    assert (out.track_id == -1).all()


def test_labels_backend_noise_is_seeded_and_has_the_configured_statistics():
    gt = Boxes3D(np.tile([20.0, 5.0, 0.8], (4000, 1)), np.tile([4.0, 2.0, 1.5], (4000, 1)), np.zeros(4000),
                 np.full(4000, "car", dtype=object), velocity_mps=np.zeros((4000, 2)),
                 instance_token=np.array([f"i{k}" for k in range(4000)], dtype=object))
    noise = LabelNoiseConfig(center_m=0.3, size_frac=0.1, yaw_rad=0.05, velocity_mps=0.5, drop_prob=0.2,
                             false_positives_per_frame=50, score_min=0.4, seed=7)
    a = noisy_labels(gt, noise, frame_rng(7, "s", 3), list(DETECTION_CLASSES))
    b = noisy_labels(gt, noise, frame_rng(7, "s", 3), list(DETECTION_CLASSES))
    c = noisy_labels(gt, noise, frame_rng(7, "s", 4), list(DETECTION_CLASSES))
    assert np.array_equal(a.center_m, b.center_m) and not np.array_equal(a.center_m[:10], c.center_m[:10])
    tp = a.instance_token != ""
    assert abs(tp.mean() * len(a) / 4000 - 0.8) < 0.03  # ~20 % dropped
    assert 25 < (~tp).sum() < 80  # Poisson(50) false positives
    assert np.std(a.center_m[tp, 0] - 20.0) == pytest.approx(0.3, rel=0.1)
    assert np.std(a.size_lwh_m[tp, 0] / 4.0 - 1) == pytest.approx(0.1, rel=0.1)
    assert np.std(a.velocity_mps[tp, 1]) == pytest.approx(0.5, rel=0.1)
    assert a.score.min() >= 0.4 and set(a.class_name[~tp]) <= set(DETECTION_CLASSES)
    r = np.linalg.norm(a.center_m[~tp, :2], axis=1)
    assert r.min() >= 3.0 and r.max() <= 50.0


def test_labels_backend_applies_score_threshold_and_classes():
    gt = street_boxes()
    cfg = DetectionConfig(backend="labels", classes=["car", "truck"], score_threshold=0.9,
                          labels={"center_m": 0.01, "score_min": 0.5})
    out = build_detector(cfg)([_frame(gt)])[0]
    assert set(out.class_name) <= {"car", "truck"} and (out.score >= 0.9).all() and 0 < len(out) < len(gt)


# ------------------------------------------------------------------------------------------- lidar backend

def test_lidar_detector_finds_vehicles_in_a_raycast_street():
    gt = street_boxes()
    pts = raycast_sweep(gt)
    det = detect_points(pts, LidarDetectorConfig())
    rec, n = _recall(gt, det, ["car", "truck", "bus"])
    # Measured: 12 of 14 vehicles within 40 m (recall 0.86; the bus seen front-on is sized as a truck and
    # one car at 34 m shows 10 points). Several are seen from one side or one face only.
    assert n == 14 and rec >= 0.8
    assert set(det.class_name) <= set(DETECTION_CLASSES) and np.isnan(det.velocity_mps).all()
    assert ((det.score > 0) & (det.score <= 1)).all() and (det.size_lwh_m > 0).all()
    # Vehicles are classified as vehicles, pedestrians as pedestrians.
    d = np.linalg.norm(gt.center_m[:, None, :2] - det.center_m[None, :, :2], axis=-1)
    j = d.argmin(axis=1)
    ok = d.min(axis=1) <= 2.0
    veh = np.isin(gt.class_name.astype(str), ["car", "truck", "bus"]) & ok
    assert np.isin(det.class_name[j[veh]].astype(str), ["car", "truck", "bus"]).mean() >= 0.9
    ped = (gt.class_name == "pedestrian") & ok
    assert ped.sum() >= 1 and (det.class_name[j[ped]] == "pedestrian").all()


def test_lidar_detector_handles_empty_and_nan_clouds():
    cfg = LidarDetectorConfig()
    assert len(detect_points(np.zeros((0, 4)), cfg)) == 0
    assert len(detect_points(np.full((100, 4), np.nan), cfg)) == 0
    ground_only = raycast_sweep(Boxes3D.empty())
    assert len(detect_points(ground_only, cfg)) == 0
    with pytest.raises(ValueError, match="points must be"):
        detect_points(np.zeros(5), cfg)


def test_lidar_detector_on_generated_logs(synth_root):
    """Recall of vehicles within 40 m that the LiDAR sees (>= 10 points in the box; the generated labels also
    list fully occluded cars), centre distance <= 2 m, on every 4th keyframe of the generated logs."""
    from generator.sources import open_source

    src = open_source("nuscenes", synth_root)
    det = build_detector(DetectionConfig(backend="lidar"))
    hits = total = 0
    for sid in src.scene_ids():
        frames = src.load_scene(sid).frames[::4]
        for fr, boxes in zip(frames, det(frames)):
            seen = fr.labels.subset(np.nonzero(fr.labels.num_lidar_pts >= 10)[0])
            rec, n = _recall(seen, boxes, ["car", "truck", "bus"])
            if n:
                hits += rec * n
                total += n
    # Measured: 0.85 over 52 vehicle boxes (misses: cars seen face-on far away taken for bicycles, a car
    # merged with a tall neighbour).
    assert total >= 30
    assert hits / total >= 0.8, f"lidar recall {hits / total:.2f} over {total} vehicles"


def test_lidar_detector_on_real_nuscenes_sweep(nuscenes_demo):
    from generator.sources import io
    from generator.sources.mmdet_info import load_mmdet_info

    frame = load_mmdet_info(nuscenes_demo / "n015-2018-07-24-11-22-45+0800.pkl").frames[0]
    boxes = build_detector(DetectionConfig(backend="lidar", score_threshold=0.0))([frame])[0]
    gt = frame.labels
    assert len(io.load_lidar_ego(frame)) == 34688 and len(boxes) > 0
    # The well-observed vehicles (>= 40 LiDAR points within 40 m: a truck and a car) are found.
    well = np.isin(gt.class_name.astype(str), ["car", "truck", "bus"]) & (gt.num_lidar_pts >= 40)
    rec, n = _recall(gt.subset(np.nonzero(well)[0]), boxes, ["car", "truck", "bus"])
    assert n == 2 and rec == 1.0


def test_detect_actor_adds_boxes_per_frame():
    from actors.detect import DetectActor

    frames = [_frame(street_boxes(), index=i) for i in range(3)]
    batch = {"frame": np.array(frames, dtype=object)}
    out = DetectActor(DetectionConfig(backend="labels"))(batch)
    assert len(out["boxes"]) == 3 and all(len(b) == len(street_boxes()) for b in out["boxes"])
