"""perceive_scene end to end: the real nuScenes keyframe (lidar/labels detectors, cpu masks, visibility on the
real GT boxes), a geometry-only AV2 slice, bad inputs recorded with reasons, and the Ray Data actor."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from support.perception import perceive
from generator.projection import project_boxes
from generator.types import Scene
from generator.visibility import DROP_REASONS
from schemas.config import PipelineConfig
from schemas.tables import OBJECTS, PROJECTIONS

PKL = "n015-2018-07-24-11-22-45+0800.pkl"


@pytest.fixture(scope="module")
def keyframe(nuscenes_demo):
    from generator.sources.mmdet_info import load_mmdet_info

    return load_mmdet_info(nuscenes_demo / PKL)


@pytest.fixture(scope="module")
def labels_result(keyframe):
    return perceive(keyframe, PipelineConfig())  # labels backend, cpu masks (defaults)


def test_tables_follow_the_schemas(labels_result, keyframe):
    r = labels_result
    assert r.objects.schema.equals(OBJECTS, check_metadata=False)
    assert r.projections.schema.equals(PROJECTIONS, check_metadata=False)
    gt = keyframe.frames[0].labels
    assert r.objects.num_rows == len(gt) == 68 and r.projections.num_rows == 68 * 6
    o = r.objects.to_pydict()
    cg = np.array(o["center_global_m"])
    assert np.allclose(cg, keyframe.frames[0].city_SE3_ego.transform_points(np.array(o["center_ego_m"])))
    assert sorted(set(o["track_id"])) == list(range(68)) and set(o["source"]) == {"labels"}
    assert np.array_equal(np.array(o["instance_token"]), gt.instance_token.astype(str))


def test_every_drop_has_a_reason_and_counts_add_up(labels_result):
    p = labels_result.projections.to_pydict()
    for vis, reason in zip(p["visible"], p["drop_reason"]):
        assert (reason is None) == vis and (vis or reason in DROP_REASONS)
    assert sum(labels_result.drop_counts.values()) == p["visible"].count(False)
    assert labels_result.issues == []


def test_visibility_decisions_on_real_gt_boxes(labels_result, keyframe):
    fr = keyframe.frames[0]
    gt = fr.labels
    p = labels_result.projections.to_pandas()
    # Boxes with 0 LiDAR points are never kept; where they are in an image the reason says so.
    zero = set(np.nonzero(gt.num_lidar_pts == 0)[0])
    assert len(zero) == 3
    z = p[p.track_id.isin(zero)]
    assert not z.visible.any() and (z.drop_reason.isin(["too_few_lidar_points", "outside_image", "behind_camera"])).all()
    assert (z.drop_reason == "too_few_lidar_points").sum() >= 3
    # Outside a camera's view -> outside_image / behind_camera, exactly where the projection says so.
    for cam_name, cam in fr.cameras.items():
        _, _, in_img = project_boxes(gt, cam)
        rows = p[p.camera == cam_name].set_index("track_id").sort_index()
        out = rows.drop_reason.isin(["outside_image", "behind_camera"]).to_numpy()
        assert np.array_equal(out, ~in_img), cam_name
    # Boxes behind the front camera (x < 0 in the ego frame, far from the sides) are dropped as behind it.
    behind = np.nonzero((gt.center_m[:, 0] < -5) & (np.abs(gt.center_m[:, 1]) < 5))[0]
    front = p[(p.camera == "CAM_FRONT") & p.track_id.isin(behind)]
    assert len(front) and (front.drop_reason == "behind_camera").all()
    # Well-observed near objects (>= 40 points within 25 m: a truck, a car, two barriers) are kept somewhere.
    near = np.nonzero((gt.num_lidar_pts >= 40) & (np.linalg.norm(gt.center_m[:, :2], axis=1) <= 25))[0]
    assert len(near) == 4
    kept = set(p[p.visible].track_id)
    assert set(near) <= kept
    # Kept rows satisfy STRIDE-QA's three rules.
    v = p[p.visible]
    assert (v.box_iou > 0.3).all() and (v.coverage > 0.8).all() and (v.mask_score > 0.8).all()


def test_lidar_detector_and_cpu_masks_on_the_real_keyframe(keyframe):
    cfg = PipelineConfig(detection={"backend": "lidar"})
    r = perceive(keyframe, cfg)
    assert r.objects.num_rows > 5 and set(r.objects.column("source").to_pylist()) == {"lidar"}
    assert r.projections.num_rows == r.objects.num_rows * 6
    p = r.projections.to_pandas()
    assert p.visible.any()  # at least the truck ahead-left is segmented and kept
    assert (p[~p.visible].drop_reason.isin(DROP_REASONS)).all()
    assert (np.array(r.objects.column("num_lidar_pts").to_pylist()) >= 8).all()  # lidar boxes count their points


def test_geometry_only_on_av2_without_images(av2_log):
    from generator.sources.av2 import AV2Source

    scene = AV2Source(av2_log.parent).load_scene(av2_log.name)
    scene = Scene(scene.scene_id, scene.source, scene.log_name, scene.frames[:12])
    r = perceive(scene, PipelineConfig())
    p = r.projections.to_pandas()
    assert r.objects.num_rows == sum(len(f.labels) for f in scene.frames)
    assert p.visible.sum() > 50 and p.mask_score.isna().all() and p.mask_rle.isna().all()
    assert set(p[~p.visible].drop_reason) <= {"zero_size_box", "behind_camera", "outside_image",
                                              "too_few_lidar_points", "box_too_small"}
    assert set(p.camera) == set(scene.frames[0].cameras)  # AV2 camera names, not nuScenes'
    assert r.issues == []  # no sweep needed: label counts are known, nothing to segment


def test_bad_inputs_are_recorded_not_raised(keyframe, tmp_path):
    import cv2

    fr = keyframe.frames[0]
    nan_bin = tmp_path / "nan.pcd.bin"
    pts = np.fromfile(fr.lidar_path, dtype=np.float32).reshape(-1, 5)
    pts[:100, 0] = np.nan
    pts.tofile(nan_bin)
    empty_bin = tmp_path / "empty.pcd.bin"
    empty_bin.write_bytes(b"")
    small = tmp_path / "small.jpg"
    cv2.imwrite(str(small), np.zeros((50, 100, 3), np.uint8))
    labels = fr.labels.copy()
    labels.size_lwh_m[0] = [0.0, 1.0, 1.0]  # zero-size box
    labels.center_m[1] = np.nan  # NaN box
    frames = [dataclasses.replace(fr, frame_index=0, timestamp_us=fr.timestamp_us, labels=labels),
              dataclasses.replace(fr, frame_index=1, timestamp_us=fr.timestamp_us + 500_000, lidar_path=str(nan_bin)),
              dataclasses.replace(fr, frame_index=2, timestamp_us=fr.timestamp_us + 1_000_000, lidar_path=str(empty_bin),
                                  image_paths={**fr.image_paths, "CAM_FRONT": str(small)})]
    scene = Scene("bad", "nuscenes", "bad", frames)
    r = perceive(scene, PipelineConfig())  # labels backend
    p = r.projections.to_pandas()
    reasons = {(i.frame_index, i.camera, i.reason) for i in r.issues}
    assert (1, None, "lidar_unavailable") in reasons  # the cpu masks need the (NaN) sweep ...
    assert (2, "CAM_FRONT", "image_unavailable") in reasons  # ... a wrong-sized image is caught
    f1 = p[p.frame_index == 1]
    assert not f1.visible.any() and (f1.drop_reason == "empty_mask").sum() >= 5  # no points: no cpu mask
    f0 = p[p.frame_index == 0]
    assert (f0[f0.track_id.isin(r.boxes[0].track_id[:2])].drop_reason == "zero_size_box").all()
    f2 = p[(p.frame_index == 2) & (p.camera == "CAM_FRONT")]
    assert f2.drop_reason.isin(["image_unavailable", "outside_image", "behind_camera", "too_few_lidar_points",
                                "box_too_small"]).all() and (f2.drop_reason == "image_unavailable").sum() >= 5
    # The lidar backend on the same frames: the NaN sweep is recorded, the empty one gives no boxes.
    r2 = perceive(scene, PipelineConfig(detection={"backend": "lidar"}))
    issues2 = {(i.frame_index, i.stage, i.reason) for i in r2.issues}
    assert (1, "detect", "detector_input_unreadable") in issues2
    per_frame = r2.objects.group_by("frame_index").aggregate([("track_id", "count")]).to_pydict()
    counts = dict(zip(per_frame["frame_index"], per_frame["track_id_count"]))
    assert counts.get(0, 0) > 0 and counts.get(1, 0) == 0 and counts.get(2, 0) == 0


def test_overlapped_steps_give_what_one_after_the_other_gives(synth_root, monkeypatch):
    """The threads that overlap a model segmenter's frames with their CPU steps (``MODEL_SEGMENTERS``: SAM)
    change nothing: a generated scene (40 frames, the steps of two frames ahead in flight, one image made
    unreadable) perceived with the CPU segmenter treated as a model equals the inline run, tables and issues."""
    import generator.perception as perception
    from generator.pipeline import SYNTH_VERSION
    from generator.sources import open_source

    cfg = PipelineConfig()
    src = open_source("nuscenes", str(synth_root), cfg, version=SYNTH_VERSION)
    scene = src.load_scene(src.scene_ids()[0])
    scene.frames[3].image_paths["CAM_FRONT"] = str(synth_root / "no-such-image.jpg")  # an issue mid-scene
    inline = perceive(scene, cfg)
    monkeypatch.setattr(perception, "MODEL_SEGMENTERS", ("sam2", "cpu"))
    threaded = perceive(scene, cfg)
    assert threaded.objects.equals(inline.objects) and threaded.projections.equals(inline.projections)
    assert [i.reason for i in threaded.issues] == [i.reason for i in inline.issues]
    assert any(i.reason == "image_unavailable" for i in inline.issues)
    assert len(inline.projections) > 100


def test_cpu_masks_without_grabcut_decode_no_image(keyframe, monkeypatch):
    """The cpu segmenter without GrabCut reads only an image's size (its masks come from the LiDAR points), so
    perception takes the size from the file's header (``io.image_shape``) and decodes nothing: the real
    keyframe's six images are never decoded, and the tables equal those of a run made to decode them; with
    GrabCut on, they are decoded."""
    import generator.perception as perception
    from actors.segment import reads_pixels
    from generator.sources import io

    real_load = io.load_image
    decoded = []

    def counting_load(frame, camera):
        decoded.append(camera)
        return real_load(frame, camera)

    monkeypatch.setattr(io, "load_image", counting_load)
    fast = perceive(keyframe, PipelineConfig())
    assert decoded == [] and fast.projections.column("visible").to_pylist().count(True) >= 4
    assert reads_pixels(PipelineConfig(segmentation={"cpu": {"grabcut_iterations": 1}}).segmentation)
    monkeypatch.setattr(perception, "reads_pixels", lambda cfg: True)
    slow = perceive(keyframe, PipelineConfig())
    assert len(decoded) == 6
    assert fast.projections.equals(slow.projections)  # (objects come before any image)
