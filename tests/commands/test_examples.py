"""The example predictions of ``examples/score/`` (issue 55): one file per scorer, written by
``scripts/score_examples.py`` from ``make run``'s output, each giving a non-trivial score on it in one command."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from generator.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "score"


@pytest.mark.slow
def test_each_scorer_has_an_example_that_scores_between_0_and_100(default_run, tmp_path, capsys):
    out = default_run[0]
    spec = importlib.util.spec_from_file_location("score_examples", REPO / "scripts" / "score_examples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(str(out), tmp_path / "again") == 0  # the shipped files are the script's on the default run
    shipped = sorted(p.relative_to(EXAMPLES) for p in EXAMPLES.rglob("*.json"))
    assert shipped == sorted(p.relative_to(tmp_path / "again") for p in (tmp_path / "again").rglob("*.json"))
    for rel in shipped:
        assert (EXAMPLES / rel).read_bytes() == (tmp_path / "again" / rel).read_bytes(), rel
    figures = {}
    for name, pred, key in (("qa", "qa_answers.json", None), ("stride", "stride", None),
                            ("drama-x", "drama_x_predictions.json", "OD"), ("pie", "pie_predictions.json", None),
                            ("intention", "intention_predictions.json", None)):
        s = tmp_path / name
        assert main(["score", name, "--pred", str(EXAMPLES / pred), str(out), "--out", str(s)]) == 0, name
        figures[name] = json.loads((s / "score.json").read_text())
    capsys.readouterr()
    qa = figures["qa"]["families"]
    assert 0 < sum(f["correct"] for f in qa.values()) < sum(f["answered"] for f in qa.values())
    assert 0 < figures["stride"]["metrics"]["lsr"]["avg"]["success_rate"] < 1
    assert 0 < figures["drama-x"]["OD"] < 1 and 0 < figures["drama-x"]["LIP"] < 1
    assert 0 < figures["pie"]["tasks"]["action"]["base"]["Acc"] < 1
    assert 0 < figures["intention"]["ISR"] < 1
