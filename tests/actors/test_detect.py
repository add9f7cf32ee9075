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


def _moving_frames(n, hz=10.0, speed=8.0, labels=None):
    """``n`` frames of an ego driving along +x in the city frame (yaw 0.3 rad), the same labels in each."""
    yaw = 0.3
    R = np.array([[np.cos(yaw), -np.sin(yaw), 0], [np.sin(yaw), np.cos(yaw), 0], [0, 0, 1]])
    out = []
    for k in range(n):
        pose = SE3(R, np.array([1000.0 + speed * k / hz * np.cos(yaw), 500.0 + speed * k / hz * np.sin(yaw), 0.0]))
        out.append(Frame("s", k, int(k / hz * 1e6), f"t{k}", pose, SE3.identity(), "", "av2_feather",
                         labels=labels.copy() if labels is not None else Boxes3D.empty()))
    return out


def test_ghosts_recur_at_fixed_places_of_the_city():
    """A real detector's ghosts come back at the same places: the same ghost sites are seen from every frame
    within range, at a fixed place in the city frame (within the centre noise), each in about
    ``ghost_presence`` of the frames, with false-positive scores; the same frames detected one at a time or
    together give the same boxes."""
    cfg = DetectionConfig(backend="labels", labels={"ghosts_per_ha": 8.0, "ghost_presence": 0.6, "center_m": 0.1,
                                                    "score_min": 0.5, "fp_score": [0.3, 0.8], "seed": 2})
    det = build_detector(cfg)
    frames = _moving_frames(60, speed=3.0)
    together = det(frames)
    alone = [det([f])[0] for f in frames]
    assert all(np.array_equal(a.center_m, b.center_m) for a, b in zip(together, alone))
    from actors.detect.labels import ghost_sites

    noise = cfg.labels
    in_view = [ghost_sites(noise, "s", f.city_SE3_ego.translation[:2], list(DETECTION_CLASSES))[0] for f in frames]
    sites = np.unique(np.concatenate(in_view), axis=0)
    seen = np.zeros(len(sites))
    for f, b, view in zip(frames, together, in_view):
        city = f.city_SE3_ego.transform_points(b.center_m)[:, :2]
        d = np.linalg.norm(city[:, None] - sites[None], axis=2)
        assert (d.min(axis=1) < 0.5).all()  # every ghost at one of the sites (jitter 0.1 m)
        seen += np.bincount(d.argmin(axis=1), minlength=len(sites))
    always = np.array([all((np.linalg.norm(v - p, axis=1) < 1e-9).any() for v in in_view) for p in sites])
    assert always.sum() >= 3  # sites in view of every frame ...
    assert abs(seen[always].sum() / (always.sum() * len(frames)) - 0.6) < 0.1  # ... seen in ~60 % of the frames
    scores = np.concatenate([b.score for b in together])
    assert scores.min() >= 0.3 and scores.max() <= 0.8 and (scores < 0.5).any()  # overlaps the true boxes' range
    off = build_detector(DetectionConfig(backend="labels", labels={"ghosts_per_ha": 0.0, "center_m": 0.1}))
    assert sum(len(b) for b in off(frames)) == 0


def test_missed_detections_come_in_runs():
    """An object's misses are runs (occlusion), not independent drops: at 10 Hz with runs of ~1 s, missed frames
    follow missed frames; the share missed matches rate x length."""
    n_obj, n_frames = 40, 600
    gt = Boxes3D(np.column_stack([np.arange(n_obj) * 3.0 + 5, np.zeros(n_obj), np.full(n_obj, 0.8)]),
                 np.tile([4.0, 2.0, 1.5], (n_obj, 1)), np.zeros(n_obj), np.full(n_obj, "car", dtype=object),
                 instance_token=np.array([f"obj{k}" for k in range(n_obj)], dtype=object))
    cfg = DetectionConfig(backend="labels", labels={"miss_runs_per_min": 6.0, "miss_run_s": 1.0, "center_m": 0.01})
    out = build_detector(cfg)(_moving_frames(n_frames, labels=gt))
    seen = np.array([[f"obj{k}" in set(b.instance_token) for k in range(n_obj)] for b in out])  # (frames, objects)
    missed = ~seen
    share = missed.mean()
    assert 0.04 < share < 0.16, share  # 6 runs/min x 1 s = 10 % of the time
    after_miss = missed[1:][missed[:-1]].mean()  # P(missed | missed the frame before)
    assert after_miss > 0.8, after_miss  # runs: independent drops would give ~0.1


# ------------------------------------------------------------------------------------------- lidar backend

