"""Broken logs: each corruption raises SourceError naming the scene, the file and what is wrong, and a
broken scene never stops another one from loading.

nuScenes cases corrupt a copy of the generated log set (tables copied, sensor files symlinked and replaced
by real files before they are modified; the shared fixture itself is never touched). AV2 cases corrupt a
copy of the real log's small feather files.
"""
from __future__ import annotations

import re

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest

from generator.sources.av2 import AV2Source
from generator.sources.io import load_lidar_ego
from generator.sources.nuscenes import NuScenesSource
from generator.types import SourceError

AV2_LOG = "7fab2350-7eaf-3b7e-a39d-6937a4c1bede"


# ---------------------------------------------------------------------------------------------- nuScenes
class Copy:
    """A writable copy of the generated nuScenes dataroot."""

    def __init__(self, src, dst):
        self.root = dst
        self.version = next(p.parent.name for p in src.glob("*/scene.json"))
        for entry in src.iterdir():
            if entry.name == self.version:
                shutil.copytree(entry, dst / entry.name)  # tables: real copies, edited below
            elif entry.is_dir():
                shutil.copytree(entry, dst / entry.name, copy_function=os.symlink)
            else:
                os.symlink(entry, dst / entry.name)

    def table(self, name):
        return json.loads((self.root / self.version / f"{name}.json").read_text())

    def write_table(self, name, rows):
        (self.root / self.version / f"{name}.json").write_text(json.dumps(rows))

    def own(self, rel):
        """Replace a symlinked sensor file by a real copy so it can be damaged."""
        p = self.root / rel
        data = p.read_bytes()
        p.unlink()
        p.write_bytes(data)
        return p

    def source(self):
        return NuScenesSource(self.root, self.version)

    # helpers over the tables of scene A (the first scene)
    def scene_a(self):
        return self.table("scene")[0]

    def samples_of(self, scene):
        by_tok = {s["token"]: s for s in self.table("sample")}
        out, tok = [], scene["first_sample_token"]
        while tok:
            out.append(by_tok[tok])
            tok = by_tok[tok]["next"]
        return out

    def sample_data_of(self, scene, channel=None):
        sensors = {s["token"]: s["channel"] for s in self.table("sensor")}
        cs = {c["token"]: sensors[c["sensor_token"]] for c in self.table("calibrated_sensor")}
        toks = {s["token"] for s in self.samples_of(scene)}
        return [sd for sd in self.table("sample_data") if sd["sample_token"] in toks and sd["is_key_frame"]
                and (channel is None or cs[sd["calibrated_sensor_token"]] == channel)]


@pytest.fixture()
def ns(synth_root, tmp_path):
    return Copy(synth_root, tmp_path / "nusc")


def expect_a_fails_b_loads(copy: Copy, match: str, file_part: str):
    src = copy.source()
    a, b = src.scene_ids()
    with pytest.raises(SourceError, match=match) as e:
        src.load_scene(a)
    assert e.value.scene == a and file_part in (e.value.file or ""), e.value
    scene_b = src.load_scene(b)  # the other scene is unaffected, with the same source object
    assert len(scene_b.frames) > 0 and scene_b.scene_id == b
    return e.value


def expect_a_frame_issue_b_clean(copy: Copy, match: str, file_part: str):
    """A damaged sensor file of scene A is recorded as that frame's problem (``Scene.issues``: stage 'load',
    the file and a message) while the scene still loads; scene B has none. Returns the issue."""
    src = copy.source()
    a, b = src.scene_ids()
    scene = src.load_scene(a)
    hits = [i for i in scene.issues if re.search(match, i.message) and file_part in (i.file or "")]
    assert len(hits) == 1 and hits[0].stage == "load", scene.issues
    assert not src.load_scene(b).issues
    return hits[0]


def test_missing_lidar_file(ns):
    sd = ns.sample_data_of(ns.scene_a(), "LIDAR_TOP")[4]
    (ns.root / sd["filename"]).unlink()
    expect_a_frame_issue_b_clean(ns, "LiDAR file is missing", sd["filename"])


def test_truncated_lidar_file(ns):
    sd = ns.sample_data_of(ns.scene_a(), "LIDAR_TOP")[2]
    p = ns.own(sd["filename"])
    p.write_bytes(p.read_bytes()[:-7])
    err = expect_a_frame_issue_b_clean(ns, "truncated", sd["filename"])
    assert "20-byte" in err.message
    # a source opened without the stat checks fails when the points are read, still naming scene and file
    lazy = NuScenesSource(ns.root, ns.version, check_files=False)
    frame = lazy.load_scene(lazy.scene_ids()[0]).frames[2]
    with pytest.raises(SourceError, match="truncated") as e:
        load_lidar_ego(frame)
    assert e.value.scene == lazy.scene_ids()[0] and e.value.file.endswith(sd["filename"])


