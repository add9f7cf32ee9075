"""Generated nuScenes-format logs: the devkit loads them, and LiDAR, images, poses, annotations and the
scenario side file agree with each other and with the scripted scenes."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from generator.geometry import SE3
from schemas.errors import InputError
from schemas.vocab import NUSCENES_CAMERAS

VERSION = "v1.0-drivegen"


@pytest.fixture(scope="module")
def nusc(synth_root):
    from nuscenes.nuscenes import NuScenes

    return NuScenes(version=VERSION, dataroot=str(synth_root), verbose=False)


@pytest.fixture(scope="module")
def scenarios(synth_root):
    return json.loads((synth_root / VERSION / "drivegen_scenarios.json").read_text())


def _scene_samples(nusc, scene):
    out, tok = [], scene["first_sample_token"]
    while tok:
        s = nusc.get("sample", tok)
        out.append(s)
        tok = s["next"]
    return out


def _sd_global_SE3_sensor(nusc, sd):
    cs = nusc.get("calibrated_sensor", sd["calibrated_sensor_token"])
    pose = nusc.get("ego_pose", sd["ego_pose_token"])
    return SE3.from_quat(pose["rotation"], pose["translation"]).compose(SE3.from_quat(cs["rotation"], cs["translation"]))


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------ structure
def test_devkit_loads_and_counts(nusc):
    assert len(nusc.scene) == 2
    for scene in nusc.scene:
        samples = _scene_samples(nusc, scene)
        assert scene["nbr_samples"] == len(samples) == 40
        ts = np.array([s["timestamp"] for s in samples])
        assert np.all(np.diff(ts) == 500_000)  # 2 Hz keyframes, microseconds
        for s in samples:
            assert set(s["data"]) == set(NUSCENES_CAMERAS) | {"LIDAR_TOP"}
            for ch, tok in s["data"].items():
                sd = nusc.get("sample_data", tok)
                assert sd["is_key_frame"] and sd["timestamp"] == s["timestamp"]
                assert Path(nusc.get_sample_data_path(tok)).is_file()
    cats = {nusc.get("category", i["category_token"])["name"] for i in nusc.instance}
    assert {"vehicle.car", "human.pedestrian.adult"} <= cats
    assert 10 <= len(nusc.instance) / len(nusc.scene) <= 40


def test_lidar_sweep_chain_at_10hz(nusc):
    scene = nusc.scene[0]
    first = nusc.get("sample", scene["first_sample_token"])
    sd = nusc.get("sample_data", first["data"]["LIDAR_TOP"])
    while sd["prev"]:  # pre-roll sweeps before the first keyframe belong to the first sample
        sd = nusc.get("sample_data", sd["prev"])
        assert sd["sample_token"] == first["token"] and not sd["is_key_frame"]
    chain = [sd]
    while chain[-1]["next"]:
        chain.append(nusc.get("sample_data", chain[-1]["next"]))
    ts = np.array([c["timestamp"] for c in chain])
    assert np.all(np.diff(ts) == 100_000)
    keys = [c for c in chain if c["is_key_frame"]]
    assert len(keys) == 40 and len(chain) == 4 + 40 + 39 * 4
    for c in chain:  # a sweep belongs to the keyframe at or after it (what devkit get_boxes interpolates)
        s = nusc.get("sample", c["sample_token"])
        assert s["timestamp"] >= c["timestamp"] and s["timestamp"] - c["timestamp"] < 500_000
        assert c["filename"].startswith("samples/" if c["is_key_frame"] else "sweeps/")
    assert len({c["ego_pose_token"] for c in chain}) == len(chain)


def test_map_mask_covers_the_ego_path(nusc):
    for scene in nusc.scene:
        log = nusc.get("log", scene["log_token"])
        mask = nusc.get("map", log["map_token"])["mask"]
        xy = np.array([nusc.get("ego_pose", nusc.get("sample_data", s["data"]["LIDAR_TOP"])["ego_pose_token"])
                       ["translation"][:2] for s in _scene_samples(nusc, scene)])
        assert mask.is_on_mask(xy[:, 0], xy[:, 1]).all()
        assert not mask.is_on_mask(xy[:, 0] + 200.0, xy[:, 1] + 200.0).all()


# ------------------------------------------------------------------------------------------ determinism
def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    from generator.cli import main as cli_main

    kw = ["--scenes", "1", "--sweep-hz", "0", "--image-width", "320"]
    assert cli_main(["synth", "--seed", "7", "--out", str(tmp_path / "a"), *kw]) == 0
    assert cli_main(["synth", "--seed", "7", "--out", str(tmp_path / "b"), *kw]) == 0
    assert cli_main(["synth", "--seed", "8", "--out", str(tmp_path / "c"), *kw]) == 0
    # never mixes two datasets in one root: refused as unusable input (exit 2)
    assert cli_main(["synth", "--seed", "8", "--out", str(tmp_path / "b"), *kw]) == 2
    a, b, c = (_tree_digest(tmp_path / x) for x in "abc")
    assert len(a) > 6 * 40 and a == b
    shared = set(a) & set(c)
    assert not any(a[k] == c[k] for k in shared if k.endswith((".jpg", ".bin")))
    assert a[f"{VERSION}/sample_annotation.json"] != c.get(f"{VERSION}/sample_annotation.json")


def test_bad_arguments_are_refused(tmp_path):
    from generator.synth import make_dataset

    with pytest.raises(InputError, match="sweep_hz"):
        make_dataset(tmp_path, num_scenes=1, sweep_hz=5)
    with pytest.raises(InputError, match="16:9"):
        make_dataset(tmp_path, num_scenes=1, image_width_px=640, image_height_px=400)


# ------------------------------------------------------------------------------------------ LiDAR
def test_num_lidar_pts_equals_points_in_box(nusc):
    """Points the devkit loads and moves to the global frame fall inside exactly the boxes they hit."""
    from nuscenes.utils.data_classes import LidarPointCloud
    from nuscenes.utils.geometry_utils import points_in_box

    checked = hit_boxes = 0
    for scene in nusc.scene:
        for s in _scene_samples(nusc, scene)[::8]:
            sd = nusc.get("sample_data", s["data"]["LIDAR_TOP"])
            pc = LidarPointCloud.from_file(nusc.get_sample_data_path(sd["token"]))
            T = _sd_global_SE3_sensor(nusc, sd)
            pts = T.transform_points(pc.points[:3].T).T
            # ground points lie on z = 0 in the global frame: calibration and poses agree with the geometry
            assert np.mean(np.abs(pts[2]) < 0.05) > 0.3
            for ann in s["anns"]:
                rec = nusc.get("sample_annotation", ann)
                n = int(points_in_box(nusc.get_box(ann), pts).sum())
                assert abs(n - rec["num_lidar_pts"]) <= max(1, 0.02 * n), (rec["category_name"], n, rec)
                checked += 1
                hit_boxes += n > 0
    assert checked > 50 and hit_boxes > 0.3 * checked


def test_lidar_occlusion_and_intensity():
    """Nearest hit wins: a box hidden behind another gets no points; rays are 32 beams x ~1084 columns."""
    from generator.synth import lidar, rig

    dirs = rig.lidar_ray_dirs(1084)
    pose = SE3(np.eye(3), np.array([0.0, 0.0, 1.8]))
    front = (np.array([[10.0, 0.0, 1.0]]), np.array([[2.0, 4.0, 2.0]]), np.array([0.0]), np.array([40.0]))
    behind = (np.array([[20.0, 0.0, 0.9]]), np.array([[4.5, 1.9, 1.8]]), np.array([0.0]), np.array([150.0]))
    g = lambda x, y: np.full(len(x), 5.0)
    both = lidar.BoxSet(*(np.concatenate([a, b]) for a, b in zip(front, behind)))
    sw = lidar.cast_sweep(pose, dirs, both, g, np.random.default_rng(0))
    assert sw.hits[0] > 100 and sw.hits[1] == 0 and sw.unoccluded[1] > 50
    alone = lidar.cast_sweep(pose, dirs, lidar.BoxSet(*behind), g, np.random.default_rng(0))
    assert alone.hits[0] == sw.unoccluded[1]
    on_box = alone.points[alone.box_index == 0]
    assert np.all(on_box[:, 3] > 100)  # box intensity (150 +- 20 %), ground is 5
    assert set(np.unique(alone.points[:, 4]).astype(int)) <= set(range(32))
    assert 20_000 < len(alone.points) <= 32 * 1084  # open field: the upward beams see only sky


def test_keyframe_sweeps_have_nuscenes_density(nusc):
    from nuscenes.utils.data_classes import LidarPointCloud

    s = nusc.get("sample", nusc.scene[0]["first_sample_token"])
    pc = LidarPointCloud.from_file(nusc.get_sample_data_path(s["data"]["LIDAR_TOP"]))
    assert 20_000 < pc.points.shape[1] < 34_700
    raw = np.fromfile(nusc.get_sample_data_path(s["data"]["LIDAR_TOP"]), dtype=np.float32).reshape(-1, 5)
    assert raw[:, 4].min() == 0 and raw[:, 4].max() == 31  # ring index
    assert np.percentile(np.linalg.norm(raw[:, :3], axis=1), 99) < 70.5


# ------------------------------------------------------------------------------------------ cameras
def _chromaticity(rgb):
    rgb = np.asarray(rgb, dtype=np.float64)
    return rgb / np.maximum(rgb.sum(-1, keepdims=True), 1e-6)


def test_unoccluded_agent_pixels_have_class_colour(nusc):
    """Inside the projection of an unoccluded, near agent the image shows that class's colour."""
    import cv2
    from nuscenes.utils.geometry_utils import view_points

    from generator.synth.render import CLASS_COLORS_RGB

    checked = 0
    for scene in nusc.scene:
        for s in _scene_samples(nusc, scene)[::3]:
            for cam in ("CAM_FRONT", "CAM_BACK"):
                path, boxes, K = nusc.get_sample_data(s["data"][cam])
                img = cv2.imread(path)[..., ::-1]
                H, W = img.shape[:2]
                rects = []
                for b in boxes:
                    c = b.corners()
                    if (c[2] < 0.5).any():
                        rects.append(None)
                        continue
                    uv = view_points(c, K, normalize=True)[:2]
                    rects.append((uv[0].min(), uv[1].min(), uv[0].max(), uv[1].max(), float(np.linalg.norm(b.center))))
                for b, r in zip(boxes, rects):
                    if r is None or r[4] > 30 or b.name.startswith("movable_object"):
                        continue
                    x1, y1, x2, y2, d = r
                    if x1 < 0 or y1 < 0 or x2 > W or y2 > H or (x2 - x1) * (y2 - y1) < 400:
                        continue
                    nearer = [o for o in rects if o is not None and o is not r and o[4] < d + 3 and
                              min(x2, o[2]) > max(x1, o[0]) and min(y2, o[3]) > max(y1, o[1])]
                    if nearer:
                        continue
                    # the middle of the visible silhouette
                    cx, cy, hw, hh = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 6, (y2 - y1) / 6
                    patch = img[int(cy - hh):int(cy + hh) + 1, int(cx - hw):int(cx + hw) + 1].reshape(-1, 3)
                    bright = patch[patch.astype(int).sum(1) > 90]
                    if len(bright) < 20:
                        continue
                    want = _chromaticity(CLASS_COLORS_RGB[b.name])
                    err = np.abs(_chromaticity(bright) - want).max(-1)
                    assert np.mean(err < 0.08) > 0.6, (b.name, cam, s["token"])
                    checked += 1
    assert checked >= 5


