"""nuScenes source on generated nuScenes-format logs, checked against the devkit's own computations."""
from __future__ import annotations

import numpy as np
import pytest

from generator.geometry import wrap_angle_rad
from generator.projection import corners_in_camera, project_boxes
from generator.sources import frames_table, open_source, scenes_table, source_from_description
from generator.sources.io import load_image, load_lidar_ego
from generator.sources.nuscenes import NuScenesSource
from generator.types import SourceError
from schemas.vocab import NUSCENES_CAMERAS
from schemas import tables
from schemas.config import DETECTION_CLASSES, KeyframeConfig



def version_of(root) -> str:
    return next(p.parent.name for p in root.glob("*/scene.json"))


@pytest.fixture(scope="module")
def src(synth_root):
    return NuScenesSource(synth_root, version_of(synth_root))


@pytest.fixture(scope="module")
def nusc(synth_root):
    """The devkit over the whole table set: the reference the source's scenes are checked against."""
    from nuscenes import NuScenes

    return NuScenes(version=version_of(synth_root), dataroot=str(synth_root), verbose=False)


@pytest.fixture(scope="module")
def scene(src):
    return src.load_scene(src.scene_ids()[0])


def test_scene_ids_and_frames_follow_the_tables(src, scene, nusc):
    assert src.scene_ids() == [s["name"] for s in nusc.scene] and len(src.scene_ids()) == 2
    rec = nusc.scene[0]
    assert len(scene.frames) == rec["nbr_samples"]
    tok, tokens = rec["first_sample_token"], []
    while tok:
        tokens.append(tok)
        tok = nusc.get("sample", tok)["next"]
    assert [f.token for f in scene.frames] == tokens
    assert np.array_equal(scene.timestamps_us, [nusc.get("sample", t)["timestamp"] for t in tokens])
    assert abs(scene.frame_interval_s - 0.5) < 0.05  # samples are 2 Hz keyframes
    assert scene.source == "nuscenes" and scene.front_camera == "CAM_FRONT"
    assert scene.log_name == nusc.get("log", rec["log_token"])["logfile"]
    assert [f.frame_index for f in scene.frames] == list(range(len(scene.frames)))


def test_anchors_are_1hz_inside_the_window(scene):
    t = (scene.timestamps_us - scene.timestamps_us[0]) / 1e6
    a = np.array(scene.anchor_indices)
    assert len(a) >= 14
    assert np.allclose(t[a], np.round(t[a]), atol=0.25) and t[a][0] == pytest.approx(2.0, abs=0.25)
    assert np.all(np.diff(np.round(t[a])) == 1.0)
    # the +3 s context ends inside the clip, which spans one more sample interval than its last timestamp
    assert np.all(t[a] + 3.0 <= t[-1] + np.median(np.diff(t)) + 0.06) and np.all(t[a] <= 17.25)
    assert [i for i, f in enumerate(scene.frames) if f.is_anchor] == scene.anchor_indices


def test_poses_and_calibration_from_the_lidar_sample_data(src, scene, nusc):
    f = scene.frames[5]
    sd = nusc.get("sample_data", nusc.get("sample", f.token)["data"]["LIDAR_TOP"])
    pose = nusc.get("ego_pose", sd["ego_pose_token"])
    assert np.allclose(f.city_SE3_ego.translation, pose["translation"])
    cs = nusc.get("calibrated_sensor", sd["calibrated_sensor_token"])
    assert np.allclose(f.ego_SE3_lidar.translation, cs["translation"])
    assert f.lidar_path == nusc.get_sample_data_path(sd["token"]) and f.lidar_format == "nuscenes_bin"
    assert tuple(f.cameras) == NUSCENES_CAMERAS
    cam_sd = nusc.get("sample_data", nusc.get("sample", f.token)["data"]["CAM_FRONT"])
    cam_cs = nusc.get("calibrated_sensor", cam_sd["calibrated_sensor_token"])
    assert np.allclose(f.cameras["CAM_FRONT"].K, cam_cs["camera_intrinsic"])
    assert (f.cameras["CAM_FRONT"].width_px, f.cameras["CAM_FRONT"].height_px) == (cam_sd["width"], cam_sd["height"])