def test_lidar_detector_finds_vehicles_in_a_raycast_street():
    gt = street_boxes()
    pts = raycast_sweep(gt)
    det = detect_points(pts, LidarDetectorConfig())
    rec, n = _recall(gt, det, ["car", "truck", "bus"])
    # Measured: 13 of 14 vehicles within 40 m (recall 0.93; 12 of 14 before the structure test, the shape
    # rules and the height quantile). Several are seen from one side or one face only.
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
    # Measured: 0.96 over 57 vehicle boxes (0.85 over 52 before: cars seen face-on far away were taken for
    # bicycles, a car merged with a tall neighbour was too tall for a car).
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


# ------------------------------------------------------------------------ lidar backend: motion, rules, goals
def test_motion_search_finds_the_displacement_and_keeps_still_clusters_still():
    from actors.detect.motion import estimate_displacement, occupancy

    rng = np.random.default_rng(3)

    def wall(x0, y0, x1, y1, n, z=(0.3, 1.5)):
        t = np.linspace(0, 1, n)
        return np.column_stack([x0 + t * (x1 - x0), y0 + t * (y1 - y0), rng.uniform(*z, n)])

    # an L-shaped car corner (back face and right side), 1 cm noise
    car = np.vstack([wall(15.0, -5.0, 15.0, -3.1, 40), wall(15.0, -5.0, 19.0, -5.0, 60)])
    car[:, :2] += rng.normal(0, 0.01, (100, 2))
    pole = np.column_stack([np.array([[8.0, 6.0]]) + rng.normal(0, 0.02, (20, 2)), rng.uniform(0.3, 4, 20)])
    moved = np.array([3.0, 0.2, 0.0])  # the car moved by this between the earlier sweep and now
    roof = wall(17.0, -5.0, 17.0, -3.1, 30, (1.45, 1.5))  # a ring across another car's roof, 2 m behind the face
    earlier = np.vstack([car - moved, pole, roof, rng.uniform(-30, 30, (200, 3))])
    args = dict(occ=occupancy(earlier, 0.1, 0.5), cell_m=0.1, z_cell_m=0.5, coarse_m=0.2, fine_m=0.05, min_gain=0.1,
                min_match=0.5)
    lonely = np.column_stack([np.array([-20.0, 20.0]) + rng.normal(0, 0.3, (12, 2)), rng.uniform(0.3, 1.5, 12)])
    d, best, still = estimate_displacement([car, pole, lonely], np.zeros(3), np.array([10.0, 1.5, 1.5]),
                                           np.array([0.75, 1.5, 1.5]), **args)
    assert np.abs(d[0] - moved[:2]).max() <= 0.05 and best[0] > 0.9 and still[0] < 0.2
    assert np.array_equal(d[1], [0.0, 0.0]) and still[1] > 0.9
    assert np.array_equal(d[2], [0.0, 0.0]) and best[2] == still[2] < 0.2  # the earlier sweep has nothing there
    # a search confined across the car's axis cannot reach the shift along it
    d, _, _ = estimate_displacement([car], np.array([np.pi / 2]), np.array([1.0]), np.array([0.2]), **args)
    assert np.abs(d[0] - moved[:2]).max() > 1.0
    # a face alone (no side) finds its own earlier place, not the roof line level with it at 2 m
    face = car[:40]
    d, _, _ = estimate_displacement([face], np.zeros(1), np.array([10.0]), np.array([0.75]), **args)
    assert np.abs(d[0] - moved[:2]).max() <= 0.1, d


def test_lidar_detector_takes_velocity_and_heading_from_an_earlier_sweep():
    """Two cars drive (one towards the sensor): with the sweep 0.5 s earlier they get their velocity and face
    the way they drive; parked cars get none (NaN: their heading is left to the tracker and the prior)."""
    now = street_boxes()
    movers = {"away": (15.0, 0.0, 0.0, 10.0), "towards": (-12.0, 2.8, np.pi, 8.0)}  # x, y, heading, speed
    earlier = now.copy()
    for x, y, h, v in movers.values():
        k = int(np.argmin(np.hypot(now.center_m[:, 0] - x, now.center_m[:, 1] - y)))
        earlier.center_m[k, :2] -= 0.5 * v * np.array([np.cos(h), np.sin(h)])
    cfg = LidarDetectorConfig()
    det = detect_points(raycast_sweep(now), cfg, raycast_sweep(earlier, seed=1), 0.5)
    alone = detect_points(raycast_sweep(now), cfg)
    assert np.isnan(alone.velocity_mps).all()
    for x, y, h, v in movers.values():
        j = int(np.argmin(np.hypot(det.center_m[:, 0] - x, det.center_m[:, 1] - y)))
        assert np.hypot(det.center_m[j, 0] - x, det.center_m[j, 1] - y) < 2.0 and det.class_name[j] == "car"
        assert np.allclose(det.velocity_mps[j], v * np.array([np.cos(h), np.sin(h)]), atol=0.5), det.velocity_mps[j]
        assert np.cos(det.yaw_rad[j] - h) > 0.95
    parked = np.abs(det.center_m[:, 1]) > 5
    assert parked.sum() >= 5 and np.isnan(det.velocity_mps[parked]).all()
    # the oncoming car hid the parked car at (-14.5, 7) in the earlier sweep; shifted 7.9 m it lines up with the
    # next car of the row, which is still there now: not motion (it would be without that check)
    loose = detect_points(raycast_sweep(now), LidarDetectorConfig(motion_max_taken=1.0), raycast_sweep(earlier, seed=1),
                          0.5)
    hidden = np.hypot(loose.center_m[:, 0] + 14.5, loose.center_m[:, 1] - 7.0) < 3.0
    assert hidden.any() and np.isfinite(loose.velocity_mps[hidden]).all()


