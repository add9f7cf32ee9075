"""AV2 source on the real Argoverse 2 log excerpt: frames, poses, calibration, labels, velocities, tables."""
from __future__ import annotations

import shutil

import numpy as np
import pyarrow.compute as pc
import pyarrow.feather as feather
import pytest

from generator.geometry import points_in_boxes, quat_wxyz_to_matrix, wrap_angle_rad
from generator.sources import frames_table, open_source, scenes_table, source_from_description
from generator.sources.av2 import AV2Source, track_velocities
from generator.sources.av2_classes import AV2_TO_NUSCENES
from generator.sources.io import load_lidar_ego
from generator.types import SourceError
from schemas import tables
from schemas.config import DETECTION_CLASSES, KeyframeConfig

LOG = "7fab2350-7eaf-3b7e-a39d-6937a4c1bede"


@pytest.fixture(scope="module")
def scene(av2_log):
    return AV2Source(av2_log.parent).load_scene(LOG)


@pytest.fixture(scope="module")
def ann(av2_log):
    return feather.read_table(av2_log / "annotations.feather")


def test_frames_are_the_annotated_timestamps(scene, ann):
    ts_ns = np.unique(ann["timestamp_ns"].to_numpy())
    assert len(scene.frames) == len(ts_ns) == 156
    assert np.array_equal(scene.timestamps_us, ts_ns // 1000)
    assert abs(scene.frame_interval_s - 0.1) < 0.005
    assert scene.source == "av2" and scene.log_name == LOG and scene.front_camera == "ring_front_center"
    # 1 Hz anchors from 2 s while 3 s of log remain (15.5 s long): 2 .. 12 s
    rel = (scene.timestamps_us[scene.anchor_indices] - scene.timestamps_us[0]) / 1e6
    assert np.allclose(rel, np.arange(2, 13), atol=0.06)
    assert [i for i, f in enumerate(scene.frames) if f.is_anchor] == scene.anchor_indices


def test_poses_match_the_pose_file(scene, av2_log):
    poses = feather.read_table(av2_log / "city_SE3_egovehicle.feather")
    ts = poses["timestamp_ns"].to_numpy()
    for f in scene.frames[::40]:
        row = int(np.nonzero(ts == int(f.token))[0][0])  # the pose file holds every LiDAR timestamp
        q = [poses[c][row].as_py() for c in ("qw", "qx", "qy", "qz")]
        t = [poses[c][row].as_py() for c in ("tx_m", "ty_m", "tz_m")]
        assert np.allclose(f.city_SE3_ego.rotation, quat_wxyz_to_matrix(np.array(q)), atol=1e-9)
        assert np.allclose(f.city_SE3_ego.translation, t)


def test_cameras_keep_av2_names_and_optical_frames(scene):
    cams = scene.frames[0].cameras
    assert len(cams) == 9 and "ring_front_center" in cams and "stereo_front_left" in cams
    front = cams["ring_front_center"]
    assert (front.width_px, front.height_px) == (1550, 2048)  # portrait
    # optical z axis of the front camera looks along ego +x; of the rear-left roughly backwards-left
    assert front.ego_SE3_cam.rotation[:, 2] @ np.array([1.0, 0, 0]) > 0.99
    rl = cams["ring_rear_left"].ego_SE3_cam.rotation[:, 2]
    assert rl[0] < -0.3 and rl[1] > 0.3
    assert all(p == "" for p in scene.frames[0].image_paths.values())  # the excerpt has no images


def test_labels_count_class_mapping(scene, ann):
    cats = ann["category"].to_numpy(zero_copy_only=False)
    kept = np.array([AV2_TO_NUSCENES[c] is not None for c in cats])
    assert sum(len(f.labels) for f in scene.frames) == kept.sum() < len(cats)  # bollards, strollers dropped
    classes = np.concatenate([f.labels.class_name for f in scene.frames])
    assert set(classes) <= set(DETECTION_CLASSES)
    n_ped = int(pc.sum(pc.equal(ann["category"], "PEDESTRIAN")).as_py())
    assert (classes == "pedestrian").sum() == n_ped


def test_every_av2_category_is_mapped_explicitly():
    assert len(AV2_TO_NUSCENES) >= 30
    assert set(v for v in AV2_TO_NUSCENES.values() if v) <= set(DETECTION_CLASSES)


def test_boxes_contain_their_interior_points(scene):
    """Ego-frame sweep + ego-frame boxes (centre, size, yaw): point counts equal num_interior_pts."""
    loaded = 0
    for f in scene.frames:
        try:
            pts = load_lidar_ego(f)
        except SourceError:
            continue  # the excerpt holds 2 of the 156 sweeps
        lab = f.labels
        counts = points_in_boxes(pts, lab.center_m, lab.size_lwh_m, lab.yaw_rad).sum(axis=1)
        assert np.mean(counts == lab.num_lidar_pts) > 0.95
        loaded += 1
    assert loaded == 2


def test_missing_sweep_errors_only_when_loaded(scene):
    f = scene.frames[0]
    with pytest.raises(SourceError, match="LiDAR file is missing") as e:
        load_lidar_ego(f)
    assert e.value.scene == LOG and e.value.file.endswith(f"{f.token}.feather")


def test_track_ids_are_stable_and_follow_uuids(scene, av2_log):
    by_uuid = {}
    for f in scene.frames:
        for tid, tok in zip(f.labels.track_id, f.labels.instance_token):
            assert by_uuid.setdefault(tok, tid) == tid
    assert len(set(by_uuid.values())) == len(by_uuid)
    again = AV2Source(av2_log).load_scene(LOG)  # one log folder as root, fresh load: same ids
    assert all(np.array_equal(a.labels.track_id, b.labels.track_id) for a, b in zip(scene.frames, again.frames))


def test_velocities_are_world_motion_in_ego_axes(scene):
    ego_speed = np.linalg.norm(np.diff([f.city_SE3_ego.translation for f in scene.frames], axis=0), axis=1) / 0.1
    assert np.median(ego_speed) > 2.0  # the ego moves: relative motion would make static things look fast
    cone, moving_dir = [], []
    for f in scene.frames:
        lab = f.labels
        speed = np.linalg.norm(lab.velocity_mps, axis=1)
        cone.append(speed[lab.class_name == "traffic_cone"])
        fast = (lab.class_name == "car") & (speed > 4.0)
        heading = np.arctan2(lab.velocity_mps[fast, 1], lab.velocity_mps[fast, 0])
        moving_dir.append(np.abs(wrap_angle_rad(heading - lab.yaw_rad[fast])))
    assert np.nanmax(np.concatenate(cone)) < 0.3
    d = np.concatenate(moving_dir)
    assert len(d) > 50 and np.median(d) < 0.1  # fast cars move along their heading, in ego axes


def test_track_velocities_central_one_sided_and_gaps():
    track = np.array([0, 0, 0, 1, 2, 2])
    t = np.array([0.0, 1.0, 2.0, 0.0, 0.0, 5.0])
    p = np.array([[0, 0, 0], [1, 0, 0], [4, 0, 0], [9, 9, 9], [0, 0, 0], [5, 0, 0]], dtype=float)
    v = track_velocities(track, t, p, max_dt_s=1.5)
    assert np.allclose(v[:3, 0], [1.0, 2.0, 3.0])  # forward, central (4-0)/2, backward
    assert np.isnan(v[3]).all()  # single observation
    assert np.isnan(v[4:]).all()  # 5 s gap > 1.5 s
    perm = np.array([5, 2, 0, 4, 1, 3])
    assert np.allclose(track_velocities(track[perm], t[perm], p[perm]), v[perm], equal_nan=True)


def test_tables_and_description_round_trip(scene, av2_log):
    ft = frames_table(scene)
    assert ft.schema.equals(tables.FRAMES, check_metadata=False) and ft.num_rows == 156
    assert ft["is_anchor"].to_numpy(zero_copy_only=False).sum() == len(scene.anchor_indices)
    m = np.array(ft["city_SE3_ego"][7].as_py()).reshape(4, 4)
    assert np.allclose(m, scene.frames[7].city_SE3_ego.as_matrix())
    cams = ft["cameras"][0].as_py()
    assert {c["name"] for c in cams} == set(scene.frames[0].cameras) and len(cams[0]["K"]) == 9
    st = scenes_table([scene])
    assert st.schema.equals(tables.SCENES, check_metadata=False)
    assert st["num_anchors"][0].as_py() == 11 and abs(st["duration_s"][0].as_py() - 15.5) < 0.01
    src = open_source("av2", av2_log.parent, KeyframeConfig(window_end_s=5.0))
    rebuilt = source_from_description(src.describe())
    assert rebuilt.describe() == src.describe() and rebuilt.scene_ids() == [LOG]
    assert len(rebuilt.load_scene(LOG).anchor_indices) == 4  # 2, 3, 4, 5 s: the config travelled



def test_camera_images_are_matched_and_motion_compensated(av2_log, tmp_path, scene):
    """Images (absent from the excerpt) are matched to the nearest sweep within 50 ms and their extrinsics
    moved into the sweep's ego frame through the ego pose at the image's own timestamp."""
    import cv2

    from generator.sources.io import load_image

    d = tmp_path / LOG
    d.mkdir()
    for f in ("annotations.feather", "city_SE3_egovehicle.feather"):
        shutil.copy(av2_log / f, d / f)
    shutil.copytree(av2_log / "calibration", d / "calibration")
    cam_dir = d / "sensors" / "cameras" / "ring_front_center"
    cam_dir.mkdir(parents=True)
    f10 = scene.frames[10]
    t_img = int(f10.token) + 30_000_000  # 30 ms after sweep 10
    cv2.imwrite(str(cam_dir / f"{t_img}.jpg"), np.zeros((2048, 1550, 3), np.uint8))
    t_img2 = int(scene.frames[30].token) - 20_000_000  # 20 ms before sweep 30: each sweep finds its own image
    cv2.imwrite(str(cam_dir / f"{t_img2}.jpg"), np.zeros((2048, 1550, 3), np.uint8))
    got = AV2Source(d).load_scene(LOG)
    paths = [f.image_paths["ring_front_center"] for f in got.frames]
    assert paths[10].endswith(f"{t_img}.jpg") and paths[30].endswith(f"{t_img2}.jpg")
    assert sum(bool(p) for p in paths) == 2  # 70 ms from sweep 11, 80 ms from sweep 29
    assert load_image(got.frames[10], "ring_front_center").shape == (2048, 1550, 3)

    poses = feather.read_table(d / "city_SE3_egovehicle.feather")
    ts = poses["timestamp_ns"].to_numpy()
    j = np.searchsorted(ts, t_img)  # the pose file is dense (~170 Hz): bracket the image time
    a = (t_img - ts[j - 1]) / (ts[j] - ts[j - 1])
    t_city = (1 - a) * np.array([poses[c][j - 1].as_py() for c in ("tx_m", "ty_m", "tz_m")]) + \
        a * np.array([poses[c][j].as_py() for c in ("tx_m", "ty_m", "tz_m")])
    static = scene.frames[10].cameras["ring_front_center"].ego_SE3_cam
    comp = got.frames[10].cameras["ring_front_center"].ego_SE3_cam
    # the camera centre in the city frame is where the ego (at the image time) carries it
    cam_city = f10.city_SE3_ego.transform_points(comp.translation[None])[0]
    R_img = f10.city_SE3_ego.rotation  # rotation changes little in 30 ms; the translation is what matters
    expected = t_city + R_img @ static.translation
    assert np.linalg.norm(cam_city - expected) < 0.02
    assert np.linalg.norm(comp.translation - static.translation) > 0.05  # the ego moved in those 30 ms
    # a frame without a matched image keeps the static calibration
    assert np.allclose(got.frames[11].cameras["ring_front_center"].ego_SE3_cam.translation, static.translation)


def test_frames_list_their_earlier_sweeps(scene, av2_log):
    """``lidar_sweeps``: the sweeps of earlier frames whose file exists, newest first (the excerpt has two
    sweeps 0.1 s apart); ``max_sweeps`` 0 lists none."""
    with_lidar = [i for i, f in enumerate(scene.frames) if (av2_log / "sensors" / "lidar").joinpath(
        f.lidar_path.rsplit("/", 1)[-1]).is_file()]
    assert len(with_lidar) == 2 and with_lidar[1] == with_lidar[0] + 1
    first, second = (scene.frames[i] for i in with_lidar)
    assert first.lidar_sweeps == []
    (sw,) = second.lidar_sweeps
    assert sw.lidar_path == first.lidar_path and sw.timestamp_us == first.timestamp_us
    assert sw.city_SE3_ego is first.city_SE3_ego and sw.lidar_format == "av2_feather"
    later = scene.frames[with_lidar[1] + 5]
    assert [s.lidar_path for s in later.lidar_sweeps] == [second.lidar_path, first.lidar_path]
    assert AV2Source(av2_log.parent, max_sweeps=0).load_scene(LOG).frames[with_lidar[1]].lidar_sweeps == []
    near = AV2Source(av2_log.parent, max_sweeps=5).load_scene(LOG).frames[with_lidar[1] + 5]  # 5 frames back
    assert [s.lidar_path for s in near.lidar_sweeps] == [second.lidar_path]


def test_a_run_with_the_labels_detector_lists_no_sweeps(av2_log):
    """Only detectors stack earlier sweeps: a source opened for the 'labels' backend lists none (their poses are
    a good part of loading), one opened for a LiDAR detector lists them, and the frames table, what a run
    writes, is the same either way. An explicit ``max_sweeps`` wins."""
    from schemas.config import parse_config

    labels, lidar = parse_config({}), parse_config({"detection": {"backend": "lidar"}})
    assert labels.detection.backend == "labels"
    quick, full = open_source("av2", av2_log.parent, labels), open_source("av2", av2_log.parent, lidar)
    assert quick.describe()["max_sweeps"] == 0 and full.describe()["max_sweeps"] == 10
    a, b = quick.load_scene(LOG), full.load_scene(LOG)
    assert all(f.lidar_sweeps == [] for f in a.frames) and any(f.lidar_sweeps for f in b.frames)
    assert frames_table(a).equals(frames_table(b))
    chosen = open_source("av2", av2_log.parent, labels, max_sweeps=3)
    assert any(f.lidar_sweeps for f in chosen.load_scene(LOG).frames)


@pytest.fixture(scope="module")
def early_log(av2_log, tmp_path_factory):
    """The excerpt as a log whose annotations end early (issue #53 finding 1): a sweep file at every one of its
    156 LiDAR timestamps (links to one real sweep), the annotations cut to the first 10 of them. Poses and
    calibration are links to the excerpt's; nothing is copied."""
    import pyarrow as pa

    root = tmp_path_factory.mktemp("av2-early")
    log = root / LOG
    (log / "sensors" / "lidar").mkdir(parents=True)
    for name in ("city_SE3_egovehicle.feather", "calibration"):
        (log / name).symlink_to(av2_log / name)
    ann = feather.read_table(av2_log / "annotations.feather")
    ts = np.unique(ann["timestamp_ns"].to_numpy())
    sweep = sorted((av2_log / "sensors" / "lidar").glob("*.feather"))[0]
    for t in ts:
        (log / "sensors" / "lidar" / f"{t}.feather").symlink_to(sweep)
    feather.write_feather(ann.filter(pc.is_in(ann["timestamp_ns"], value_set=pa.array(ts[:10]))),
                          log / "annotations.feather")
    return log


def test_frames_are_the_sweeps_whatever_the_annotations_cover(early_log, scene):
    """Frames come from the LiDAR sweeps, not from the annotation timestamps: all 156 stay, with the full log's
    anchors; the 10 annotated ones carry the same labels as in the full log, the others none (unknown)."""
    early = AV2Source(early_log.parent, check_files=False).load_scene(LOG)
    assert len(early.frames) == 156 and np.array_equal(early.timestamps_us, scene.timestamps_us)
    assert early.anchor_indices == scene.anchor_indices and max(early.anchor_indices) > 10
    for f, full in zip(early.frames[:10], scene.frames[:10]):
        assert f.labels is not None and f.labels.instance_token.tolist() == full.labels.instance_token.tolist()
    assert all(f.labels is None for f in early.frames[10:])


def test_a_labels_run_keeps_the_unlabelled_frames_with_their_ego_questions(early_log, scene, tmp_path):
    """The labels backend on that log: every frame is kept, the 146 past the annotations are counted and listed
    (issues, reason 'unlabelled'; no failure), and their keyframes get the questions about the ego's own motion
    and nothing that would read objects nobody looked for. The run takes the Ford Fusion's body of AV2 logs."""
    import pandas as pd

    from generator.pipeline import run
    from generator.pipeline.driver import format_summary
    from generator.runfolder import RunReader
    from schemas.config import parse_config

    cfg = parse_config({"writers": {"webdataset": False, "card": False}, "report": {"on_run": False},
                        "bench": {"export": False}})
    res = run(str(tmp_path / "out"), source="av2", data=str(early_log.parent), cfg=cfg, executor="local",
              progress=False)
    assert res.exit_code == 0 and res.summary.frames == 156 and res.summary.unlabelled_frames == 146
    assert res.summary.failed_frames == {}
    assert "frames outside their logs' annotations: 146" in format_summary(res.summary)
    reader = RunReader(str(tmp_path / "out"))
    issues = reader.read_table("issues").to_pandas()
    assert sorted(issues.frame_index) == list(range(10, 156)) and set(issues.reason) == {"unlabelled"}
    assert reader.config().ego.length_m == pytest.approx(4.869)
    qa = reader.read_table("qa").to_pandas()
    past = qa[qa.keyframe_index >= 10]
    assert set(past.keyframe_index) == {i for i in scene.anchor_indices if i >= 10}
    assert set(zip(past.family, past.question_type)) == {("ego_spatiotemporal", "ego_speed"),
                                                        ("ego_behaviour", "maneuver"),
                                                        ("ego_behaviour", "speed_status")}
    assert pd.Series([len(t) for t in past.track_ids]).eq(0).all()
