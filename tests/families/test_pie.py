"""PIE/JAAD family (issue 14): the JAAD reader, the benchmark's samples and labels, the export and the scorer.

Synthetic JAAD folders are written here (XML in JAAD's own layout, a tiny mp4 made with OpenCV); the real
annotations are read from ../shared/data/jaad when present (skipped otherwise).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from generator.families.pie.attributes import (build_samples, region_distance, risk_class, risk_region, risk_weight,
                                      sample_counts, tte_weight)
from generator.cli import main as cli
from generator.runfolder import RunStore
from generator.sources.clips import read_frames
from generator.sources.jaad import read_jaad
from generator.families.pie import score as scorer
from generator.families.pie.export import EXPORT_FORMAT, write_pie_export
from generator.families.pie.config import PieConfig
from schemas.config import parse_config
from schemas.errors import ConfigError, RunFolderError, SourceError
from support.jaad import JAAD, needs_jaad, write_video

def _x_cross(f):  # walks left to right: centre 120 + 4 f px
    return 120 + 4 * f


def good_video(root: Path, vid: str = "video_0001", **kw) -> None:
    """A crossing pedestrian (event 150), a non-crossing one (gone after 120) and a bystander (10-60)."""
    write_video(root, vid, [
        {"pid": "0_1_1b", "label": "pedestrian", "frames": range(0, 200), "x": _x_cross, "cross_from": 150},
        {"pid": "0_1_2b", "label": "pedestrian", "frames": range(0, 121), "x": lambda f: 1800.0},
        {"pid": "0_1_3", "label": "ped", "frames": range(10, 61), "x": lambda f: 100.0},
        {"pid": "0_1_4", "label": "people", "frames": range(0, 50), "x": lambda f: 500.0},
    ], [{"pid": "0_1_1b", "crossing": 1, "crossing_point": 150},
        {"pid": "0_1_2b", "crossing": 0, "crossing_point": -1}], **kw)


@pytest.fixture
def jaad_dir(tmp_path):
    root = tmp_path / "jaad"
    good_video(root)
    return root


# ------------------------------------------------------------------------------------------ risk regions
def test_risk_class_boundaries_at_1920():
    x = np.array([0.0, 159.9, 160.0, 639.9, 640.0, 799.9, 800.0, 959.9, 960.0, 1119.9, 1120.0, 1760.0, 1919.9,
                  2500.0, -5.0])
    assert risk_region(x, 1920).tolist() == [0, 0, 1, 3, 4, 4, 5, 5, 6, 6, 7, 11, 11, 11, 0]
    assert risk_class(x, 1920).tolist() == [5, 5, 4, 2, 1, 1, 0, 0, 0, 0, 1, 5, 5, 5, 5]


def test_risk_class_boundaries_scale_to_1280():
    w = 1280 * 160 / 1920  # 106.67 px regions
    x = np.array([w - 0.01, w, 5 * w - 0.01, 5 * w + 0.01, 7 * w - 0.01, 7 * w + 0.01, 1279.9])
    assert risk_region(x, 1280).tolist() == [0, 1, 4, 5, 6, 7, 11]
    assert risk_class(x, 1280).tolist() == [5, 4, 1, 0, 0, 1, 5]


def test_region_distance_is_the_papers_formula():
    assert region_distance(np.arange(12), 12).tolist() == [5, 4, 3, 2, 1, 0, 0, 1, 2, 3, 4, 5]
    assert region_distance(np.arange(5), 5).tolist() == [2, 1, 0, 1, 2]  # odd N: |cls - m|


def test_weights_by_hand():
    w = tte_weight([90, 60, 30])  # d_tte = 0, 1/3, 2/3; sigma 0.3
    raw = [1.0, math.exp(-0.5 * (1 / 3 / 0.3) ** 2), math.exp(-0.5 * (2 / 3 / 0.3) ** 2)]
    assert np.allclose(w, np.array(raw) / sum(raw))
    assert w[0] > w[1] > w[2]  # closer to the event, lower weight
    assert np.allclose(risk_weight([0, 3, 5]), [1.0, math.exp(-0.5), math.exp(-0.5 * 25 / 9)])  # m sigma = 3


def test_pie_config_is_checked():
    cfg = parse_config({"pie": {"risk_region_width_px": 320}}).pie
    assert cfg.risk_regions == 6 and cfg.sample_step_frames == 10
    with pytest.raises(ConfigError, match="pie"):
        parse_config({"pie": {"risk_region_width_px": 500}})
    with pytest.raises(ConfigError, match="tte_min_frames"):
        parse_config({"pie": {"tte_min_frames": 100}})


# ------------------------------------------------------------------------------------------ reader + samples
def test_reader_tables(jaad_dir):
    t = read_jaad(jaad_dir)
    assert t.errors == [] and t.video_ids == ["video_0001"]
    assert t.boxes.num_rows == 200 + 121 + 51 + 50
    assert set(t.boxes.column("label").to_pylist()) == {"pedestrian", "ped", "people"}
    assert t.pedestrians.num_rows == 2 and t.vehicle.num_rows == 200 and t.traffic.num_rows == 200
    assert t.videos.to_pylist()[0]["split"] == "train"


def test_action_and_risk_samples_by_hand(jaad_dir):
    t = read_jaad(jaad_dir)
    s, stats = build_samples(t.videos, t.boxes, t.pedestrians, t.vehicle)
    act = [r for r in s.to_pylist() if r["task"] == "action"]
    cross = sorted((r for r in act if r["ped_id"] == "0_1_1b"), key=lambda r: r["end_frame"])
    assert [r["end_frame"] for r in cross] == [60, 70, 80, 90, 100, 110, 120]
    assert [r["tte_frames"] for r in cross] == [90, 80, 70, 60, 50, 40, 30]
    assert {r["crossing"] for r in cross} == {1} and cross[0]["tte_s"] == pytest.approx(3.0)
    assert cross[0]["frames"] == list(range(46, 61)) and len(cross[0]["boxes_px"]) == 15
    assert cross[0]["boxes_px"][-1] == [_x_cross(60) - 20, 500, _x_cross(60) + 20, 600]
    assert cross[0]["ego_action"][0] == "moving_slow" and cross[-1]["ego_action"][-1] == "decelerating"
    assert cross[0]["image_paths"][0] == "images/video_0001/00046.png"
    # risk 3 s ahead: end 60 -> frame 150, centre 720 px: region 4, class 1; end 120 -> frame 210 is past the
    # track (last box 199, centre 916 px): region 5, class 0
    assert (cross[0]["risk_horizon_frame"], cross[0]["risk_region"], cross[0]["risk_class"]) == (150, 4, 1)
    assert cross[0]["risk_box_visible"]
    assert (cross[-1]["risk_horizon_frame"], cross[-1]["risk_class"], cross[-1]["risk_box_visible"]) == (199, 0, False)
    nc = sorted((r for r in act if r["ped_id"] == "0_1_2b"), key=lambda r: r["end_frame"])
    assert [r["tte_frames"] for r in nc] == [90, 80, 70, 60, 50, 40, 30] and {r["crossing"] for r in nc} == {0}
    assert {r["event_frame"] for r in nc} == {120}
    by = [r for r in act if r["ped_id"] == "0_1_3"]  # bystander 10-60: only the window ending at 30 fits
    assert [(r["end_frame"], r["tte_frames"], r["crossing"], r["intention"]) for r in by] == [(30, 30, 0, 0)]
    assert not [r for r in s.to_pylist() if r["ped_id"] == "0_1_4"]  # groups are not sampled
    risk = sorted((r for r in s.to_pylist() if r["task"] == "risk" and r["ped_id"] == "0_1_1b"),
                  key=lambda r: r["end_frame"])
    assert [r["end_frame"] for r in risk] == list(range(14, 200, 10))
    counts = sample_counts(s)
    assert counts["action"]["samples"] == 15 and counts["action"]["crossing"] == 7
    cfg = PieConfig(include_bystanders=False)
    s2, _ = build_samples(t.videos, t.boxes, t.pedestrians, t.vehicle, cfg)
    assert "0_1_3" not in s2.column("ped_id").to_pylist()


def test_named_errors_and_other_videos_continue(jaad_dir):
    good_video(jaad_dir, "video_0002")
    (jaad_dir / "annotations" / "video_0002.xml").write_text(
        (jaad_dir / "annotations" / "video_0002.xml").read_text()[:500])  # truncated: broken XML
    write_video(jaad_dir, "video_0003", [{"pid": "0_3_1b", "label": "pedestrian", "frames": range(0, 50),
                                          "x": lambda f: 1900.0 + f}],
                [{"pid": "0_3_1b", "crossing": 0, "crossing_point": -1}])
    write_video(jaad_dir, "video_0004", [{"pid": "0_4_1b", "label": "pedestrian",
                                          "frames": list(range(0, 40)) + list(range(60, 120)), "x": _x_cross}],
                [{"pid": "0_4_1b", "crossing": 0, "crossing_point": -1}])
    good_video(jaad_dir, "video_0005")
    (jaad_dir / "annotations_vehicle" / "video_0005_vehicle.xml").unlink()
    t = read_jaad(jaad_dir)
    assert t.video_ids == ["video_0001", "video_0004"]  # a track with a gap is kept (track_gap: keep, the default)
    errs = {e.scene: e for e in t.errors}
    assert set(errs) == {"video_0002", "video_0003", "video_0005"}
    assert all(isinstance(e, SourceError) for e in errs.values())
    assert "broken XML" in errs["video_0002"].message and errs["video_0002"].file.endswith("annotations/video_0002.xml")
    assert "outside" in errs["video_0003"].message and "0_3_1b" in errs["video_0003"].message
    assert "missing" in errs["video_0005"].message and errs["video_0005"].file.endswith("video_0005_vehicle.xml")
    # ... and only windows without the gap are sampled: the pedestrian still gives samples on both sides of it
    s, _ = build_samples(*(getattr(read_jaad(jaad_dir, video_ids=["video_0004"]), k)
                           for k in ("videos", "boxes", "pedestrians", "vehicle")))
    frames = [set(r["frames"]) for r in s.to_pylist()]
    assert frames and not any(f & set(range(40, 60)) for f in frames)
    assert any(max(f) < 40 for f in frames) and any(min(f) >= 60 for f in frames)
    # track_gap: error fails the gapped video, naming the gap
    t2 = read_jaad(jaad_dir, PieConfig(track_gap="error"), video_ids=["video_0004"])
    assert t2.video_ids == [] and "gap" in t2.errors[0].message and "40-59" in t2.errors[0].message
    # a missing clip is an error when clips are required; the other videos continue
    t3 = read_jaad(jaad_dir, video_ids=["video_0001"], require_clips=True)
    assert t3.video_ids == [] and "missing video" in t3.errors[0].message
    assert t3.errors[0].file.endswith("clips/video_0001.mp4")


def _edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, count))


@pytest.mark.parametrize("case, file, words", [
    ("pedestrian listed twice", "annotations_attributes/{v}_attributes.xml", ["0_1_1b", "listed twice"]),
    ("crossing 7", "annotations_attributes/{v}_attributes.xml", ["'0_1_1b' crossing", "is 7, not one of"]),
    ("crossing_point beyond the video", "annotations_attributes/{v}_attributes.xml",
     ["crossing_point", "'5000'", "outside [-1, 199]"]),
    ("vehicle frame twice", "annotations_vehicle/{v}_vehicle.xml", ["vehicle frame 5 is listed twice"]),
    ("video in train and val", "split_ids", ["listed in two splits", "train.txt and val.txt"]),
    ("box frame 0.7", "annotations/{v}.xml", ["frame of 0_1_1b", "not a whole number", "'0.7'"]),
    ("width inf", "annotations/{v}.xml", ["image width", "not a whole number", "'inf'"]),
    ("size 2e9", "annotations/{v}.xml", ["number of frames", "outside [1, 1000000]"]),
    ("100,000-character id", "annotations/{v}.xml", ["100000 characters long"]),
    # issue 57 #10 and #12: read silently (an unknown tag value, an occlusion flag of 7, a video hash-split because
    # its split file is gone) or blocking the run forever (a FIFO)
    ("cross maybe", "annotations/{v}.xml", ["0_1_1b frame 0", "cross is 'maybe'", "not one of"]),
    ("occluded 7", "annotations/{v}.xml", ["0_1_1b frame 0", "occluded is '7', not 0 or 1"]),
    ("a FIFO annotation", "annotations_vehicle/{v}_vehicle.xml", ["is a FIFO (named pipe)"]),
    ("a missing split file", "split_ids/default/val.txt", ["listed in no split file", "val.txt of it is missing"]),
])
def test_hostile_or_inconsistent_annotations_are_refused_naming_file_and_field(jaad_dir, case, file, words):
    """Each was read silently (the last duplicate won, '7' read as 0, a crossing point past the video's end,
    0.7 truncated to 0) or failed with a bare Python error and no file; now the video is refused with its file
    and field named (a quoted id cut short), and the other videos are read."""
    v = "video_0002"
    good_video(jaad_dir, v)
    ann, attrs = jaad_dir / "annotations" / f"{v}.xml", jaad_dir / "annotations_attributes" / f"{v}_attributes.xml"
    if case == "pedestrian listed twice":
        text = attrs.read_text()
        dup = text[text.index("<pedestrian"):text.index("/>") + 2].replace('crossing="1"', 'crossing="0"')
        attrs.write_text(text.replace("</ped_attributes>", dup + "</ped_attributes>"))
    elif case == "crossing 7":
        _edit(attrs, 'crossing="1"', 'crossing="7"')
    elif case == "crossing_point beyond the video":
        _edit(attrs, 'crossing_point="150"', 'crossing_point="5000"')
    elif case == "vehicle frame twice":
        _edit(jaad_dir / "annotations_vehicle" / f"{v}_vehicle.xml", 'id="6" />', 'id="5" />')
    elif case == "video in train and val":
        (jaad_dir / "split_ids" / "default" / "val.txt").write_text(v + "\n")
    elif case == "box frame 0.7":
        _edit(ann, '<box frame="0"', '<box frame="0.7"')
    elif case == "width inf":
        _edit(ann, "<width>1920</width>", "<width>inf</width>")
    elif case == "size 2e9":
        _edit(ann, "<size>200</size>", "<size>2000000000</size>")
    elif case == "cross maybe":
        _edit(ann, '<attribute name="cross">not-crossing</attribute>', '<attribute name="cross">maybe</attribute>')
    elif case == "occluded 7":
        _edit(ann, 'occluded="0"', 'occluded="7"')
    elif case == "a FIFO annotation":
        (jaad_dir / "annotations_vehicle" / f"{v}_vehicle.xml").unlink()
        os.mkfifo(jaad_dir / "annotations_vehicle" / f"{v}_vehicle.xml")
    elif case == "a missing split file":  # v was in val.txt, which is gone; video_0001 is in train.txt
        (jaad_dir / "split_ids" / "default" / "train.txt").write_text("video_0001\n")
        (jaad_dir / "split_ids" / "default" / "test.txt").write_text("")
    else:
        _edit(ann, ">0_1_1b<", ">" + "x" * 100_000 + "<", count=-1)
    t = read_jaad(jaad_dir)
    assert t.video_ids == ["video_0001"], [e.message for e in t.errors]
    [err] = t.errors
    assert err.scene == v and err.file.endswith(file.format(v=v)), err.file
    assert all(w in err.message for w in words), err.message
    assert len(err.message) < 400


def test_a_late_decision_point_and_a_video_in_no_split_are_reported_as_issues(jaad_dir, tmp_path):
    """Issue 57 #10: a decision point after the crossing point, or a video no split file lists, gave exit 0 and
    no issue row. Both are JAAD's own facts (87 of the excerpt's 461 pedestrians decide after their crossing
    point; 22 of its 250 videos are in no default split), so they are kept as given and reported: an issues row
    each, naming the file and what drivegen does with it."""
    import pyarrow.parquet as pq

    from generator.cli import main

    _edit(jaad_dir / "annotations_attributes" / "video_0001_attributes.xml", 'decision_point="-1"',
          'decision_point="180"')  # 0_1_1b crosses at frame 150
    good_video(jaad_dir, "video_0002", split=None)  # in no split file (train.txt lists video_0001; no val/test)
    (jaad_dir / "split_ids" / "default" / "val.txt").write_text("")
    (jaad_dir / "split_ids" / "default" / "test.txt").write_text("")
    out = tmp_path / "run"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("report: {on_run: false}\nwriters: {card: false, webdataset: false}\n")
    assert main(["run", "--source", "jaad", "--data", str(jaad_dir), "--out", str(out), "--config", str(cfg),
                 "--local", "--no-progress"]) == 0
    rows = {v: pq.read_table(out / "issues" / f"{v}.parquet").to_pylist() for v in ("video_0001", "video_0002")}
    late = [r for r in rows["video_0001"] if r["reason"] == "decision_after_crossing"]
    assert [(r["frame_index"], r["file"]) for r in late] == [
        (180, str(jaad_dir / "annotations_attributes" / "video_0001_attributes.xml"))]
    assert "0_1_1b: decision_point 180 is after crossing_point 150" in late[0]["message"]
    assert not [r for r in rows["video_0001"] if r["reason"] == "no_split"]
    [hashed] = [r for r in rows["video_0002"] if r["reason"] == "no_split"]
    assert hashed["file"] == str(jaad_dir / "split_ids" / "default") and "hashed split 'train'" in hashed["message"]


def _make_mp4(path: Path, n: int = 40, w: int = 64, h: int = 48):
    cv2 = pytest.importorskip("cv2")
    path.parent.mkdir(parents=True, exist_ok=True)
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (w, h))
    if not vw.isOpened():
        pytest.skip("OpenCV cannot write mp4v here")
    for i in range(n):
        img = np.zeros((h, w, 3), np.uint8)
        img[:, :, 1] = i * 6  # the frame's index, readable back despite compression
        vw.write(img)
    vw.release()


def test_read_frames_decodes_only_requested_frames(tmp_path):
    clip = tmp_path / "clips" / "video_0001.mp4"
    _make_mp4(clip)
    got = read_frames(clip, [35, 3, 17, 18])
    assert sorted(got) == [3, 17, 18, 35]
    for f, img in got.items():
        assert img.shape == (48, 64, 3)
        assert abs(float(img[:, :, 1].mean()) - 6 * f) < 4, f
    with pytest.raises(SourceError, match="past the video"):
        read_frames(clip, [40])
    with pytest.raises(SourceError, match="missing video") as err:
        read_frames(tmp_path / "clips" / "video_0009.mp4", [0])
    assert err.value.scene == "video_0009"


# ------------------------------------------------------------------------------------------ export + CLI
def test_export_pie_command(jaad_dir, tmp_path, capsys):
    out = tmp_path / "export"
    assert cli(["export_pie", "--data", str(jaad_dir), "--out", str(out)]) == 0
    summary = json.loads((out / "export_summary.json").read_text())
    assert summary["format"] == EXPORT_FORMAT
    assert sorted(summary["files"]) == ["action/train.parquet", "export_summary.json", "risk/train.parquet"]
    t = pq.read_table(out / "action" / "train.parquet")
    assert t.num_rows == 15 and {"boxes_px", "ego_action", "image_paths", "crossing", "tte_frames", "ped_id",
                                 "video_id", "risk_class"} <= set(t.column_names)
    # an earlier export is replaced; its files this one does not write go
    (jaad_dir / "split_ids" / "default" / "train.txt").write_text("")
    (jaad_dir / "split_ids" / "default" / "val.txt").write_text("video_0001\n")
    assert cli(["export_pie", "--data", str(jaad_dir), "--out", str(out)]) == 0
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.parquet")) == [
        "action/val.parquet", "risk/val.parquet"]
    # a non-empty folder that is not an export is refused (exit 2), untouched
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    assert cli(["export_pie", "--data", str(jaad_dir), "--out", str(foreign)]) == 2
    assert "not an earlier PIE export" in capsys.readouterr().err
    assert [p.name for p in foreign.iterdir()] == ["keep.txt"]
    with pytest.raises(RunFolderError):
        write_pie_export(RunStore(foreign), pa.table({"task": ["action"]}))


# ------------------------------------------------------------------------------------------ metrics by hand
def _conf(p):
    p = np.asarray(p, dtype=float)
    return np.stack([1 - p, p], axis=1)


def test_base_metrics_by_hand():
    m = scorer.base_metrics(np.array([0, 0, 1, 1]), _conf([0.1, 0.6, 0.4, 0.8]))
    # predictions 0 1 0 1: one TP, one FP, one FN
    assert m["Acc"] == pytest.approx(0.5) and m["bAcc"] == pytest.approx(0.5)
    assert m["Prec"] == pytest.approx(0.5) and m["F1"] == pytest.approx(0.5)
    assert m["AUC"] == pytest.approx(0.75)  # 3 of the 4 (positive, negative) pairs ordered
    assert m["ap"] == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)  # ranks: + - + -
    assert m["mAP"] == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)  # the negative class ranks the same way


def test_multiclass_metrics_by_hand():
    y = np.array([0, 1, 2])
    conf = np.eye(6)[[0, 1, 1]]
    m = scorer.base_metrics(y, conf)
    assert m["Acc"] == pytest.approx(2 / 3) and m["bAcc"] == pytest.approx(2 / 3)
    assert m["Prec"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert m["F1"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    w = risk_weight(y)
    wm = scorer.weighted_metrics(y, conf, w)
    assert wm["Acc"] == pytest.approx((1 + math.exp(-0.5 / 9)) / (1 + math.exp(-0.5 / 9) + math.exp(-2 / 9)))


def test_tte_weighted_accuracy_by_hand():
    y = np.array([1, 1, 1])
    conf = _conf([0.9, 0.9, 0.1])  # the sample nearest the event (TTE 30) is wrong
    w = tte_weight([90, 60, 30])
    raw = [1.0, math.exp(-0.5 * (1 / 0.9) ** 2), math.exp(-0.5 * (2 / 0.9) ** 2)]
    assert scorer.weighted_metrics(y, conf, w)["Acc"] == pytest.approx((raw[0] + raw[1]) / sum(raw))
    assert scorer.base_metrics(y, conf)["Acc"] == pytest.approx(2 / 3)


def test_instance_metrics_by_hand():
    y = np.array([1, 1, 1, 0, 0, 1])
    conf = _conf([0.8, 0.7, 0.3, 0.2, 0.1, 0.6])
    keys = [("v", "A")] * 3 + [("v", "B")] * 2 + [("v", "C")]
    m = scorer.instance_metrics(y, conf, scorer.instance_groups(keys))
    assert m["instances"] == 3
    assert m["soft"]["Acc"] == 1.0  # A's mean 0.6 -> crossing
    # hard: A's samples disagree -> wrong (non-crossing); B right, C right
    assert m["hard"]["Acc"] == pytest.approx(2 / 3) and m["hard"]["bAcc"] == pytest.approx(0.75)
    assert m["hard"]["Prec"] == pytest.approx(1.0) and m["hard"]["F1"] == pytest.approx(2 / 3)
    assert m["conf_delta"]["max"] == pytest.approx(0.25)  # A: (0.1 + 0.4) / 2
    assert m["conf_delta"]["avg"] == pytest.approx((0.25 + 0.1) / 2)  # C has one sample: no delta


def test_risk_instances_are_runs_of_one_class():
    keys = scorer.instance_keys(["v"] * 5, ["A", "A", "A", "A", "B"], np.array([2, 2, 1, 2, 2]))
    assert keys == [("v", "A", 0), ("v", "A", 0), ("v", "A", 1), ("v", "A", 2), ("v", "B", 0)]


# ------------------------------------------------------------------------------------------ scorer end to end
def _many_videos(root: Path, n: int = 6) -> None:
    """Crossing and non-crossing pedestrians with long tracks: 7 action samples each."""
    for i in range(1, n + 1):
        vid = f"video_{i:04d}"
        write_video(root, vid, [
            {"pid": f"0_{i}_1b", "label": "pedestrian", "frames": range(0, 200), "x": _x_cross, "cross_from": 150},
            {"pid": f"0_{i}_2b", "label": "pedestrian", "frames": range(0, 160), "x": lambda f, i=i: 200.0 + 40 * i},
        ], [{"pid": f"0_{i}_1b", "crossing": 1, "crossing_point": 150},
            {"pid": f"0_{i}_2b", "crossing": 0, "crossing_point": -1}], split="test" if i % 2 else "train")


@pytest.fixture
def export_dir(tmp_path):
    root = tmp_path / "jaad"
    _many_videos(root)
    out = tmp_path / "export"
    assert cli(["export_pie", "--data", str(root), "--out", str(out)]) == 0
    return out


def _targets(out: Path) -> list[dict]:
    rows = []
    for f in sorted(out.rglob("*.parquet")):
        rows += pq.read_table(f).select(["sample_id", "task", "crossing", "risk_class", "tte_frames", "ped_id",
                                         "end_frame"]).to_pylist()
    return rows


def _oracle(rows):
    return [{"sample_id": r["sample_id"], "crossing_prob": float(r["crossing"])} if r["task"] == "action" else
            {"sample_id": r["sample_id"], "risk_probs": np.eye(6)[r["risk_class"]].tolist()} for r in rows]


def _write_pred(path: Path, preds: list[dict]) -> str:
    path.write_text(json.dumps(preds))
    return str(path)


def _flat(m: dict) -> dict:
    return {f"{g}.{k}": v for g in ("base", "weighted", "soft", "hard") for k, v in m[g].items()}


def test_oracle_is_perfect_on_every_metric(export_dir, tmp_path):
    rows = _targets(export_dir)
    res = scorer.score(_write_pred(tmp_path / "p.json", _oracle(rows)), str(export_dir))
    assert res["problems"] == []
    for task in ("action", "risk"):
        m = res["tasks"][task]
        assert m["scored"] == m["samples"] > 0
        assert all(v == pytest.approx(1.0) for v in _flat(m).values() if v is not None), (task, _flat(m))
        assert m["conf_delta"]["max"] == 0.0 and m["conf_delta"]["avg"] == 0.0
    # Parquet predictions score the same
    pq.write_table(pa.Table.from_pylist([p for p in _oracle(rows) if "crossing_prob" in p]), tmp_path / "p.parquet")
    res2 = scorer.score(str(tmp_path / "p.parquet"), str(export_dir), splits=["test"])
    assert res2["tasks"]["action"]["base"]["Acc"] == 1.0 and res2["problems"] == []
    assert res2["tasks"]["risk"]["scored"] == 0
    assert "action" in scorer.to_text(res2)
    assert cli(["score", "pie", str(export_dir), "--pred", str(tmp_path / "p.json"), "--out", str(tmp_path / "s")]) == 0
    assert json.loads((tmp_path / "s" / "score.json").read_text())["tasks"]["risk"]["hard"]["F1"] == 1.0


def test_corruption_lowers_base_metrics(export_dir, tmp_path):
    rows = _targets(export_dir)
    preds = _oracle(rows)
    rng = np.random.default_rng(0)
    for p in preds:
        if rng.random() < 0.3:
            if "crossing_prob" in p:
                p["crossing_prob"] = 1.0 - p["crossing_prob"]
            else:
                p["risk_probs"] = np.roll(p["risk_probs"], 1).tolist()
    res = scorer.score(_write_pred(tmp_path / "p.json", preds), str(export_dir))
    for task in ("action", "risk"):
        b = res["tasks"][task]["base"]
        assert all(b[k] < 1.0 for k in ("mAP", "bAcc", "AUC", "Acc", "Prec", "F1")), (task, b)


def _acc_drop(res, task):
    m = res["tasks"][task]
    return 1 - m["base"]["Acc"], 1 - m["weighted"]["Acc"]


def test_weighting_works(export_dir, tmp_path):
    rows = _targets(export_dir)
    # TTE weights (§III-D 1: "the closer a sample is to the event, the lower is its weight"): corrupting the
    # samples nearest the event changes the weighted accuracy less than the base one; the farthest, more
    near = _oracle(rows)
    far = _oracle(rows)
    for p, r in zip(near, rows):
        if r["task"] == "action" and r["tte_frames"] <= 40:
            p["crossing_prob"] = 1.0 - p["crossing_prob"]
    for p, r in zip(far, rows):
        if r["task"] == "action" and r["tte_frames"] >= 80:
            p["crossing_prob"] = 1.0 - p["crossing_prob"]
    base_n, weighted_n = _acc_drop(scorer.score(_write_pred(tmp_path / "n.json", near), str(export_dir)), "action")
    base_f, weighted_f = _acc_drop(scorer.score(_write_pred(tmp_path / "f.json", far), str(export_dir)), "action")
    assert base_n == pytest.approx(base_f) and 0 < weighted_n < 0.5 * base_n and weighted_f > base_f
    # risk weights: corrupting the samples far from the image centre (classes 4-5) changes the weighted
    # accuracy less than the base one
    edge = _oracle(rows)
    for p, r in zip(edge, rows):
        if r["task"] == "risk" and r["risk_class"] >= 4:
            p["risk_probs"] = np.eye(6)[0].tolist()
    base_e, weighted_e = _acc_drop(scorer.score(_write_pred(tmp_path / "e.json", edge), str(export_dir)), "risk")
    assert 0 < weighted_e < base_e


def test_flipping_one_sample_changes_the_hard_metric(export_dir, tmp_path):
    rows = _targets(export_dir)
    ok = scorer.score(_write_pred(tmp_path / "o.json", _oracle(rows)), str(export_dir))["tasks"]["action"]
    preds = _oracle(rows)
    i = next(k for k, r in enumerate(rows) if r["task"] == "action" and r["crossing"] == 1 and r["tte_frames"] == 60)
    preds[i]["crossing_prob"] = 0.0
    m = scorer.score(_write_pred(tmp_path / "p.json", preds), str(export_dir))["tasks"]["action"]
    n_inst = m["instances"]
    assert m["hard"]["Acc"] == pytest.approx(1 - 1 / n_inst)  # one pedestrian of n wrong
    assert m["soft"]["Acc"] == 1.0  # its mean confidence is still 6/7 crossing
    assert m["base"]["Acc"] == pytest.approx(1 - 1 / m["scored"])  # one sample of many
    assert (1 - m["hard"]["Acc"]) > 2 * (1 - m["base"]["Acc"])
    assert m["conf_delta"]["max"] > ok["conf_delta"]["max"]


def test_malformed_predictions_are_listed_not_fatal(export_dir, tmp_path):
    rows = _targets(export_dir)
    preds = [p for p in _oracle(rows) if "crossing_prob" in p]
    missing = preds.pop(0)["sample_id"]
    preds[0]["crossing_prob"] = float("nan")
    preds[1]["crossing_prob"] = 1.5
    preds.append(dict(preds[2]))
    preds.append({"sample_id": "action/video_9999/x/1", "crossing_prob": 0.5})
    preds.append({"crossing_prob": 0.5})
    preds.append("not an object")
    risk_id = next(r["sample_id"] for r in rows if r["task"] == "risk")
    preds.append({"sample_id": risk_id, "risk_probs": [0.5, 0.5]})
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"predictions": preds}))  # NaN: JSON's extension, as json.dumps writes it
    res = scorer.score(str(path), str(export_dir))
    kinds = {(p["kind"], p["sample_id"]) for p in res["problems"]}
    assert ("missing", missing) in kinds
    assert ("invalid", preds[0]["sample_id"]) in kinds and ("invalid", preds[1]["sample_id"]) in kinds
    assert ("duplicate", preds[2]["sample_id"]) in kinds and ("unknown", "action/video_9999/x/1") in kinds
    assert ("invalid", risk_id) in kinds
    assert res["problem_counts"]["malformed"] == 2
    m = res["tasks"]["action"]
    assert m["scored"] == m["samples"] - 3 and m["base"]["Acc"] == 1.0
    # every other risk sample is missing, listed one by one
    assert res["problem_counts"]["missing"] == 1 + res["tasks"]["risk"]["samples"] - 1
    assert "problems" in scorer.to_text(res)


def test_unusable_inputs_are_input_errors(export_dir, tmp_path):
    from schemas.errors import InputError

    with pytest.raises(InputError, match="not a PIE export"):
        scorer.score(_write_pred(tmp_path / "p.json", []), str(tmp_path))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InputError, match="neither Parquet nor JSON"):
        scorer.score(str(tmp_path / "bad.json"), str(export_dir))
    assert cli(["score", "pie", str(export_dir), "--pred", str(tmp_path / "bad.json")]) == 2


# ------------------------------------------------------------------------------------------ real JAAD
@pytest.fixture(scope="module")
def real():
    t = read_jaad(JAAD)
    s, stats = build_samples(t.videos, t.boxes, t.pedestrians, t.vehicle)
    return t, s, stats


@needs_jaad
def test_real_jaad_reads_with_named_errors(real):
    t, s, _ = real
    assert len(t.video_ids) == 250 and t.errors == []  # the 13 videos with a gapped track are kept
    strict = read_jaad(JAAD, PieConfig(track_gap="error"))
    assert all(isinstance(e, SourceError) and e.scene and e.file for e in strict.errors)
    assert len(strict.errors) == 13 and all("track has a gap" in e.message for e in strict.errors)
    assert set(t.videos.column("split").to_pylist()) <= {"train", "val", "test", None}


@needs_jaad
def test_real_jaad_crossing_attribute_reproduced(real):
    t, s, _ = real
    attr = {(r["video_id"], r["ped_id"]): r for r in t.pedestrians.to_pylist()}
    act = s.filter(pa.compute.equal(s.column("task"), "action")).to_pylist()
    seen: dict = {}
    for r in act:
        a = attr.get((r["video_id"], r["ped_id"]))
        if a is None or a["crossing"] not in (0, 1):
            continue
        seen.setdefault((r["video_id"], r["ped_id"]), set()).add(r["crossing"])
        assert r["crossing"] == a["crossing"], r["sample_id"]
        if a["crossing_point"] >= 0:  # the event is JAAD's crossing_point
            assert r["end_frame"] + r["tte_frames"] == a["crossing_point"]
        assert 30 <= r["tte_frames"] <= 90
    with_attr = [k for k, a in attr.items() if a["crossing"] in (0, 1)]
    assert len(seen) > 100 and {v for vs in seen.values() for v in vs} == {0, 1}
    assert len(seen) <= len(with_attr)


@needs_jaad
def test_real_jaad_figures(real):
    _, s, _ = real
    c = sample_counts(s)
    a = c["action"]
    assert a["crossing"] + a["non_crossing"] == a["samples"] > 0
    assert sorted(a["per_tte_frames"]) == [30, 40, 50, 60, 70, 80, 90]
    assert sum(c["risk"]["risk_class"].values()) == c["risk"]["samples"]
    assert sorted(c["risk"]["risk_class"]) == [0, 1, 2, 3, 4, 5]


@needs_jaad
def test_real_jaad_benchmark_profile(real):
    """``pie.profile: benchmark`` on the shared videos: every kept behaviour pedestrian gives the benchmark's
    11 windows (TTE 60, 57, ..., 30); the figures docs/families/pie.md gives."""
    t = real[0]
    s, stats = build_samples(t.videos, t.boxes, t.pedestrians, t.vehicle, PieConfig(profile="benchmark"),
                             tasks=("action",))
    a = sample_counts(s)["action"]
    assert (a["samples"], a["pedestrians"], a["crossing"]) == (2948, 268, 2233)
    assert a["per_split"] == {"test": 1188, "train": 1397, "unsplit": 253, "val": 110}
    assert sorted(a["per_tte_frames"]) == list(range(30, 61, 3))
    assert set(s.column("track_label").to_pylist()) == {"pedestrian"}
    assert stats["benchmark: fewer than 76 boxes up to the event"] == 192


def _benchmark_samples_from_xml(root: Path) -> dict[str, set[tuple]]:
    """The PedestrianActionBenchmark's JAAD action samples by ``sample_type`` ('beh' = JAAD_beh, 'all' =
    JAAD_all), by its rules read from its public code and written again here over the XMLs, independently of
    drivegen's reader: ``jaad_data.JAAD`` (the videos of ``split_ids/default/{train,val,test}.txt``; a track's
    id is its first box's ``id``, its boxes in file order; ``_get_crossing``: ids containing 'p' (people groups)
    skipped, with 'beh' ids without 'b' too; the event is the attributes' ``crossing_point`` for a 'b' id, else
    -1, which keeps the boxes up to the third-to-last, else those up to the event's box; fewer than
    ``obs_length + time_to_event[1]`` = 76 boxes: none; label ``int(crossing > 0)`` for 'b' ids, else 0) and
    ``ActionPredict.get_data_sequence`` (obs 16, TTE [30, 60], overlap 0.8: window starts
    ``range(L - 16 - 60, L - 16 - 30 + 1, int(0.2 * 16))``, TTE ``L - (i + 16)``). -> {sample_type: {(video,
    id, frames, label, tte)}}."""
    import xml.etree.ElementTree as ET

    videos = []
    for split in ("train", "val", "test"):
        videos += [v.strip() for v in (root / "split_ids" / "default" / f"{split}.txt").read_text().splitlines()
                   if v.strip()]
    out: dict[str, set] = {"all": set(), "beh": set()}
    for vid in sorted(videos):
        if not (root / "annotations" / f"{vid}.xml").exists():  # the excerpt holds videos 0001-0250 only
            continue
        tracks = {}
        for t in ET.parse(root / "annotations" / f"{vid}.xml").findall("./track"):
            boxes = t.findall("./box")
            pid = boxes[0].find('./attribute[@name="id"]').text
            tracks[pid] = [int(b.get("frame")) for b in boxes]
        attrs = {p.get("id"): p.attrib for p in
                 ET.parse(root / "annotations_attributes" / f"{vid}_attributes.xml").findall("./pedestrian")}
        for pid in sorted(tracks):
            if "p" in pid:
                continue
            frames = tracks[pid]
            event = int(attrs[pid]["crossing_point"]) if "b" in pid else -1
            end = -3 if event == -1 else frames.index(event)
            frames = frames[:end + 1]
            if len(frames) < 76:
                continue
            label = int(int(attrs[pid]["crossing"]) > 0) if "b" in pid else 0
            n = len(frames)
            for i in range(n - 16 - 60, n - 16 - 30 + 1, 3):
                sample = (vid, pid, tuple(frames[i:i + 16]), label, n - (i + 16))
                out["all"].add(sample)
                if "b" in pid:
                    out["beh"].add(sample)
    return out


def _drivegen_samples(samples: pa.Table) -> set[tuple]:
    rows = samples.filter(pa.compute.is_valid(samples.column("split"))).to_pylist()
    return {(r["video_id"], r["ped_id"], tuple(r["frames"]), r["crossing"], r["tte_frames"]) for r in rows}


@needs_jaad
@pytest.mark.slow
def test_real_jaad_benchmark_profile_gives_jaad_all_and_jaad_beh_window_for_window(real):
    """Issue 55: ``pie.profile: benchmark`` with ``include_bystanders: true`` is the benchmark's JAAD_all, and
    unset (its default ``sample_type: beh``) its JAAD_beh, window for window on the shared videos 0001-0250
    against the benchmark's rules over the XMLs (``_benchmark_samples_from_xml``); unsplit videos, which the
    benchmark does not read, are drivegen's own extra (split null) and left out of the comparison."""
    t = real[0]
    sets, references = {}, _benchmark_samples_from_xml(JAAD)
    for name, bystanders in (("all", True), ("beh", None)):
        s, _ = build_samples(t.videos, t.boxes, t.pedestrians, t.vehicle,
                             PieConfig(profile="benchmark", include_bystanders=bystanders), tasks=("action",))
        sets[name] = _drivegen_samples(s)
        reference = references[name]
        assert sets[name] == reference, (name, len(sets[name]), len(reference),
                                         sorted(sets[name] ^ reference)[:3])
    beh_ids = {(v, p) for v, p, *_ in sets["beh"]}
    extra = {(v, p) for v, p, *_ in sets["all"]} - beh_ids
    assert len(sets["all"]) > len(sets["beh"]) and extra and all(not p.endswith("b") for _, p in extra)
    print(f"JAAD_all {len(sets['all'])} samples, JAAD_beh {len(sets['beh'])} (split videos of 0001-0250)")


