"""What a paper family may touch: its own tables and its own counts. A family's ``counts()`` lives in its own
namespace of the scene's manifest counts (``counts["families"][name]``), so a key the core uses (``frames``) or
another family uses is never overwritten; a family's ``derive()`` may return only the tables its ``tables()``
declares, so it can never replace a core table (``objects``). Both defects were reproduced on an in-process run
of one generated scene with a family that does each."""
from __future__ import annotations

import json

import pytest

import generator.pipeline.stages as stages
from generator.pipeline import run
from generator.runfolder import RunReader
from schemas.families import PaperFamily, family_counts, families
from support.data import SYNTH_VERSION


class CountsFrames(PaperFamily):
    """Counts under a name the core uses."""

    name = "counts_frames"

    def derive(self, scene, cfg):
        return {}

    def counts(self, tables, cfg):
        return {"frames": 0, "objects": 0}


class WritesObjects(PaperFamily):
    """Returns a table under the core's ``objects``."""

    name = "writes_objects"

    def derive(self, scene, cfg):
        return {"objects": scene["objects"].slice(0, 1)}


def _run_with(family: PaperFamily, logs, out, monkeypatch):
    with_it = {**families(), family.name: family}
    monkeypatch.setattr(stages, "families", lambda: with_it)
    return run(str(out), source="nuscenes", data=str(logs), version=SYNTH_VERSION, executor="local", progress=False,
               scenes=1)


def _plain(logs, out):
    return run(str(out), source="nuscenes", data=str(logs), version=SYNTH_VERSION, executor="local", progress=False,
               scenes=1)


@pytest.fixture(scope="module")
def plain_run(minimal_logs, tmp_path_factory):
    out = tmp_path_factory.mktemp("plain") / "run"
    assert _plain(minimal_logs, out).exit_code == 0
    return out


def test_a_familys_counts_never_overwrite_the_cores(minimal_logs, plain_run, tmp_path, monkeypatch):
    res = _run_with(CountsFrames(), minimal_logs, tmp_path / "run", monkeypatch)
    assert res.exit_code == 0, res.summary
    reader, plain = RunReader(str(tmp_path / "run")), RunReader(str(plain_run))
    sid = reader.scene_ids()[0]
    counts, want = reader.manifest(sid)["counts"], plain.manifest(sid)["counts"]
    assert want["frames"] > 0 and want["objects"] > 0
    assert (counts["frames"], counts["objects"]) == (want["frames"], want["objects"])  # 41 -> 0 before
    assert family_counts(counts, "counts_frames") == {"frames": 0, "objects": 0}
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["frames"] == want["frames"] and summary["objects"] == want["objects"]


def test_a_family_cannot_return_a_core_table(minimal_logs, plain_run, tmp_path, monkeypatch):
    res = _run_with(WritesObjects(), minimal_logs, tmp_path / "run", monkeypatch)
    reader = RunReader(str(tmp_path / "run"), require=False)
    objects = reader.read_scene("objects", RunReader(str(plain_run)).scene_ids()[0])
    assert objects is None or objects.num_rows > 1  # 587 rows written as 1 before
    assert res.exit_code == 1 and res.summary.scenes.failed == 1, res.summary
    (err,) = res.summary.errors
    assert "writes_objects" in err["message"] and "'objects'" in err["message"] and "derive" in err["message"], err


def test_family_counts_reads_run_folders_from_before_the_namespace():
    """Manifests written before each family had its namespace hold its counts at the top level."""
    old = {"frames": 41, "pie_action_samples": 3}
    assert family_counts(old, "pie") == old
    assert family_counts({"frames": 41, "families": {"pie": {"pie_action_samples": 3}}}, "pie") == \
        {"pie_action_samples": 3}
    assert family_counts({"frames": 41, "families": {}}, "pie") == {}
