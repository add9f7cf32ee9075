"""WebDataset shards: one sample per keyframe with every grounded image; readable by webdataset and Ray."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from support.writers import make_qa_rows, make_qa_table, rle_of_box, write_images_for
from generator.writers.wds import WriterError, image_member, sample_key, scene_wds_shards, write_wds_shards
from schemas.config import WriterConfig
from schemas.tables import QA


def _expected(table: pa.Table):
    """keyframe -> (qa ids, {(frame, camera)}) straight from the rows."""
    exp: dict[int, tuple[set, set]] = {}
    for r in table.to_pylist():
        ids, imgs = exp.setdefault(r["keyframe_index"], (set(), set()))
        ids.add(r["qa_id"])
        imgs.update((g["frame_index"], g["camera"]) for g in r["grounding"])
    return exp


@pytest.fixture
def scene(tmp_path):
    t = make_qa_table("scene.v1/a", n=40, seed=7, num_keyframes=5)
    imgs = write_images_for(t, tmp_path / "logs")
    return t, imgs, tmp_path / "logs", tmp_path / "run"


def test_webdataset_reader_gets_every_keyframe_and_image(scene):
    import webdataset as wds
    t, imgs, root, out = scene
    paths = write_wds_shards(t, out, "scene.v1/a", WriterConfig(wds_max_samples=2), image_root=root)
    exp = _expected(t)
    assert len(paths) == -(-len(exp) // 2)
    assert [p.name for p in paths] == [f"scene.v1_a-{k:05d}.tar" for k in range(len(paths))]
    seen = {}
    for s in wds.WebDataset([str(p) for p in paths], shardshuffle=False).decode("rgb8"):
        meta = s["json"]
        kf = meta["keyframe_index"]
        assert s["__key__"] == sample_key("scene.v1/a", kf) and "." not in s["__key__"]
        ids, want_imgs = exp[kf]
        assert {q["qa_id"] for q in meta["qas"]} == ids
        assert {(i["frame_index"], i["camera"]) for i in meta["images"]} == want_imgs
        for i in meta["images"]:
            arr = s[i["member"]]
            assert arr.shape == (90, 160, 3) and arr.dtype == np.uint8
        seen[kf] = meta
    assert set(seen) == set(exp)
    # raw bytes: JPEG sources are stored verbatim
    raw = next(iter(wds.WebDataset(str(paths[0]), shardshuffle=False)))
    meta = json.loads(raw["json"])
    i0 = meta["images"][0]
    assert raw[i0["member"]] == imgs[i0["source_path"]]
    # groundings survive exactly (masks decode with pycocotools to the same area)
    from pycocotools import mask as mu
    by_id = {r["qa_id"]: r for r in t.to_pylist()}
    q = meta["qas"][0]
    g_out, g_in = q["grounding"][0], by_id[q["qa_id"]]["grounding"][0]
    assert g_out["box_xyxy"] == g_in["box_xyxy"]
    assert mu.area(g_out["mask_rle"]) == mu.area(g_in["mask_rle"]) > 0


def test_deterministic_and_rewrite_removes_stale(scene):
    t, _, root, out = scene
    a = [p.read_bytes() for p in write_wds_shards(t, out, "scene.v1/a", WriterConfig(wds_max_samples=1),
                                                  image_root=root)]
    b = write_wds_shards(t, out, "scene.v1/a", WriterConfig(wds_max_samples=1), image_root=root)
    assert [p.read_bytes() for p in b] == a
    small = t.filter(pa.compute.equal(t["keyframe_index"], t["keyframe_index"][0]))
    c = write_wds_shards(small, out, "scene.v1/a", WriterConfig(wds_max_samples=1), image_root=root)
    assert scene_wds_shards(out, "scene.v1/a") == c and len(c) == 1
    assert not list((out / "wds").glob(".*"))


def test_shards_are_the_bytes_webdatasets_own_writer_gives(scene, tmp_path):
    """drivegen writes the members with ``tarfile`` as ``webdataset.TarWriter(mtime=0.0, encoder=False)`` does:
    the same samples through the library's writer give the same file, and another owner would not."""
    import tarfile

    import webdataset as wds

    from generator.writers.wds import build_samples

    t, _, root, out = scene
    ours = write_wds_shards(t, out, "scene.v1/a", WriterConfig(wds_max_samples=100), image_root=root)
    assert len(ours) == 1
    samples = list(build_samples(t, "scene.v1/a", root))
    theirs = tmp_path / "theirs.tar"
    w = wds.TarWriter(str(theirs), mtime=0.0, encoder=False)
    for sample in samples:
        w.write(sample)
    w.close()
    assert ours[0].read_bytes() == theirs.read_bytes()
    with tarfile.open(ours[0]) as tar:  # the check can fail: the members' owner is part of the bytes
        assert {m.uname for m in tar.getmembers()} == {"bigdata"}
    other = tmp_path / "other.tar"
    w = wds.TarWriter(str(other), mtime=0.0, encoder=False, user="someone")
    for sample in samples:
        w.write(sample)
    w.close()
    assert other.read_bytes() != theirs.read_bytes()


