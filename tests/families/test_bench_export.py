"""STRIDE-QA-Bench export.

The format test re-states, as assertions, what the public toolkit (turingmotors/STRIDE-QA-Dataset,
benchmarks/STRIDE-QA-Bench) does with the files: ``inference/inference.py`` (glob, horizon from the file
stem, rle buckets decoded with pycocotools, images opened under --image-folder), ``benchmark.py``
(TIME_BUCKET / EGO_TARGET_DISTINCTION category names, group id from the question id, gt_value/unit per
qa_type, tolerance keys, annotation_sheet.csv columns, LSR pairing of distance and direction) and
``config/tolerance.yaml``. A drift in any of them fails here.
"""
from __future__ import annotations

import json
import re
from numbers import Real
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pycocotools import mask as mask_utils

from support.bench import AGENTS, EGO_V, NAME_OF_TRACK, SCENE, TIMES, agent_state, ego_xy, make_bench_run, recommit
from generator.families.stride_qa.export import export_bench
from generator.families.stride_qa.bench_export import RELATIONS, classify_scenario, is_dynamic
from generator.families.stride_qa.config import ScenarioConfig

# --- the toolkit's expectations, restated (benchmark.py, config/tolerance.yaml, inference.py) ---------
TIME_BUCKET = {"ego_distance_data": 0, "ego_speed_data": 0, "target_speed_data": 0, "target_bearing_angle_data": 0,
               **{f"{c}_4d_t{t}": t for t in (1, 2, 3) for c in ("ego_distance_data", "ego_speed_data",
                                                                   "target_speed_data")}}
EGO_OR_TARGET = {c: ("ego" if c.startswith("ego_speed") else "target") for c in TIME_BUCKET}
TOLERANCE_KEYS = {"direction", "distance", "velocity"}
BUCKETS = ["prev_3", "prev_2", "prev_1", "current"]
OBJECT_TYPES = {"vehicle", "large vehicle", "pedestrian", "bicycle", "bus", "motorcycle"}
NUM = r"([-+]?\d+(?:\.\d+)?)"


def parse_gt(qa_type: str, text: str):
    """Numbers with units the toolkit's parser accepts (utils/parser.py), written independently."""
    pat = {"distance": rf"{NUM}\s*meters\b(?!/)", "direction": rf"{NUM}\s*degrees\b", "velocity": rf"{NUM}\s*m/s"}[qa_type]
    m = re.search(pat, text)
    return float(m.group(1)) if m else None


def judge(qa_type: str, gt: float, pred: float) -> bool:
    """config/tolerance.yaml: distance relative 0.25, direction +-10 deg, velocity relative 0.2 with an
    absolute floor of 0.5 * 0.2 below 0.5 m/s."""
    if qa_type == "direction":
        return abs((pred - gt + 180) % 360 - 180) <= 10
    if qa_type == "velocity" and gt < 0.5:
        return abs(pred - gt) <= 0.5 * 0.2
    r = 0.25 if qa_type == "distance" else 0.2
    return gt * (1 - r) <= pred <= gt * (1 + r)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    br = make_bench_run(root)
    summary = export_bench(br.run)
    return br, br.run / "bench", summary


def _expected_questions(sheet: pd.DataFrame) -> int:
    """13 questions per group, the 4 ego-speed ones once per keyframe (in its first group)."""
    return 9 * len(sheet) + 4 * len(sheet.drop_duplicates(["scene_id", "keyframe_index"]))


def _load(bench_dir: Path) -> dict[int, list[dict]]:
    ann = bench_dir / "annotation_files"
    files = sorted(ann.glob("strideqa_bench*.json"))  # inference.py's glob
    assert [f.name for f in files] == [f"strideqa_bench_t{t}.json" for t in range(4)]
    return {int(f.stem[-1]): json.loads(f.read_text(encoding="utf-8")) for f in files}  # t = int(stem[-1])


