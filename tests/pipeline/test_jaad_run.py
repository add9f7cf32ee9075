"""``drivegen run --source jaad``: camera-only videos through Ray, PIE samples with extracted frames, DRAMA-X image
intent inside the run (issues 13 and 14).

The synthetic JAAD folder has small clips made here with OpenCV: a textured street that pans left by ``PAN`` px a
frame (the camera turns right), a pedestrian who keeps the camera's pace (still in the image, walking right in
the world) and one who stands in the world (drifting left in the image with the street). Only the camera-motion
compensation tells them apart. The real annotations (../shared/data/jaad, no videos) are run too when present.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from generator.families.drama_x.attributes import video_intent_frames
from generator.families.pie.attributes import build_samples
from generator.cli import main as cli
from generator.runfolder import RunReader
from generator.sources.clips import read_frames
from generator.sources.jaad import read_jaad, read_video
from generator.families.drama_x.config import DramaImageIntentConfig
from generator.families.pie.config import PieConfig
from support.jaad import JAAD, needs_jaad, write_video
from support.shared import built_once

cv2 = pytest.importorskip("cv2")

W, H, N, PAN = 320, 180, 90, 2  # image, frames, street shift per frame (px)
WALKER_X = 100.0  # keeps the camera's pace: still in the image
STANDER_X0 = 250.0  # still in the world: x = 250 - PAN f in the image
BOX_Y = (90, 150)


def _walker_x(f):
    return WALKER_X


def _stander_x(f):
    return STANDER_X0 - PAN * f


def _make_clip(path: Path) -> None:
    rng = np.random.default_rng(3)
    street = cv2.GaussianBlur(rng.integers(0, 255, (H, W + PAN * N), dtype=np.uint8), (0, 0), 2.0)
    person = cv2.GaussianBlur(rng.integers(0, 255, (BOX_Y[1] - BOX_Y[0], 20), dtype=np.uint8), (0, 0), 1.0)
    path.parent.mkdir(parents=True, exist_ok=True)
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (W, H))
    if not vw.isOpened():
        pytest.skip("OpenCV cannot write mp4v here")
    for f in range(N):
        img = street[:, PAN * f:PAN * f + W].copy()
        for x in (_walker_x(f), _stander_x(f)):
            x1 = int(round(x - 10))
            img[BOX_Y[0]:BOX_Y[1], x1:x1 + 20] = person
        vw.write(cv2.cvtColor(img, cv2.COLOR_GRAY2BGR))
    vw.release()


def _video(root: Path, vid: str, clip: str | None) -> None:
    write_video(root, vid, [
        {"pid": f"{vid}_w", "label": "pedestrian", "frames": range(0, N), "x": _walker_x, "cross_from": 60},
        {"pid": f"{vid}_s", "label": "ped", "frames": range(0, N), "x": _stander_x},
    ], [{"pid": f"{vid}_w", "crossing": 1, "crossing_point": 60}], n_frames=N, width=W, height=H, box_y=BOX_Y,
        half_width=10)
    if clip == "good":
        _make_clip(root / "clips" / f"{vid}.mp4")
    elif clip == "broken":
        (root / "clips").mkdir(parents=True, exist_ok=True)
        (root / "clips" / f"{vid}.mp4").write_bytes(b"\x00not an mp4" * 100)


def _three_videos(root: Path) -> None:
    _video(root, "video_0001", "good")
    _video(root, "video_0002", "broken")
    _video(root, "video_0003", None)


@pytest.fixture(scope="module")
def jaad_root(tmp_path_factory) -> Path:
    """The three videos, made once per test run (``support.shared.built_once``: the module's tests run on several
    pytest-xdist workers); tests never change them (the resume test changes a copy)."""
    return built_once(tmp_path_factory, "jaad-videos", lambda folder: _three_videos(folder / "jaad")) / "jaad"


@pytest.fixture(scope="module")
def ray_run(jaad_root, tmp_path_factory):
    """The three videos through Ray (exit 1: video_0002's clip cannot be decoded), once per test run (each worker
    ran it again: up to four times in one suite run)."""

    def build(folder: Path) -> None:
        code = cli(["run", "--out", str(folder / "run"), "--source", "jaad", "--data", str(jaad_root),
                    "--no-progress"])
        (folder / "exit_code").write_text(str(code))

    folder = built_once(tmp_path_factory, "jaad-ray-run", build)
    return int((folder / "exit_code").read_text()), folder / "run"


def _first_video_run(jaad_root: Path, out: Path, config_yaml: str) -> Path:
    """``video_0001`` alone, in process, with a config of ``config_yaml``; the run folder (its exit must be 0)."""
    cfg = out.parent / f"{out.name}.yaml"
    cfg.write_text(config_yaml)
    assert cli(["run", "--out", str(out), "--source", "jaad", "--data", str(jaad_root), "--scenes", "1",
                "--config", str(cfg), "--local", "--no-progress"]) == 0
    return out


def _intent_by_ped(out: Path, vid: str) -> dict[str, list[str]]:
    t = pq.read_table(out / "drama_video" / f"{vid}.parquet").to_pylist()
    by: dict[str, list[str]] = {}
    for r in t:
        by.setdefault(r["ped_id"], []).append(r["lateral_intent"])
    return by


def _share(values: list[str], want: str) -> float:
    return sum(v == want for v in values) / max(1, len(values))


def test_video_intent_frames_take_every_third_frame_at_10_hz(jaad_root):
    boxes = read_video(jaad_root, "video_0001", PieConfig())["boxes"]
    got = video_intent_frames(boxes, 30.0, DramaImageIntentConfig())
    assert got.tolist() == list(range(0, N, 3))
    assert video_intent_frames(boxes, 30.0, DramaImageIntentConfig(video_fps=30.0)).tolist() == list(range(N))


def test_run_goes_on_past_a_broken_clip_and_names_it(ray_run, jaad_root):
    code, out = ray_run
    assert code == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenes"] == {"total": 3, "ok": 2, "failed": 1, "skipped": 0}
    (err,) = summary["errors"]
    assert err["scene_id"] == "video_0002" and err["stage"] == "video"
    assert err["file"] == str(jaad_root / "clips" / "video_0002.mp4")
    assert RunReader(out).scene_ids() == ["video_0001", "video_0003"]
    assert summary["camera_only"]["clips"] == 1


def test_samples_are_the_benchmarks_and_their_frames_are_extracted(ray_run, jaad_root):
    _, out = ray_run
    got = pq.read_table(out / "pie_samples" / "video_0001.parquet")
    t = read_jaad(jaad_root, video_ids=["video_0001"])
    want, _ = build_samples(t.videos, t.boxes, t.pedestrians, t.vehicle, PieConfig())
    other = [c for c in want.column_names if c not in ("image_paths", "video_path")]
    assert got.select(other).equals(want.select(other))
    assert got.num_rows > 0 and set(got.column("task").to_pylist()) == {"action", "risk"}
    assert 1 in got.column("crossing").to_pylist()
    assert set(got.column("video_path").to_pylist()) == {str(jaad_root / "clips" / "video_0001.mp4")}
    paths = sorted({p for ps in got.column("image_paths").to_pylist() for p in ps})
    frames = sorted({f for fs in got.column("frames").to_pylist() for f in fs})
    assert paths == [str(out / "images" / "video_0001" / f"{f:05d}.png") for f in frames]
    decoded = read_frames(jaad_root / "clips" / "video_0001.mp4", frames[::7])
    for f, img in decoded.items():  # png: the very pixels the clip decodes to
        assert np.array_equal(cv2.imread(str(out / "images" / "video_0001" / f"{f:05d}.png")), img), f
    manifest = json.loads((out / "manifest" / "video_0001.json").read_text())
    assert manifest["counts"]["images"] == len(frames)
    assert sum(p["path"].startswith("images/") for p in manifest["files"]) == len(frames)


def test_qa_asks_the_pie_questions_of_the_samples(ray_run):
    import pyarrow.compute as pc

    _, out = ray_run
    qa = pq.read_table(out / "qa").to_pandas()
    assert set(qa.family) == {"pie", "drama_x"} and set(qa.split) == {"train"}
    assert set(qa[qa.scene_id == "video_0003"].family) == {"pie"}  # no clip: no image intent, no DRAMA-X rows
    for vid, extracted in (("video_0001", True), ("video_0003", False)):
        s = pq.read_table(out / "pie_samples" / f"{vid}.parquet").to_pandas()
        q = qa[(qa.scene_id == vid) & (qa.family == "pie")]
        cross = q[q.question_type == "crossing"].set_index(["keyframe_index", q[q.question_type == "crossing"]
                                                            .instance_tokens.str[0]])
        act = s[s.task == "action"].set_index(["end_frame", "ped_id"])
        assert len(cross) == len(act) > 0
        assert (cross.value.loc[act.index].to_numpy() == act.crossing.to_numpy()).all()
        assert set(cross.answer.str[:3]) <= {"Yes", "No,", "No:"}
        risk = q[q.question_type == "risk_region"]
        assert len(risk) == int((s.task == "risk").sum())
        assert sorted(risk.value) == sorted(s[s.task == "risk"].risk_class.astype(float))
        g = [gs[0] for gs in q.grounding]
        assert all(x["frame_index"] == k for x, k in zip(g, q.keyframe_index))
        paths = {x["image_path"] for x in g}
        if extracted:
            assert all(Path(p).is_file() for p in paths)
        else:
            assert paths == {None}
    assert json.loads((out / "summary.json").read_text())["qa"]["total"] == len(qa)
    # DRAMA-X questions: one intent and one risk per labelled pedestrian and sampled frame, one action per frame
    d = pq.read_table(out / "drama_video" / "video_0001.parquet").to_pandas()
    dq = qa[qa.family == "drama_x"]
    by = {(r.keyframe_index, r.instance_tokens[0]): r for r in dq[dq.question_type != "action"].itertuples()
          if r.question_type == "intent"}
    assert len(by) == len(d) and len(dq[dq.question_type == "risk"]) == len(d)
    for r in d.itertuples():
        q = by[(r.frame_index, r.ped_id)]
        assert q.value == 3 * ["goes to the left", "goes to the right", "stationary"].index(r.lateral_intent) + [
            "moves towards ego vehicle", "moves away from ego vehicle", "stationary"].index(r.vertical_intent)
    act = dq[dq.question_type == "action"]
    assert sorted(act.keyframe_index) == sorted(d.frame_index.unique()) and act.region_ids.map(len).eq(0).all()


def test_a_video_without_its_clip_runs_from_annotations_with_an_issue(ray_run, jaad_root):
    _, out = ray_run
    issues = pq.read_table(out / "issues" / "video_0003.parquet").to_pylist()
    assert [(i["reason"], i["frame_index"], i["file"]) for i in issues] == [
        ("no_clip", -1, str(jaad_root / "clips" / "video_0003.mp4"))]
    s = pq.read_table(out / "pie_samples" / "video_0003.parquet")
    assert s.num_rows > 0 and s.column("image_paths").null_count == s.num_rows
    assert not (out / "drama_video" / "video_0003.parquet").exists()
    assert not (out / "images" / "video_0003").exists()


def test_image_intent_in_the_run_needs_the_compensation(ray_run, jaad_root, tmp_path):
    _, out = ray_run
    by = _intent_by_ped(out, "video_0001")
    assert _share(by["video_0001_w"], "goes to the right") >= 0.9, by["video_0001_w"]
    assert _share(by["video_0001_s"], "stationary") >= 0.9, by["video_0001_s"]
    raw = _first_video_run(jaad_root, tmp_path / "raw", "drama_x:\n  image_intent:\n    compensate: false\n")
    by_raw = _intent_by_ped(raw, "video_0001")
    assert _share(by_raw["video_0001_w"], "stationary") >= 0.9, by_raw["video_0001_w"]
    assert _share(by_raw["video_0001_s"], "goes to the left") >= 0.9, by_raw["video_0001_s"]
    # frames scaled down to half width for the flow: the boxes are scaled alike, the intent is the same
    half = _first_video_run(jaad_root, tmp_path / "half",
                            f"drama_x:\n  image_intent:\n    video_max_width_px: {W // 2}\n")
    by_half = _intent_by_ped(half, "video_0001")
    assert _share(by_half["video_0001_w"], "goes to the right") >= 0.9, by_half["video_0001_w"]
    assert _share(by_half["video_0001_s"], "stationary") >= 0.9, by_half["video_0001_s"]


def test_resume_finishes_the_video_once_its_clip_is_fixed(jaad_root, tmp_path):
    """A copy of the videos (the module's are shared by its tests) run in process, its broken clip then replaced by
    a good one: ``--resume`` runs that video alone and leaves the finished ones as they were."""
    import shutil

    logs, run = tmp_path / "jaad", tmp_path / "run"
    shutil.copytree(jaad_root, logs)
    assert cli(["run", "--out", str(run), "--source", "jaad", "--data", str(logs), "--local", "--no-progress"]) == 1
    assert RunReader(run).scene_ids() == ["video_0001", "video_0003"]
    before = (run / "manifest" / "video_0001.json").read_bytes()
    (logs / "clips" / "video_0002.mp4").unlink()
    shutil.copy(logs / "clips" / "video_0001.mp4", logs / "clips" / "video_0002.mp4")
    assert cli(["run", "--resume", str(run), "--local", "--no-progress"]) == 0
    assert RunReader(run).scene_ids() == ["video_0001", "video_0002", "video_0003"]
    assert (run / "manifest" / "video_0001.json").read_bytes() == before
    assert not list((run / "errors").glob("*.parquet"))
    assert json.loads((run / "summary.json").read_text())["scenes"]["skipped"] == 2


def test_export_pie_from_the_run(ray_run, tmp_path):
    import pyarrow.compute as pc

    _, out = ray_run
    exp = tmp_path / "export"
    assert cli(["export_pie", "--run", str(out), "--out", str(exp)]) == 0
    summary = json.loads((exp / "export_summary.json").read_text())
    assert summary["source"]["kind"] == "jaad" and summary["errors"][0]["video"] == "video_0002"
    stored = pq.read_table(out / "pie_samples")
    exported = pq.read_table(exp / "action" / "train.parquet")
    assert exported.num_rows == pc.sum(pc.equal(stored.column("task"), "action")).as_py() > 0
    assert sorted(exported.column("sample_id").to_pylist()) == sorted(
        stored.filter(pc.equal(stored.column("task"), "action")).column("sample_id").to_pylist())
    other = tmp_path / "other.yaml"
    other.write_text("pie:\n  observation_frames: 10\n")
    assert cli(["export_pie", "--run", str(out), "--out", str(tmp_path / "e2"), "--config", str(other)]) == 2


@needs_jaad
def test_real_jaad_annotations_run_like_the_export(tmp_path):
    out, exp = tmp_path / "run", tmp_path / "export"
    code = cli(["run", "--out", str(out), "--source", "jaad", "--data", str(JAAD), "--local", "--no-progress"])
    tables = read_jaad(JAAD)
    assert code == 0 and tables.errors == [] and len(tables.video_ids) == 250  # every video, gapped tracks kept
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == [] and summary["scenes"]["ok"] == 250
    want, _ = build_samples(tables.videos, tables.boxes, tables.pedestrians, tables.vehicle, PieConfig())
    assert cli(["export_pie", "--run", str(out), "--out", str(exp)]) == 0
    got = json.loads((exp / "export_summary.json").read_text())["counts"]
    from generator.families.pie.attributes import sample_counts

    assert got == json.loads(json.dumps(sample_counts(want)))
    assert summary["families"]["pie"]["action_samples"] == got["action"]["samples"]
    # Region [X]: the pedestrians of the keyframe numbered from the lowest box bottom up (nearest first), by hand
    qa = pq.read_table(out / "qa").to_pandas()
    boxes = tables.boxes.to_pandas()
    for r in qa.sample(n=min(200, len(qa)), random_state=0).itertuples():
        at = boxes[(boxes.video_id == r.scene_id) & (boxes.frame == r.keyframe_index)
                   & boxes.label.isin(["pedestrian", "ped"])]
        ranked = sorted(zip(-at.y2_px, at.ped_id))
        assert [pid for _, pid in ranked].index(r.instance_tokens[0]) == r.region_ids[0], r.qa_id
        assert f"Region [{r.region_ids[0]}]" in r.question


def test_regenerate_rebuilds_the_videos_qa_from_the_run_folder(ray_run, tmp_path):
    """No video is decoded again: the samples and the 2D boxes the run kept are enough. The same seed gives the
    very rows of the run; another seed another template choice, with the same questions' ids and values."""
    _, out = ray_run
    same, other = tmp_path / "same", tmp_path / "other"
    assert cli(["regenerate", str(out), "--out", str(same), "--no-progress"]) == 0
    assert cli(["regenerate", str(out), "--out", str(other), "--seed", "5", "--no-progress"]) == 0
    a, b, c = (pq.read_table(d / "qa").sort_by("qa_id") for d in (out, same, other))
    assert a.num_rows > 0 and b.equals(a)
    assert c.column("qa_id").equals(a.column("qa_id")) and c.column("value").equals(a.column("value"))
    assert c.column("template_id") != a.column("template_id")
    assert RunReader(other).scene_ids() == ["video_0001", "video_0003"]


@pytest.mark.parametrize("command", [["export", "stride_qa"], ["export", "intention_drive"], ["validate"]])
def test_3d_commands_refuse_a_camera_only_run_by_name(ray_run, capsys, command):
    _, out = ray_run
    assert cli([*command, str(out)]) == 2
    err = capsys.readouterr().err
    assert "camera-only run (source jaad)" in err and f"drivegen {' '.join(command)}" in err and "drivegen -h" in err


def test_drama_x_of_videos_risk_export_and_scorer(jaad_root, tmp_path):
    """DRAMA-X for a camera-only log, end to end: the walker crosses at frame 60 (JAAD's crossing_point), so
    with a 1 s horizon it is at risk from frame 30 on (time to conflict: the wait, 0 once crossing) and the
    ego, moving, must stop (within stop_ttc_s); the bystander is never at risk. Positions come from the box
    centre's x (the middle third is Front). ``export_drama`` writes the frames in DRAMA-X's format and the
    scorer gives the ground truth 100 %, less with flipped intents."""
    import copy

    from generator.validate.score import scorer

    run = _first_video_run(jaad_root, tmp_path / "run", "drama_x:\n  risk:\n    horizon_s: 1.0\n")
    rows = pq.read_table(run / "drama_video").to_pandas()
    w, s = rows[rows.ped_id == "video_0001_w"], rows[rows.ped_id == "video_0001_s"]
    at_risk = (w.frame_index >= 30).to_numpy()
    assert (w.risk.to_numpy() == at_risk).all() and at_risk.any() and not at_risk.all()
    ttc = np.where(w.frame_index >= 60, 0.0, (60 - w.frame_index) / 30.0)
    assert np.allclose(w.time_to_conflict_s.to_numpy()[at_risk], ttc[at_risk])
    assert set(w.suggested_action[at_risk]) == {"stop"} and set(w.suggested_action[~at_risk]) == {"continue"}
    assert not s.risk.any() and set(s.suggested_action) == {"continue"}
    x = np.array([(b[0] + b[2]) / 2 for b in rows.box_xyxy])
    want = np.where(x > W * 2 / 3, "Right", np.where(x < W / 3, "Left", "Front"))
    assert (rows.position.to_numpy() == want).all() and len(set(want)) == 3

    out = tmp_path / "dx"
    assert cli(["export_drama", str(run), "--out", str(out)]) == 0
    gt = json.loads((out / "samples" / "video_0001.json").read_text())
    assert len(gt) == rows.frame_index.nunique() and {v["Risk"] for v in gt.values()} == {"Yes", "No"}
    one = gt["video_0001_0060"]
    assert one["image_path"] == str(run / "images" / "video_0001" / "00060.png") and one["camera"] == "front"
    assert one["Pedestrians"]["video_0001_w"]["Intent"][0] == "goes to the right"
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps(gt))
    perfect = scorer("drama-x").score(str(pred), str(out))
    for m in ("OD", "LIP", "VIP", "intent_combined", "risk_balanced_accuracy", "risk_f1", "action_exact_vocab_accuracy"):
        assert perfect[m] == pytest.approx(1.0), (m, perfect[m])
    flipped = copy.deepcopy(gt)
    for v in flipped.values():
        for o in v["Pedestrians"].values():
            o["Intent"][0] = "goes to the left" if o["Intent"][0] != "goes to the left" else "goes to the right"
    pred.write_text(json.dumps(flipped))
    assert scorer("drama-x").score(str(pred), str(out))["LIP"] == 0


