"""Bounds on what a log source reads, damaged sensor files and the synth command's arguments (the source-level
half of docs/operations/guarantees.md).

Each test reproduces one reported input on the generated logs (a writable copy, ``test_bad_input_sources.Copy``),
the real AV2 log or the real nuScenes sweep, and checks the named error (scene, file, field, value) or the
corrected output. Each also checks that the intact input still passes, so a check that refuses everything
fails here too.
"""
from __future__ import annotations

import math
import os
import shutil
from decimal import ROUND_HALF_EVEN, Decimal, localcontext

import cv2
import numpy as np
import pyarrow.feather as feather
import pytest

from generator.sources.av2 import AV2Source
from generator.sources.io import load_image, load_lidar_ego
from generator.sources.nuscenes import NuScenesSource
from generator.types import SourceError
from schemas.errors import InputError
from test_bad_input_sources import AV2_LOG, Copy, expect_a_fails_b_loads, expect_a_frame_issue_b_clean, set_column
from test_sources_io import make_frame


@pytest.fixture()
def ns(synth_root, tmp_path):
    return Copy(synth_root, tmp_path / "nusc")


@pytest.fixture()
def av2_copy(av2_log, tmp_path):
    """A copy of the real AV2 log's small feather files; ``sensors`` (LiDAR sweeps) linked, not copied."""
    def make(name, sensors=False):
        d = tmp_path / name / AV2_LOG
        d.mkdir(parents=True)
        for f in ("annotations.feather", "city_SE3_egovehicle.feather"):
            shutil.copy(av2_log / f, d / f)
        shutil.copytree(av2_log / "calibration", d / "calibration")
        if sensors:
            os.symlink(av2_log / "sensors", d / "sensors")
        return d
    return make


def lidar_of_scene_a(copy: Copy, k: int):
    return copy.sample_data_of(copy.scene_a(), "LIDAR_TOP")[k]["filename"]


def assert_names(err: SourceError, *parts: str):
    text = str(err)
    missing = [p for p in parts if p not in text]
    assert not missing, f"{missing} not in: {text}"


# ================================================================================================ item 7
def _exact(x: float, decimals: int) -> str:
    """The double ``x`` rounded half-to-even at ``decimals`` digits by decimal arithmetic; no "-0"."""
    with localcontext() as ctx:
        ctx.prec = 400  # every double has at most 309 integer digits
        text = f"{Decimal(x).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_EVEN):.{decimals}f}"
    return text.lstrip("-") if Decimal(text) == 0 else text


def test_format_fixed_is_right_for_every_finite_double():
    """Item 7: "Numbers above ~9.2e16 render as garbage ("-92233720368547759.92 m/s"; double minus on
    large negatives): an integer overflow in the renderer." Every finite float64 prints as its value,
    one minus sign at most, never "-0.00"."""
    from generator.qa.render import format_fixed

    big = [9.2e16, 9.3e16, -9.3e16, 2.0 ** 63 / 100, -(2.0 ** 63) / 100, 1e104, -6e296,
           np.finfo(np.float64).max, -np.finfo(np.float64).max, 1.2345e18, -4.5e17, 2.0 ** 53 / 100 + 2]
    small = [0.0, -0.0, -0.004, 1.25, -1.5, 123.456, -7.8125, 5e-324, -5e-324]  # no decimal ties near float error
    v = np.array(big + small + [np.nan, np.inf, -np.inf])
    for decimals in (0, 1, 2, 6):
        out = format_fixed(v, decimals, " m/s").to_pylist()
        for x, s in zip(v, out):
            if not math.isfinite(x):
                assert s is None
                continue
            assert s.endswith(" m/s") and s[:-4] == _exact(float(x), decimals), (x, decimals, s)
    # the whole range of magnitudes mixed in one column (vectorised rows and exact rows side by side)
    rng = np.random.default_rng(0)
    mags = 10.0 ** rng.uniform(-4, 308, 4000) * rng.choice([-1.0, 1.0], 4000)
    for x, s in zip(mags, format_fixed(mags, 2).to_pylist()):
        printed = Decimal(s)
        assert s.startswith("-") == (x < 0 and printed != 0) and "--" not in s, (x, s)
        # within half a unit of the last digit of the value, up to float error
        tolerance = Decimal("0.005") + abs(Decimal(float(x))) * Decimal(2.0 ** -52)
        assert abs(printed - Decimal(float(x))) <= tolerance, (x, s)