def test_profile_settings_it_would_not_use_are_refused_by_name():
    """Issue 55: a ``pie:`` setting the chosen profile would not use is refused, naming it; what a profile uses
    is accepted (the bystanders under either profile, risk settings, the paper's own windows)."""
    for field, value in (("tte_max_frames", 60), ("tte_min_frames", 20), ("observation_frames", 16),
                         ("overlap", 0.8)):
        with pytest.raises(ConfigError, match=f"pie.{field}: {value}"):
            parse_config({"pie": {"profile": "benchmark", field: value}})
        assert getattr(parse_config({"pie": {field: value}}).pie, field) == value  # the paper's profile uses it
    for ok in ({"include_bystanders": True}, {"include_bystanders": False}, {"risk_horizon_frames": 60},
               {"tte_sigma": 0.5}):
        assert parse_config({"pie": {"profile": "benchmark", **ok}}).pie.profile == "benchmark"
    cfg = PieConfig(profile="benchmark")
    assert (cfg.bystanders("action"), cfg.bystanders("risk")) == (False, True)
    assert PieConfig().bystanders("action") and not PieConfig(include_bystanders=False).bystanders("risk")


# ------------------------------------------------------------------------------------------ from 3D logs
def _scripted_entry_s(sc, j, cfg: PieConfig, body) -> float:
    """The script's own time (20 Hz grid) at which agent ``j`` first stands where the ego is going to drive:
    a plain loop over the script's arrays, the rule of ``path_entry`` written out independently."""
    from generator.synth.world import TIME_GRID_S

    t, ego, tr = TIME_GRID_S, sc.ego, sc.tracks[j]
    front, rear = body.center_offset_m + body.length_m / 2, body.center_offset_m - body.length_m / 2
    step = int(round(cfg.path_step_s / (t[1] - t[0])))
    for i in np.flatnonzero((t >= 0) & (t <= 19.5 + 1e-9)):
        for jj in range(i, min(len(t), i + int(round(cfg.path_horizon_s / (t[1] - t[0]))) + 1), step):
            if math.hypot(ego.x[jj] - ego.x[i], ego.y[jj] - ego.y[i]) > cfg.path_ahead_m:
                continue
            dx, dy = tr.x[i] - ego.x[jj], tr.y[i] - ego.y[jj]
            c, s = math.cos(ego.yaw[jj]), math.sin(ego.yaw[jj])
            along, across = c * dx + s * dy, -s * dx + c * dy
            if rear <= along <= front and abs(across) <= body.width_m / 2 + cfg.path_margin_m:
                return float(t[i])
    return math.nan