def test_the_dataset_card_of_a_camera_only_run_loads_and_says_what_it_is(ray_run):
    """The run ends with a dataset card, as 3D runs do: JAAD's licence, the camera-only provenance and split rule,
    and a folder Hugging Face ``datasets`` loads as it is."""
    _, out = ray_run
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlicense: mit\n")
    assert "**Camera-only logs**" in card and "JAAD: `split_ids/" in card and "driving videos" in card
    assert "COCO RLE" not in card and "3D annotations" not in card
    datasets = pytest.importorskip("datasets")
    qa = datasets.load_dataset(str(out), split="train")
    assert len(qa) == pq.read_table(out / "qa").num_rows


@pytest.mark.slow
def test_camera_only_run_into_object_storage(s3_server, ray_run, jaad_root, tmp_path):
    """A camera-only run whose folder is on S3 (moto's server): the extracted frames are objects there, the samples
    and QA name them by URI, with the very bytes of a local run's; the broken clip is an errors row; export_pie
    reads the run back from S3."""
    from support.pipeline import drivegen

    _, local = ray_run
    bucket = s3_server.new_bucket()
    out = f"s3://{bucket}/runs/jaad"
    r = drivegen("run", "--out", out, "--source", "jaad", "--data", jaad_root, "--local", "--no-progress")
    assert r.returncode == 1, r.stderr[-3000:]
    reader = RunReader(out)
    assert reader.scene_ids() == ["video_0001", "video_0003"]
    assert [e["scene_id"] for e in reader.errors()] == ["video_0002"]
    samples = reader.read_scene("pie_samples", "video_0001")
    paths = sorted({p for ps in samples.column("image_paths").to_pylist() for p in ps})
    assert paths and all(p.startswith(f"s3://{bucket}/runs/jaad/images/video_0001/") for p in paths)
    fs = s3_server.filesystem()
    for p in paths[::9]:
        with fs.open_input_stream(p.removeprefix("s3://")) as f:
            data = f.read()
        assert data == (local / "images" / "video_0001" / p.rsplit("/", 1)[1]).read_bytes()
    qa = reader.read_table("qa")
    assert qa.num_rows == pq.read_table(local / "qa").num_rows
    exp = tmp_path / "pie"
    r = drivegen("export_pie", "--run", out, "--out", exp)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((exp / "export_summary.json").read_text())["source"]["kind"] == "jaad"