def test_a_sweep_checked_at_load_is_not_checked_again(ns, monkeypatch):
    """A source that checks its files when a scene loads marks each sound sweep (``Frame.lidar_checked``), and
    ``load_lidar_ego`` then reads its points without checking them again (the same points); a sweep that failed
    the check is not marked and still fails when read; one of another size after the load is checked again."""
    import generator.sources.io as sio

    sd = ns.sample_data_of(ns.scene_a(), "LIDAR_TOP")
    bad = ns.own(sd[3]["filename"])
    rec = np.fromfile(bad, np.float32).reshape(-1, 5)
    rec[7, 0] = np.nan
    rec.tofile(bad)
    src = ns.source()
    frames = src.load_scene(src.scene_ids()[0]).frames
    assert [f.frame_index for f in frames if not f.lidar_checked] == [3]
    lazy = NuScenesSource(ns.root, ns.version, check_files=False).load_scene(src.scene_ids()[0]).frames
    assert not any(f.lidar_checked for f in lazy)
    calls = []
    monkeypatch.setattr(sio, "_check_points", lambda *a, **k: calls.append(a[1]))
    assert np.array_equal(load_lidar_ego(frames[2]), load_lidar_ego(lazy[2])) and len(calls) == 1
    monkeypatch.undo()
    with pytest.raises(SourceError, match="NaN"):
        load_lidar_ego(frames[3])
    moved = ns.own(sd[5]["filename"])
    rec = np.fromfile(moved, np.float32).reshape(-1, 5)[:-100]  # whole records, another size, one NaN point
    rec[0, 2] = np.inf
    rec.tofile(moved)
    with pytest.raises(SourceError, match="NaN/inf"):
        load_lidar_ego(frames[5])


def test_missing_image(ns):
    sd = ns.sample_data_of(ns.scene_a(), "CAM_BACK_LEFT")[7]
    (ns.root / sd["filename"]).unlink()
    issue = expect_a_frame_issue_b_clean(ns, "image of CAM_BACK_LEFT .* is unreadable \\(missing\\)", sd["filename"])
    assert issue.camera == "CAM_BACK_LEFT" and issue.reason == "image_unreadable"


def test_calibration_of_the_wrong_shape(ns):
    """A new calibrated_sensor row with a 2x3 intrinsic matrix, used by one camera image of scene A."""
    sd_rows = ns.table("sample_data")
    target = ns.sample_data_of(ns.scene_a(), "CAM_FRONT")[3]
    cs_rows = ns.table("calibrated_sensor")
    bad = dict(next(c for c in cs_rows if c["token"] == target["calibrated_sensor_token"]))
    bad["token"] = "bad-calibration"
    bad["camera_intrinsic"] = [[1000.0, 0.0, 400.0], [0.0, 1000.0, 225.0]]
    ns.write_table("calibrated_sensor", cs_rows + [bad])
    for r in sd_rows:
        if r["token"] == target["token"]:
            r["calibrated_sensor_token"] = "bad-calibration"
    ns.write_table("sample_data", sd_rows)
    err = expect_a_fails_b_loads(ns, r"calibration of CAM_FRONT .*bad-calibration.* must be \(3, 3\)",
                                 "calibrated_sensor.json")
    assert "(2, 3)" in str(err)


def test_malformed_sensor_pose_fails_its_scene_each_time(ns):
    """A calibrated_sensor row whose rotation is no rotation (a zero quaternion), used by one LiDAR keyframe of
    scene A: scene A fails naming the row, again when asked again (a sensor pose is kept for reuse only once
    it is built), and scene B loads, its sweeps sharing one pose per sensor."""
    sd_rows = ns.table("sample_data")
    target = ns.sample_data_of(ns.scene_a(), "LIDAR_TOP")[3]
    cs_rows = ns.table("calibrated_sensor")
    bad = dict(next(c for c in cs_rows if c["token"] == target["calibrated_sensor_token"]))
    bad["token"], bad["rotation"] = "bad-rotation", [0.0, 0.0, 0.0, 0.0]
    ns.write_table("calibrated_sensor", cs_rows + [bad])
    for r in sd_rows:
        if r["token"] == target["token"]:
            r["calibrated_sensor_token"] = "bad-rotation"
    ns.write_table("sample_data", sd_rows)
    expect_a_fails_b_loads(ns, r"calibrated_sensor bad-rotation \(LIDAR_TOP\) is malformed", "calibrated_sensor.json")
    src = ns.source()
    a, b = src.scene_ids()
    for _ in range(2):
        with pytest.raises(SourceError, match="bad-rotation"):
            src.load_scene(a)
    frames = src.load_scene(b).frames
    poses = {id(f.ego_SE3_lidar) for f in frames} | {id(w.ego_SE3_lidar) for f in frames for w in f.lidar_sweeps}
    assert len(frames) > 10 and len(poses) == 1