def test_files_are_what_the_toolkit_reads(bench):
    _, bench_dir, summary = bench
    per_t = _load(bench_dir)
    sheet = pd.read_csv(bench_dir / "annotation_files" / "annotation_sheet.csv")
    assert {"group_id", "object_type", "relation"} <= set(sheet.columns)
    assert sheet["group_id"].is_unique and sheet["relation"].isin(RELATIONS).all()
    assert sheet["object_type"].isin(OBJECT_TYPES).all()
    by_group: dict[str, list[dict]] = {}
    qids = set()
    for t, recs in per_t.items():
        assert isinstance(recs, list) and recs
        for q in recs:
            # inference.py
            assert "rle" in q and "current" in q["rle"]
            assert isinstance(q["question"], str) and isinstance(q["region_id"], int)
            assert len(q["images"]) == len(BUCKETS) == 4
            for img, bucket in zip(q["images"], BUCKETS):
                path = bench_dir / img
                assert path.is_file(), img
                m = mask_utils.decode(q["rle"][bucket])
                import cv2
                im = cv2.imread(str(path))
                assert m.shape == im.shape[:2] and m.sum() > 0
            # benchmark.py
            assert re.fullmatch(r"q\d+_g\d+", q["question_id"]) and q["question_id"] not in qids
            qids.add(q["question_id"])
            gid = "g" + q["question_id"].split("_g")[1]
            assert gid == q["group_id"]
            assert TIME_BUCKET[q["qa_category"]] == t
            assert isinstance(q["gt"], str) and isinstance(q["gt_value"], dict) and q["gt_value"]
            assert set(q["gt_value"]) <= TOLERANCE_KEYS and set(q["unit"]) == set(q["gt_value"])
            for k, v in q["gt_value"].items():
                assert isinstance(v, Real) and not isinstance(v, bool) and isinstance(q["unit"][k], str)
                assert parse_gt(k, q["gt"]) == pytest.approx(v)  # the gt sentence states the value
                assert judge(k, v, parse_gt(k, q["gt"]))  # and would score as a success
            by_group.setdefault(gid, []).append(q)
    assert set(by_group) == set(sheet["group_id"])
    assert summary["groups"] == len(by_group) and summary["questions"] == len(qids) == _expected_questions(sheet)
    first_of_keyframe = set(sheet.drop_duplicates(["scene_id", "keyframe_index"])["group_id"])
    for gid, qs in by_group.items():
        # 13, one per category, in the keyframe's first group; the others lack the 4 ego-speed questions
        want = sorted(c for c in TIME_BUCKET if gid in first_of_keyframe or EGO_OR_TARGET[c] == "target")
        assert sorted(q["qa_category"] for q in qs) == want
        assert len({json.dumps(q["images"]) for q in qs}) == 1 and len({json.dumps(q["rle"]) for q in qs}) == 1
        for t in range(4):  # LSR pairs distance and direction per (group, time, target)
            kinds = {k for q in qs if TIME_BUCKET[q["qa_category"]] == t and EGO_OR_TARGET[q["qa_category"]] == "target"
                     for k in q["gt_value"]}
            assert {"distance", "direction"} <= kinds
        ego = [q for q in qs if EGO_OR_TARGET[q["qa_category"]] == "ego"]
        assert all(set(q["gt_value"]) == {"velocity"} for q in ego)


def test_annotation_files_are_the_records_as_json_dumps_writes_them(tmp_path):
    """``merge_bench`` writes each horizon's records one at a time, a group's closing keys rendered once: the files
    are byte for byte ``json.dumps(records, indent=1, ensure_ascii=False)`` of the records as numbered, for parts
    that keep a group's keys once (``shared``) and for parts of before, whose records carry them each."""
    from generator.families.stride_qa.bench_export import GROUP_KEYS, merge_bench

    rel = next(iter(RELATIONS))

    def shared(k: int) -> dict:
        rle = {"t-1.0": {"size": [9, 16], "counts": "a"}}
        return dict(zip(GROUP_KEYS, ([f"images/CAM_FRONT/s_{k:06d}.jpg"] * 4, rle, k, "car", "vehicle", rel,
                                     bool(k % 2), "val", {"scene_id": "s", "ids": [k]})))

    def q(text: str, value: float) -> dict:
        return {"qa_category": "distance", "question": text, "gt": f"{value} m", "gt_value": {"distance": value},
                "unit": {"distance": "m"}}

    groups = [{"sheet": {"relation": rel, "oov": False, "object_type": "vehicle"}, "shared": shared(k),
               "questions": [[t, q(f"Wie weit ist Region [{k}]? é{t}", 1.5 * k + t)] for t in (0, 1, 1, 3)]}
              for k in range(3)]
    old = {"sheet": {"relation": rel, "oov": True, "object_type": "vehicle"},
           "questions": [[2, {**q("before", 2.0), **shared(7)}], [0, {**q("before", 3.0), **shared(7)}]]}
    parts = [{"groups": groups[:2]}, {"groups": [old, groups[2]]}]
    merge_bench(iter(parts), tmp_path)
    expected: dict[int, list] = {t: [] for t in range(4)}
    n = 0
    for m, grp in enumerate(groups[:2] + [old, groups[2]]):
        for t, rec in grp["questions"]:
            expected[t].append({"question_id": f"q{n:08d}_g{m:05d}", "group_id": f"g{m:05d}", **rec,
                                **grp.get("shared", {})})
            n += 1
    for t in range(4):
        text = (tmp_path / "annotation_files" / f"strideqa_bench_t{t}.json").read_text(encoding="utf-8")
        assert text == json.dumps(expected[t], indent=1, ensure_ascii=False), t