def test_agent_behind_building_is_hidden():
    """Painter's order respects occlusion by buildings, not just distance: a car behind a wall is not drawn."""
    from generator.synth import rig
    from generator.synth.render import CLASS_COLORS_RGB, CameraRenderer

    cam = rig.camera_rig(320, 180)["CAM_FRONT"]
    r = CameraRenderer(cam)
    pose = cam.ego_SE3_cam  # ego at the origin of the frame
    car = [(np.array([40.0, 0.0, 0.9]), np.array([4.5, 1.9, 1.8]), 0.0, "vehicle.car")]
    wall = [(np.array([25.0, 0.0, 5.0]), np.array([4.0, 30.0, 10.0]), 0.0, (150, 150, 140), "building")]
    red = lambda img: np.mean(np.abs(_chromaticity(img[..., ::-1].reshape(-1, 3)) -
                                     _chromaticity(CLASS_COLORS_RGB["vehicle.car"])).max(-1) < 0.05)
    assert red(r.render(pose, [], car)) > 0.001
    assert red(r.render(pose, wall, car)) == 0.0


# ------------------------------------------------------------------------------------------ annotations
def test_box_velocity_matches_scripted_speed(nusc, scenarios):
    err = []
    for inst in nusc.instance:
        ann = nusc.get("sample_annotation", inst["first_annotation_token"])
        scene_tok = nusc.get("sample", ann["sample_token"])["scene_token"]
        speeds = scenarios["scenes"][scene_tok]["instances"][inst["token"]]["speed_mps"]
        for k in range(inst["nbr_annotations"]):
            if ann["prev"] and ann["next"]:
                v = nusc.box_velocity(ann["token"])
                err.append(abs(np.linalg.norm(v[:2]) - speeds[k]))
            ann = nusc.get("sample_annotation", ann["next"]) if ann["next"] else ann
    err = np.array(err)
    assert len(err) > 200
    assert np.median(err) < 0.05 and np.mean(err < 0.5) > 0.95


