"""The nuScenes scene index (``generator.sources.nuscenes_index``): each scene's slice holds what the devkit over the
whole table set gives for that scene, a scene's load reads that scene's bytes only, and the conversion happens
once per table content, safely when converters run together."""
from __future__ import annotations

import json
import logging
import os
import shutil
import threading

import numpy as np
import pyarrow as pa
import pytest

from generator.sources import frames_table
from generator.sources import nuscenes_index as nxi
from generator.sources.nuscenes import NuScenesSource
from generator.types import SourceError
from schemas.config import SourceLimitsConfig
from support.data import SYNTH_VERSION

TABLES_VERSION = "v1.0-tables"


@pytest.fixture(scope="module")
def dense_tables(tmp_path_factory):
    """Three scenes of tables only at real trainval density (radars, sweeps of every channel, a shared log)."""
    from generator.synth.tables import make_tables

    root = tmp_path_factory.mktemp("dense")
    make_tables(root, 3, seed=1, version=TABLES_VERSION)
    return root


@pytest.fixture()
def limits(tmp_path):
    return SourceLimitsConfig(cache_dir=str(tmp_path / "cache"))


def _logs(request, name):
    return (request.getfixturevalue(name), TABLES_VERSION if name == "dense_tables" else SYNTH_VERSION)


def _whole(root, version):
    from nuscenes import NuScenes

    return NuScenes(version=version, dataroot=str(root), verbose=False)


def _expected_tokens(whole, scene: dict) -> dict[str, set]:
    """What the devkit over the whole set says the scene reaches, table by table."""
    samples = [s for s in whole.sample if s["scene_token"] == scene["token"]]
    tokens = {s["token"] for s in samples}
    sd = [r for r in whole.sample_data if r["sample_token"] in tokens]
    anns = [a for a in whole.sample_annotation if a["sample_token"] in tokens]
    return {"sample": tokens, "sample_data": {r["token"] for r in sd}, "ego_pose": {r["ego_pose_token"] for r in sd},
            "calibrated_sensor": {r["calibrated_sensor_token"] for r in sd},
            "sample_annotation": {a["token"] for a in anns}, "instance": {a["instance_token"] for a in anns},
            "log": {scene["log_token"]}, "scene": {scene["token"]}}


@pytest.mark.parametrize("logs", ["synth_root", "minimal_logs", "dense_tables"])
def test_every_scene_slice_holds_the_devkit_records(logs, request, limits):
    """Every record of every scene's slice, de-normalised by the devkit, equals the whole set's devkit record; the
    slice holds every row the scene reaches; the rows' positions are the whole tables'; the devkit's velocities
    agree for every annotation."""
    root, version = _logs(request, logs)
    whole = _whole(root, version)
    index = nxi.SceneIndex.open(root / version, limits)
    assert index.scenes.column("name").to_pylist() == [s["name"] for s in whole.scene]
    for i, scene in enumerate(whole.scene):
        tables, rows = index.tables(i)
        part = nxi.scene_devkit(tables, root, version)
        for name in nxi.TABLES:
            for rec in getattr(part, name):
                ref = whole.get(name, rec["token"])
                if name == "map":
                    assert rec["mask"].img_file == ref["mask"].img_file
                    assert rec["mask"].resolution == ref["mask"].resolution
                    rec, ref = ({k: v for k, v in r.items() if k != "mask"} for r in (rec, ref))
                assert rec == ref, (scene["name"], name, rec["token"])
            assert rows[name] == {t: whole.getind(name, t) for t in rows[name]}, (scene["name"], name)
        for name, expected in _expected_tokens(whole, scene).items():
            assert {r["token"] for r in getattr(part, name)} == expected, (scene["name"], name)
        for ann in part.sample_annotation:
            assert np.array_equal(part.box_velocity(ann["token"]), whole.box_velocity(ann["token"]), equal_nan=True)
        assert len(part.sample_annotation) == index.scenes.column("annotations")[i].as_py()