def test_scene_without_ego_poses(ns):
    mine = {sd["ego_pose_token"] for sd in ns.sample_data_of(ns.scene_a())}
    ns.write_table("ego_pose", [p for p in ns.table("ego_pose") if p["token"] not in mine])
    expect_a_fails_b_loads(ns, "no ego pose", "ego_pose.json")


def test_unknown_category(ns):
    """One instance of scene A re-labelled with a category that is not in the nuScenes taxonomy."""
    samples = {s["token"] for s in ns.samples_of(ns.scene_a())}
    inst_tok = next(a["instance_token"] for a in ns.table("sample_annotation") if a["sample_token"] in samples)
    cats = ns.table("category")
    cats.append({"token": "cat-hovercraft", "name": "vehicle.hovercraft", "description": "not nuScenes"})
    ns.write_table("category", cats)
    inst = ns.table("instance")
    for r in inst:
        if r["token"] == inst_tok:
            r["category_token"] = "cat-hovercraft"
    ns.write_table("instance", inst)
    err = expect_a_fails_b_loads(ns, "not in the nuScenes taxonomy", "category.json")
    assert "vehicle.hovercraft" in str(err)


@pytest.mark.parametrize("name", ["../../outside.pcd.bin", "/etc/passwd", "samples/../../escape.jpg"])
def test_filename_outside_the_dataroot(ns, name):
    rows = ns.table("sample_data")
    target = ns.sample_data_of(ns.scene_a(), "CAM_FRONT")[1]
    for r in rows:
        if r["token"] == target["token"]:
            r["filename"] = name
    ns.write_table("sample_data", rows)
    err = expect_a_fails_b_loads(ns, "points outside the dataroot", "sample_data.json")
    assert name in str(err)


def test_a_cycle_in_the_sample_chain_fails_its_scene(ns):
    """Issue 57 #12: a sample whose ``next`` leads back into the chain was followed forever (memory +15 MB/s);
    the loop is now refused naming the table and the sample, and scene B loads."""
    rows = ns.table("sample")
    chain = ns.samples_of(ns.scene_a())
    for r in rows:
        if r["token"] == chain[5]["token"]:
            r["next"] = chain[2]["token"]
    ns.write_table("sample", rows)
    err = expect_a_fails_b_loads(ns, "sample chain loops", "sample.json")
    assert chain[5]["token"] in err.message and "3 back" in err.message


def test_a_fifo_in_place_of_a_table_is_named_not_read(ns):
    """Issue 57 #12: the devkit would block reading a FIFO forever; it is refused by name when the logs open."""
    p = ns.root / ns.version / "ego_pose.json"
    p.unlink()
    os.mkfifo(p)
    with pytest.raises(SourceError, match=r"nuScenes table ego_pose.json is a FIFO") as e:
        ns.source()
    assert e.value.file == str(p)


def test_a_fifo_in_place_of_a_sensor_file_is_named_not_missing(ns):
    sd = ns.sample_data_of(ns.scene_a(), "LIDAR_TOP")[4]
    (ns.root / sd["filename"]).unlink()
    os.mkfifo(ns.root / sd["filename"])
    expect_a_frame_issue_b_clean(ns, r"LiDAR file is a FIFO \(named pipe\)", sd["filename"])


def test_corrupt_table_file_fails_at_open(ns):
    (ns.root / ns.version / "sample.json").write_text("[{not json")
    with pytest.raises(SourceError, match="could not be loaded: sample.json is not a JSON array") as e:
        ns.source()
    assert e.value.file.endswith(f"{ns.version}/sample.json")


# --------------------------------------------------------------------------------------------------- AV2
@pytest.fixture()
def av2_copy(av2_log, tmp_path):
    def make(name):
        d = tmp_path / name / AV2_LOG
        d.mkdir(parents=True)
        for f in ("annotations.feather", "city_SE3_egovehicle.feather"):
            shutil.copy(av2_log / f, d / f)
        shutil.copytree(av2_log / "calibration", d / "calibration")
        return d
    return make


def set_column(path, column, fn):
    t = feather.read_table(path)
    values = fn(t[column].to_numpy(zero_copy_only=False).copy())
    feather.write_feather(t.set_column(t.column_names.index(column), column, pa.array(values)), path)


def test_av2_unknown_category(av2_copy):
    d = av2_copy("cat")

    def rename(c):
        c[5] = "FLYING_CAR"
        return c
    set_column(d / "annotations.feather", "category", rename)
    with pytest.raises(SourceError, match="FLYING_CAR.*av2_classes.py") as e:
        AV2Source(d).load_scene(AV2_LOG)
    assert e.value.scene == AV2_LOG and e.value.file.endswith("annotations.feather")


