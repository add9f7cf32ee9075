"""The end of a run as per-scene parts and a merge (``generator.runfolder.parts``): the exports, the card and the
report merged from parts are the very files the whole-run path writes; a killed end of a run resumed builds
only the parts it lacked and writes the same bytes; a part whose scene changed is built again; the driver keeps
sums, not rows."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from generator.pipeline import SYNTH_VERSION
from generator.runfolder import RunReader, RunStore
from generator.runfolder.parts import build_parts, build_scene_parts, part_file, read_parts
from support.pipeline import count_parquet_reads, drivegen

# the end-of-run outputs whose bytes must not depend on how they were built (card/stats.json also holds this
# command's figures of the run; its statistics are compared below)
OUTPUTS = ("bench", "intention", "README.md")


def _sums(run: Path, tops=OUTPUTS) -> dict[str, str]:
    """sha256 of each file; an export summary's without the run folder it names (a copied run has another)."""
    out = {}
    for top in tops:
        p = run / top
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
        for f in files:
            data = f.read_bytes()
            if f.name == "export_summary.json":
                data = json.dumps({k: v for k, v in json.loads(data).items() if k != "run"}).encode()
            out[f.relative_to(run).as_posix()] = hashlib.sha256(data).hexdigest()
    return out


@pytest.fixture(scope="module")
def finished(minimal_logs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("parts") / "run"
    res = drivegen("run", "--source", "nuscenes", "--data", minimal_logs, "--version", SYNTH_VERSION, "--out", out,
                   "--scenes", 4, "--local", "--no-progress")
    assert res.returncode == 0, res.stderr[-3000:]
    (out.parent / "stderr.txt").write_text(res.stderr)
    return out


def test_scenes_build_their_parts_as_they_are_committed(finished):
    """Each scene's parts are built by the worker that committed it: the end of the run builds none, and each part
    carries the key of its scene's manifest (``build_parts`` keeps them all)."""
    stderr = (finished.parent / "stderr.txt").read_text()
    assert "parts of 4 scene(s): 0 built, 16 kept" in stderr
    reader = RunReader(str(finished))
    from generator.pipeline.exports import finalize_parts

    assert build_parts(reader.store, reader.scene_ids(), finalize_parts(reader.config())) == {"built": 0, "kept": 16}


def test_parts_merge_to_the_whole_run_files(finished, tmp_path):
    """bench/ and intention/ merged from the run's parts are byte for byte what the exports write when they read
    the whole run themselves (``drivegen export_bench|export_intention --out``), and the card's statistics are
    those of the rows."""
    from generator.pipeline.exports import CARD_PART
    from generator.writers.card import compute_stats, merge_stats

    reader = RunReader(str(finished))
    assert len(reader.scene_ids()) == 4
    for name in ("card", "bench", "intention", "report"):
        assert len(list((finished / "parts" / name).glob("*.json"))) == 4, name
    for cmd, folder in (("export_bench", "bench"), ("export_intention", "intention")):
        res = drivegen(cmd, finished, "--out", tmp_path / folder)
        assert res.returncode == 0, res.stderr[-2000:]
        whole = {k.split("/", 1)[1]: v for k, v in _sums(tmp_path, (folder,)).items()}
        merged = {k.split("/", 1)[1]: v for k, v in _sums(finished, (folder,)).items()}
        assert merged == whole, folder
    assert (finished / "bench" / "annotation_files" / "strideqa_bench_t0.json").stat().st_size > 100
    from_parts = merge_stats(rec for _, rec in read_parts(reader.store, CARD_PART, reader.scene_ids()))
    assert from_parts == compute_stats(str(finished / "qa"))
    assert from_parts["num_qa"] > 0


def test_killed_finalize_resumed_builds_only_missing_parts(finished, tmp_path):
    """A finalize killed after half the scenes' parts: ``--resume`` builds the other half only, and the end of the
    run's files are the same bytes as the clean run's."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    clean = _sums(finished)
    scenes = RunReader(str(run)).scene_ids()
    shutil.rmtree(run / "parts")
    for top in ("bench", "intention"):  # what a finalize killed before its merges leaves: no export yet
        shutil.rmtree(run / top)
    specs_run = RunReader(str(run))
    from generator.pipeline.exports import finalize_parts

    specs = finalize_parts(specs_run.config())
    assert build_scene_parts(str(run), scenes[:2], specs) == {"built": 2 * len(specs), "kept": 0}
    kept_before = {p: p.stat().st_mtime_ns for p in (run / "parts").rglob("*.json")}
    res = drivegen("run", "--resume", run, "--local", "--no-progress")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"{2 * len(specs)} built, {2 * len(specs)} kept" in res.stderr
    assert all(p.stat().st_mtime_ns == t for p, t in kept_before.items())  # not redone
    assert _sums(run) == clean


def test_a_part_whose_scene_changed_is_built_again(finished, tmp_path):
    """A part records the key of its scene's manifest and of the config: a recommitted scene's part is stale and
    built again; an unchanged one is kept; a missing part is refused by name."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    store = RunStore(str(run))
    reader = RunReader(store)
    specs = __import__("generator.pipeline.exports", fromlist=["x"]).finalize_parts(reader.config())
    sid = reader.scene_ids()[0]
    assert build_parts(store, reader.scene_ids(), specs) == {"built": 0, "kept": 4 * len(specs)}
    manifest = run / "manifest" / f"{sid}.json"
    manifest.write_text(manifest.read_text().replace('"epoch": 1', '"epoch": 2'))  # as a recommit would
    assert build_parts(store, reader.scene_ids(), specs) == {"built": len(specs), "kept": 3 * len(specs)}
    (run / part_file("bench", sid)).unlink()
    from schemas.errors import RunFolderError

    with pytest.raises(RunFolderError, match=f"bench part of scene {sid} is missing"):
        list(read_parts(store, "bench", reader.scene_ids()))


def test_the_builders_of_a_scene_read_each_file_once(finished, tmp_path, monkeypatch):
    """The builders of one scene's parts read overlapping tables (frames by four of them, the QA rows by two);
    their reader reads each file once, whole, and serves the others from it: on object storage each read is a
    few requests. The parts are the ones built before."""
    from generator.pipeline.exports import finalize_parts

    run = tmp_path / "run"
    shutil.copytree(finished, run)
    store = RunStore(str(run))
    reader = RunReader(store)
    sid = reader.scene_ids()[0]
    before = {p: p.read_bytes() for p in (run / "parts").rglob(f"{sid}.*")}
    for p in before:
        p.unlink()
    reads = count_parquet_reads(monkeypatch)
    specs = finalize_parts(reader.config())
    assert build_scene_parts(store, [sid], specs) == {"built": len(specs), "kept": 0}
    tables = {f for f in reads if not f.startswith("parts/")}
    assert {f.split("/")[0] for f in tables} >= {"qa", "perception", "labels", "attributes"}
    assert {f: n for f, n in reads.items() if n > 1} == {}
    for p, data in before.items():  # the same records (a part's key hashes the manifest, unchanged here)
        got = p.read_bytes()
        assert (json.loads(got) if p.suffix == ".json" else got) == (json.loads(data) if p.suffix == ".json" else data)


def test_the_driver_keeps_sums_not_rows():
    """The driver's tally adds each scene's counts once (a retried block's second report is not counted) and
    keeps nothing of a scene but its id."""
    from generator.pipeline.driver import Tally

    t = Tally()
    row = {"scene_id": "s1", "status": "ok", "info": json.dumps({"counts": {"frames": 3, "qa_by_family": {"a": 2}}})}
    assert t.add(row) and not t.add(row)
    assert t.add({"scene_id": "s2", "status": "failed", "info": "{}"})
    assert (t.ok, t.failed, t.this_run) == (1, 1, {"frames": 3, "qa_by_family": {"a": 2}})
    assert set(vars(t)) == {"ok", "failed", "this_run", "stale", "seen"}