def test_gt_loads_into_devkit_eval_boxes(nusc):
    """The detection/tracking eval loaders accept every annotation (names, attributes, velocities)."""
    from nuscenes.eval.common.loaders import load_gt_of_sample_tokens
    from nuscenes.eval.detection.data_classes import DetectionBox

    tokens = [s["token"] for s in nusc.sample]
    det = load_gt_of_sample_tokens(nusc, tokens, DetectionBox)
    boxes = [b for t in det.sample_tokens for b in det[t]]
    assert len(boxes) == len(nusc.sample_annotation)
    names = {b.detection_name for b in boxes}
    assert {"car", "pedestrian", "traffic_cone"} <= names
    moving = [b for b in boxes if b.attribute_name == "vehicle.moving"]
    assert moving and np.median([np.linalg.norm(b.velocity) for b in moving]) > 3.0
    for b in boxes:
        if b.attribute_name == "vehicle.parked" or b.detection_name in ("traffic_cone", "barrier"):
            assert np.linalg.norm(b.velocity) < 1e-6
        elif b.attribute_name == "pedestrian.standing":  # may start or stop walking within the +-0.5 s window
            assert np.linalg.norm(b.velocity) < 0.9
    assert {b.attribute_name for b in boxes if b.detection_name == "barrier"} == {""}