def test_3d_logs_give_pie_samples_with_the_scripted_crossing_time(labelled_run, synth_root, tmp_path):
    """Issue #14 item 3 on generated logs: every tracked pedestrian of the run becomes a PIE instance; the
    crossing ones (scenario ped_crossing) enter the ego's path at the script's own time, within one frame
    (0.5 s at 2 Hz), and give crossing action samples whose TTE counts to that frame; those waiting at the
    kerb never enter it and give only non-crossing samples. ``drivegen export_pie --run`` writes them with
    the front camera's images."""
    import pandas as pd

    from generator.families.pie.attributes import log_config, path_entry
    from generator.runfolder import RunReader
    from generator.synth.world import script_scene
    from generator.synth.writer import token
    from support.data import SYNTH_VERSION

    r = RunReader(str(labelled_run))
    cfg = r.config()
    lcfg = log_config(cfg.pie, 2.0)
    assert (lcfg.observation_frames, lcfg.tte_min_frames, lcfg.tte_max_frames, lcfg.risk_horizon_frames) == (1, 2, 6, 6)
    objects = r.read_table("objects")
    entries = path_entry(r.read_table("frames"), objects, lcfg, cfg.ego).to_pandas()
    side = json.loads((synth_root / SYNTH_VERSION / "drivegen_scenarios.json").read_text())
    index_of = {v["name"]: int(v["name"].split("-")[1]) for v in side["scenes"].values()}
    scen = {tok: inst["scenario"] for v in side["scenes"].values() for tok, inst in v["instances"].items()}
    tok_of = objects.select(["scene_id", "track_id", "instance_token"]).to_pandas().drop_duplicates(["scene_id", "track_id"])
    e = entries.merge(tok_of, on=["scene_id", "track_id"])
    e["scenario"] = e.instance_token.map(scen)
    checked = {"ped_crossing": 0, "waiting_at_curb": 0}
    diffs = []
    for row in e.itertuples():
        if row.scenario not in checked:
            continue
        idx = index_of[row.scene_id]
        sc = script_scene(0, idx)
        j = next(a for a in range(len(sc.tracks)) if token(0, idx, "instance", a) == row.instance_token)
        truth = _scripted_entry_s(sc, j, lcfg, cfg.ego)
        first_t = row.first_frame / 2.0
        if row.scenario == "waiting_at_curb":
            assert math.isnan(truth) and row.event_frame == -1, row
        elif not math.isnan(truth) and truth >= first_t:
            assert abs(row.event_t_s - truth) <= 0.5 + 1e-9, (row, truth)
            diffs.append(row.event_t_s - truth)
        else:
            continue
        checked[row.scenario] += 1
    print(f"3D-log PIE events vs the script: {checked}, event - scripted entry (s): {sorted(diffs)}")
    assert checked["ped_crossing"] >= 1 and checked["waiting_at_curb"] >= 1, checked

    out = tmp_path / "pie"
    assert cli(["export_pie", "--run", str(labelled_run), "--out", str(out)]) == 0
    summary = json.loads((out / "export_summary.json").read_text())
    assert summary["source"]["kind"] == "run" and summary["source"]["frame_rate_hz"] == 2.0
    action = pd.concat([pd.read_parquet(f) for f in (out / "action").glob("*.parquet")])
    crossing = e[e.event_frame >= 0]
    assert set(action[action.crossing == 1].ped_id) <= set(crossing.track_id.astype(str))
    assert (action.crossing == 1).sum() > 0 and (action.crossing == 0).sum() > 0
    # TTE counts to the event frame, 1-3 s ahead
    assert ((action.event_frame - action.end_frame) == action.tte_frames).all()
    assert action.tte_s.between(1.0, 3.0).all()
    waiting = set(e[e.scenario == "waiting_at_curb"].track_id.astype(str))
    assert (action[action.ped_id.isin(waiting)].crossing == 0).all()
    paths = [p for ps in action.image_paths for p in ps]
    assert paths and all("CAM_FRONT" in p and Path(p).exists() for p in paths)


