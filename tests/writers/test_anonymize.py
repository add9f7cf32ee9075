"""Anonymisation (issue 16 item 5, STRIDE-QA App. A.4): faces and plates found inside the regions the 3D boxes
give and blurred; timestamps stripped from published metadata; measured against the exact truth the generated
logs paint (README "Anonymisation")."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from generator.synth import rig
from generator.synth.render import TRUTH_FACE, TRUTH_PLATE, CameraRenderer
from generator.types import Boxes3D
from generator.writers.anonymize import (ScenePublisher, anonymize_image, candidate_regions, publish_image,
                                         rect_mask, strip_timestamps)
from schemas.config import AnonymizeConfig

CAM = rig.camera_rig(800, 450)["CAM_FRONT"]
# in the ego frame (the camera pose is the ego's: the frame of the scene is the ego frame here)
AGENTS = [(np.array([8.0, 1.5, 0.75]), np.array([4.5, 1.9, 1.5]), 0.0, "vehicle.car", "car"),
          (np.array([6.0, -1.5, 0.885]), np.array([0.67, 0.73, 1.77]), np.pi, "human.pedestrian.adult", "pedestrian")]


def _scene(agents=AGENTS):
    img, label = CameraRenderer(CAM).render(CAM.ego_SE3_cam, [], [a[:4] for a in agents], truth=True)
    boxes = Boxes3D(np.array([a[0] for a in agents]), np.array([a[1] for a in agents]),
                    np.array([a[2] for a in agents]), np.array([a[4] for a in agents], dtype=object))
    return img, label, boxes


def test_face_and_plate_are_found_by_the_cascades_and_blurred():
    img, label, boxes = _scene()
    assert (label == TRUTH_FACE).sum() > 200 and (label == TRUTH_PLATE).sum() > 200
    regions, kinds = candidate_regions(boxes, CAM, AnonymizeConfig())
    assert sorted(kinds) == ["face", "plate"]
    # each candidate holds its truth
    for r, k in zip(regions, kinds):
        truth = label == (TRUTH_FACE if k == "face" else TRUTH_PLATE)
        assert (truth & rect_mask(np.round(r).astype(int)[None], *label.shape)).sum() == truth.sum()
    # with the undetected policy 'none' only cascade detections are blurred: both are found
    out, rects = anonymize_image(img, CAM, boxes, AnonymizeConfig(undetected="none"))
    blurred = rect_mask(rects, *label.shape)
    for code in (TRUTH_FACE, TRUTH_PLATE):
        truth = label == code
        assert (truth & blurred).sum() / truth.sum() > 0.9, code
        # the detail is gone: the pixel spread inside the truth region drops
        assert out[truth].std() < 0.7 * img[truth].std(), code
    assert (out[~blurred] == img[~blurred]).all()  # nothing else changes
    # the detections are tighter than the candidates
    assert blurred.sum() < rect_mask(np.round(regions).astype(int), *label.shape).sum()
    assert not np.shares_memory(out, img)


def test_undetected_policy_blurs_the_whole_candidate_or_nothing():
    img, label, boxes = _scene()
    flat = img.copy()
    flat[label > 0] = flat[label == 0][0]  # no face or plate left for the cascades to find
    _, none = anonymize_image(flat, CAM, boxes, AnonymizeConfig(undetected="none"))
    assert len(none) == 0
    regions, _ = candidate_regions(boxes, CAM, AnonymizeConfig())
    _, region = anonymize_image(flat, CAM, boxes, AnonymizeConfig(undetected="region"))
    assert len(region) == len(regions)
    # switched off: nothing blurred
    out, rects = anonymize_image(img, CAM, boxes, AnonymizeConfig(faces=False, plates=False))
    assert len(rects) == 0 and (out == img).all()
    # publish_image is anonymize_image's image
    assert (publish_image(img, CAM, boxes) == anonymize_image(img, CAM, boxes)[0]).all()


def test_plate_candidates_only_on_faces_turned_to_the_camera():
    # a car seen from its side (yaw 90 deg, 10 m ahead) shows neither its front nor its rear face
    side = Boxes3D(np.array([[10.0, 0.0, 0.75]]), np.array([[4.5, 1.9, 1.5]]), np.array([np.pi / 2]),
                   np.array(["car"], dtype=object))
    assert len(candidate_regions(side, CAM, AnonymizeConfig())[0]) == 0
    rear = Boxes3D(side.center_m, side.size_lwh_m, np.array([0.0]), side.class_name)
    assert list(candidate_regions(rear, CAM, AnonymizeConfig())[1]) == ["plate"]


def test_scene_publisher_passes_untouched_bytes_and_blurs_jpegs():
    img, label, boxes = _scene()
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
    data = buf.tobytes()
    cam = {"name": CAM.name, "image_path": "", "width_px": 800, "height_px": 450, "K": CAM.K.ravel().tolist(),
           "ego_SE3_cam": CAM.ego_SE3_cam.as_matrix().ravel().tolist()}
    pub = ScenePublisher(scene_id="s", cams={(3, CAM.name): cam}, boxes={3: boxes}, cfg=AnonymizeConfig())
    assert pub(data, 7, CAM.name) == data  # a frame without boxes: byte for byte
    out = cv2.imdecode(np.frombuffer(pub(data, 3, CAM.name), np.uint8), cv2.IMREAD_COLOR)
    face = label == TRUTH_FACE
    assert out[face].std() < 0.7 * img[face].std()
    with pytest.raises(Exception, match="no calibration for camera CAM_BACK"):
        pub(data, 3, "CAM_BACK")
    # arrays of any size (a report's thumbnail): the intrinsics follow the image
    small = cv2.resize(img, (400, 225), interpolation=cv2.INTER_AREA)
    face_small = cv2.resize(label, (400, 225), interpolation=cv2.INTER_NEAREST) == TRUTH_FACE
    out_small = pub.image(small, 3, CAM.name)
    assert face_small.sum() > 50 and out_small[face_small].std() < 0.7 * small[face_small].std()
    assert (pub.image(small, 7, CAM.name) == small).all()


def test_strip_timestamps_removes_times_and_source_paths_keeps_order():
    meta = {"scene_id": "s", "keyframe_index": 4, "timestamp_us": 1, "images": [
        {"frame_index": 3, "source_path": "samples/x__CAM_FRONT__1532402927612460.jpg", "member": "m"}],
        "qas": [{"timestamp_us": 2, "grounding": [{"frame_index": 3, "timestamp_us": 3, "image_path": "p"}]}]}
    out = strip_timestamps(meta)
    text = json.dumps(out)
    assert "timestamp" not in text and "1532402927612460" not in text and "image_path" not in text
    assert out["keyframe_index"] == 4 and out["images"][0]["frame_index"] == 3 and out["images"][0]["member"] == "m"
    assert strip_timestamps(meta, enabled=False) is meta


@pytest.fixture(scope="module")
def measured():
    from generator.validate.anonymize import measure_scenes

    return {u: measure_scenes(AnonymizeConfig(undetected=u), scenes=(0, 1), times_s=(2.0, 10.0, 18.0))
            for u in ("region", "none")}


def test_measured_recall_and_false_blurring_on_generated_logs(measured):
    """Thresholds a margin beyond what ``python bench/anonymize.py --times 2 10 18`` measures on this subset
    (36 images; README "Anonymisation"): default policy (blur the candidate when the cascade finds nothing):
    face recall 1.000, plate recall 1.000, false share 0.961, 0.85 % of the image blurred; cascades alone: face
    recall 0.959, plates 0.000 (800 px wide plates are ~30 x 6 px, below the cascade's reach), false share 0.654.
    Misplacing the head region (top -> bottom of the box) fails the face recall."""
    r, c = measured["region"], measured["none"]
    assert r["face"]["truth_px"] > 300 and r["plate"]["truth_px"] > 1000  # enough truth to measure
    assert r["face"]["recall"] >= 0.98 and r["plate"]["recall"] >= 0.99
    assert r["false_share"] <= 0.98 and r["blurred_image_share"] <= 0.01
    assert c["face"]["recall"] >= 0.85
    assert c["false_share"] <= 0.75  # detections are tight
    assert c["blurred_px"] < r["blurred_px"] / 10
    # what the dataset card quotes (MEASURED_DEFAULT, the full bench) is what this subset measures, within 2 %
    from generator.writers.anonymize import MEASURED_DEFAULT as M

    assert abs(M["face_recall"] - r["face"]["recall"]) <= 0.02 and abs(M["plate_recall"] - r["plate"]["recall"]) <= 0.02
    assert abs(M["blurred_outside_share"] - r["false_share"]) <= 0.02


def test_run_outputs_are_anonymised(labelled_run, tmp_path):
    """What leaves a run: WebDataset samples (written as ``write_scene`` writes them) hold the published image
    (faces and plates blurred) and JSON without timestamps or source paths; the STRIDE-QA-Bench export's images
    are the published images too."""
    import webdataset as wds

    from generator.families.stride_qa.export import export_bench
    from generator.runfolder import RunReader
    from generator.writers.wds import write_wds_shards

    reader = RunReader(str(labelled_run))
    cfg = reader.config()
    sources: dict[tuple[str, int, str], str] = {}
    pubs = {}
    for sid in reader.scene_ids():
        frames = reader.read_scene("frames", sid)
        pubs[sid] = ScenePublisher.from_tables(sid, frames, reader.read_scene("objects", sid), cfg.anonymize)
        for f, cams in zip(frames.column("frame_index").to_pylist(), frames.column("cameras").to_pylist()):
            for c in cams:
                sources[(sid, f, c["name"])] = c["image_path"]
    sid = reader.scene_ids()[0]
    qa = reader.read_scene("qa", sid)
    qa = qa.filter(np.isin(qa.column("keyframe_index").to_numpy(), np.unique(qa.column("keyframe_index"))[::4]))
    paths = write_wds_shards(qa, tmp_path / "run", sid, cfg.writers, publish=pubs[sid])
    changed = kept = 0
    keyframes = []
    for s in wds.WebDataset([str(p) for p in paths], shardshuffle=False):
        text = s["json"].decode()
        assert "timestamp" not in text and "source_path" not in text and "image_path" not in text
        meta = json.loads(text)
        keyframes.append(meta["keyframe_index"])
        for im in meta["images"]:
            src = open(sources[(sid, im["frame_index"], im["camera"])], "rb").read()
            assert s[im["member"]] == pubs[sid](src, im["frame_index"], im["camera"])
            changed += s[im["member"]] != src
            kept += s[im["member"]] == src
    assert keyframes == sorted(keyframes) and len(keyframes) > 1
    assert changed > 0  # faces or plates were blurred in some images

    summary = export_bench(str(labelled_run), out=str(tmp_path / "bench"), cfg=cfg)
    assert summary["groups"] > 0
    for f in sorted((tmp_path / "bench" / "annotation_files").iterdir()):
        assert "timestamp" not in f.read_text(), f  # the bench carries frame indices, never capture times
    recs = json.loads((tmp_path / "bench" / "annotation_files" / "strideqa_bench_t0.json").read_text())
    bench_changed = 0
    for rec in recs[:40]:
        ti = rec["token_info"]
        for img, f in zip(rec["images"], ti["context_frame_indices"]):
            src = open(sources[(ti["scene_id"], f, ti["camera"])], "rb").read()
            out = (tmp_path / "bench" / img).read_bytes()
            assert out == pubs[ti["scene_id"]](src, f, ti["camera"])
            bench_changed += out != src
    assert bench_changed > 0


def test_report_images_are_anonymised(labelled_run, tmp_path):
    """The HTML report showed camera frames as read: its frames go through the scene's publisher before the
    Set-of-Mark drawing, like the shards' and the bench export's."""
    from generator.report.images import ReportImages
    from generator.runfolder import RunReader

    reader = RunReader(str(labelled_run))
    cfg = reader.config()
    off = cfg.anonymize.model_copy(update={"faces": False, "plates": False})
    shown = {}
    for sid in reader.scene_ids():
        frames, objects = reader.read_scene("frames", sid), reader.read_scene("objects", sid)
        pub = ScenePublisher.from_tables(sid, frames, objects, cfg.anonymize)
        for f, cams in zip(frames.column("frame_index").to_pylist()[::5], frames.column("cameras").to_pylist()[::5]):
            for c in cams:
                src = open(c["image_path"], "rb").read()
                if pub(src, f, c["name"]) == src:
                    continue  # nothing to blur in this frame
                for name, anon in (("on", cfg.anonymize), ("off", off)):
                    p = ScenePublisher.from_tables(sid, frames, objects, anon)
                    imgs = ReportImages(tmp_path / name, 95, publisher=lambda s, p=p: p)
                    rel = imgs.marked(c["image_path"], [], f, c["name"], 10_000, sid)
                    shown[name] = cv2.imread(str(tmp_path / name / rel)).astype(np.int16)
                plain = ReportImages(tmp_path / "plain", 95).marked(c["image_path"], [], f, c["name"], 10_000, sid)
                diff = np.abs(shown["on"] - shown["off"]).max(axis=2)
                assert (diff > 40).sum() > 50, "a frame the publisher blurs is shown unblurred in the report"
                assert np.array_equal(shown["off"], cv2.imread(str(tmp_path / "plain" / plain)).astype(np.int16))
                return
    pytest.fail("no frame of the labelled run has a face or plate to blur")