def test_values_match_the_scripted_trajectories(bench):
    _, bench_dir, _ = bench
    per_t = _load(bench_dir)
    sheet = pd.read_csv(bench_dir / "annotation_files" / "annotation_sheet.csv").set_index("group_id")
    checked = 0
    for t, recs in per_t.items():
        for q in recs:
            g = sheet.loc[q["group_id"]]
            tt = TIMES[int(g["keyframe_index"])] + t
            xyz, yaw, _, _ = agent_state(NAME_OF_TRACK[int(g["track_id"])], np.array([tt]))
            rel = xyz[0] - np.array([*ego_xy(tt), 0.0])
            gv = q["gt_value"]
            if "distance" in gv:
                assert gv["distance"] == pytest.approx(np.linalg.norm(rel), abs=0.006)
            if "direction" in gv:
                assert gv["direction"] == pytest.approx(np.degrees(np.arctan2(rel[1], rel[0])), abs=0.006)
            if "velocity" in gv:
                want = EGO_V if q["qa_category"].startswith("ego_speed") else \
                    np.linalg.norm(np.gradient(agent_state(NAME_OF_TRACK[int(g["track_id"])], TIMES)[0][:, :2],
                                               0.5, axis=0)[int(g["keyframe_index"]) + 2 * t])
                assert gv["velocity"] == pytest.approx(want, abs=0.006)
            checked += 1
    assert checked == _expected_questions(sheet.reset_index())


def test_groups_scenarios_oov_and_drops(bench):
    br, bench_dir, summary = bench
    sheet = pd.read_csv(bench_dir / "annotation_files" / "annotation_sheet.csv")
    sheet["name"] = sheet["track_id"].map(NAME_OF_TRACK)
    rel = sheet.groupby("name")["relation"].apply(set).to_dict()
    assert "parked" not in rel and summary["dropped"]["static"] > 0  # a standing car is not dynamic
    # the toolkit's relation names (visualize.py), not the readable ones the classifier returns
    assert "Oncoming_Pass" in rel["oncoming"] and "Overtake" in rel["overtaken"]
    assert rel["maintain"] == {"Maintain_State"}
    assert "Other_Pulling_Away_From_Ego" in rel["pulling"] and "Path_Divergence_at_Intersection" in rel["diverging"]
    assert rel["crossing"] == {"Minor_Relations"}
    # OOV: the passing cars leave the front camera, the car ahead never does
    oov = sheet.groupby("relation")["oov"].agg(["min", "max"])
    assert oov.loc["Oncoming_Pass", "min"] and oov.loc["Overtake", "min"]
    assert not sheet[sheet["name"] == "maintain"]["oov"].any()
    # the oncoming pass is centred: its keyframe lies within 3 s before the scripted pass (t = 10.5 s)
    k = sheet[(sheet["name"] == "oncoming") & (sheet["relation"] == "Oncoming_Pass")]["keyframe_index"]
    assert ((TIMES[k] < 10.5) & (TIMES[k] >= 7.5)).all()
    # repetitions: one target and scenario never twice within the 3 s horizon
    for _, g in sheet.groupby(["track_id", "relation"]):
        assert (np.diff(np.sort(TIMES[g["keyframe_index"].to_numpy()])) >= 3.0 - 1e-9).all()
    # images: exactly the context frames used, as published: faces and plates the boxes place are blurred
    # (generator.writers.anonymize), JPEG bytes copied verbatim where there is nothing to blur
    from generator.writers.anonymize import ScenePublisher

    imgs = sorted((bench_dir / "images" / "CAM_FRONT").glob("*.jpg"))
    assert len(imgs) == summary["images"]
    pub = ScenePublisher.from_tables(SCENE, br.tables["frames"], br.tables["objects"])
    verbatim = 0
    for img in imgs:
        frame = int(img.stem.rsplit("_", 1)[1])
        src = (br.images / f"{SCENE}_{frame:03d}.jpg").read_bytes()
        assert img.read_bytes() == pub(src, frame, "CAM_FRONT")
        verbatim += img.read_bytes() == src
    assert verbatim < len(imgs)  # the scripted cars show their front or rear: something was blurred