def test_traffic_side_prior_turns_still_vehicles_to_their_side_of_the_road():
    from actors.detect.lidar import traffic_side_heading

    centre = np.array([[10.0, -6.0], [-20.0, 9.0], [12.0, 3.5], [5.0, 1.0], [30.0, -8.0], [8.0, 20.0]])
    yaw = np.array([np.pi + 0.05, 0.1, -0.2, np.pi, 0.0, np.pi / 2])
    got = traffic_side_heading(centre, yaw, LidarDetectorConfig())
    # right of the ego's lane: the ego's direction; beyond half a lane to its left: the opposite; a vehicle
    # across the ego's road (the last) keeps its fitted axis
    want = np.array([0.05, np.pi + 0.1, np.pi - 0.2, 0.0, 0.0, np.pi / 2])
    assert np.allclose(np.cos(got - want), 1.0)
    left = traffic_side_heading(centre, yaw, LidarDetectorConfig(traffic_side="left"))
    assert np.allclose(np.cos(left[[0, 1]] - np.array([np.pi + 0.05, 0.1])), 1.0)
    assert np.array_equal(traffic_side_heading(centre, yaw, LidarDetectorConfig(traffic_side="none")), yaw)


def test_lidar_detector_tells_structure_cones_barriers_and_signs_apart():
    """A building's face 45 m away, its top above the beams' reach at that range, is no truck; a
    nuScenes-sized cone (1.07 m) is a cone, not a pedestrian; a barrier's box has nuScenes' axes (0.5 m long,
    2.5 m wide); a sign board above the ground is nothing. The old fixed rules made the first two a truck and
    a pedestrian; without the structure and floating tests the first and last come back."""
    world = Boxes3D(np.array([[45.0, 3.0, 6.0], [9.0, -4.0, 0.535], [11.0, 6.0, 0.49], [7.0, 8.0, 1.6],
                              [10.0, -9.0, 0.865]]),
                    np.array([[0.5, 6.0, 12.0], [0.41, 0.41, 1.07], [0.5, 2.53, 0.98], [0.6, 0.1, 0.8],
                              [4.6, 1.9, 1.73]]),
                    np.zeros(5), np.array(["", "traffic_cone", "barrier", "", "car"], dtype=object))
    pts = raycast_sweep(world)

    def at(det, x, y):
        return np.nonzero(np.hypot(det.center_m[:, 0] - x, det.center_m[:, 1] - y) < 2.5)[0]

    det = detect_points(pts, LidarDetectorConfig())
    assert len(at(det, 45.5, 3.0)) == 0 and len(at(det, 7.0, 8.0)) == 0
    (cone,) = at(det, 9.0, -4.0)
    (barrier,) = at(det, 11.0, 6.0)
    assert det.class_name[cone] == "traffic_cone" and det.class_name[barrier] == "barrier"
    assert abs(np.cos(det.yaw_rad[barrier])) > 0.95 and det.size_lwh_m[barrier, 1] > 2 * det.size_lwh_m[barrier, 0]
    assert det.class_name[at(det, 10.0, -9.0)].tolist() == ["car"]
    loose = detect_points(pts, LidarDetectorConfig(structure_min_points_above=10 ** 6, structure_height_m=100,
                                                   floating_m=100))
    assert loose.class_name[at(loose, 45.5, 3.0)].tolist() == ["truck"]
    assert loose.class_name[at(loose, 7.0, 8.0)].tolist() == ["pedestrian"]