def test_the_run_ends_with_a_report_of_its_videos(ray_run, tmp_path):
    """``drivegen run`` writes the HTML report of a camera-only run: its counts are the run's, the Videos page has a
    row per finished video instead of bird's-eye views, and in headless Chromium every sample page shows its
    marked frames (the video without a clip has none to show)."""
    import re

    from test_report import CHROMIUM, chromium, count_problems, image_problems, reading_problems

    _, out = ray_run
    report = out / "report"
    videos = (report / "scenes.html").read_text()
    assert re.findall(r'<tr data-scene="([^"]+)">', videos) == ["video_0001", "video_0003"]
    assert "bird's-eye" not in videos and "projections visible" not in (report / "index.html").read_text()
    if CHROMIUM is None:
        pytest.skip("chromium is not installed: the browser half of this test cannot run")
    index = chromium((report / "index.html").as_uri(), tmp_path)
    assert count_problems(index, out) == []
    assert reading_problems(index) == [] and 'id="no-distributions"' in index  # says why it has no histograms
    pages = sorted(report.glob("samples-*.html"))
    assert {p.name.split("-")[1] for p in pages} == {"pie", "drama_x"}
    for page in pages:
        dom = chromium(page.as_uri(), tmp_path)
        broken = [p for p in image_problems(dom) if p != "the page has no image"]
        assert broken == [], page.name
        assert re.search(r'<p class="q">[^<]+</p>', dom), page.name
        assert reading_problems(dom) == [], page.name  # a card of the clip-less video says why it has no image
    assert any('alt="front frame' in chromium(p.as_uri(), tmp_path) for p in pages)