def test_writing_shards_does_not_import_torch():
    """The default CPU pipeline's writers leave torch unloaded (the ``webdataset`` package imports it)."""
    import subprocess
    import sys

    from support.pipeline import REPO

    code = "import sys, generator.writers.wds, generator.pipeline.stages; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr[-2000:]


def test_byte_bound_rolls_over(scene):
    t, imgs, root, out = scene
    per_image = np.mean([len(v) for v in imgs.values()])
    limit = int(per_image * 8)
    paths = write_wds_shards(t, out, "scene.v1/a", WriterConfig(wds_max_bytes=limit), image_root=root)
    assert len(paths) > 1
    for p in paths[:-1]:
        assert p.stat().st_size <= limit + 10 * 1024  # tar end-of-archive padding


def test_missing_image_names_scene_and_file(scene):
    t, imgs, root, out = scene
    victim = sorted(imgs)[0]
    (root / victim).unlink()
    with pytest.raises(WriterError, match=r"missing.*scene=scene.v1/a.*file=.*" + victim.split("/")[-1]):
        write_wds_shards(t, out, "scene.v1/a", image_root=root)
    assert not list((out / "wds").glob("*"))


def test_image_member_names():
    assert image_member(12, "CAM_FRONT") == "f000012.cam_front.jpeg"
    assert image_member(3, "ring.front Center") == "f000003.ring_front_center.jpeg"


@pytest.mark.ray
def test_ray_read_webdataset(scene):
    import ray
    t, _, root, out = scene
    paths = write_wds_shards(t, out, "scene.v1/a", WriterConfig(wds_max_samples=2), image_root=root)
    exp = _expected(t)
    # address="local": our own instance even while another process on this machine runs a Ray cluster
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        rows = ray.data.read_webdataset([str(p) for p in paths]).take_all()
    finally:
        ray.shutdown()
    import cv2

    assert len(rows) == len(exp)
    image_cols = {k for r in rows for k in r if k.endswith(".jpeg")}
    for r in rows:
        meta = r["json"]
        kf = meta["keyframe_index"]
        assert {q["qa_id"] for q in meta["qas"]} == exp[kf][0]
        members = {i["member"] for i in meta["images"]}
        assert {k for k in image_cols if r.get(k) is not None} == members
        for m in members:
            img = cv2.imdecode(np.frombuffer(r[m], np.uint8), cv2.IMREAD_COLOR)
            assert img.shape == (90, 160, 3)


def test_generated_qa_round_trip(tmp_path):
    """WebDataset shards of the project's QA generator output carry every keyframe's QAs and images."""
    import webdataset as wds
    from support.bench import SCENE, make_bench_run
    from generator.writers.parquet import read_qa

    br = make_bench_run(tmp_path, with_qa="generated")
    qa = read_qa(br.run / "qa")
    paths = write_wds_shards(qa, br.run, SCENE, WriterConfig(wds_max_samples=5))
    exp = _expected(qa)
    got = {}
    for s in wds.WebDataset([str(p) for p in paths], shardshuffle=False).decode("rgb8"):
        meta = s["json"]
        got[meta["keyframe_index"]] = ({q["qa_id"] for q in meta["qas"]},
                                       {(i["frame_index"], i["camera"]) for i in meta["images"]})
        assert all(s[i["member"]].shape == (180, 320, 3) for i in meta["images"])
    assert got == exp