def test_gt_loads_into_devkit_tracking_boxes(nusc):
    from nuscenes.eval.common.config import config_factory
    from nuscenes.eval.common.loaders import load_gt_of_sample_tokens
    from nuscenes.eval.tracking.data_classes import TrackingBox
    from nuscenes.eval.tracking.utils import category_to_tracking_name

    config_factory("tracking_nips_2019")  # registers the tracking class names the boxes are checked against
    trk = load_gt_of_sample_tokens(nusc, [s["token"] for s in nusc.sample], TrackingBox)
    boxes = [b for t in trk.sample_tokens for b in trk[t]]
    tracked = [r for r in nusc.sample_annotation if category_to_tracking_name(r["category_name"])]
    assert len(boxes) == len(tracked) > 0
    assert len({b.tracking_id for b in boxes}) == len({r["instance_token"] for r in tracked})


def test_visibility_follows_lidar_occlusion(nusc):
    recs = nusc.sample_annotation
    vis = np.array([int(r["visibility_token"]) for r in recs])
    pts = np.array([r["num_lidar_pts"] for r in recs])
    assert set(vis) <= {1, 2, 3, 4} and len(set(vis)) >= 3
    assert np.all(vis[pts == 0] == 1)
    assert np.median(pts[vis == 4]) > np.median(pts[vis == 1])