def test_labels_match_devkit_boxes_in_the_ego_frame(src, scene, nusc):
    """Centre, size (wlh -> lwh), yaw and class of every kept annotation, against the devkit's Box."""
    from nuscenes.eval.detection.utils import category_to_detection_name
    from pyquaternion import Quaternion

    checked = 0
    for f in scene.frames[::7]:
        sample = nusc.get("sample", f.token)
        pose = nusc.get("ego_pose", nusc.get("sample_data", sample["data"]["LIDAR_TOP"])["ego_pose_token"])
        want = {}
        for tok in sample["anns"]:
            ann = nusc.get("sample_annotation", tok)
            cls = category_to_detection_name(ann["category_name"])
            if cls is None:
                continue
            box = nusc.get_box(tok)
            box.translate(-np.array(pose["translation"]))
            box.rotate(Quaternion(pose["rotation"]).inverse)
            want[ann["instance_token"]] = (box, cls, ann["num_lidar_pts"])
        lab = f.labels
        assert sorted(lab.instance_token) == sorted(want)
        for i, inst in enumerate(lab.instance_token):
            box, cls, npts = want[inst]
            assert np.allclose(lab.center_m[i], box.center, atol=1e-6)
            assert np.allclose(lab.size_lwh_m[i], box.wlh[[1, 0, 2]])
            assert abs(wrap_angle_rad(lab.yaw_rad[i] - box.orientation.yaw_pitch_roll[0])) < 1e-6
            assert lab.class_name[i] == cls and lab.num_lidar_pts[i] == npts
            assert lab.track_id[i] == nusc.getind("instance", inst)
            checked += 1
    assert checked > 20
    classes = np.concatenate([f.labels.class_name for f in scene.frames])
    assert set(classes) <= set(DETECTION_CLASSES)


def test_velocities_are_world_motion_in_ego_axes(src, scene, nusc):
    speeds, along = [], []
    for f in scene.frames:
        lab = f.labels
        ok = np.isfinite(lab.velocity_mps).all(axis=1)
        for i in np.nonzero(ok)[0][:3]:  # the devkit's estimate, rotated by the ego pose
            ann = next(a for a in (nusc.get("sample_annotation", t) for t in nusc.get("sample", f.token)["anns"])
                       if a["instance_token"] == lab.instance_token[i])
            v = f.city_SE3_ego.inverse().rotate_vectors(nusc.box_velocity(ann["token"])[None])[0]
            assert np.allclose(lab.velocity_mps[i], v[:2])
        sp = np.linalg.norm(lab.velocity_mps, axis=1)
        speeds.append(sp)
        fast = (lab.class_name == "car") & (sp > 3.0)
        along.append(np.abs(wrap_angle_rad(np.arctan2(lab.velocity_mps[fast, 1], lab.velocity_mps[fast, 0])
                                           - lab.yaw_rad[fast])))
    along = np.concatenate(along)
    assert len(along) > 10  # the generated scenes have moving cars
    assert np.median(along) < 0.2  # they travel along their heading (a wrong rotation would break this)


def test_projection_matches_devkit_camera_boxes(src, scene, nusc):
    """Our motion-compensated extrinsics reproduce the devkit's boxes in the camera frame exactly."""
    f = scene.frames[10]
    sample = nusc.get("sample", f.token)
    for cam in ("CAM_FRONT", "CAM_BACK_LEFT"):
        _, boxes, K = nusc.get_sample_data(sample["data"][cam])
        by_inst = {nusc.get("sample_annotation", b.token)["instance_token"]: b for b in boxes}
        lab = f.labels
        ours = corners_in_camera(lab, f.cameras[cam])
        for i, inst in enumerate(lab.instance_token):
            if inst in by_inst:
                dev = by_inst[inst].corners().T  # (8, 3) in the camera frame
                assert np.allclose(np.sort(ours[i], axis=0), np.sort(dev, axis=0), atol=1e-5)
        assert np.allclose(K, f.cameras[cam].K)
        box2d, _, vis = project_boxes(lab, f.cameras[cam])
        assert np.all(box2d[vis, 2] <= f.cameras[cam].width_px) and np.all(box2d[vis, 0] >= 0)