@pytest.mark.parametrize("marked", [False, True])
def test_marked_images_only_when_configured(scene, marked):
    """``writers.wds.marked_images``: each raw frame gets a Set-of-Mark copy beside it, and only then; the
    copy differs from the raw frame exactly inside the grounded boxes' neighbourhood (marks drawn there)."""
    import cv2
    import webdataset as wds

    from generator.writers.marks import MASK_ALPHA, region_colour
    from generator.writers.wds import marked_member
    from schemas.config import WdsConfig

    _, _, root, out = scene
    rows = make_qa_rows("scene.v1/a", 40, seed=7, num_keyframes=5)
    for r in rows:  # region r sits at its own place on every image (as in a run: a region is one object)
        for g in r["grounding"]:
            g["box_xyxy"] = [8.0 + 78 * g["region_id"], 30.0, 70.0 + 78 * g["region_id"], 85.0]
            g["mask_rle"] = rle_of_box(g["box_xyxy"])
    t = pa.Table.from_pylist(rows, schema=QA)
    write_images_for(t, root)
    cfg = WriterConfig(wds_max_samples=100, wds=WdsConfig(marked_images=marked))
    paths = write_wds_shards(t, out, "scene.v1/a", cfg, image_root=root)
    samples = list(wds.WebDataset([str(p) for p in paths], shardshuffle=False))
    assert samples
    n_marked = n_regions = 0
    for s in samples:
        meta = json.loads(s["json"])
        members = {k for k in s if k.endswith(".jpeg")}
        raw = {i["member"] for i in meta["images"]}
        if not marked:
            assert members == raw and not any("marked" in m for m in members)
            assert all("marked_member" not in i for i in meta["images"])
            continue
        assert members == raw | {marked_member(i["frame_index"], i["camera"]) for i in meta["images"]}
        for i in meta["images"]:
            assert i["marked_member"] == marked_member(i["frame_index"], i["camera"])
            a = cv2.imdecode(np.frombuffer(s[i["member"]], np.uint8), cv2.IMREAD_COLOR).astype(int)
            b = cv2.imdecode(np.frombuffer(s[i["marked_member"]], np.uint8), cv2.IMREAD_COLOR).astype(int)
            assert a.shape == b.shape
            gs = {}  # region -> its first grounding on this image: the one drawn (a region is one object)
            for g in (g for q in meta["qas"] for g in q["grounding"]):
                if g["frame_index"] == i["frame_index"] and g["camera"] == i["camera"]:
                    gs.setdefault(g["region_id"], g)
            gs = list(gs.values())
            cover = np.zeros(a.shape[:2], int)
            for g in gs:
                x1, y1, x2, y2 = (int(round(v)) for v in g["box_xyxy"])
                cover[y1:y2, x1:x2] += 1
            for g in gs:  # inside a mask only one region covers (and off its outline): the region's tint
                x1, y1, x2, y2 = (int(round(v)) for v in g["box_xyxy"])
                sel = np.zeros(a.shape[:2], bool)
                sel[y1 + 18:y2 - 3, x1 + 3:x2 - 3] = True  # below a label drawn inside the box
                sel &= cover == 1
                if sel.sum() < 20:
                    continue
                tint = a[sel] * (1 - MASK_ALPHA) + np.array(region_colour(g["region_id"])[::-1]) * MASK_ALPHA
                # mean colours survive JPEG's re-encoding of the noise frames (pixels do not)
                np.testing.assert_allclose(b[sel].mean(0), tint.mean(0), atol=12)
                n_regions += 1
                assert np.abs(b[sel].mean(0) - a[sel].mean(0)).max() > 15 or np.abs(tint - a[sel]).max() < 15
            far = np.ones(a.shape[:2], bool)  # away from every box and the label beside it
            for g in gs:
                x1, y1, x2, y2 = (int(round(v)) for v in g["box_xyxy"])
                far[max(0, y1 - 18):y2 + 18, max(0, x1 - 70):x2 + 4] = False
            np.testing.assert_allclose(b[far].mean(0), a[far].mean(0), atol=10, err_msg="marks away from every box")
            n_marked += 1
    assert n_marked == 0 if not marked else n_marked > 0 and n_regions > n_marked


def _reference_rows(rows, drop):
    """The rows as the JSON member must hold them, value by value: NaN/inf -> None, keys in ``drop`` gone."""
    def walk(x):
        if isinstance(x, float):
            return x if np.isfinite(x) else None
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items() if k not in drop}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x
    return walk(rows)