@pytest.mark.parametrize("logs", ["synth_root", "dense_tables"])
def test_scenes_load_as_from_the_devkit_over_the_whole_set(logs, request, limits):
    """Each scene loaded through the index equals the scene loaded from the devkit over every table: frames,
    poses, cameras, labels (track ids: instance positions in the whole table), sweeps and anchors."""
    root, version = _logs(request, logs)
    whole = _whole(root, version)
    src = NuScenesSource(root, version, check_files=False, limits=limits)
    ref = NuScenesSource(root, version, check_files=False, limits=limits)
    ref._scene_tables = lambda name: (whole, whole._token2ind["instance"])
    assert src.scene_ids() == [s["name"] for s in whole.scene]
    for sid in src.scene_ids():
        a, b = src.load_scene(sid), ref.load_scene(sid)
        assert frames_table(a).equals(frames_table(b)) and a.anchor_indices == b.anchor_indices
        for fa, fb in zip(a.frames, b.frames):
            for f in ("center_m", "size_lwh_m", "yaw_rad", "velocity_mps", "track_id", "num_lidar_pts"):
                assert np.array_equal(getattr(fa.labels, f), getattr(fb.labels, f), equal_nan=True), (sid, f)
            assert list(fa.labels.instance_token) == list(fb.labels.instance_token)
            assert [(w.lidar_path, w.timestamp_us) for w in fa.lidar_sweeps] == \
                [(w.lidar_path, w.timestamp_us) for w in fb.lidar_sweeps]
        assert any(len(f.labels) for f in a.frames)


class _Counting:
    """A binary file that records the byte ranges read from it."""

    def __init__(self, path, ranges: list):
        self.fh, self.ranges = open(path, "rb"), ranges

    def read(self, n=-1):
        at = self.fh.tell()
        data = self.fh.read(n)
        self.ranges.append((at, at + len(data)))
        return data

    def __getattr__(self, name):
        return getattr(self.fh, name)


def test_a_scene_load_reads_that_scene_only(dense_tables, limits, monkeypatch):
    """Opening reads the scene list (and the rows file's footer), not a scene's rows; loading a scene reads
    about its share of the rows file, and no byte of another scene's."""
    ranges: list = []
    monkeypatch.setattr(nxi, "_open_rows", lambda path: pa.PythonFile(_Counting(path, ranges), mode="r"))
    src = NuScenesSource(dense_tables, TABLES_VERSION, check_files=False, limits=limits)
    size = (src.index.path / nxi.ROWS_FILE).stat().st_size
    n = len(src.scene_ids())
    src.work_estimates()
    [src.drivable_map(s) for s in src.scene_ids()]
    opened = sum(b - a for a, b in ranges)
    assert opened < size / (4 * n), (opened, size)
    per_scene = []
    for sid in src.scene_ids():
        ranges.clear()
        src.load_scene(sid)
        per_scene.append(list(ranges))
        assert sum(b - a for a, b in ranges) < 1.3 * size / n, (sid, ranges, size)
    spans = [(min(a for a, _ in r), max(b for _, b in r)) for r in per_scene]
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:])), spans  # each scene its own bytes


def test_the_index_is_made_once_per_table_content(synth_root, tmp_path, limits, monkeypatch):
    """A second open, and an open of a copy of the tables, reuse the index; an edited table makes a new one."""
    made = []
    convert = nxi.convert
    monkeypatch.setattr(nxi, "convert", lambda src, dest: made.append(src) or convert(src, dest))
    first = nxi.SceneIndex.open(synth_root / SYNTH_VERSION, limits).path
    assert nxi.SceneIndex.open(synth_root / SYNTH_VERSION, limits).path == first and len(made) == 1
    copy = tmp_path / "copy"
    shutil.copytree(synth_root / SYNTH_VERSION, copy)
    assert nxi.SceneIndex.open(copy, limits).path == first and len(made) == 1  # the same content: hashed, found
    scenes = json.loads((copy / "scene.json").read_text())
    scenes[0]["description"] = "edited"
    (copy / "scene.json").write_text(json.dumps(scenes))
    edited = nxi.SceneIndex.open(copy, limits)
    assert edited.path != first and len(made) == 2
    assert json.loads(edited.scenes.column("record")[0].as_py())["description"] == "edited"
    root = nxi.index_root(limits)
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(("keys", "locks"))) == \
        sorted([first.name, edited.path.name])  # no temporary folder left
    (first / nxi.META_FILE).unlink()  # a partial copy of the cache: the folder without its meta.json
    assert nxi.SceneIndex.open(synth_root / SYNTH_VERSION, limits).path == first and len(made) == 3
    assert (first / nxi.META_FILE).is_file()


def test_converters_that_start_together_make_one_index(synth_root, limits, monkeypatch):
    made, errors, paths = [], [], []
    convert = nxi.convert
    monkeypatch.setattr(nxi, "convert", lambda src, dest: made.append(src) or convert(src, dest))
    start = threading.Barrier(4)

    def opener():
        try:
            start.wait()
            paths.append(nxi.SceneIndex.open(synth_root / SYNTH_VERSION, limits).path)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(made) == 1 and len(set(paths)) == 1 and len(paths) == 4
    assert not [p for p in nxi.index_root(limits).iterdir() if p.name.endswith(".tmp")]


def _copy_tables(src, dst):
    shutil.copytree(src / SYNTH_VERSION, dst / SYNTH_VERSION)
    (dst / "maps").symlink_to(src / "maps")
    return dst