def test_av2_missing_and_short_poses(av2_copy):
    d = av2_copy("none")
    (d / "city_SE3_egovehicle.feather").unlink()
    with pytest.raises(SourceError, match="ego pose file is missing") as e:
        AV2Source(d).load_scene(AV2_LOG)
    assert e.value.file.endswith("city_SE3_egovehicle.feather") and e.value.scene == AV2_LOG
    d = av2_copy("short")
    p = d / "city_SE3_egovehicle.feather"
    feather.write_feather(feather.read_table(p).slice(0, 100), p)
    with pytest.raises(SourceError, match="not covered by the ego poses"):
        AV2Source(d).load_scene(AV2_LOG)


def test_av2_zero_quaternion_pose_is_named_as_such(av2_copy):
    """Issue 57 #15: a pose whose quaternion is all zeros was reported as frames "not covered by the ego poses";
    it is a row that is no rotation, and the message says so, naming the row."""
    d = av2_copy("zero-quat")
    p = d / "city_SE3_egovehicle.feather"
    t = feather.read_table(p)
    for c in ("qw", "qx", "qy", "qz"):
        t = t.set_column(t.column_names.index(c), c, pa.array(np.r_[t[c].to_numpy()[:7], 0.0, t[c].to_numpy()[8:]]))
    feather.write_feather(t, p)
    with pytest.raises(SourceError, match=r"ego pose at timestamp_ns \d+: quaternion .* has norm 0, not 1") as e:
        AV2Source(d).load_scene(AV2_LOG)
    assert "not covered" not in e.value.message and e.value.file.endswith("city_SE3_egovehicle.feather")


def test_av2_fifo_annotations_are_named_not_missing(av2_copy):
    """Issue 57 #15: a FIFO ``annotations.feather`` was "missing"; it is named as the FIFO it is (never read)."""
    d = av2_copy("fifo")
    (d / "annotations.feather").unlink()
    os.mkfifo(d / "annotations.feather")
    with pytest.raises(SourceError, match=r"annotations file is a FIFO \(named pipe\)") as e:
        AV2Source(d).load_scene(AV2_LOG)
    assert "missing" not in e.value.message and e.value.file.endswith("annotations.feather")


def test_av2_bad_calibration(av2_copy):
    d = av2_copy("calib")

    def negative(fx):
        fx[0] = -1.0
        return fx
    set_column(d / "calibration" / "intrinsics.feather", "fx_px", negative)
    with pytest.raises(SourceError, match="calibration of camera ring_front_center is invalid") as e:
        AV2Source(d).load_scene(AV2_LOG)
    assert "calibration" in e.value.file


def test_av2_one_broken_log_does_not_stop_another(av2_copy, tmp_path):
    good = av2_copy("two")
    broken = good.parent / "broken-log"
    shutil.copytree(good, broken)
    (broken / "annotations.feather").write_bytes(b"garbage")
    src = AV2Source(good.parent)
    assert src.scene_ids() == [AV2_LOG, "broken-log"]
    with pytest.raises(SourceError, match="annotations file is unreadable") as e:
        src.load_scene("broken-log")
    assert e.value.scene == "broken-log"
    assert len(src.load_scene(AV2_LOG).frames) == 156


def test_av2_nan_annotation(av2_copy):
    d = av2_copy("nan")

    def poison(x):
        x[0] = np.nan
        return x
    set_column(d / "annotations.feather", "tx_m", poison)
    with pytest.raises(SourceError, match="non-finite"):
        AV2Source(d).load_scene(AV2_LOG)


def test_the_wrong_source_kind_names_the_right_one(av2_log, tmp_path):
    """``--source nuscenes`` on a folder of AV2 logs (or a JAAD folder) said "pass version=": it now says which
    source the folder looks like; several nuScenes versions name the --version flag."""
    from generator.sources import SourceError, open_source

    with pytest.raises(SourceError, match=r"looks like Argoverse 2 logs .*use --source av2"):
        open_source("nuscenes", av2_log.parent)
    jaad = tmp_path / "jaad"
    (jaad / "annotations").mkdir(parents=True)
    (jaad / "annotations" / "video_0001.xml").write_text("<annotations/>")
    with pytest.raises(SourceError, match=r"looks like a JAAD folder .*use --source jaad"):
        open_source("nuscenes", jaad)
    for v in ("v1.0-mini", "v1.0-trainval"):
        (tmp_path / "ns" / v).mkdir(parents=True)
        (tmp_path / "ns" / v / "scene.json").write_text("[]")
    with pytest.raises(SourceError, match=r"several nuScenes versions \(v1.0-mini, v1.0-trainval\): choose one with "
                                          r"--version v1.0-mini"):
        open_source("nuscenes", tmp_path / "ns")