def test_lidar_and_images_load(src, scene):
    from nuscenes.utils.data_classes import LidarPointCloud

    f = scene.frames[3]
    pts = load_lidar_ego(f)
    ref = LidarPointCloud.from_file(f.lidar_path).points.T
    assert pts.shape == ref.shape and np.allclose(pts[:, :3], f.ego_SE3_lidar.transform_points(ref[:, :3]), atol=1e-4)
    for cam in NUSCENES_CAMERAS:
        img = load_image(f, cam)
        assert img.shape == (f.cameras[cam].height_px, f.cameras[cam].width_px, 3)


def test_lidar_points_fall_in_the_labelled_boxes(scene):
    """LiDAR -> ego transform and label conversion agree: points per box equal the table's num_lidar_pts."""
    from generator.geometry import points_in_boxes

    for f in scene.frames[::13]:
        pts = load_lidar_ego(f)
        lab = f.labels
        counts = points_in_boxes(pts, lab.center_m, lab.size_lwh_m, lab.yaw_rad).sum(axis=1)
        assert lab.num_lidar_pts.sum() > 0
        assert np.mean(counts == lab.num_lidar_pts) > 0.9


def test_scene_filter_tokens_and_unknown(src, synth_root, nusc):
    SYNTH_VERSION = version_of(synth_root)
    second = nusc.scene[1]
    one = NuScenesSource(synth_root, SYNTH_VERSION, scenes=[second["token"]])
    assert one.scene_ids() == [second["name"]]
    assert one.load_scene(second["token"]).scene_id == second["name"]
    with pytest.raises(SourceError, match="unknown scenes"):
        NuScenesSource(synth_root, SYNTH_VERSION, scenes=["scene-nope"])
    with pytest.raises(SourceError, match="unknown scene"):
        src.load_scene("scene-nope")
    with pytest.raises(SourceError, match="no nuScenes tables for version 'v9'"):
        NuScenesSource(synth_root, "v9")


def test_open_source_description_round_trip_and_tables(src, synth_root):
    s = open_source("nuscenes", synth_root, KeyframeConfig(window_end_s=4.0))  # version found on disk
    assert s.version == version_of(synth_root) == src.version
    rebuilt = source_from_description(s.describe())
    assert rebuilt.describe() == s.describe()
    sc = rebuilt.load_scene(rebuilt.scene_ids()[1])
    assert len(sc.anchor_indices) == 3  # 2, 3, 4 s: the keyframe config travelled with the description
    ft = frames_table(sc)
    assert ft.schema.equals(tables.FRAMES, check_metadata=False) and ft.num_rows == len(sc.frames)
    assert ft["cameras"][0].as_py()[0]["image_path"] == sc.frames[0].image_paths["CAM_FRONT"]
    assert np.allclose(np.array(ft["ego_SE3_lidar"][0].as_py()).reshape(4, 4), sc.frames[0].ego_SE3_lidar.as_matrix())
    st = scenes_table([sc, src.load_scene(src.scene_ids()[0])])
    assert st.num_rows == 2 and st["num_frames"].to_pylist() == [len(sc.frames), len(src.load_scene(
        src.scene_ids()[0]).frames)]
    assert st["duration_s"][0].as_py() == pytest.approx((sc.timestamps_us[-1] - sc.timestamps_us[0]) / 1e6)
    with pytest.raises(ValueError, match="unknown source kind"):
        open_source("kitti", synth_root)