def test_context_mask_missing_drops_group_and_rewrite_is_clean(tmp_path):
    import pyarrow as pa
    import pyarrow.compute as pc

    br = make_bench_run(tmp_path)
    first = export_bench(br.run)
    proj = br.tables["projections"]
    # the maintained car loses its mask in every frame at t = 4.5 s (a prev_3 frame of the t=6 s keyframe)
    k = int(np.flatnonzero(np.isclose(TIMES, 4.5))[0])
    hit = pc.and_(pc.equal(proj["track_id"], AGENTS["maintain"][0]), pc.equal(proj["frame_index"], k))
    masks = proj["mask_rle"].to_pylist()
    masks = [None if h else m for m, h in zip(masks, hit.to_pylist())]
    proj = proj.set_column(proj.schema.get_field_index("mask_rle"), "mask_rle", pa.array(masks, proj.schema.field("mask_rle").type))
    recommit(br, projections=proj)
    second = export_bench(br.run)
    assert second["dropped"]["no_front_mask"] >= 1
    sheet = pd.read_csv(br.run / "bench" / "annotation_files" / "annotation_sheet.csv")
    m = sheet[sheet["track_id"] == AGENTS["maintain"][0]]
    frames_with_gap = {k + d for d in range(0, 4)}  # keyframes whose context (3 frames back) includes frame k
    assert not set(m["keyframe_index"]) & frames_with_gap
    # a rewrite replaces the folder: no images of groups that are gone, no temporary folders
    used = {img for f in (br.run / "bench" / "annotation_files").glob("*.json")
            for q in json.loads(f.read_text()) for img in q["images"]}
    on_disk = {str(p.relative_to(br.run / "bench")) for p in (br.run / "bench" / "images").rglob("*.jpg")}
    assert used == on_disk
    assert not (br.run / ".staging").exists()
    assert first["groups"] >= second["groups"]


def test_agrees_with_the_qa_generator(tmp_path):
    """Candidates from the project's generated QA rows; the bench values, computed here from attributes,
    must equal the generator's own ego_spatiotemporal answers (two implementations, one truth)."""
    from generator.runfolder import read_table

    br = make_bench_run(tmp_path, with_qa="generated")
    summary = export_bench(br.run)
    assert summary["groups"] > 0
    qa = read_table(br.run, "qa").to_pandas()
    st = qa[qa["family"] == "ego_spatiotemporal"]
    by_id = st.set_index("qa_id")
    sheet = pd.read_csv(br.run / "bench" / "annotation_files" / "annotation_sheet.csv").set_index("group_id")
    kinds = {"distance": "distance", "direction": "bearing"}
    n = 0
    for t, recs in _load(br.run / "bench").items():
        for q in recs:
            g = sheet.loc[q["group_id"]]
            ego = q["qa_category"].startswith("ego_speed")  # a question about the ego: one per keyframe
            key = f"{SCENE}:{g['keyframe_index']}:ego_spatiotemporal:{{}}:{'ego' if ego else g['track_id']}:+{t}s"
            for k, v in q["gt_value"].items():
                qt = kinds.get(k) or ("ego_speed" if ego else "target_speed")
                assert v == pytest.approx(by_id.loc[key.format(qt), "value"], abs=0.006), (q["qa_category"], key)
                n += 1
            if t > 0:  # OOV = the generator's out_of_view at some future horizon
                fut = [by_id.loc[f"{SCENE}:{g['keyframe_index']}:ego_spatiotemporal:distance:{g['track_id']}:+{h}s",
                                 "out_of_view"] for h in (1, 2, 3)]
                assert bool(g["oov"]) == any(fut)
    # 16 values per group (t1..t3 distance questions carry distance and direction), 4 of them ego speeds
    assert n == 12 * summary["groups"] + 4 * len(sheet.drop_duplicates(["scene_id", "keyframe_index"]))


