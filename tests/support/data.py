"""Fixtures of the real data excerpts (``../shared/data``, skipped with a reason when absent) and a small
generated nuScenes-format log set."""
from __future__ import annotations

from pathlib import Path

import pytest

from support.shared import built_once

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"
SYNTH_VERSION = "v1.0-drivegen"


def shared_data(sub: str) -> Path:
    """Path under ../shared/data, skipping the test with a reason when it is absent."""
    p = SHARED_DATA / sub
    if not p.exists():
        pytest.skip(f"real data excerpt {p} is absent (it lives in ../shared/data beside the repo, never in it)")
    return p


@pytest.fixture(scope="session")
def nuscenes_demo() -> Path:
    return shared_data("nuscenes-demo")


@pytest.fixture(scope="session")
def av2_log() -> Path:
    return shared_data("av2/7fab2350-7eaf-3b7e-a39d-6937a4c1bede")


@pytest.fixture(scope="session")
def av2_perceived(av2_log):
    """The real AV2 log through ``AV2Source`` -> labels perception (the log's own tracks; geometry-only
    visibility, the excerpt has no images) -> attributes, once per test run: (frames, PerceptionResult,
    attributes)."""
    from generator.attributes import compute_attributes
    from generator.sources import frames_table, open_source
    from schemas.config import PipelineConfig
    from support.perception import perceive

    cfg = PipelineConfig()
    scene = open_source("av2", str(av2_log.parent), cfg).load_scene(av2_log.name)
    frames = frames_table(scene)
    res = perceive(scene, cfg)
    return frames, res, compute_attributes(res.objects, frames)


@pytest.fixture(scope="session")
def labelled_run(synth_root, tmp_path_factory) -> Path:
    """The two generated scenes through the whole pipeline in-process (labels backend, every default QA
    family, the intention export; no WebDataset, bench export or card), made once per test run
    (``support.shared.built_once``)."""

    def build(folder: Path) -> None:
        from generator.pipeline import run
        from schemas.config import parse_config

        cfg = parse_config({"bench": {"export": False}, "writers": {"webdataset": False, "card": False}})
        res = run(str(folder / "run"), source="nuscenes", data=str(synth_root), version=SYNTH_VERSION, cfg=cfg,
                  executor="local", progress=False)
        assert res.exit_code == 0, res.summary

    return built_once(tmp_path_factory, "labelled-run", build) / "run"


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory) -> Path:
    """Two generated 20 s scenes (seed 0) in nuScenes format, made once per test run."""
    from generator.synth import make_dataset

    return built_once(tmp_path_factory, "synth", lambda root: make_dataset(root, num_scenes=2, seed=0,
                                                                           version=SYNTH_VERSION))


@pytest.fixture(scope="session")
def short_logs(tmp_path_factory) -> Path:
    """Two generated scenes (seed 0) at the full sensor density of ``synth_root`` (LiDAR sweeps at 10 Hz, six
    800x450 cameras) but their first 7 s only (14 keyframes), made once per test run: every stage and every code
    path of a scene at about a third of its cost, for the end-to-end tests whose property does not depend on a
    scene's length (same bytes, S3 equals local)."""
    from generator.synth import make_dataset

    return built_once(tmp_path_factory, "short-logs", lambda root: make_dataset(
        root, num_scenes=2, seed=0, version=SYNTH_VERSION, num_keyframes=14))


@pytest.fixture(scope="session")
def short_logs_cache(short_logs, tmp_path_factory) -> Path:
    """``short_logs`` as the default job's cached generated logs: ``drivegen run --scenes 2`` with this folder as
    ``DRIVEGEN_SYNTH_DIR`` reads them (the same paths in every run that does, so the same bytes)."""
    from support.pipeline import link_synth_cache

    return built_once(tmp_path_factory, "short-logs-cache", lambda folder: link_synth_cache(short_logs, folder))