def test_bad_tables_are_named(synth_root, tmp_path, limits):
    """A duplicated token is refused at open naming the file, the token and both rows; an annotation whose
    instance is missing fails its own scene only, naming the field."""
    root = _copy_tables(synth_root, tmp_path / "dup")
    rows = json.loads((root / SYNTH_VERSION / "ego_pose.json").read_text())
    (root / SYNTH_VERSION / "ego_pose.json").write_text(json.dumps(rows + [rows[3]]))
    with pytest.raises(SourceError, match=rf"token '{rows[3]['token']}' is in rows 3 and {len(rows)} of ego_pose"):
        NuScenesSource(root, SYNTH_VERSION, check_files=False, limits=limits)
    root = _copy_tables(synth_root, tmp_path / "dangling")
    scenes = json.loads((root / SYNTH_VERSION / "scene.json").read_text())
    first = {s["token"] for s in json.loads((root / SYNTH_VERSION / "sample.json").read_text())
             if s["scene_token"] == scenes[0]["token"]}
    anns = json.loads((root / SYNTH_VERSION / "sample_annotation.json").read_text())
    next(a for a in anns if a["sample_token"] in first)["instance_token"] = "nowhere"
    (root / SYNTH_VERSION / "sample_annotation.json").write_text(json.dumps(anns))
    src = NuScenesSource(root, SYNTH_VERSION, check_files=False, limits=limits)
    with pytest.raises(SourceError, match="missing token or lacks field 'nowhere'") as e:
        src.load_scene(scenes[0]["name"])
    assert e.value.scene == scenes[0]["name"]
    assert len(src.load_scene(scenes[1]["name"]).frames) == 40


def test_the_ego_body_is_the_vehicle_of_the_scenes_logs(synth_root, tmp_path, limits):
    """Generated logs name drivegen's own ego; where one of the run's scenes' logs names another vehicle, the
    source's body is nuScenes' car (the scene list holds each scene's log's vehicle: the driver reads no rows)."""
    from generator.sources.vehicles import GENERATED_EGO_VEHICLE, ego_body

    assert NuScenesSource(synth_root, SYNTH_VERSION, check_files=False, limits=limits).ego_body() == \
        ego_body("generated")
    root = _copy_tables(synth_root, tmp_path / "zoe")
    logs = json.loads((root / SYNTH_VERSION / "log.json").read_text())
    assert {rec["vehicle"] for rec in logs} == {GENERATED_EGO_VEHICLE}
    scenes = json.loads((root / SYNTH_VERSION / "scene.json").read_text())
    edited = next(rec for rec in logs if rec["token"] == scenes[-1]["log_token"])
    edited["vehicle"] = "n015"
    (root / SYNTH_VERSION / "log.json").write_text(json.dumps(logs))
    others = [s["name"] for s in scenes if s["log_token"] != edited["token"]]
    assert others  # the generated set has scenes of other logs
    assert NuScenesSource(root, SYNTH_VERSION, check_files=False, limits=limits).ego_body() == ego_body("nuscenes")
    assert NuScenesSource(root, SYNTH_VERSION, scenes=others, check_files=False, limits=limits).ego_body() == \
        ego_body("generated")


def test_a_large_table_set_is_converted_in_a_child_process(synth_root, tmp_path, limits, monkeypatch, caplog):
    """Above ``CHILD_BYTES`` of JSON the index is made by a child process: the same bytes as in this one, its
    progress logged here (records of the child's pid), a bad table's SourceError raised here with its fields."""
    here = nxi.convert(synth_root / SYNTH_VERSION, tmp_path / "here")
    monkeypatch.setattr(nxi, "CHILD_BYTES", 0)
    with caplog.at_level(logging.INFO, logger="drivegen"):
        path = nxi.SceneIndex.open(synth_root / SYNTH_VERSION, limits).path
    for name in (nxi.ROWS_FILE, nxi.SCENES_FILE):
        assert (path / name).read_bytes() == (tmp_path / "here" / name).read_bytes()
    written = [r for r in caplog.records if r.getMessage().startswith("scene index:") and "written" in r.getMessage()]
    assert written and all(r.process != os.getpid() for r in written)
    assert json.loads((path / nxi.META_FILE).read_text())["rows"] == here["rows"]
    root = _copy_tables(synth_root, tmp_path / "bad")
    (root / SYNTH_VERSION / "sample.json").write_text('{"not": "an array"}')
    with pytest.raises(SourceError, match="sample.json is not a JSON array") as e:
        nxi.SceneIndex.open(root / SYNTH_VERSION, limits)
    assert e.value.file == str(root / SYNTH_VERSION / "sample.json") and e.value.stage == "open"