def test_pie_qa_family_answers_are_the_path_rule_and_the_risk_regions(labelled_run):
    """Issue #14 item 4, the QA family on generated logs: "Will the pedestrian Region [X] cross in front of the
    ego vehicle?" is answered by the path-entry rule (Yes iff it enters the ego's path within 3 s of the
    keyframe; pedestrians that never enter get No), and "Where will Region [X] be in 3 seconds?" by the event-risk
    class of its last visible front-camera box up to 3 s later, recomputed here from the projections table."""
    import pandas as pd

    from generator.families.pie.attributes import path_entry, risk_class
    from generator.families.pie.qa import WHERE
    from generator.runfolder import RunReader

    r = RunReader(str(labelled_run))
    cfg = r.config()
    qa = pd.read_parquet(labelled_run / "qa")
    p = qa[qa.family == "pie"]
    counts = p.question_type.value_counts().to_dict()
    assert counts.get("crossing", 0) > 10 and counts.get("risk_region", 0) > 5, counts
    assert (p.class_names.map(lambda c: list(c)) == p.class_names.map(lambda c: ["pedestrian"])).all()
    frames = r.read_table("frames").to_pandas().set_index(["scene_id", "frame_index"])
    t0 = frames.groupby(level=0).timestamp_us.min()
    entries = path_entry(r.read_table("frames"), r.read_table("objects"), cfg.pie, cfg.ego).to_pandas()
    entries = entries.set_index(["scene_id", "track_id"])
    yes = 0
    for row in p[p.question_type == "crossing"].itertuples():
        e = entries.loc[(row.scene_id, int(row.track_ids[0]))]
        t_key = (frames.loc[(row.scene_id, row.keyframe_index)].timestamp_us - t0[row.scene_id]) / 1e6
        want = e.event_frame >= 0 and 0 < e.event_t_s - t_key <= 3.0 + 1e-9
        assert row.value == float(want) and row.answer.startswith("Yes" if want else "No"), (row, e)
        assert want or e.event_frame == -1  # no question about one entering only later
        yes += want
    assert 0 < yes < counts["crossing"]
    proj = r.read_table("projections").to_pandas()
    front = proj[(proj.camera == "CAM_FRONT") & proj.visible]
    width = {s: next(c["width_px"] for c in cams if c["name"] == "CAM_FRONT")
             for s, cams in frames.cameras.groupby(level=0).first().items()}
    for row in p[p.question_type == "risk_region"].itertuples():
        t_key = frames.loc[(row.scene_id, row.keyframe_index)].timestamp_us
        f = front[(front.scene_id == row.scene_id) & (front.track_id == row.track_ids[0])
                  & (front.frame_index >= row.keyframe_index)].copy()
        f["t"] = [frames.loc[(row.scene_id, fi)].timestamp_us for fi in f.frame_index]
        f = f[f.t <= t_key + 3_000_000].sort_values("frame_index")
        box = f.box2d_proj_xyxy.iloc[-1]
        if f.mask_box_xyxy.iloc[-1] is not None:
            box = f.mask_box_xyxy.iloc[-1]
        want = int(risk_class((box[0] + box[2]) / 2, width[row.scene_id], cfg.pie))
        assert row.value == want, (row, f.frame_index.tolist())
        assert any(w in row.answer for w in (WHERE[0],) if want == 0) or want > 0