@pytest.mark.slow
def test_lidar_backend_meets_the_generated_log_goals(synth_root, synth_lidar_detector, tmp_path):
    """Issue #18 goals on the generated logs, scored by drivegen validate's own code: mAP >= 0.5 and mAOE
    < 0.5 rad through detection and tracking (the detector alone: the same mAP; its still boxes' heading is
    made consistent per track by the tracker). Before: mAP 0.336, mAOE 1.229."""
    from generator.validate.detection_quality import detection_metrics, write_run_folder
    from support.data import SYNTH_VERSION
    from generator.sources import open_source
    from schemas.config import parse_config

    cfg = parse_config({"detection": {"backend": "lidar"}, "segmentation": {"cameras": ["CAM_FRONT"]}})
    src = open_source("nuscenes", synth_root, version=SYNTH_VERSION)
    scenes = [src.load_scene(s) for s in src.scene_ids()]
    assert cfg.detection == DetectionConfig(backend="lidar")  # the shared pass's detector
    tracked = detection_metrics(write_run_folder(tmp_path / "tracked", src, cfg, scenes, detector=synth_lidar_detector))
    alone = detection_metrics(write_run_folder(tmp_path / "alone", src, cfg, scenes, tracked=False,
                                               detector=synth_lidar_detector))
    for name, d in (("detect + track", tracked), ("detector alone", alone)):
        print(f"lidar backend, generated logs, {name}: mAP {d['mAP']:.3f} mAOE {d['mAOE']:.3f} NDS {d['NDS']:.3f} "
              + " ".join(f"{c} {m['AP']:.2f}" for c, m in d["per_class"].items() if m["has_gt"]))
    # measured: 0.683 / 0.335 (detect + track), 0.683 / 0.65 (alone)
    assert tracked["mAP"] >= 0.5 and tracked["mAOE"] < 0.5, (tracked["mAP"], tracked["mAOE"])
    assert alone["mAP"] >= 0.5
    assert len(tracked["classes"]) == 8 and min(m["AP"] for m in tracked["per_class"].values() if m["has_gt"]) > 0.2


def test_lidar_backend_on_the_real_av2_frames(av2_log, tmp_path):
    """The AV2 excerpt's two frames with a LiDAR sweep (the second with the first as its earlier sweep):
    prints per-class AP and false positives. Measured: car AP 0.41 (before 0.40), car AOE 0.13 rad (before
    1.30, detector alone), 7 truck/bus boxes within 50 m that match nothing (before 9)."""
    from generator.validate.detection_quality import detection_metrics, frames_with_lidar, write_run_folder
    from generator.sources.av2 import AV2Source

    src = AV2Source(av2_log.parent)
    scene = frames_with_lidar(src.load_scene(av2_log.name))
    assert len(scene.frames) == 2 and len(scene.frames[1].lidar_sweeps) == 1
    cfg = DetectionConfig(backend="lidar")
    from schemas.config import PipelineConfig

    run = write_run_folder(tmp_path / "av2", src, PipelineConfig(detection=cfg), [scene], tracked=False)
    d = detection_metrics(run)
    print("lidar backend, AV2 frames with a sweep: " + ", ".join(
        f"{c} AP {m['AP']:.2f} ({m['num_gt']} GT, {m['num_pred']} pred, {m['num_fp']} FP)"
        for c, m in d["per_class"].items() if m["has_gt"] or m["num_pred"]))
    car = d["per_class"]["car"]
    assert car["AP"] >= 0.35 and car["AOE"] < 0.5
    big = sum(d["per_class"][c]["num_fp"] for c in ("truck", "bus"))
    assert big <= 8


def test_coinciding_annotations_are_detected_once():
    """Issue #33: the AV2 log annotates one parked car twice (two tokens, identical boxes); the labels backend gave
    both, and the tracker swapped between them (two tracks carrying both identities). With ``coincident_frac``
    and noise on, a detector sees one object there: the box with the smaller token, in every frame. Pedestrians
    0.56 m apart (the closest pair of that log) and a car and a pedestrian at one spot stay two; the default
    (noise alone) and noise-free labels keep every annotation."""
    gt = Boxes3D(np.array([[10.0, 0.0, 0.8], [10.01, 0.02, 0.8], [20.0, 5.0, 0.9], [20.56, 5.0, 0.9],
                           [30.0, 0.0, 0.9], [30.0, 0.0, 0.8]]),
                 np.array([[4.1, 2.0, 1.9], [4.1, 2.0, 1.9]] + [[0.7, 0.6, 1.7]] * 3 + [[4.1, 2.0, 1.9]]),
                 np.zeros(6), np.array(["car", "car", "pedestrian", "pedestrian", "pedestrian", "car"], dtype=object),
                 instance_token=np.array(["b-car", "a-car", "p1", "p2", "p3", "c3"], dtype=object))
    frames = _moving_frames(5, labels=gt)
    noisy = build_detector(DetectionConfig(backend="labels", labels={"center_m": 0.01, "coincident_frac": 0.5}))
    for b in noisy(frames):
        assert sorted(b.instance_token) == ["a-car", "c3", "p1", "p2", "p3"]
    noise_alone = build_detector(DetectionConfig(backend="labels", labels={"center_m": 0.01}))
    assert all(len(b) == 6 for b in noise_alone(frames))
    whole = build_detector(DetectionConfig(backend="labels", labels={"coincident_frac": 0.5}))(frames)
    assert all(len(b) == 6 for b in whole)