@pytest.mark.slow
def test_jaad_folder_on_object_storage(s3_server, ray_run, jaad_root, tmp_path):
    """``--data s3://...``: the annotations are mirrored into the node cache when the source opens, a clip when its
    video loads; the samples and QA equal the local folder's, and every file the run names (the clip a sample was
    cut from, the broken clip's error, the missing clip's issue) is named by its URI."""
    from support.pipeline import drivegen, write_config

    _, local = ray_run
    bucket = s3_server.new_bucket()
    uri = f"s3://{bucket}/jaad"
    s3_server.upload(jaad_root, uri)
    cfg = write_config(tmp_path / "cfg.yaml", {"sources": {"cache_dir": str(tmp_path / "cache")}})
    out = tmp_path / "run"
    r = drivegen("run", "--out", out, "--source", "jaad", "--data", uri, "--config", cfg, "--local", "--no-progress")
    assert r.returncode == 1, r.stderr[-3000:]
    reader = RunReader(str(out))
    assert reader.scene_ids() == ["video_0001", "video_0003"]
    (err,) = reader.errors()
    assert err["scene_id"] == "video_0002" and err["file"] == f"{uri}/clips/video_0002.mp4", err
    issues = pq.read_table(out / "issues" / "video_0003.parquet").to_pylist()
    assert [i["file"] for i in issues] == [f"{uri}/clips/video_0003.mp4"]
    for vid in ("video_0001", "video_0003"):
        a = pq.read_table(local / "pie_samples" / f"{vid}.parquet")
        b = pq.read_table(out / "pie_samples" / f"{vid}.parquet")
        keep = [c for c in a.column_names if c not in ("image_paths", "video_path")]
        assert b.select(keep).equals(a.select(keep))
    assert set(pq.read_table(out / "pie_samples" / "video_0001.parquet").column("video_path").to_pylist()) == {
        f"{uri}/clips/video_0001.mp4"}
    a, b = (pq.read_table(d / "qa").sort_by("qa_id") for d in (local, out))
    assert b.select(["qa_id", "question", "answer", "value"]).equals(a.select(["qa_id", "question", "answer", "value"]))
    assert (tmp_path / "cache").is_dir() and any((tmp_path / "cache").rglob("video_0001.mp4"))