def _av2_path_events(log: Path, cfg: PieConfig, body) -> dict[str, float]:
    """Per PEDESTRIAN track of a real AV2 log, the first annotation time (s since the first) at which it stands in
    the ego's path (NaN: never), by the rule of ``path_entry`` written out as a plain loop over the log's own
    feather files: the ego's poses at t + tau (interpolated in the 10 Hz annotation times), the pedestrian's
    centre taken to the city frame with the pose of its own time."""
    import pyarrow.feather as feather

    from generator.geometry import quat_wxyz_to_matrix

    poses = feather.read_table(str(log / "city_SE3_egovehicle.feather")).to_pandas().set_index("timestamp_ns")
    ann = feather.read_table(str(log / "annotations.feather")).to_pandas()
    times = np.sort(ann.timestamp_ns.unique())
    t_s = (times - times[0]) / 1e9
    xy = np.array([poses.loc[t, ["tx_m", "ty_m"]].to_numpy(float) for t in times])
    rots = [quat_wxyz_to_matrix(poses.loc[t, ["qw", "qx", "qy", "qz"]].to_numpy(float)) for t in times]
    yaw = np.unwrap([math.atan2(r[1, 0], r[0, 0]) for r in rots])
    front, rear = body.center_offset_m + body.length_m / 2, body.center_offset_m - body.length_m / 2
    out = {}
    for uuid, rows in ann[ann.category == "PEDESTRIAN"].groupby("track_uuid"):
        out[uuid] = math.nan
        for r in rows.sort_values("timestamp_ns").itertuples():
            i = int(np.searchsorted(times, r.timestamp_ns))
            c = rots[i] @ np.array([r.tx_m, r.ty_m, r.tz_m]) + np.r_[xy[i], 0.0]
            for tau in np.arange(0.0, cfg.path_horizon_s + 1e-9, cfg.path_step_s):
                t = t_s[i] + tau
                if t > t_s[-1] + 1e-9:
                    break
                ex, ey = np.interp(t, t_s, xy[:, 0]), np.interp(t, t_s, xy[:, 1])
                if math.hypot(ex - xy[i, 0], ey - xy[i, 1]) > cfg.path_ahead_m:
                    continue
                a = np.interp(t, t_s, yaw)
                dx, dy = c[0] - ex, c[1] - ey
                along, across = math.cos(a) * dx + math.sin(a) * dy, -math.sin(a) * dx + math.cos(a) * dy
                if rear <= along <= front and abs(across) <= body.width_m / 2 + cfg.path_margin_m:
                    out[uuid] = float(t_s[i])
                    break
            if not math.isnan(out[uuid]):
                break
    return out