@pytest.mark.parametrize("drop", [(), ("timestamp_us", "image_path", "source_path")])
def test_json_ready_matches_a_value_by_value_walk(drop):
    """json_ready cleans in Arrow what a recursive walk cleans in Python: non-finite floats at every depth (a
    column, a box in a grounding, a list of lists), nulls kept, dropped keys gone from columns and structs,
    sliced and multi-chunk input included."""
    from generator.writers.wds import json_ready

    t = make_qa_table("scene-a", n=30, seed=3, num_keyframes=4)
    v = t.column("value").to_numpy(zero_copy_only=False).copy()
    v[::4], v[1::5], v[2::9] = np.nan, np.inf, -np.inf
    t = t.set_column(t.schema.get_field_index("value"), "value", pa.array(v))
    rows = t.to_pylist()
    for r in rows[::3]:  # a non-finite corner inside a grounding box
        for g in r["grounding"] or []:
            g["box_xyxy"] = [float("nan"), 1.0, float("inf"), 2.0]
    rows[5]["grounding"] = None
    t = pa.Table.from_pylist(rows, schema=t.schema)
    t = pa.concat_tables([t.slice(0, 11), t.slice(11)]).slice(2, 25)  # two chunks, both sliced
    t = t.append_column("tracks_xy", pa.array([[[1.0, np.nan], None, []] if i % 2 else None for i in range(25)],
                                              pa.list_(pa.list_(pa.float64()))))
    ready = json_ready(t, drop)
    got = ready.to_pylist()
    assert got == _reference_rows(t.to_pylist(), drop)
    assert "dictionary" not in str(ready.schema)  # decoded once in Arrow: to_pylist is several times faster
    assert any(r["value"] is None for r in got) and any(r["value"] is not None for r in got)
    assert ("timestamp_us" in got[0]) == (not drop)
    json.dumps(got, allow_nan=False)  # strict JSON


def test_an_image_shared_by_samples_is_published_once(scene):
    """Neighbouring keyframes reference the same context frames: each image is read and published (anonymised)
    once per scene, and every sample that references it carries the published bytes."""
    import webdataset as wds

    t, imgs, root, out = scene
    refs = [(kf, g["frame_index"], g["camera"]) for kf, gs in zip(t.column("keyframe_index").to_pylist(),
                                                                  t.column("grounding").to_pylist()) for g in gs]
    per_sample = {(kf, fi, cam) for kf, fi, cam in refs}
    unique = {(fi, cam) for _, fi, cam in per_sample}
    assert len(unique) < len(per_sample), "the fixture must share images between keyframes"

    class Publisher:
        dropped_keys = ()

        def __init__(self):
            self.calls = []

        def __call__(self, data, fi, cam):
            self.calls.append((fi, cam))
            return data + f"published {fi} {cam}".encode()

        def metadata(self, meta):
            return meta

    pub = Publisher()
    write_wds_shards(t, out, "scene.v1/a", WriterConfig(), image_root=root, publish=pub)
    assert sorted(pub.calls) == sorted(unique)
    members = 0
    for p in scene_wds_shards(out, "scene.v1/a"):
        for s in wds.WebDataset(str(p), shardshuffle=False):
            for img in json.loads(s["json"])["images"]:
                data = s[img["member"]]
                assert data.endswith(f"published {img['frame_index']} {img['camera']}".encode())
                members += 1
    assert members == len(per_sample)


def test_sample_images_are_the_groundings_of_each_keyframe():
    """A sample's images, built in arrays from every grounding, equal a loop over the rows: per keyframe each
    (frame, camera) once, with the set of its roles and the first grounding's image path; the table in two
    chunks, keyframes out of order."""
    from generator.writers.wds import _sample_images

    t = make_qa_table("scene.v1/a", n=60, seed=3, num_keyframes=6)
    t = pa.concat_tables([t.slice(30), t.slice(0, 30)])  # two chunks, keyframes not sorted
    kf = t.column("keyframe_index").to_numpy()
    order = np.argsort(kf, kind="stable")
    cuts = np.flatnonzero(np.diff(kf[order])) + 1
    want: dict[int, dict] = {}
    for r in t.to_pylist():
        images = want.setdefault(r["keyframe_index"], {})
        for g in r["grounding"]:
            e = images.setdefault((g["frame_index"], g["camera"]), {"frame_index": g["frame_index"],
                                                                     "camera": g["camera"], "roles": set(),
                                                                     "source_path": g["image_path"] or ""})
            e["roles"].add(g["role"])
    got = _sample_images(t, order, cuts)
    assert got == [want[k] for k in sorted(want)]
    groundings = sum(len(r["grounding"]) for r in t.to_pylist())
    assert 0 < sum(len(images) for images in got) < groundings  # rows share images: each is listed once