@pytest.mark.parametrize("rate_hz", [2.0, 1.0])
def test_context_rate_moves_qa_grounding_and_bench_images_together(tmp_path, rate_hz):
    """keyframes.context_rate_hz is read by one function (KeyframeConfig.context_offsets_s) for the QA
    grounding and the bench export: at 1 Hz the four context frames are -3..0 s, at 2 Hz -1.5..0 s, in both."""
    from generator.runfolder import read_table
    from schemas.config import PipelineConfig

    cfg = PipelineConfig()
    cfg.keyframes.context_rate_hz = rate_hz
    cfg.keyframes.context_before_s = 3.0  # so the 1 Hz context fits before the first keyframes
    br = make_bench_run(tmp_path, with_qa="generated", cfg=cfg)
    summary = export_bench(br.run)
    assert summary["groups"] > 0
    qa = read_table(br.run, "qa").to_pandas()
    st = qa[(qa.family == "ego_spatiotemporal") & (qa.horizon_s == 0) & (qa.track_ids.map(len) > 0)]
    ctx_of = {(r.keyframe_index, r.track_ids[0]): sorted(g["frame_index"] for g in r.grounding
                                                           if g["role"] in ("context", "current")) for r in st.itertuples()}
    want = [round(o * 2) for o in cfg.keyframes.context_offsets_s()]  # frame offsets at the fixture's 2 Hz
    assert want == ([-3, -2, -1, 0] if rate_hz == 2.0 else [-6, -4, -2, 0])
    n = 0
    for recs in _load(br.run / "bench").values():
        for q in recs:
            info = q["token_info"]
            kf = info["keyframe_index"]
            assert info["context_frame_indices"] == [kf + d for d in want]
            assert ctx_of[(kf, info["track_id"])] == info["context_frame_indices"]  # same frames as the QA rows
            n += 1
    sheet = pd.read_csv(br.run / "bench" / "annotation_files" / "annotation_sheet.csv")
    assert n == _expected_questions(sheet)


def test_non_finite_values_drop_the_group(tmp_path):
    import pyarrow as pa

    br = make_bench_run(tmp_path)
    att = br.tables["attributes"]
    k = int(np.flatnonzero(np.isclose(TIMES, 9.0))[0])
    hit = (att["track_id"].to_numpy() == AGENTS["pulling"][0]) & (att["frame_index"].to_numpy() == k)
    speed = np.where(hit, np.nan, att["speed_mps"].to_numpy())
    recommit(br, attributes=att.set_column(att.schema.get_field_index("speed_mps"), "speed_mps", pa.array(speed)))
    summary = export_bench(br.run)
    assert summary["dropped"]["non_finite_value"] >= 1
    for f in (br.run / "bench" / "annotation_files").glob("*.json"):
        assert "NaN" not in f.read_text()
    sheet = pd.read_csv(br.run / "bench" / "annotation_files" / "annotation_sheet.csv")
    kf = TIMES[sheet[sheet["track_id"] == AGENTS["pulling"][0]]["keyframe_index"].to_numpy()]
    assert not ((kf - 1.5 <= 9.0) & (kf + 3.0 >= 9.0)).any()  # no kept window spans t = 9 s


def test_without_qa_rows_candidates_come_from_anchors(tmp_path):
    br = make_bench_run(tmp_path, with_qa=False)
    summary = export_bench(br.run, tmp_path / "b2")
    assert summary["groups"] > 0
    sheet = pd.read_csv(tmp_path / "b2" / "annotation_files" / "annotation_sheet.csv")
    assert set(TIMES[sheet["keyframe_index"]]) <= set(np.arange(2.0, 18.0))  # anchors only


