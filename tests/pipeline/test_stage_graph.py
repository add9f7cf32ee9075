"""The stage graph describes itself (``generator.pipeline.core.describe``, ``drivegen run --describe``): every
stage with what it needs and makes, how it runs under the config and what it does, read from the stages; a
graph whose stage needs what no earlier stage makes is refused."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from generator.pipeline import stages as real, video
from generator.pipeline.core import Stage, check_graph, describe
from schemas.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_graph_describes_each_stage():
    cfg = load_config()
    text = describe(real.default_stages(cfg), cfg)
    lines = text.splitlines()
    for stage, wiring in [("load", "- -> loaded"), ("detect", "loaded -> detected"),
                          ("perceive", "loaded, detected -> perceived"), ("attributes", "loaded, perceived -> described"),
                          ("qa", "loaded, perceived, described -> questions"), ("write", "(all) -> run folder")]:
        row = next(x for x in lines if x.startswith(stage + " "))
        assert wiring in row and "task, 1 CPU" in row, row
    assert "generator.perception.detect_scene" in text and "generator.qa.generate_qa" in text


def test_how_a_stage_runs_follows_the_config():
    cfg = load_config(overrides={"detection": {"backend": "mmdet3d"},
                                 "ray": {"actor_num_cpus": 0.25, "stage_actors": {"detect": {"pool_size": 3}}}})
    row = next(x for x in describe(real.default_stages(cfg), cfg).splitlines() if x.startswith("detect "))
    assert "actor pool of 3, 0.25 CPU, 1 GPU when the cluster has GPUs" in row, row


def test_the_camera_only_graph():
    cfg = load_config()
    text = describe(video.stages(cfg), cfg)
    assert "- -> video" in text and "derive_video" in text


def test_a_stage_needing_what_no_earlier_stage_makes_is_refused():
    cfg = load_config()
    stages = real.default_stages(cfg)
    check_graph(stages)
    with pytest.raises(ValueError, match="stage 'detect' needs loaded, which no stage before it makes"):
        check_graph(stages[1:])
    with pytest.raises(ValueError, match="makes 'loaded', which a stage before it makes already"):
        check_graph([stages[0], Stage("again", stages[0].run, makes="loaded")])


def test_run_describe_prints_the_graph_and_runs_nothing(tmp_path):
    res = subprocess.run([sys.executable, "-m", "generator.cli", "run", "--describe", "--source", "jaad"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines()[0].split() == ["stage", "needs", "->", "makes", "runs", "as", "does"]
    assert "load   - -> video" in res.stdout and "perceive" not in res.stdout
    assert list(tmp_path.iterdir()) == []