@pytest.fixture(scope="session")
def short_default_run(short_logs_cache, tmp_path_factory):
    """``drivegen run --out RUN --scenes 2`` on the embedded Ray with 2 CPUs (the default job and config, its
    logs ``short_logs``), once per test run: (the run folder, the command's exit code, stdout and stderr as a
    ``CompletedProcess``). Tests read the folder and never change it (one that does copies it)."""
    import json
    import subprocess

    from support.pipeline import drivegen, write_config

    def build(folder: Path) -> None:
        cfg = write_config(folder / "two_cpus.yaml", {"ray": {"num_cpus": 2}})
        r = drivegen("run", "--out", folder / "run", "--scenes", 2, "--config", cfg, "--no-progress",
                     env={"DRIVEGEN_SYNTH_DIR": str(short_logs_cache)}, timeout=600)
        (folder / "command.json").write_text(json.dumps({"code": r.returncode, "out": r.stdout, "err": r.stderr}))

    folder = built_once(tmp_path_factory, "short-default-run", build)
    c = json.loads((folder / "command.json").read_text())
    return folder / "run", subprocess.CompletedProcess(["drivegen", "run"], c["code"], c["out"], c["err"])


@pytest.fixture(scope="session")
def minimal_logs(tmp_path_factory) -> Path:
    """Twelve short generated scenes (a few tenths of a CPU second each through the pipeline)."""
    from generator.synth import MINIMAL_SCENES, make_dataset

    return built_once(tmp_path_factory, "minimal-logs", lambda root: make_dataset(
        root, num_scenes=12, seed=0, version=SYNTH_VERSION, **MINIMAL_SCENES))


@pytest.fixture(scope="session")
def synth_lidar_detector(synth_root, tmp_path_factory):
    """The weight-free ``lidar`` detector (default ``DetectionConfig`` but for the backend) over the generated logs,
    run once per test run: a detector (frames -> boxes) that runs it on first sight of a list of frames and
    replays its output afterwards, read back from a file of the run's shared temporary root (the tests that use
    it run on several pytest-xdist workers). The tests that score it on every scene share one pass (detection
    is the costly part; tracking and scoring differ per test)."""
    import hashlib
    import pickle

    from actors.detect import build_detector
    from schemas.config import DetectionConfig

    real = build_detector(DetectionConfig(backend="lidar"))

    def detect(frames):
        key = repr([(f.scene_id, f.token, len(f.lidar_sweeps or ())) for f in frames])
        name = f"lidar-detections-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
        folder = built_once(tmp_path_factory, name,
                            lambda folder: (folder / "boxes.pkl").write_bytes(pickle.dumps(list(real(frames)))))
        return pickle.loads((folder / "boxes.pkl").read_bytes())  # fresh copies for each caller

    return detect


@pytest.fixture(scope="session")
def default_run(tmp_path_factory):
    """The embedded default run as ``make run`` makes it (three generated scenes, seed 0), through the CLI
    in-process with the same stages outside Ray (``drivegen run --out OUT --local``; the report included), made
    once per test run: ``(out, RunSummary, QA rows as pandas, the STRIDE-QA-Bench files {t: rows}, its
    annotation sheet, the command's wall time measured around it, what it printed)``. About 25 s on 2 cores: tests
    that use it are marked slow."""
    import contextlib
    import io
    import json
    import time

    import pandas as pd

    from generator.cli import main
    from schemas.summary import RunSummary

    def build(folder: Path) -> None:
        printed = io.StringIO()
        t = time.perf_counter()
        with contextlib.redirect_stdout(printed):
            code = main(["run", "--out", str(folder / "run"), "--local", "--no-progress"])
        wall = time.perf_counter() - t
        summary = folder / "run" / "summary.json"
        assert code == 0, summary.read_text() if summary.is_file() else code
        (folder / "command.json").write_text(json.dumps({"wall_s": wall, "printed": printed.getvalue()}))

    folder = built_once(tmp_path_factory, "default-run", build)
    out = folder / "run"
    command = json.loads((folder / "command.json").read_text())
    summary = RunSummary.from_json(json.loads((out / "summary.json").read_text()))
    qa = pd.read_parquet(out / "qa")
    ann = out / "bench" / "annotation_files"
    bench = {t: json.loads((ann / f"strideqa_bench_t{t}.json").read_text()) for t in range(4)}
    sheet = pd.read_csv(ann / "annotation_sheet.csv")
    return out, summary, qa, bench, sheet, command["wall_s"], command["printed"]