def test_cli(tmp_path, capsys):
    """``drivegen export stride_qa`` takes the bench's own options: ``--split`` reaches the export (the run's
    scenes are all in val, so a train bench is empty and says why)."""
    from generator.cli import main

    br = make_bench_run(tmp_path)
    assert main(["export", "stride_qa", str(br.run), "--out", str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out)["groups"] > 0
    assert (tmp_path / "out" / "annotation_files" / "strideqa_bench_t3.json").is_file()
    assert main(["export", "stride_qa", str(tmp_path / "nothing")]) == 2
    assert "not a drivegen run folder" in capsys.readouterr().err
    assert main(["export", "stride_qa", str(br.run), "--split", "train", "--out", str(tmp_path / "o2")]) == 0
    empty = json.loads((tmp_path / "o2" / "export_summary.json").read_text())
    assert empty["groups"] == 0  # the run's scenes are all in val: it says so, not "no rows"
    assert empty["why_empty"].startswith("no scene of the run is in split train (its QA rows are in val;"), empty


def test_the_deprecated_export_bench_runs_the_same_export(tmp_path, capsys):
    """``drivegen export_bench`` (deprecated for one release) says so on stderr, in one line naming the new form,
    and writes the very files ``drivegen export stride_qa`` writes with the same options; ``bench``, the export's
    earlier name under ``drivegen export``, still works."""
    from generator.cli import main

    br = make_bench_run(tmp_path)
    outs = {}
    for argv in (["export", "stride_qa"], ["export_bench"], ["export", "bench"]):
        out = tmp_path / "_".join(argv)
        assert main([*argv, str(br.run), "--split", "val", "--image-root", str(br.run), "--out", str(out)]) == 0
        err = capsys.readouterr().err
        outs[argv[-1]] = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        if argv == ["export_bench"]:
            assert err.splitlines() == ["drivegen export_bench is deprecated and will be removed in the next release: "
                                        "use drivegen export stride_qa"], err
        else:
            assert "deprecated" not in err, err
    assert len(outs["stride_qa"]) > 3 and outs["export_bench"] == outs["stride_qa"] == outs["bench"]


# --- the scenario classifier against scripted scenes -----------------------------------------------
OFFSETS = np.array([-1.5, -1.0, -0.5, 0.0, 1.0, 2.0, 3.0])


def _relative(ego, track, t0, grid):
    t = t0 + OFFSETS
    ex, ey, eyaw = (np.interp(t, grid, a) for a in (ego.x, ego.y, np.unwrap(ego.yaw)))
    tx, ty, tyaw = (np.interp(t, grid, a) for a in (track.x, track.y, np.unwrap(track.yaw)))
    dx, dy = tx - ex, ty - ey
    c, s = np.cos(eyaw), np.sin(eyaw)
    return np.stack([c * dx + s * dy, -s * dx + c * dy], 1), np.degrees(tyaw - eyaw)


def scripted_window(scenario: str, details: dict, straight, first_turn_after):
    """(t0, expected label) of the 4.5 s classification window for a scripted agent, placed from the script's
    own event times, never from the classifier; None when the script gives no usable window.
    ``straight(a, b)``: the ego drives straight over [a, b]; ``first_turn_after(t)``: start of the ego's next
    turn after t (None if none)."""
    d = details
    if scenario == "oncoming_pass":
        return d["pass_time_s"] - 1.5, "Oncoming Pass"
    if scenario == "overtake":
        return d["pass_time_s"] - 1.0, "Overtake"
    if scenario == "pulling_away":
        return d["accel_start_s"] + 0.5, "Pulling Away From Ego"
    if scenario == "ped_crossing":
        return d["cross_time_s"] - 1.0, "Minor Relations"
    if scenario == "maintain_state":  # a stretch where neither the ego nor the car ahead turns
        ok = [t for t in np.arange(2.0, 15.0) if straight(t - 1.5, t + 8.0)]
        return (ok[0], "Maintain State") if ok else None
    if scenario == "path_divergence":  # the window holds the turn of whichever of the two turns
        if d["agent_turn"] != "straight":
            return d["intersection_time_s"] + 0.5, "Path Divergence"
        t = first_turn_after(d["intersection_time_s"])
        return (t + 0.5, "Path Divergence") if t is not None else None
    return None


def test_classifier_agrees_with_scripted_scenarios():
    """Windows are placed from the scripts' own event times (details, ego manoeuvre labels), never from
    the classifier; the expected label is the scripted scenario."""
    from generator.synth.world import TIME_GRID_S as grid
    from generator.synth.world import script_scene

    def ego_straight(ego, a, b):
        sel = (grid >= a - 1e-9) & (grid <= b + 1e-9)
        return bool((ego.maneuver[sel] == "Straight").all())

    results: dict[str, list[str]] = {}
    for idx in range(40):  # scenes 2, 6, ... pull over: fewer straight windows there
        sc = script_scene(0, idx)
        ego = sc.ego
        for tr in sc.tracks:
            def first_turn_after(t):
                turning = np.flatnonzero(np.char.startswith(ego.maneuver.astype(str), "Turn") & (grid > t))
                return grid[turning[0]] if len(turning) else None

            s = tr.scenario
            window = scripted_window(s, tr.details, lambda a, b: ego_straight(ego, a, b), first_turn_after)
            if window is None:
                continue
            t0, want = window
            if not 1.5 <= t0 <= 17.0:
                continue
            if s != "path_divergence" and not ego_straight(ego, t0 - 1.5, t0 + 3.0):
                continue  # the ego turning makes any of these a divergence
            p, h = _relative(ego, tr, t0, grid)
            results.setdefault(want, []).append(classify_scenario(p, OFFSETS, h))
    assert set(results) == {"Oncoming Pass", "Overtake", "Pulling Away From Ego", "Minor Relations",
                            "Maintain State", "Path Divergence"}
    for want, got in results.items():
        acc = np.mean([g == want for g in got])
        assert len(got) >= 3 and acc >= 0.9, (want, len(got), acc, got)


def test_classifier_rules_and_input_checks():
    t = OFFSETS
    ahead = np.stack([np.full(7, 20.0), np.zeros(7)], 1)
    assert classify_scenario(ahead, t, np.zeros(7)) == "Maintain State"
    away = ahead + np.stack([np.clip(t, 0, None) * 3.0, np.zeros(7)], 1)
    assert classify_scenario(away, t, np.zeros(7)) == "Pulling Away From Ego"
    th = ScenarioConfig(pull_away_m=20.0)
    assert classify_scenario(away, t, np.zeros(7), thresholds=th) == "Minor Relations"
    with pytest.raises(ValueError, match="same length"):
        classify_scenario(ahead[:3], t, np.zeros(7))
    with pytest.raises(ValueError, match="increase"):
        classify_scenario(ahead, t[::-1], np.zeros(7))
    assert is_dynamic([0.1, 0.2, np.nan], 0.5) is False and is_dynamic([0.4, 0.9], 0.5) is True


def test_classifier_on_generated_logs(synth_root):
    """Against ``drivegen_scenarios.json`` of the generated nuScenes-format logs: relative trajectories
    from the devkit's ego poses and sample annotations at the 2 Hz keyframes; windows from the scripted
    event times (rounded to the keyframe grid) and the ego's manoeuvre segments."""
    from nuscenes.nuscenes import NuScenes

    from support.data import SYNTH_VERSION
    from generator.geometry import SE3

    nusc = NuScenes(version=SYNTH_VERSION, dataroot=str(synth_root), verbose=False)
    side = json.loads((synth_root / SYNTH_VERSION / "drivegen_scenarios.json").read_text())
    checked = []
    for sc in nusc.scene:
        info = side["scenes"][sc["token"]]
        toks, tok = [], sc["first_sample_token"]
        while tok:
            toks.append(tok)
            tok = nusc.get("sample", tok)["next"]
        ts = np.array([nusc.get("sample", k)["timestamp"] for k in toks])
        tk = (ts - ts[0]) / 1e6
        ego = [SE3.from_quat(p["rotation"], p["translation"]) for p in
               (nusc.get("ego_pose", nusc.get("sample_data", nusc.get("sample", k)["data"]["LIDAR_TOP"])["ego_pose_token"])
                for k in toks)]
        segs = [((s["start_timestamp"] - ts[0]) / 1e6, (s["end_timestamp"] - ts[0]) / 1e6, s["maneuver"])
                for s in info["ego"]["segments"]]

        def straight(a, b):
            return all(m == "Straight" for s0, s1, m in segs if s1 >= a - 1e-6 and s0 <= b + 1e-6)

        for inst, d in info["instances"].items():
            s = d["scenario"]
            window = scripted_window(s, d["details"], straight, lambda t: next(
                (s0 for s0, _, m in segs if m.startswith("Turn") and s0 > t), None))
            if window is None:
                continue
            t0, want = window
            t0 = round(t0 * 2) / 2
            if not 1.5 <= t0 <= 17.0 or (s != "path_divergence" and not straight(t0 - 1.5, t0 + 3.0)):
                continue
            anns = {a["sample_token"]: a for a in (nusc.get("sample_annotation", t) for t in
                                                    nusc.field2token("sample_annotation", "instance_token", inst))}
            idx = [int(np.argmin(np.abs(tk - (t0 + o)))) for o in OFFSETS]
            if any(toks[i] not in anns for i in idx):
                continue
            rel = [ego[i].inverse().compose(SE3.from_quat(anns[toks[i]]["rotation"], anns[toks[i]]["translation"]))
                   for i in idx]
            got = classify_scenario(np.array([r.translation[:2] for r in rel]), OFFSETS,
                                    np.degrees([r.yaw_rad for r in rel]))
            checked.append((want, got))
    assert len(checked) >= 5 and len({w for w, _ in checked}) >= 4
    assert np.mean([w == g for w, g in checked]) >= 0.9, checked


# ------------------------------------------------------------------- drivegen score stride on this export
def _toolkit_output(bench_dir: Path, out: Path, answer) -> Path:
    """The toolkit's inference output for ``answer(question) -> pred text``: one file per horizon."""
    out.mkdir()
    for t, rows in _load(bench_dir).items():
        (out / f"oracle_20261127_000000_t{t}.json").write_text(
            json.dumps([{**q, "pred": answer(q), "t": t} for q in rows]), encoding="utf-8")
    return out


def _said(q: dict, change: dict | None = None) -> str:
    """An answer stating ``gt_value``, the quantities ``change`` names changed by its function."""
    v = {k: (change or {}).get(k, lambda x: x)(x) for k, x in q["gt_value"].items()}
    parts = [f"{v['distance']:.2f} meters"] if "distance" in v else []
    parts += [f"{v['direction']:.2f} degrees"] if "direction" in v else []
    parts += [f"{v['velocity']:.2f} m/s"] if "velocity" in v else []
    return " at ".join(parts)


def test_score_stride_oracle_is_perfect_and_each_corruption_lowers_its_metric(bench, tmp_path):
    from generator.families.stride_qa.score import score

    _, bench_dir, _ = bench
    oracle = score(str(_toolkit_output(bench_dir, tmp_path / "oracle", lambda q: q["gt"])), str(bench_dir))
    assert oracle["problems"] == [] and oracle["missing"] == 0 and oracle["rows"] > 0
    assert {m: per["avg"]["success_rate"] for m, per in oracle["metrics"].items()} == {
        "target_distance": 1.0, "target_direction": 1.0, "ego_velocity": 1.0, "target_velocity": 1.0, "lsr": 1.0}
    assert oracle["temporal_consistency"][0] == {"relation": "Overall", "TLC@1": 1.0, "TLC@2": 1.0, "TLC@3": 1.0,
                                                 "TLC": 1.0, "MLSR": 1.0}
    first = _load(bench_dir)[1][0]["question_id"]  # one t1 distance question (distance and direction)
    speeds = {c: next(q["question_id"] for q in _load(bench_dir)[2] if q["qa_category"] == c)
              for c in ("ego_speed_data_4d_t2", "target_speed_data_4d_t2")}
    for name, qid, change, lowered in (
            ("distance", first, {"distance": lambda x: 2 * x}, {"target_distance", "lsr"}),
            ("direction", first, {"direction": lambda x: x + 90}, {"target_direction", "lsr"}),
            ("ego speed", speeds["ego_speed_data_4d_t2"], {"velocity": lambda x: 3 * x + 1}, {"ego_velocity"}),
            ("target speed", speeds["target_speed_data_4d_t2"], {"velocity": lambda x: 3 * x + 1},
             {"target_velocity"})):
        def answer(q, qid=qid, change=change):
            return _said(q, change) if q["question_id"] == qid else _said(q)
        r = score(str(_toolkit_output(bench_dir, tmp_path / name.replace(" ", "_"), answer)), str(bench_dir))
        got = {m for m, per in r["metrics"].items() if per["avg"]["success_rate"] < 1.0}
        assert got == lowered, (name, got)