def test_real_av2_pedestrians_by_the_path_rule(av2_log, av2_perceived):
    """Issue #14 item 3 on a real log: the tracked pedestrians of the AV2 excerpt (labels backend: the log's
    own tracks) against the path rule written out over the feather files. At the config's margin (0.5 m) none of
    the 17 steps into the ego's path: they keep 8 m or more to the side of it. Widened to 12 m (a check of the
    machinery on real poses, not a setting) one does, and for every pedestrian both agree on whether and when."""
    from generator.families.pie.attributes import path_entry, pedestrian_rows
    from schemas.config import PipelineConfig

    cfg = PipelineConfig()
    frames, res, attrs = av2_perceived
    uuid_of = dict(zip(res.objects.column("track_id").to_pylist(), res.objects.column("instance_token").to_pylist()))
    seen = {}
    for margin in (cfg.pie.path_margin_m, 12.0):
        pcfg = cfg.pie.model_copy(update={"path_margin_m": margin})
        got = path_entry(frames, pedestrian_rows(attrs), pcfg, cfg.ego).to_pandas()
        want = _av2_path_events(av2_log, pcfg, cfg.ego)
        assert len(got) >= 10 and all(uuid_of[t] in want for t in got.track_id)
        for row in got.itertuples():
            w = want[uuid_of[row.track_id]]
            if math.isnan(w):
                assert row.event_frame == -1, (margin, row)
            else:
                assert row.event_frame >= 0 and abs(row.event_t_s - w) <= 0.1 + 1e-6, (margin, row, w)
        seen[margin] = int((got.event_frame >= 0).sum())
    print(f"real AV2 pedestrians entering the ego's path by margin: {seen}")
    assert seen[cfg.pie.path_margin_m] == 0 < seen[12.0]