def _set(rows, value):
    """A ``set_column`` edit: rows ``rows`` of a column set to ``value`` (a number or a function of them)."""
    def edit(x):
        x = x.astype(np.float64)
        x[rows] = value(x[rows]) if callable(value) else value
        return x
    return edit


def av2_refuses(d, file: str, column: str, edit, *words: str) -> None:
    """Edit ``column`` of the log copy's ``file``: loading the log raises SourceError naming it, the file and
    ``words``."""
    set_column(d / file, column, edit)
    with pytest.raises(SourceError) as e:
        AV2Source(d).load_scene(AV2_LOG)
    assert e.value.scene == AV2_LOG and e.value.file.endswith(file)
    assert_names(e.value, *words)


def test_av2_object_at_1e104_m_is_refused(av2_copy):
    """Item 7: "Physically impossible values (an object at 1e104 m ...) must be rejected at the source with a
    named error" (AV2 ``annotations.feather``)."""
    av2_refuses(av2_copy("far"), "annotations.feather", "tx_m", _set(7, 1e104),
                "centre", "1e+104", "max_box_distance_m")


def test_av2_huge_box_is_refused(av2_copy):
    """Item 7: sanity bounds on source geometry: a box 1e5 m long is refused naming the field."""
    av2_refuses(av2_copy("long"), "annotations.feather", "length_m", _set(3, 1e5),
                "length_m", "100000", "max_box_size_m")


def test_av2_car_at_impossible_speed_is_refused(av2_copy):
    """Item 7: "... a car at 6e296 m/s must be rejected at the source". One annotation of a car jumps
    300 m (still inside the distance bound): its track's speed is impossible."""
    d = av2_copy("fast")
    t = feather.read_table(d / "annotations.feather")
    car = t["category"].to_numpy(zero_copy_only=False) == "REGULAR_VEHICLE"
    row = int(np.flatnonzero(car)[np.argmin(np.abs(t["tx_m"].to_numpy()[car]))])  # the nearest car annotation
    av2_refuses(d, "annotations.feather", "tx_m", _set(row, lambda x: x + 300.0),
                "speed", "max_object_speed_mps", "m/s")