# ------------------------------------------------------------------------------------------ scenario file
def test_scenario_file_covers_every_instance(nusc, scenarios):
    from schemas.vocab import MANEUVERS, SCRIPTED_SCENARIOS as SCENARIOS, SPEED_STATUS as SPEED_STATUSES

    assert set(scenarios["scenes"]) == {s["token"] for s in nusc.scene}
    for inst in nusc.instance:
        ann = nusc.get("sample_annotation", inst["first_annotation_token"])
        scene_tok = nusc.get("sample", ann["sample_token"])["scene_token"]
        entry = scenarios["scenes"][scene_tok]["instances"][inst["token"]]
        assert entry["scenario"] in SCENARIOS
        assert entry["category"] == nusc.get("category", inst["category_token"])["name"]
        assert entry["first_sample_token"] == ann["sample_token"]
        assert len(entry["speed_mps"]) == inst["nbr_annotations"]
    used = {e["scenario"] for sc in scenarios["scenes"].values() for e in sc["instances"].values()}
    assert len(used) >= 7
    for scene in nusc.scene:
        ego = scenarios["scenes"][scene["token"]]["ego"]
        kf = ego["keyframes"]
        assert [k["sample_token"] for k in kf] == [s["token"] for s in _scene_samples(nusc, scene)]
        assert all(k["maneuver"] in MANEUVERS and k["speed_status"] in SPEED_STATUSES for k in kf)
        assert ego["segments"][0]["start_timestamp"] == kf[0]["timestamp"]


def test_ego_maneuvers_agree_with_poses(nusc, scenarios):
    """Turn labels have the right yaw-rate sign, Stop means the poses do not move, speeds match."""
    labels = set()
    for scene in nusc.scene:
        kf = scenarios["scenes"][scene["token"]]["ego"]["keyframes"]
        poses = [nusc.get("ego_pose", nusc.get("sample_data", s["data"]["LIDAR_TOP"])["ego_pose_token"])
                 for s in _scene_samples(nusc, scene)]
        xy = np.array([p["translation"][:2] for p in poses])
        yaw = np.unwrap([SE3.from_quat(p["rotation"], [0, 0, 0]).yaw_rad for p in poses])
        rate = np.gradient(yaw, 0.5)
        speed = np.linalg.norm(np.gradient(xy, 0.5, axis=0), axis=1)
        for k, lab in enumerate(kf):
            labels.add(lab["maneuver"])
            if lab["maneuver"] == "Turn Left":
                assert rate[k] > 0.1
            elif lab["maneuver"] == "Turn Right":
                assert rate[k] < -0.1
            elif lab["maneuver"] == "Stop":
                assert speed[k] < 0.5
            if 0 < k < len(kf) - 1:
                assert abs(speed[k] - lab["speed_mps"]) < 0.8
    assert labels - {"Straight"}


# ------------------------------------------------------------------------------------------ scripted world
def test_scripted_scenes_are_physically_plausible():
    """Across seeds: no two agents (or an agent and the ego) overlap, nobody drives through a building,
    headings turn smoothly, speeds stay in range, and every STRIDE-QA/DRAMA-X scenario occurs."""
    from generator.synth.world import (DT_S, SCENARIOS, TIME_GRID_S, _CHECK, _overlap_any, _rect,
                                       collides, script_scene)

    seen = set()
    for seed, idx in ((3, 0), (3, 1), (4, 0), (4, 1), (5, 0), (5, 1)):
        sc = script_scene(seed, idx)
        assert 0.0 <= sc.ego.speed_mps.min() and sc.ego.speed_mps.max() <= 15.0 + 1e-6
        for k, tr in enumerate(sc.tracks):
            seen.add(tr.scenario)
            assert not collides(tr, sc.ego, [], ego_margin=0.0)
            for other in sc.tracks[k + 1:]:
                assert not _overlap_any(_rect(tr, 0.0), _rect(other, 0.0)), (tr.scenario, other.scenario)
            assert tr.speed_mps.max() < 16.5
            assert np.abs(np.diff(tr.yaw[_CHECK])).max() / DT_S < 2.5, (tr.scenario, tr.category)
            for s in sc.statics:
                if s.kind != "building":
                    continue
                c, sn = np.cos(s.yaw_rad), np.sin(s.yaw_rad)
                dx, dy = tr.x[_CHECK] - s.center_m[0], tr.y[_CHECK] - s.center_m[1]
                inside = (np.abs(dx * c + dy * sn) < s.size_lwh_m[0] / 2) & (np.abs(-dx * sn + dy * c) < s.size_lwh_m[1] / 2)
                assert not inside.any(), (tr.scenario, s.center_m)
        assert len(TIME_GRID_S) == len(sc.ego.maneuver)
    assert seen >= set(SCENARIOS) - {"maintain_state", "pulling_away"}
