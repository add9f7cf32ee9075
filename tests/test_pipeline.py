"""The pipeline machinery (run store, commit, resume, Ray Data wiring) with small stage functions defined
here, and the real ``drivegen run`` on generated logs, AV2 logs and a 3-node local cluster.

Real Ray, real files. The toy stages are plain module functions that Ray pickles by value."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
from ray import cloudpickle

from generator.pipeline import RunStore, run_pipeline
from generator.pipeline.core import Stage
from generator.pipeline.read import check_run, read_table
from generator.runfolder import RunFolder, atomic_write_table
from schemas.config import PipelineConfig

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable


# ------------------------------------------------------------------------------------------ toy stages
def toy_load(work, env):
    """'Load' a scene: its frame count comes from the id; scene names containing 'bad' have a bad file."""
    if "bad" in work.scene_id:
        from generator.types import SourceError

        raise SourceError("LiDAR file is truncated", scene=work.scene_id, file=f"/logs/{work.scene_id}.bin",
                          stage="read")
    work.data["n"] = 3 + int(work.scene_id.rsplit("-", 1)[-1])
    work.counts["frames"] = work.data["n"]


def toy_model(cfg):
    return {"pid": os.getpid(), "scale": 10}


def toy_detect(work, env):
    work.data["det"] = [i * env.model["scale"] for i in range(work.data["n"])]
    work.counts["objects"] = len(work.data["det"])


def toy_qa(work, env):
    det = work.data["det"]
    work.data["qa"] = pa.table({"scene_id": [work.scene_id] * len(det), "qa_id": [f"{work.scene_id}/{d}" for d in det],
                                "family": ["ego_spatial"] * len(det)})
    work.counts["qa_by_family"] = {"ego_spatial": len(det)}


def toy_write(work, env, staging):
    atomic_write_table(staging / "qa" / f"{work.scene_id}-00000.parquet", work.data["qa"])
    atomic_write_table(RunFolder(staging).perception("objects", work.scene_id), pa.table({"x": work.data["det"]}))


def toy_stages(actor: bool = False) -> list[Stage]:
    return [Stage("load", toy_load), Stage("detect", toy_detect, build=toy_model, actor=actor), Stage("qa", toy_qa)]


def qa_keys(out) -> list[tuple[str, str]]:
    t = read_table(out, "qa")
    return sorted(zip(t.column("scene_id").to_pylist(), t.column("qa_id").to_pylist())) if t is not None else []


def toy_cfg(**ray_kw) -> PipelineConfig:
    cfg = PipelineConfig()
    for k, v in {"num_cpus": 2, **ray_kw}.items():
        setattr(cfg.ray, k, v)
    return cfg


# ------------------------------------------------------------------------------------------ store
def test_store_on_file_uri_writes_atomically(tmp_path):
    store = RunStore(f"file://{tmp_path}/run")
    assert store.is_local and store.local_root == tmp_path / "run"
    store.write_json("manifest/a.json", {"x": 1})
    assert store.read_json("manifest/a.json") == {"x": 1}
    with pytest.raises(TypeError):
        store.write_bytes("manifest/b.json", {"not": "bytes"})  # fails mid-write
    assert store.list("manifest") == ["manifest/a.json"]  # no temporary file, no partial b.json
    staged = store.staging_dir("s")
    (staged / "f.bin").write_bytes(b"abc")
    store.commit_file(staged / "f.bin", "qa/f.bin")
    assert (tmp_path / "run" / "qa" / "f.bin").read_bytes() == b"abc"
    (tmp_path / "run" / "qa" / ".f.bin.123.tmp").write_bytes(b"partial")
    assert store.cleanup_leftovers() == ["qa/.f.bin.123.tmp"]
    assert not (tmp_path / "run" / ".staging").exists()
    # a pickled store is rebuilt from its URI (what Ray workers receive)
    import pickle

    assert pickle.loads(pickle.dumps(store)).full("x") == store.full("x")


# ------------------------------------------------------------------------------------------ in-process
def test_local_run_commits_manifests_errors_and_resumes(tmp_path):
    out = tmp_path / "run"
    ids = ["s-0", "s-1", "bad-2"]
    res = run_pipeline(str(out), {"kind": "toy"}, toy_cfg(), ids, toy_stages(), toy_write, executor="local",
                       progress=False)
    assert res.exit_code == 1
    assert res.summary["scenes"] == {"total": 3, "ok": 2, "failed": 1, "skipped": 0}
    assert res.summary["qa"] == {"total": 3 + 4, "by_family": {"ego_spatial": 7}}
    [err] = res.summary["errors"]
    assert (err["scene_id"], err["stage"], err["file"]) == ("bad-2", "load", "/logs/bad-2.bin")
    assert pq.read_table(out / "errors" / "bad-2-load.parquet").num_rows == 1
    m = json.loads((out / "manifest" / "s-1.json").read_text())
    assert {f["path"]: f["rows"] for f in m["files"]} == {"qa/s-1-00000.parquet": 4,
                                                          "perception/objects/s-1.parquet": 4}
    assert check_run(out) == []
    before = qa_keys(out)
    assert len(before) == 7 and len(set(before)) == 7
    # resume: finished scenes are skipped, the failed one is tried again (and fails again)
    res2 = run_pipeline(str(out), {"kind": "toy"}, toy_cfg(), ids, toy_stages(), toy_write, executor="local",
                        progress=False)
    assert res2.summary["scenes"] == {"total": 3, "ok": 0, "failed": 1, "skipped": 2}
    assert qa_keys(out) == before and res2.summary["qa"]["total"] == 7


def test_unfinished_attempt_leftovers_are_replaced(tmp_path):
    """A worker died after committing some files of a scene but before its manifest: the next attempt
    rewrites the same names and removes files only the dead attempt produced."""
    out = tmp_path / "run"
    store = RunStore(out)
    stale = out / "qa" / "s-0-00001.parquet"
    stale.parent.mkdir(parents=True)
    pq.write_table(pa.table({"scene_id": ["s-0"], "qa_id": ["old"], "family": ["ego_spatial"]}), stale)
    pq.write_table(pa.table({"scene_id": ["s-0"], "qa_id": ["old"], "family": ["ego_spatial"]}),
                   out / "qa" / "s-0-00000.parquet")
    store.write_json("_pending/s-0.json", {"scene_id": "s-0", "files": ["qa/s-0-00000.parquet",
                                                                      "qa/s-0-00001.parquet"]})
    (out / "qa" / ".s-0-00002.parquet.abc.tmp").write_bytes(b"half")
    assert any("no manifest lists" in p for p in check_run(out))
    run_pipeline(str(out), {"kind": "toy"}, toy_cfg(), ["s-0"], toy_stages(), toy_write, executor="local",
                 progress=False)
    assert not stale.exists()
    assert check_run(out) == []
    assert qa_keys(out) == [("s-0", f"s-0/{i * 10}") for i in range(3)]


# ------------------------------------------------------------------------------------------ Ray
@pytest.fixture(scope="module")
def ray2():
    """Embedded Ray with 2 CPUs (the smallest machine the default must complete on)."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    yield
    ray.shutdown()


@pytest.mark.ray
def test_ray_actor_pool_on_two_cpus_matches_in_process(ray2, tmp_path):
    """A model stage as an actor pool (fractional CPUs) next to CPU tasks completes on 2 CPUs (whole-CPU
    actors would starve the read stage and hang) and gives the same rows as the in-process run."""
    ids = [f"s-{i}" for i in range(4)] + ["bad-4"]
    res = run_pipeline(str(tmp_path / "ray"), {"kind": "toy"}, toy_cfg(actor_pool_size=2), ids,
                       toy_stages(actor=True), toy_write, progress=False)
    local = run_pipeline(str(tmp_path / "local"), {"kind": "toy"}, toy_cfg(), ids, toy_stages(), toy_write,
                         executor="local", progress=False)
    assert res.summary["scenes"] == local.summary["scenes"] == {"total": 5, "ok": 4, "failed": 1, "skipped": 0}
    assert qa_keys(tmp_path / "ray") == qa_keys(tmp_path / "local")
    assert check_run(tmp_path / "ray") == []
    assert res.summary["errors"][0]["stage"] == "load"