def test_av2_ego_pose_far_away_or_too_fast_is_refused(av2_copy):
    """Item 7: bounds on the ego poses where they enter (``city_SE3_egovehicle.feather``): a pose at 1e104 m,
    and a pose that jumps 300 m between two frames."""
    av2_refuses(av2_copy("pose-far"), "city_SE3_egovehicle.feather", "ty_m", _set(100, 1e104),
                "ego position", "1e+104", "max_ego_position_m")
    d = av2_copy("pose-jump")
    n = feather.read_table(d / "city_SE3_egovehicle.feather").num_rows
    av2_refuses(d, "city_SE3_egovehicle.feather", "tx_m", _set(slice(n // 2, None), lambda x: x + 300.0),
                "ego speed", "max_ego_speed_mps")


def test_nuscenes_annotation_and_pose_bounds(ns):
    """Item 7 on the generated logs (nuScenes tables): an annotation at 1e104 m, a box 1e5 m wide, a camera's
    ego pose at 1e104 m and an ego pose that jumps 200 m between two keyframes are refused naming scene, table
    file, row, field and value."""
    samples = {s["token"] for s in ns.samples_of(ns.scene_a())}
    original = ns.table("sample_annotation")
    token = next(r["token"] for r in original if r["sample_token"] in samples)
    for field, value, what, shown, bound in (
            ("translation", [1e104, 0.0, 0.0], "centre", "1e+104", "max_box_distance_m"),
            ("size", [1e5, 4.0, 1.5], "size", "100000", "max_box_size_m")):
        ns.write_table("sample_annotation", [{**r, field: value} if r["token"] == token else r for r in original])
        err = expect_a_fails_b_loads(ns, what, "sample_annotation.json")
        assert_names(err, token, shown, bound)
    ns.write_table("sample_annotation", original)

    poses = ns.table("ego_pose")
    camera_pose = ns.sample_data_of(ns.scene_a(), "CAM_BACK")[3]["ego_pose_token"]
    ns.write_table("ego_pose", [{**p, "translation": [0.0, 1e104, 0.0]} if p["token"] == camera_pose else p
                                for p in poses])
    err = expect_a_fails_b_loads(ns, "ego position", "ego_pose.json")
    assert_names(err, camera_pose, "1e+104", "max_ego_position_m")

    keyframe_poses = [sd["ego_pose_token"] for sd in ns.sample_data_of(ns.scene_a(), "LIDAR_TOP")]
    for p in poses:
        if p["token"] == keyframe_poses[10]:
            p["translation"] = [p["translation"][0] + 200.0, p["translation"][1], p["translation"][2]]
    ns.write_table("ego_pose", poses)
    err = expect_a_fails_b_loads(ns, "ego speed", "ego_pose.json")
    assert_names(err, "max_ego_speed_mps")


def test_source_limits_come_from_the_config_and_reach_a_worker(av2_log):
    """Item 7: "sanity bounds on source geometry from the config": the real AV2 log (farthest annotation
    221.3 m) loads with the defaults, is refused with ``sources.max_box_distance_m: 200``, and a source
    rebuilt from its description (as on a Ray worker) keeps that limit."""
    from generator.sources import open_source, source_from_description
    from schemas.config import parse_config

    assert len(open_source("av2", av2_log.parent, parse_config({})).load_scene(AV2_LOG).frames) == 156
    cfg = parse_config({"sources": {"max_box_distance_m": 200.0}})
    src = open_source("av2", av2_log.parent, cfg)
    for s in (src, source_from_description(src.describe())):
        with pytest.raises(SourceError) as e:
            s.load_scene(AV2_LOG)
        assert_names(e.value, "221.", "max_box_distance_m = 200")


# ================================================================================================ item 9
def test_zero_byte_lidar_file_is_an_error(ns, tmp_path):
    """Item 9: "Damaged sensor data passes silently, exit 0: a zero-byte LiDAR file"."""
    rel = lidar_of_scene_a(ns, 5)
    ns.own(rel).write_bytes(b"")
    err = expect_a_frame_issue_b_clean(ns, "empty", rel)
    assert "0 bytes" in err.message
    p = tmp_path / "empty.pcd.bin"
    p.write_bytes(b"")
    with pytest.raises(SourceError, match="empty") as e:
        load_lidar_ego(make_frame(p))
    assert e.value.file == str(p)


def test_lidar_cut_at_a_record_boundary_is_an_error(ns):
    """Item 9: "... or one cut at a 20-byte boundary (masks silently lost ...)". The generated logs store
    a sweep ring by ring (generator/synth/lidar.py): the cut loses the upper rings."""
    rel = lidar_of_scene_a(ns, 2)
    p = ns.own(rel)
    data = p.read_bytes()
    p.write_bytes(data[:20 * (len(data) // 40)])  # half of the point records
    err = expect_a_frame_issue_b_clean(ns, "incomplete", rel)
    assert_names(err, "rings", "lidar_rings")
    lazy = NuScenesSource(ns.root, ns.version, check_files=False)  # the reader refuses it too
    frame = lazy.load_scene(lazy.scene_ids()[0]).frames[2]
    with pytest.raises(SourceError, match="incomplete"):
        load_lidar_ego(frame)


def test_real_nuscenes_sweep_cut_at_a_record_boundary_is_an_error(nuscenes_demo, tmp_path):
    """Item 9: the real nuScenes sweep is stored in firing order (all rings at one azimuth, then the next
    azimuth): a cut loses a sector of the revolution. The intact sweep passes (all 360 azimuth bins)."""
    src = next(nuscenes_demo.glob("*LIDAR_TOP*.pcd.bin"))
    assert load_lidar_ego(make_frame(src)).shape == (34688, 4)
    data = src.read_bytes()
    cut = tmp_path / "cut.pcd.bin"
    cut.write_bytes(data[:20 * int(len(data) / 20 * 0.9)])  # 90 % of the records: points in 354 of 360 bins
    with pytest.raises(SourceError, match="incomplete") as e:
        load_lidar_ego(make_frame(cut))
    assert_names(e.value, "azimuth", "min_lidar_azimuth_coverage")
    assert e.value.file == str(cut)


def test_nan_filled_lidar_keeps_file_and_message(ns):
    """Item 9: "a NaN-filled LiDAR file (only a count survives, the file name and message are dropped)":
    the frame's problem is recorded when the scene loads, with the file and what is wrong (the pipeline
    keeps it in issues/<scene>.parquet and fails the scene past failures.max_failed_frame_share)."""
    rel = lidar_of_scene_a(ns, 7)
    p = ns.own(rel)
    p.write_bytes(np.full(os.path.getsize(p) // 4, np.nan, np.float32).tobytes())
    err = expect_a_frame_issue_b_clean(ns, "NaN", rel)
    assert err.file == str(ns.root / rel) and err.frame_index == 7
    assert "NaN" in err.message and "frame" in err.message


def test_nan_filled_av2_sweep_is_recorded_when_the_log_loads(av2_copy, av2_log):
    """Item 9: the NaN-filled sweep of an AV2 log is found when the log loads (AV2 sweeps used to be read
    only by perception), recorded for its frame with the sweep file named."""
    d = av2_copy("nan-sweep")
    shutil.copytree(av2_log / "sensors" / "lidar", d / "sensors" / "lidar")
    sweep = sorted((d / "sensors" / "lidar").glob("*.feather"))[1]
    set_column(sweep, "x", lambda x: np.full(len(x), np.nan, np.float16))
    [issue] = AV2Source(d).load_scene(AV2_LOG).issues
    assert issue.file == str(sweep) and "NaN" in issue.message and issue.reason == "lidar_unreadable"


def test_lidar_file_size_limit_checked_before_reading(ns, tmp_path):
    """Item 9: "a 200 MB point cloud costs 7.8 GB of memory (no size limit)". A file over
    ``sources.max_lidar_file_bytes`` is refused by its size (a sparse file: nothing is read), and the limit
    comes from the config."""
    from generator.sources import open_source
    from schemas.config import SourceLimitsConfig, parse_config

    limit = SourceLimitsConfig().max_lidar_file_bytes
    big = tmp_path / "huge.pcd.bin"
    with open(big, "wb") as fh:
        fh.truncate(limit + 20)  # sparse: zeros that are never on disk; read, they would be "incomplete"
    with pytest.raises(SourceError, match="larger than") as e:
        load_lidar_ego(make_frame(big))
    assert_names(e.value, str(limit + 20), "max_lidar_file_bytes")
    cfg = parse_config({"sources": {"max_lidar_file_bytes": 100_000}})  # generated sweeps are ~650 kB
    src = open_source("nuscenes", ns.root, cfg, version=ns.version)
    issues = src.load_scene(src.scene_ids()[0]).issues
    assert issues and all("larger than" in i.message and "LIDAR_TOP" in i.file for i in issues)


def _jpeg(tmp_path, name="ok.jpg", size=(48, 64)):
    img = np.random.default_rng(0).integers(0, 255, (*size, 3), dtype=np.uint8)
    p = tmp_path / name
    cv2.imwrite(str(p), img)
    return p


def test_truncated_jpeg_is_not_packed_into_the_webdataset(tmp_path):
    """Item 9: "a truncated JPEG is packed into the WebDataset tar". ``read_jpeg`` (what the tar writer
    stores) refuses it naming the file; the intact JPEG is stored byte for byte."""
    from generator.writers.wds import WriterError, read_jpeg

    ok = _jpeg(tmp_path)
    assert read_jpeg(ok, "scene-x") == ok.read_bytes()
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(ok.read_bytes()[: ok.stat().st_size * 2 // 3])
    with pytest.raises(WriterError, match="truncated") as e:
        read_jpeg(cut, "scene-x")
    assert e.value.file == str(cut) and e.value.scene == "scene-x"
    not_jpeg = tmp_path / "png-named.jpg"
    not_jpeg.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    with pytest.raises(WriterError, match="not a JPEG"):
        read_jpeg(not_jpeg, "scene-x")


def test_truncated_jpeg_is_not_segmented(tmp_path):
    """Item 9: the same truncated JPEG is refused where images enter (``load_image``): OpenCV decodes a
    truncated JPEG without an error (grey below the cut), so masks would be drawn on it."""
    ok = _jpeg(tmp_path, size=(48, 64))
    assert load_image(make_frame(tmp_path / "x.bin", image=ok), "CAM_FRONT").shape == (48, 64, 3)
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(ok.read_bytes()[: ok.stat().st_size * 2 // 3])
    with pytest.raises(SourceError, match="truncated") as e:
        load_image(make_frame(tmp_path / "x.bin", image=cut), "CAM_FRONT")
    assert e.value.file == str(cut)


def test_truncated_jpeg_fails_the_scene_when_it_loads(ns):
    """Item 9: a truncated camera image of the generated logs is found when the scene loads (the nuScenes
    source checks its files) and recorded with its file, instead of silently costing the scene its masks in
    that camera; the camera is left without an image for that frame."""
    rel = ns.sample_data_of(ns.scene_a(), "CAM_FRONT")[6]["filename"]
    p = ns.own(rel)
    p.write_bytes(p.read_bytes()[:5000])
    err = expect_a_frame_issue_b_clean(ns, "truncated", rel)
    assert "CAM_FRONT" in err.message and err.camera == "CAM_FRONT"


def test_av2_log_without_annotations_fails_under_the_labels_backend(av2_copy):
    """Item 9: "an AV2 log with no annotations finishes 'ok' with 0 QA under the labels backend". The
    scene fails when it is loaded (what a worker rebuilds from the description too); with a detector that
    needs no labels it loads."""
    from generator.sources import open_source, source_from_description
    from schemas.config import parse_config

    d = av2_copy("unlabelled", sensors=True)
    (d / "annotations.feather").unlink()
    src = open_source("av2", d, parse_config({"detection": {"backend": "labels"}}))
    for s in (src, source_from_description(src.describe())):
        with pytest.raises(SourceError, match="no annotations") as e:
            s.load_scene(AV2_LOG)
        assert e.value.scene == AV2_LOG and e.value.file.endswith("annotations.feather")
        assert "detection.backend" in str(e.value)
    scene = open_source("av2", d, parse_config({"detection": {"backend": "lidar"}})).load_scene(AV2_LOG)
    assert len(scene.frames) == 2 and all(f.labels is None for f in scene.frames)


def test_empty_scene_is_an_error(ns):
    """Item 9: "an empty scene (0 samples) is 'ok'"."""
    scenes = ns.table("scene")
    scenes[0].update(nbr_samples=0, first_sample_token="", last_sample_token="")
    ns.write_table("scene", scenes)
    err = expect_a_fails_b_loads(ns, "no samples", "scene.json")
    assert scenes[0]["name"] in str(err)


# ================================================================================================ item 10
@pytest.mark.parametrize("args, field", [
    (["--scenes", "-1"], "--scenes"), (["--scenes", "0"], "--scenes"),
    (["--seed", "-3"], "--seed"), (["--sweep-hz", "5"], "--sweep-hz"), (["--sweep-hz", "40"], "--sweep-hz"),
    (["--image-width", "0"], "--image-width"), (["--image-width", "100"], "--image-width"),
    (["--first-scene", "-2"], "--first-scene"), (["--version", "../escape"], "--version"),
])
def test_synth_numeric_arguments_are_checked_by_argparse(tmp_path, capsys, args, field):
    """Item 10: "`drivegen synth --scenes -1` gives a traceback instead of a clean message": exit 2 with a
    message naming the option and the value, nothing written."""
    from generator.cli import main

    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["synth", "--out", str(out), *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert field in err and args[1] in err and "Traceback" not in err, err
    assert not out.exists()


def test_synth_overwrite_with_bad_arguments_keeps_the_old_dataset(tmp_path):
    """Item 10 / the issue's title, "Never lose a user's data": ``make_dataset(overwrite=True)`` removed the
    old table set before it checked its arguments, so a bad value deleted the user's logs and then failed."""
    from generator.synth import make_dataset

    root = tmp_path / "logs"
    (root / "v1.0-drivegen").mkdir(parents=True)
    (root / "v1.0-drivegen" / "scene.json").write_text("[]")
    (root / "samples").mkdir()
    (root / "samples" / "keep.jpg").write_bytes(b"x")
    for kw in ({"num_scenes": -1}, {"sweep_hz": 5}, {"image_width_px": 640, "image_height_px": 400},
               {"seed": -1}, {"first_scene_index": -1}):
        with pytest.raises(InputError):
            make_dataset(root, version="v1.0-drivegen", overwrite=True, **{"num_scenes": 1, **kw})
        assert (root / "v1.0-drivegen" / "scene.json").exists() and (root / "samples" / "keep.jpg").exists(), kw
    # a version that is a path, not a folder name: overwrite would have removed <other>/../logs/<version>
    with pytest.raises(InputError, match="version"):
        make_dataset(tmp_path / "other", num_scenes=1, sweep_hz=0, image_width_px=320, image_height_px=180,
                     version="../logs/v1.0-drivegen", overwrite=True)
    assert (root / "v1.0-drivegen" / "scene.json").read_text() == "[]"