# ------------------------------------------------------------------------ pie.profile: benchmark, by hand
def _tables(tracks: dict[str, tuple[str, list[int], dict]]):
    """One 1920x1080 video, ``tracks`` = {ped_id: (label, frames, attributes)}; boxes drift right 2 px a frame."""
    from generator.sources.jaad import PEDESTRIANS_SCHEMA, VEHICLE_SCHEMA, VIDEOS_SCHEMA
    from schemas.tables import VIDEO_BOXES

    def table(schema, rows):
        return pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)

    videos = table(VIDEOS_SCHEMA, [{"video_id": "video_0001", "width_px": 1920, "height_px": 1080,
                                    "num_frames": 300, "split": "test"}])
    boxes, peds = [], []
    for pid, (label, frames, attrs) in tracks.items():
        boxes += [{"video_id": "video_0001", "ped_id": pid, "label": label, "frame": f, "x1_px": 100.0 + 2 * f,
                   "y1_px": 500.0, "x2_px": 150.0 + 2 * f, "y2_px": 650.0, "occlusion": "none"} for f in frames]
        if label == "pedestrian":
            peds.append({"video_id": "video_0001", "ped_id": pid, **attrs})
    return (videos, table(VIDEO_BOXES, boxes), table(PEDESTRIANS_SCHEMA, peds),
            table(VEHICLE_SCHEMA, []))


