"""``drivegen view``: a scene as a Rerun recording, opened back with rerun's own reader."""
from __future__ import annotations

import os

import numpy as np
import pyarrow.compute as pc
import pytest

from generator.cli import main as cli
from generator.runfolder import RunReader

rr = pytest.importorskip("rerun", reason="rerun-sdk is the optional extra 'view' (pip install -e '.[view]'); "
                                         "drivegen view needs it")
SCENE = "scene-0000"
N = 4


def _column(rec, entity: str, component: str) -> list:
    t = rec.view(index="frame", contents=entity).select().read_all()
    return t.column("frame").to_pylist(), t.column(f"{entity}:{component}").to_pylist()


def test_view_writes_a_recording_rerun_reads_back(labelled_run, tmp_path, capsys):
    import rerun.dataframe as rrd

    out = tmp_path / "scene.rrd"
    assert cli(["view", str(labelled_run), "--scene", SCENE, "--out", str(out), "--max-frames", str(N)]) == 0
    assert f"wrote {out}: scene {SCENE}, {N} frames" in capsys.readouterr().out
    rec = rrd.load_recording(str(out))
    reader = RunReader(labelled_run)
    frames = reader.read_scene("frames", SCENE).sort_by("frame_index").slice(0, N).to_pylist()
    objects = reader.read_scene("objects", SCENE)
    proj = reader.read_scene("projections", SCENE)
    cams = [c["name"] for c in frames[0]["cameras"]]
    entities = {c.entity_path for c in rec.schema().component_columns()}
    want = {"/world/ego_path", "/world/ego", "/world/ego/lidar", "/world/boxes"}
    want |= {f"/world/ego/{c}{s}" for c in cams for s in ("", "/image", "/masks", "/boxes")}
    assert want <= entities, sorted(want - entities)

    # tracked boxes: per frame, the objects table's boxes with their track ids
    idx, sizes = _column(rec, "/world/boxes", "HalfSize3D")
    _, labels = _column(rec, "/world/boxes", "Text")
    assert idx == [f["frame_index"] for f in frames]
    for fi, sz, lab in zip(idx, sizes, labels):
        o = objects.filter(pc.equal(objects.column("frame_index"), fi))
        assert len(sz) == o.num_rows > 0
        assert sorted(lab) == sorted(f"{c} #{t}" for c, t in zip(o.column("class_name").to_pylist(),
                                                                 o.column("track_id").to_pylist()))
        np.testing.assert_allclose(np.asarray(sz) * 2, np.array(o.column("size_lwh_m").to_pylist()), rtol=1e-6)
    # LiDAR: every point of each frame's sweep (nuScenes .bin: 5 float32 per point)
    _, pts = _column(rec, "/world/ego/lidar", "Position3D")
    assert [len(p) for p in pts] == [os.path.getsize(f["lidar_path"]) // 20 for f in frames]
    # ego path: one vertex per frame of the scene, at the ego poses
    strip = rec.view(index="frame", contents="/world/ego_path").select_static().read_all().column(
        "/world/ego_path:LineStrip3D").to_pylist()
    assert len(strip[0][0]) == reader.read_scene("frames", SCENE).num_rows
    # masks: the segmentation image of the front camera holds one class id (track + 1) per visible masked object
    cam = "CAM_FRONT"
    _, bufs = _column(rec, f"/world/ego/{cam}/masks", "ImageBuffer")
    h, w = frames[0]["cameras"][cams.index(cam)]["height_px"], frames[0]["cameras"][cams.index(cam)]["width_px"]
    total = 0
    for f, buf in zip(frames, bufs):
        seg = np.frombuffer(np.asarray(buf[0], dtype=np.uint8).tobytes(), dtype=np.uint16).reshape(h, w)
        p = proj.filter(pc.and_(pc.and_(pc.equal(proj.column("frame_index"), f["frame_index"]),
                                        pc.equal(proj.column("camera"), cam)), proj.column("visible")))
        masked = {t + 1 for t, m in zip(p.column("track_id").to_pylist(), p.column("mask_rle").to_pylist()) if m}
        assert set(np.unique(seg)) - {0} <= masked  # an occluded mask may be painted over by a nearer one
        total += len(masked)
    assert total > 0


def test_view_refuses_an_unknown_scene(labelled_run, tmp_path, capsys):
    assert cli(["view", str(labelled_run), "--scene", "nope", "--out", str(tmp_path / "x.rrd")]) == 2
    assert "no finished scene 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "x.rrd").exists()
