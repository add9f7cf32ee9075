"""drivegen validate: nuscenes-devkit detection/tracking metrics of a run against its labelled logs.

Run folders are made here by running perception per scene (tests/support/validate.py) on the generated
logs (fixture ``synth_root``) and on the real Argoverse 2 log (``/work/shared/data/av2``).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest

from support.data import SYNTH_VERSION
from support.validate import make_run_folder, noise_config
from generator.runfolder import RunReader, RunStore, commit_tables
from generator.sources import open_source
from generator.validate.agreement import match_tracks, within_tolerance
from generator.validate.boxes import BoxArrays, cap_per_sample, predicted_attributes
from generator.validate.report import check_gates
from generator.validate.run import ValidateOptions, validate_run
from schemas.config import ToleranceConfig, parse_config
from schemas.tables import OBJECTS

REPO = Path(__file__).resolve().parents[2]
SWEEP = (0.0, 0.5, 1.0, 2.0)
THRESHOLDS = 10  # recall thresholds for AMOTA in tests (devkit: 40; see generator.validate.tracking)


def _front_only(cfg):
    cfg.segmentation.cameras = ["CAM_FRONT"]  # perception cost: one camera is enough for the QA families
    return cfg


@pytest.fixture(scope="module")
def synth_runs(synth_root, tmp_path_factory):
    """Run folders on the generated logs, made on first use: key -> run folder."""
    made: dict = {}
    base = tmp_path_factory.mktemp("validate_runs")

    def get(key, cfg, scenes=None) -> Path:
        if key not in made:
            cfg = _front_only(cfg)
            src = open_source("nuscenes", synth_root, cfg, version=SYNTH_VERSION)
            made[key] = make_run_folder(base / str(key), src, cfg, scenes)
        return made[key]

    return get


@pytest.fixture(scope="module")
def sweep_reports(synth_runs):
    out = {}
    for lvl in SWEEP:
        run = synth_runs(("sweep", lvl), noise_config(lvl, seed=3))
        out[lvl] = validate_run(str(run), ValidateOptions(tracking_thresholds=THRESHOLDS))
    return out


# ----------------------------------------------------------------------------------------- generated logs
def test_labels_backend_scores_one_on_generated_logs(sweep_reports):
    r = sweep_reports[0.0]
    d, t, a = r["detection"], r["tracking"], r["label_agreement"]
    assert r["scenes"]["evaluated"] == ["scene-0000", "scene-0001"] and r["scenes"]["unlabelled"] == []
    assert r["scenes"]["num_samples"] == 80  # 2 scenes x 40 keyframes (2 Hz, 20 s)
    assert d["has_attributes"] and len(d["classes"]) >= 4
    assert d["mAP"] == pytest.approx(1.0, abs=1e-9)
    for c in d["classes"]:
        assert d["per_class"][c]["AP"] == pytest.approx(1.0, abs=1e-9), c
        assert d["per_class"][c]["num_pred"] >= d["per_class"][c]["num_gt"] > 0
    for m in ("mATE", "mASE", "mAOE", "mAVE"):
        assert d[m] == pytest.approx(0.0, abs=1e-6), m
    # NDS = (5 mAP + sum of TP scores) / 10; only the attribute term can differ from 1 (attributes are
    # inferred from the predicted speed, the logs' own rule may differ near its thresholds)
    assert d["NDS"] == pytest.approx(1.0 - d["mAAE"] / 10, abs=1e-9)
    assert d["all_classes"]["mAP"] < 1.0  # the devkit's ten-class mean counts absent classes as 0
    assert t["AMOTA"] == pytest.approx(1.0, abs=1e-9) and t["MOTA"] == pytest.approx(1.0, abs=1e-9)
    assert t["recall"] == 1.0 and t["IDSW"] == 0 and t["FRAG"] == 0 and t["fp"] == 0
    assert all(type(t[k]) is int for k in ("IDSW", "FRAG", "tp", "fp", "fn"))  # counts, not 0.0
    assert all(type(m["ids"]) is int for m in t["per_class"].values() if m["has_gt"])
    assert t["AMOTP"] == pytest.approx(0.0, abs=1e-6)
    assert t["num_gt_tracks"] > 10
    assert a["agreement"] == 1.0 and a["compared"] > 1000 and a["unmatched_target"] == 0
    ident = r["track_identity"]["all"]  # noise-free labels: one identity per track, every class
    assert ident["merged_tracks"] == ident["bridge_boxes"] == 0 and ident["tracks"] >= t["num_gt_tracks"]


def test_noise_sweep_moves_every_metric_the_expected_way(sweep_reports):
    def series(section, key):
        return np.array([sweep_reports[lvl][section][key] for lvl in SWEEP], dtype=float)

    for key in ("mAP", "NDS"):
        assert np.all(np.diff(series("detection", key)) < 0), (key, series("detection", key))
    for key in ("mATE", "mASE", "mAOE", "mAVE"):
        assert np.all(np.diff(series("detection", key)) > 0), (key, series("detection", key))
    for key in ("AMOTA", "MOTA", "recall"):
        assert np.all(np.diff(series("tracking", key)) < 0), (key, series("tracking", key))
    assert np.all(np.diff(series("tracking", "AMOTP")) > 0)
    sw = series("tracking", "IDSW") + series("tracking", "FRAG")
    assert np.all(np.diff(sw) >= 0) and sw[-1] > sw[0]
    agr = np.array([sweep_reports[lvl]["label_agreement"]["agreement"] for lvl in SWEEP])
    assert np.all(np.diff(agr) < 0), agr
    # centre noise sigma 0.5 m per axis at level 1: the planar error is Rayleigh, mean 0.5 sqrt(pi/2) = 0.63 m
    assert sweep_reports[1.0]["detection"]["mATE"] == pytest.approx(0.5 * np.sqrt(np.pi / 2), rel=0.2)


def test_each_noise_moves_only_its_own_error(synth_runs):
    """Centre noise moves mATE only, size noise mASE only: boxes reach the devkit in its own conventions
    (size w, l, h; yaw as a quaternion) and nothing else is perturbed. The online tracker passes the detected boxes
    through, so the devkit sees the noise model itself; the offline tracker (the default) smooths the centres and
    gives a rigid track one size, so it must come closer to the truth than the noise on both."""
    out = {}
    for mode in ("kalman", "offline"):
        for name, noise in (("centre", {"center_m": 0.3}), ("size", {"size_frac": 0.15})):
            cfg = parse_config({"detection": {"backend": "labels", "labels": {**noise, "score_min": 1.0, "seed": 1}},
                                "tracking": {"mode": mode}})
            run = synth_runs(("only", name, mode), cfg, ["scene-0000"])
            out[name, mode] = validate_run(str(run), ValidateOptions(tracking=False,
                                                                     label_agreement=False))["detection"]
    assert out["centre", "offline"]["mATE"] < 0.9 * out["centre", "kalman"]["mATE"]
    assert out["size", "offline"]["mASE"] < 0.8 * out["size", "kalman"]["mASE"]
    c, s = out["centre", "kalman"], out["size", "kalman"]
    assert c["mATE"] == pytest.approx(0.3 * np.sqrt(np.pi / 2), rel=0.25)  # Rayleigh mean of the planar error
    assert c["mASE"] == pytest.approx(0.0, abs=1e-9) and c["mAOE"] == pytest.approx(0.0, abs=1e-9)
    assert s["mASE"] > 0.1 and s["mATE"] == pytest.approx(0.0, abs=1e-9) and s["mAOE"] == pytest.approx(0.0, abs=1e-9)
    assert s["mAP"] == pytest.approx(1.0, abs=1e-9)  # size does not enter the centre-distance matching
    assert c["mAP"] < 1.0


def test_empty_predicted_boxes_count_only_when_asked(synth_runs, sweep_reports):
    run = synth_runs(("sweep", 0.0), noise_config(0.0, seed=3))
    strict = validate_run(str(run), ValidateOptions(tracking=False, label_agreement=False,
                                                    keep_empty_predictions=True))["detection"]
    # the logs hold zero-point annotations: as predictions they are false positives under the devkit's
    # submission convention, and removed (like the GT boxes they copy) by default
    assert strict["mAP"] < 0.99
    assert strict["mATE"] == pytest.approx(0.0, abs=1e-6)


def test_pipeline_run_folder_validates(synth_root, tmp_path):
    """A run folder written by ``drivegen run`` itself (manifests, QA shards, the writers' storage types):
    validate reads only manifest-listed files and takes the perception answers from the run's QA shards."""
    from generator.pipeline import run

    cfg = _front_only(noise_config(0.0))
    out = tmp_path / "run"
    res = run(str(out), source="nuscenes", data=str(synth_root), version=SYNTH_VERSION, cfg=cfg, executor="local",
              progress=False)
    assert res.summary.scenes.ok == 2
    r = validate_run(str(out), ValidateOptions(tracking_thresholds=THRESHOLDS))
    assert r["scenes"]["evaluated"] == ["scene-0000", "scene-0001"]
    assert r["detection"]["mAP"] == pytest.approx(1.0, abs=1e-9)
    assert r["tracking"]["AMOTA"] == pytest.approx(1.0, abs=1e-9)
    a = r["label_agreement"]
    assert "regenerated" not in a["note"] and a["agreement"] == 1.0
    qa_rows = sum(pa.parquet.read_table(p).num_rows for p in (out / "qa").glob("*.parquet"))
    assert a["perception_answers"] > 0 and a["perception_answers"] < qa_rows  # quantitative ones only


def _copy_tables(src_root: Path, dst_root: Path) -> Path:
    """A dataroot whose tables are copies (editable) and whose sensor folders are links."""
    dst_root.mkdir()
    for p in src_root.iterdir():
        if p.name == SYNTH_VERSION:
            shutil.copytree(p, dst_root / p.name)
        else:
            (dst_root / p.name).symlink_to(p)
    return dst_root


def test_unlabelled_scene_is_listed_and_excluded(synth_root, synth_runs, sweep_reports, tmp_path):
    logs = _copy_tables(synth_root, tmp_path / "logs")
    tdir = logs / SYNTH_VERSION
    scenes = json.loads((tdir / "scene.json").read_text())
    samples = json.loads((tdir / "sample.json").read_text())
    scene_token = next(x["token"] for x in scenes if x["name"] == "scene-0001")
    drop = {s["token"] for s in samples if s["scene_token"] == scene_token}
    anns = json.loads((tdir / "sample_annotation.json").read_text())
    (tdir / "sample_annotation.json").write_text(json.dumps([a for a in anns if a["sample_token"] not in drop]))
    run = synth_runs(("sweep", 0.0), noise_config(0.0, seed=3))
    r = validate_run(str(run), ValidateOptions(logs=str(logs), tracking_thresholds=THRESHOLDS))
    assert r["scenes"]["evaluated"] == ["scene-0000"] and r["scenes"]["unlabelled"] == ["scene-0001"]
    assert r["scenes"]["num_samples"] == 40
    assert r["detection"]["mAP"] == pytest.approx(1.0, abs=1e-9)
    assert r["tracking"]["AMOTA"] == pytest.approx(1.0, abs=1e-9)
    full = sweep_reports[0.0]
    assert r["detection"]["num_gt"] < full["detection"]["num_gt"]
    assert r["tracking"]["num_gt_tracks"] < full["tracking"]["num_gt_tracks"]


# ------------------------------------------------------------------------------------------ real AV2 log
def test_av2_real_annotations_within_noise_bounds(av2_log, tmp_path):
    """Labels of the real AV2 log with seeded geometric noise, through the tracker, scored by the devkit.

    The bounds follow from the noise model, independent of the code under test: a centre error of
    N(0, s^2) per axis has a Rayleigh-distributed planar norm with mean s sqrt(pi/2) (mATE, and AMOTP at
    the recall thresholds reached); a yaw error N(0, s^2) has mean |e| = s sqrt(2/pi) (mAOE); the velocity
    error is Rayleigh like the centre's (mAVE); mASE is 1 - IoU of aligned boxes whose sides are scaled by
    1 + N(0, s^2), estimated here by Monte Carlo with the devkit's scale-IoU definition. Nothing is dropped
    and no false positives are added, so recall is bounded only by the tracker and the devkit's range
    filter (a box near 50 m can fall on either side).
    """
    sc, ss, sy, sv = 0.3, 0.1, 0.1, 0.3
    cfg = parse_config({"detection": {"backend": "labels", "labels": {
        "center_m": sc, "size_frac": ss, "yaw_rad": sy, "velocity_mps": sv, "score_min": 0.5, "seed": 0}},
        "tracking": {"mode": "kalman"}})  # the online tracker passes detections through: the noise model is seen
    src = open_source("av2", av2_log.parent, cfg)
    run = make_run_folder(tmp_path / "run", src, cfg)
    r = validate_run(str(run), ValidateOptions(tracking_thresholds=THRESHOLDS))
    d, t = r["detection"], r["tracking"]
    assert r["source"]["kind"] == "av2" and r["scenes"]["num_samples"] == 156
    assert not d["has_attributes"] and d["mAAE"] is None and "mAAE" not in d["nds_terms"]
    assert {"car", "pedestrian", "bicycle"} <= set(d["classes"])
    rayleigh = sc * np.sqrt(np.pi / 2)
    assert d["mATE"] == pytest.approx(rayleigh, rel=0.12)
    assert d["mAOE"] == pytest.approx(sy * np.sqrt(2 / np.pi), rel=0.15)
    assert d["mAVE"] == pytest.approx(sv * np.sqrt(np.pi / 2), rel=0.15)
    rng = np.random.default_rng(0)
    s = np.maximum(1 + rng.normal(0.0, ss, (100_000, 3)), 0.05)
    inter = np.minimum(s, 1).prod(axis=1)
    assert d["mASE"] == pytest.approx(np.mean(1 - inter / (1 + s.prod(axis=1) - inter)), rel=0.12)
    for c, m in d["per_class"].items():
        if m["num_gt"] >= 50:  # at 2 m and 4 m every noisy box lies within reach (P(error > 2 m) < 1e-9)
            assert m["AP_by_dist"]["2.0"] > 0.95 and m["AP_by_dist"]["4.0"] > 0.95, c
    assert t["recall"] > 0.9
    assert rayleigh * 0.9 < t["AMOTP"] < rayleigh + 0.3  # unreached recall thresholds count 2 m each
    assert 0.5 < t["AMOTA"] <= 1.0 and t["IDSW"] < 0.05 * t["tp"]
    assert r["label_agreement"]["compared"] > 0 and r["label_agreement"]["agreement"] > 0.8


# --------------------------------------------------------------------------------------------- bad input
@pytest.fixture
def cli(capsys, monkeypatch):
    """``drivegen validate ...`` in this process: (exit code, stdout, stderr)."""
    from generator.cli import main

    monkeypatch.setenv("TQDM_DISABLE", "1")

    def call(*args):
        capsys.readouterr()
        code = main(["validate", *map(str, args)])
        out = capsys.readouterr()
        return code, out.out, out.err

    return call


def _bad(res, *words):
    code, _, err = res
    assert code == 2, err
    assert "Traceback" not in err
    for w in words:
        assert w in err, (w, err)


def test_run_without_perception_tables_is_refused(cli, tmp_path):
    store = RunStore(tmp_path / "run")
    store.write_bytes("config.yaml", b"{}\n")
    store.write_json("source.json", {"kind": "nuscenes", "dataroot": "/nowhere", "version": "v"})
    _bad(cli(tmp_path / "run", "--no-tracking"), "no committed perception tables", "perception/objects",
         "drivegen run")


def test_scenes_absent_from_the_logs_are_refused(cli, synth_runs, tmp_path):
    run = synth_runs(("sweep", 0.0), noise_config(0.0, seed=3))
    moved = tmp_path / "run"
    shutil.copytree(run, moved)
    t = RunReader(moved).read_table("objects", ["scene-0000"])
    t = pa.Table.from_pylist([dict(r, scene_id="scene-9999") for r in t.to_pylist()], schema=OBJECTS)
    commit_tables(RunStore(moved), "scene-9999", {"objects": t}, split="train")
    _bad(cli(moved, "--no-tracking"), "scene-9999", "not in the logs", "--logs")


def test_class_missing_from_the_mapping_is_refused(cli, av2_log, tmp_path):
    logs = tmp_path / "logs"
    log = logs / av2_log.name
    log.mkdir(parents=True)
    for p in av2_log.iterdir():
        if p.name != "annotations.feather":
            (log / p.name).symlink_to(p)
    ann = feather.read_table(av2_log / "annotations.feather")
    cat = np.array(ann.column("category").to_pylist(), dtype=object)
    cat[:5] = "HOVERBOARD"
    feather.write_feather(ann.set_column(ann.schema.get_field_index("category"), "category", pa.array(cat)),
                          log / "annotations.feather")
    store = RunStore(tmp_path / "run")
    store.write_json("source.json", {"kind": "av2", "root": str(logs)})
    row = {k: None for k in OBJECTS.names}
    row.update(scene_id=av2_log.name, frame_index=0, timestamp_us=int(ann.column("timestamp_ns")[0].as_py()) // 1000,
               track_id=0, class_name="car", score=0.9, center_ego_m=[5.0, 0, 0], size_lwh_m=[4.0, 2, 1.5],
               yaw_ego_rad=0.0, center_global_m=[0.0, 0, 0], yaw_global_rad=0.0, velocity_ego_mps=[0.0, 0],
               velocity_global_mps=[0.0, 0], num_lidar_pts=10, instance_token="", source="labels")
    commit_tables(store, av2_log.name, {"objects": pa.Table.from_pylist([row], schema=OBJECTS)}, split="train")
    _bad(cli(tmp_path / "run", "--no-tracking"), "HOVERBOARD", "av2_classes.py")


# ------------------------------------------------------------------------------------------ CLI and gates
def test_cli_writes_reports_and_applies_gates(cli, synth_runs, sweep_reports, tmp_path):
    noisy = synth_runs(("sweep", 1.0), noise_config(1.0, seed=3))
    code, out, err = cli(noisy, "--tracking-thresholds", THRESHOLDS, "--min-map", "0.99", "--min-amota", "0.05")
    assert code == 1, err
    assert "min_map" in err and "| Detection | mAP |" in out
    rep = json.loads((noisy / "validate" / "report.json").read_text())
    assert rep["gates"]["min_map"]["ok"] is False and rep["gates"]["min_amota"]["ok"] is True
    assert rep["detection"]["mAP"] == pytest.approx(sweep_reports[1.0]["detection"]["mAP"], abs=1e-9)
    md = (noisy / "validate" / "report.md").read_text()
    assert "| Detection | mAP |" in md and "| Tracking | AMOTA |" in md and "| Label noise |" in md
    clean = synth_runs(("sweep", 0.0), noise_config(0.0, seed=3))
    out = tmp_path / "reports"
    code, _, err = cli(clean, "--tracking-thresholds", 5, "--quiet", "--out", out, "--min-map", 0.999,
                       "--min-nds", 0.9, "--min-amota", 0.999, "--max-idsw", 0, "--min-label-agreement", 0.999)
    assert code == 0, err
    assert json.loads((out / "report.json").read_text())["passed"] is True
    md = (out / "report.md").read_text()
    assert "|  | IDSW | 0 |" in md and "| --max-idsw | tracking.IDSW | 0 | 0 | yes |" in md  # a count: never 0.0


def test_track_identity_counts_merges_bridges_and_splits():
    """Hand-built tracks: track 0 takes identity a then b with two boxes without identity between them (a merge,
    2 bridge boxes), tracks 1 and 2 share identity c (a split), track 3 coasts inside identity d (no bridge),
    an untracked box and another scene's identity a (a different object) count for nothing; a run whose boxes
    carry no identity gets no figure."""
    from generator.validate.identity import track_identity

    rows = [("s0", 0, 0, "car", "a"), ("s0", 1, 0, "car", "a"), ("s0", 2, 0, "car", ""), ("s0", 3, 0, "car", ""),
            ("s0", 4, 0, "car", "b"), ("s0", 5, 0, "car", "b"), ("s0", 0, 1, "traffic_cone", "c"),
            ("s0", 5, 2, "traffic_cone", "c"), ("s0", 0, 3, "car", "d"), ("s0", 1, 3, "car", ""),
            ("s0", 2, 3, "car", "d"), ("s0", 3, -1, "car", "e"), ("s1", 0, 0, "car", "a"), ("s1", 1, 0, "car", "")]
    t = pa.table({"scene_id": [r[0] for r in rows], "frame_index": pa.array([r[1] for r in rows], pa.int32()),
                  "track_id": pa.array([r[2] for r in rows], pa.int64()), "class_name": [r[3] for r in rows],
                  "instance_token": [r[4] for r in rows]})
    got = track_identity(t.take(np.random.default_rng(0).permutation(t.num_rows)))  # any row order
    assert got["all"] == {"tracks": 5, "identities": 5, "merged_tracks": 1, "foreign_boxes": 2, "bridge_boxes": 2,
                          "split_identities": 1}
    assert got["per_class"]["traffic_cone"] == {"tracks": 2, "identities": 1, "merged_tracks": 0, "foreign_boxes": 0,
                                                "bridge_boxes": 0, "split_identities": 1}
    # one swapped box in a long track: one merged track, one foreign box (the track's own identity is its majority)
    swap = [("s0", f, 7, "bicycle", "g" if f != 4 else "h") for f in range(9)] + [("s0", 4, 8, "bicycle", "g")]
    t2 = pa.table({"scene_id": [r[0] for r in swap], "frame_index": pa.array([r[1] for r in swap], pa.int32()),
                   "track_id": pa.array([r[2] for r in swap], pa.int64()), "class_name": [r[3] for r in swap],
                   "instance_token": [r[4] for r in swap]})
    one = track_identity(t2)["all"]
    assert one["merged_tracks"] == 1 and one["foreign_boxes"] == 1 and one["split_identities"] == 1
    assert track_identity(t.set_column(4, "instance_token", pa.array([""] * t.num_rows))) is None


def test_gate_without_its_figure_fails():
    gates, ok = check_gates({"detection": {"mAP": 0.8}, "label_agreement": None},
                            {"min_map": 0.5, "min_label_agreement": 0.9})
    assert not ok and gates["min_map"]["ok"] and not gates["min_label_agreement"]["ok"]
    with pytest.raises(ValueError, match="unknown gate"):
        check_gates({}, {"min_mpa": 0.1})


# ----------------------------------------------------------------------------------------- small pieces
def test_tolerances_follow_stride_qa():
    tol = ToleranceConfig()
    unit = np.array(["m", "m", "degrees", "degrees", "m/s", "m/s", "m/s", "m/s"], dtype=object)
    pred = np.array([12.4, 12.6, 175.0, 160.0, 1.25, 1.35, 2.35, 2.45])
    label = np.array([10.0, 10.0, -176.0, 171.0, 0.8, 0.8, 2.0, 2.0])
    # 24 % / 26 %; 9 deg across the +-180 wrap / 11 deg; below 1 m/s: 0.45 / 0.55 absolute; above: 17.5 / 22.5 %
    assert within_tolerance(unit, pred, label, tol).tolist() == [True, False, True, False, True, False, True, False]


def test_track_matching_is_a_global_assignment():
    """Greedy nearest-first would pair perception 0 with label 10 (0.9 m) and leave perception 1 unmatched
    (label 11 is 2.5 m away); the assignment pairs 0-11 and 1-10 (1.0 + 1.1 m)."""
    def objs(track, xs):
        base = {k: None for k in OBJECTS.names}
        base.update(scene_id="s", frame_index=0, timestamp_us=0, class_name="car")
        rows = [base | {"track_id": t, "center_ego_m": [x, 0.0, 0.0]} for t, x in zip(track, xs)]
        return pa.Table.from_pylist(rows, schema=OBJECTS)

    m = match_tracks(objs([0, 1], [0.0, -2.0]), objs([10, 11], [-0.9, 1.0]), gate_m=2.0)
    assert sorted(zip(m.track_id, m.gt_track_id)) == [(0, 11), (1, 10)]
    m = match_tracks(objs([0], [0.0]), objs([10], [2.5]), gate_m=2.0)
    assert len(m) == 0


def test_predicted_attributes_and_box_cap():
    cls = np.array(["car", "car", "pedestrian", "bicycle", "barrier", "truck"], dtype=object)
    vel = np.array([[1.0, 0], [0.1, 0], [0.0, 0.0], [0.5, 0.5], [3, 0], [np.nan, np.nan]])
    want = ["vehicle.moving", "vehicle.parked", "pedestrian.standing", "cycle.with_rider", "", "vehicle.parked"]
    assert predicted_attributes(cls, vel).tolist() == want
    n = 7
    b = BoxArrays(sample_token=np.array(["a"] * 5 + ["b"] * 2, dtype=object), center_m=np.zeros((n, 3)),
                  size_lwh_m=np.ones((n, 3)), quat_wxyz=np.tile([1.0, 0, 0, 0], (n, 1)), velocity_mps=np.zeros((n, 2)),
                  class_name=np.full(n, "car", dtype=object), score=np.array([0.1, 0.9, 0.5, 0.3, 0.7, 0.2, 0.4]),
                  track_id=np.full(n, "", dtype=object), num_pts=np.full(n, -1), attribute=np.full(n, "", dtype=object))
    kept, dropped = cap_per_sample(b, 3)
    assert dropped == 2
    assert sorted(kept.score.tolist()) == [0.2, 0.4, 0.5, 0.7, 0.9]


def _det_boxes(rows):
    """rows: (sample, class, x, y, score) -> the devkit's EvalBoxes (unit boxes, no attributes)."""
    from nuscenes.eval.common.data_classes import EvalBoxes
    from nuscenes.eval.detection.data_classes import DetectionBox

    out = EvalBoxes()
    by_sample: dict = {}
    for tok, cls, x, y, score in rows:
        by_sample.setdefault(tok, []).append(DetectionBox(
            sample_token=tok, translation=(x, y, 0.5), size=(1.0, 1.0, 1.0), rotation=(1.0, 0, 0, 0),
            velocity=(0.0, 0.0), ego_translation=(x, y, 0.5), num_pts=10, detection_name=cls,
            detection_score=score, attribute_name=""))
    for tok in ("s0", "s1"):
        out.add_boxes(tok, by_sample.get(tok, []))
    return out


def test_false_positives_follow_the_devkit_matching_and_count_classes_without_gt():
    from generator.validate.metrics import evaluate_detection, false_positives

    gt = _det_boxes([("s0", "car", 10.0, 0.0, -1.0), ("s0", "car", 13.0, 0.0, -1.0), ("s1", "car", 20.0, 5.0, -1.0)])
    base = [("s0", "car", 11.4, 0.0, 0.9), ("s1", "car", 20.0, 5.5, 0.8)]
    # s0: the 0.9 car takes the nearer GT box (1.4 m; the other is 1.6 m off); a 0.3 car 1 m from that box
    # finds only the far one left (4 m): a false positive. Matched lowest score first, both would match.
    # s1: a car 2.5 m off.
    extra_car = [("s0", "car", 9.0, 0.0, 0.3), ("s1", "car", 22.5, 5.0, 0.7)]
    trucks = [("s0", "truck", 30.0, 0.0, 0.95), ("s1", "truck", 15.0, 2.0, 0.9), ("s1", "truck", 40.0, 0.0, 0.4)]
    pred = _det_boxes(base + extra_car + trucks)
    fp = false_positives(gt, pred, ["car", "truck", "bus"], 2.0)
    assert fp == {"car": 2, "truck": 3, "bus": 0}
    assert false_positives(gt, _det_boxes(base), ["car"], 2.0) == {"car": 0}
    assert false_positives(gt, _det_boxes(base), ["car"], 1.0) == {"car": 1}  # 1.4 m off is not within 1 m

    clean = evaluate_detection(gt, _det_boxes(base), has_attributes=False)
    noisy = evaluate_detection(gt, _det_boxes(base + trucks), has_attributes=False)
    # the headline mean does not see the phantom trucks ...
    assert noisy["classes"] == ["car"] and noisy["mAP"] == clean["mAP"]
    # ... the false-positive report does
    f = noisy["false_positives"]
    assert clean["false_positives"]["num_fp"] == 0 and f["num_fp"] == 3 and f["num_fp_classes_without_gt"] == 3
    assert f["classes_without_gt"] == {"truck": 3} and f["fp_rate"] == pytest.approx(3 / 5)
    t = noisy["per_class"]["truck"]
    assert t["num_fp"] == 3 and t["fp_rate"] == 1.0 and t["fp_per_sample"] == 1.5 and not t["has_gt"]


def test_report_lists_false_positives_of_classes_without_gt(synth_runs):
    """Label noise adds false positives of random classes, trailers and construction vehicles among them;
    the generated logs have none of those: the summary and the per-class table name them. The greedy tracker
    keeps one-frame boxes (the default Kalman tracker confirms a track only after several hits)."""
    from generator.validate.report import to_markdown

    run = synth_runs(("fp", 1.0), noise_config(1.0, seed=3, tracking_mode="greedy"), ["scene-0000"])
    r = validate_run(str(run), ValidateOptions(tracking=False, label_agreement=False))
    d = r["detection"]
    absent = [c for c, m in d["per_class"].items() if not m["has_gt"] and m["num_pred"]]
    assert absent and set(d["false_positives"]["classes_without_gt"]) == set(absent)
    for c in absent:
        assert d["per_class"][c]["num_fp"] == d["per_class"][c]["num_pred"] and d["per_class"][c]["fp_rate"] == 1.0
    assert 0 < d["false_positives"]["num_fp_classes_without_gt"] < d["false_positives"]["num_fp"]
    md = to_markdown(r)
    assert "| Class | GT | Pred | FP | FP rate |" in md
    row = next(line for line in md.splitlines() if line.startswith("|  | ... of classes without GT"))
    assert all(f"{c} {d['per_class'][c]['num_fp']}" in row for c in absent)