def test_benchmark_profile_cuts_action_samples_as_the_public_benchmark_by_hand():
    """Worked by hand from PedestrianActionBenchmark's rules (jaad_data._get_crossing, ActionPredict.
    get_data_sequence; obs 16, TTE [30, 60], overlap 0.8 -> step int(0.2 * 16) = 3, minimum 76 boxes):

    - ``b_start``: crossing already when its track starts (crossing 1, crossing_point -1), boxes 0..99: cut at
      the third-to-last box (frame 97), L = 98, starts 22, 25, ..., 52: windows 22-37 (TTE 60) ... 52-67 (TTE
      30), label 1 (the paper profile gives it no sample: its event is its first frame);
    - ``b_nocp``: no crossing point, crossing 0, boxes 0..99: the same windows, label 0;
    - ``b_short``: crossing point 70 on boxes 0..76: 71 boxes up to the event, fewer than 76: none;
    - ``b_gap``: boxes 0..49 and 80..129, crossing point 120 (position 90), L = 91: starts 15, 18, ..., 45,
      the last window's boxes are frames 45-49 then 80-90 (positions, across the gap), TTE 30;
    - ``p_by``: a bystander: none (behaviour pedestrians only)."""
    tracks = {
        "0_1_1b_start": ("pedestrian", list(range(100)), {"crossing": 1, "crossing_point": -1}),
        "0_1_2b_nocp": ("pedestrian", list(range(100)), {"crossing": 0, "crossing_point": -1}),
        "0_1_3b_short": ("pedestrian", list(range(77)), {"crossing": 1, "crossing_point": 70}),
        "0_1_4b_gap": ("pedestrian", list(range(50)) + list(range(80, 130)), {"crossing": 1, "crossing_point": 120}),
        "0_1_5_by": ("ped", list(range(120)), {}),
    }
    s, stats = build_samples(*_tables(tracks), PieConfig(profile="benchmark"), tasks=("action",))
    by = {pid: s.filter(pa.compute.equal(s.column("ped_id"), pid)).to_pylist() for pid in tracks}
    assert [len(by[p]) for p in tracks] == [11, 11, 0, 11, 0]
    for pid, label in (("0_1_1b_start", 1), ("0_1_2b_nocp", 0)):
        rows = by[pid]
        assert [(r["start_frame"], r["end_frame"]) for r in rows] == [(i, i + 15) for i in range(22, 53, 3)]
        assert [r["tte_frames"] for r in rows] == list(range(60, 29, -3))
        assert {r["crossing"] for r in rows} == {label} and {r["event_frame"] for r in rows} == {97}
        assert all(len(r["frames"]) == len(r["boxes_px"]) == 16 for r in rows)
    gap = by["0_1_4b_gap"]
    assert [r["tte_frames"] for r in gap] == list(range(60, 29, -3))
    assert gap[0]["frames"] == list(range(15, 31))
    assert gap[-1]["frames"] == list(range(45, 50)) + list(range(80, 91))
    assert gap[-1]["boxes_px"][5] == [260.0, 500.0, 310.0, 650.0]  # frame 80's box
    assert {r["event_frame"] for r in gap} == {120} and {r["crossing"] for r in gap} == {1}
    assert stats["benchmark: fewer than 76 boxes up to the event"] == 1
    # include_bystanders: true is JAAD_all: the bystander's event is its third-to-last box (frame 117), L = 118,
    # starts 42, 45, ..., 72, label 0; a 'people' group never gives samples
    tracks["0_1_6p"] = ("people", list(range(120)), {})
    s_all, _ = build_samples(*_tables(tracks), PieConfig(profile="benchmark", include_bystanders=True),
                             tasks=("action",))
    by_all = s_all.filter(pa.compute.equal(s_all.column("ped_id"), "0_1_5_by")).to_pylist()
    assert [(r["start_frame"], r["tte_frames"]) for r in by_all] == [(i, 118 - i - 16) for i in range(42, 73, 3)]
    assert {r["crossing"] for r in by_all} == {0} and {r["event_frame"] for r in by_all} == {117}
    assert s_all.num_rows == s.num_rows + 11 and "0_1_6p" not in set(s_all.column("ped_id").to_pylist())
    # the paper's profile on the same tracks: other rules, other samples (the check can fail)
    paper, _ = build_samples(*_tables(tracks), PieConfig(), tasks=("action",))
    assert "0_1_1b_start" not in set(paper.column("ped_id").to_pylist())
