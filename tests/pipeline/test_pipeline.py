"""The pipeline machinery (run store, commit, resume, Ray Data wiring) with small stage functions defined
here, and the real ``drivegen run`` on generated logs, AV2 logs and a 3-node local cluster.

Real Ray, real files. The toy stages are plain module functions that Ray pickles by value."""
from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError
import ray
from ray import cloudpickle

from schemas.summary import QACounts, SceneCounts
from support.pipeline import LocalCluster, assert_same_rows, drivegen, write_config
from generator.pipeline import RunStore, run_pipeline
from generator.pipeline.core import SceneFinish, Stage
from generator.runfolder import RunReader, read_table
from schemas import layout
from schemas.config import PipelineConfig
from schemas.tables import write_parquet

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def check_run(out) -> list[str]:
    return RunReader(str(out), require=False).check()


# ------------------------------------------------------------------------------------------ toy stages
def toy_load(work, env):
    """'Load' a scene: its frame count comes from the id; scene names containing 'bad' have a bad file."""
    if "bad" in work.scene_id:
        from generator.types import SourceError

        raise SourceError("LiDAR file is truncated", scene=work.scene_id, file=f"/logs/{work.scene_id}.bin",
                          stage="read")
    work.loaded = 3 + int(work.scene_id.rsplit("-", 1)[-1])  # the toy's "scene": a frame count
    work.counts["frames"] = work.loaded


def toy_model(cfg):
    return {"pid": os.getpid(), "scale": 10}


def toy_detect(work, env):
    work.detected = [i * env.model["scale"] for i in range(work.loaded)]
    work.counts["objects"] = len(work.detected)


def toy_qa(work, env):
    det = work.detected
    work.questions = pa.table({"scene_id": [work.scene_id] * len(det), "qa_id": [f"{work.scene_id}/{d}" for d in det],
                               "family": ["ego_spatial"] * len(det)})
    work.counts["qa_by_family"] = {"ego_spatial": len(det)}


def toy_write(work, env, staging):
    for rel, table in ((layout.scene_file("qa", work.scene_id, 0, "train"), work.questions),
                       (layout.scene_file("objects", work.scene_id, split="train"), pa.table({"x": work.detected}))):
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        write_parquet(staging / rel, table)


def toy_stages(actor: bool = False) -> list[Stage]:
    return [Stage("load", toy_load, makes="loaded"),
            Stage("detect", toy_detect, needs=("loaded",), makes="detected", build=toy_model, actor=actor),
            Stage("qa", toy_qa, needs=("detected",), makes="questions")]


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
    tmp = layout.tmp_name("qa/f.bin")
    (tmp_path / "run" / tmp).write_bytes(b"partial")
    (tmp_path / "run" / "qa" / "notes.tmp").write_bytes(b"the user's")  # not a name drivegen writes
    from generator.runfolder import remove_leftovers

    assert remove_leftovers(store) == [tmp, ".staging/" + staged.name + "/"]
    assert not (tmp_path / "run" / ".staging").exists() and (tmp_path / "run" / "qa" / "notes.tmp").exists()
    # a pickled store is rebuilt from its URI (what Ray workers receive)
    import pickle

    assert pickle.loads(pickle.dumps(store)).full("x") == store.full("x")


# ------------------------------------------------------------------------------------------ in-process
def test_local_run_commits_manifests_errors_and_resumes(tmp_path):
    out = tmp_path / "run"
    ids = ["s-0", "s-1", "bad-2"]
    res = run_pipeline(RunStore(out), {"kind": "toy"}, toy_cfg(), ids, toy_stages(), toy_write, executor="local",
                       progress=False)
    assert res.exit_code == 1
    assert res.summary.scenes == SceneCounts(total=3, ok=2, failed=1, skipped=0)
    assert res.summary.qa == QACounts(total=3 + 4, by_family={"ego_spatial": 7})
    [err] = res.summary.errors
    assert (err["scene_id"], err["stage"], err["file"]) == ("bad-2", "load", "/logs/bad-2.bin")
    assert pq.read_table(out / "errors" / "bad-2-load.parquet").num_rows == 1
    m = json.loads((out / "manifest" / "s-1.json").read_text())
    assert {f["path"]: f["rows"] for f in m["files"]} == {"qa/train-s-1-00000.parquet": 4,
                                                          "perception/objects/train-s-1.parquet": 4}
    # each stage's wall-clock span (bench/gpu.py's busy shares): one per timed stage, in stage order
    spans = m["stage_spans_unix"]
    assert set(spans) == set(m["timings_s"]) and len(spans) == len(toy_stages()) + 1
    ordered = [spans[st.name] for st in toy_stages()] + [spans["write"]]
    assert all(a <= b for a, b in ordered) and all(p[1] <= q[0] for p, q in zip(ordered, ordered[1:]))
    assert check_run(out) == []
    before = qa_keys(out)
    assert len(before) == 7 and len(set(before)) == 7
    # resume: finished scenes are skipped, the failed one is tried again (and fails again)
    res2 = run_pipeline(RunStore(out), {"kind": "toy"}, toy_cfg(), ids, toy_stages(), toy_write, executor="local",
                        progress=False)
    assert res2.summary.scenes == SceneCounts(total=3, ok=0, failed=1, skipped=2)
    assert qa_keys(out) == before and res2.summary.qa.total == 7
    # drivegen inspect: consistent now; a lost shard is reported
    from generator.cli import main as cli

    assert cli(["inspect", str(out)]) == 0
    (out / "qa" / "train-s-1-00000.parquet").unlink()
    assert cli(["inspect", str(out)]) == 1
    assert check_run(out) == ["manifest lists a missing file: qa/train-s-1-00000.parquet"]


def toy_part(part, cfg):
    """A toy end-of-run part: the scene's QA row count; a scene named 'late-*' cannot build it."""
    if part.scene_id.startswith("late"):
        raise ValueError("its inputs are not there yet")
    return {"rows": part.reader.read_scene("qa", part.scene_id).num_rows}


def test_a_committed_scene_builds_its_parts_and_a_failed_part_is_left_to_the_end(tmp_path, caplog):
    """The worker that commits a scene builds its end-of-run parts (``part_specs``), so the end of the run only
    merges; a part that fails there leaves its scene committed and is built (and named) at the end of the run."""
    from generator.runfolder.parts import PartSpec, build_parts, part_file
    from schemas.errors import RunFolderError

    out = tmp_path / "run"
    store = RunStore(out)
    spec = PartSpec("toy", f"{__name__}:toy_part")
    with caplog.at_level("WARNING", logger="drivegen.pipeline"):
        res = run_pipeline(store, {"kind": "toy"}, toy_cfg(), ["s-0", "late-1"], toy_stages(), toy_write,
                           executor="local", progress=False, part_specs=(spec,))
    assert res.exit_code == 0 and res.summary.scenes.ok == 2
    assert json.loads((out / part_file("toy", "s-0")).read_text())["record"] == {"rows": 3}
    assert not (out / part_file("toy", "late-1")).exists()
    assert "scene late-1: its end-of-run parts were not built with it (RunFolderError" in caplog.text
    assert build_parts(store, ["s-0"], [spec]) == {"built": 0, "kept": 1}  # nothing left for the end
    with pytest.raises(RunFolderError, match="scene late-1: building its toy part failed: ValueError"):
        build_parts(store, ["s-0", "late-1"], [spec])


def test_unfinished_attempt_leftovers_are_replaced(tmp_path):
    """A worker died after committing some files of a scene but before its manifest: the next attempt
    rewrites the same names and removes files only the dead attempt produced."""
    out = tmp_path / "run"
    store = RunStore(out)
    stale = out / "qa" / "train-s-0-00001.parquet"
    stale.parent.mkdir(parents=True)
    pq.write_table(pa.table({"scene_id": ["s-0"], "qa_id": ["old"], "family": ["ego_spatial"]}), stale)
    pq.write_table(pa.table({"scene_id": ["s-0"], "qa_id": ["old"], "family": ["ego_spatial"]}),
                   out / "qa" / "train-s-0-00000.parquet")
    store.write_json("_pending/s-0.json", {"scene_id": "s-0", "files": ["qa/train-s-0-00000.parquet",
                                                                      "qa/train-s-0-00001.parquet"]})
    (out / layout.tmp_name("qa/train-s-0-00002.parquet")).write_bytes(b"half")
    assert any("no manifest lists" in p for p in check_run(out))
    run_pipeline(RunStore(out), {"kind": "toy"}, toy_cfg(), ["s-0"], toy_stages(), toy_write, executor="local",
                 progress=False)
    assert not stale.exists()
    assert check_run(out) == []
    assert qa_keys(out) == [("s-0", f"s-0/{i * 10}") for i in range(3)]


# ------------------------------------------------------------------------------------------ Ray
@pytest.fixture(scope="module")
def ray2():
    """Embedded Ray with 2 CPUs (the smallest machine the default must complete on), one for the tests of this
    module that use it (each a Ray driver's run after another, as a user's script runs several; a Ray start
    costs about 7 CPU s)."""
    if ray.is_initialized():
        ray.shutdown()
    # address "local": a new instance, never one another test started on this machine (with PYTEST_WORKERS=2 the
    # suite runs on two pytest-xdist workers; without an address Ray may join the other worker's cluster)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    yield
    ray.shutdown()


def test_longest_first_orders_by_work_and_keeps_ties():
    from generator.pipeline.driver import longest_first

    ids = ["a", "b", "c", "d"]
    assert longest_first(ids, None) == ids and longest_first(ids, {}) == ids
    assert longest_first(ids, {"b": 5.0, "c": 9.0, "d": 5.0}) == ["c", "b", "d", "a"]  # a: no estimate, 0


def test_scenes_stream_heaviest_first_by_the_sources_estimate(synth_root, tmp_path):
    """nuScenes' estimate is keyframes + annotated boxes per scene (counted here from the JSON tables);
    ``drivegen run`` records it in scenes.json (a resumed run reads it back) and the scenes start in its
    order, the heaviest first, whatever order they are listed in."""
    from generator.pipeline import SYNTH_VERSION, run
    from generator.sources import open_source

    tab = {n: json.loads((synth_root / SYNTH_VERSION / f"{n}.json").read_text())
           for n in ("scene", "sample", "sample_annotation")}
    scene_of = {s["token"]: s["scene_token"] for s in tab["sample"]}
    expect = {sc["name"]: float(sc["nbr_samples"] + sum(scene_of[a["sample_token"]] == sc["token"]
                                                        for a in tab["sample_annotation"])) for sc in tab["scene"]}
    assert len(set(expect.values())) == len(expect) > 1  # unequal scenes: the order below is a real check
    src = open_source("nuscenes", synth_root, PipelineConfig(), version=SYNTH_VERSION)
    assert src.work_estimates() == expect
    heavy_first = sorted(expect, key=lambda s: -expect[s])

    def start_order(out) -> list[str]:
        starts = {m["scene_id"]: m["stage_spans_unix"]["load"][0] for m in RunReader(str(out)).manifests()}
        return sorted(starts, key=starts.get)

    out = tmp_path / "run"
    res = run(str(out), source="nuscenes", data=str(synth_root), version=SYNTH_VERSION, cfg=toy_cfg(),
              stages=toy_stages(), write=toy_write, finalize=lambda store, summary: None, executor="local",
              progress=False)
    assert res.exit_code == 0 and RunReader(str(out)).planned_work() == expect
    assert start_order(out) == heavy_first
    # listed lightest first, run heaviest first; without estimates, as listed
    for work, order in ((expect, heavy_first), (None, heavy_first[::-1])):
        out = tmp_path / f"direct-{work is None}"
        run_pipeline(RunStore(out), src.describe(), toy_cfg(), heavy_first[::-1], toy_stages(), toy_write,
                     executor="local", progress=False, work=work)
        assert start_order(out) == order


def test_overwrite_replaces_a_finished_run_and_nothing_else(synth_root, tmp_path):
    """``drivegen run --overwrite`` (what ``make run`` passes): a finished run drivegen made is deleted, its
    exports, report and validation included, and run again; a folder that also holds a file drivegen did not
    write, or an unfinished run, is refused with the choices named and nothing deleted. Without the flag a
    finished run is refused naming ``--overwrite``."""
    from generator.cli import main as cli
    from generator.pipeline import SYNTH_VERSION, run
    from schemas.errors import RunFolderError

    out = tmp_path / "run"

    def go(**kw):
        return run(str(out), source="nuscenes", data=str(synth_root), version=SYNTH_VERSION, cfg=toy_cfg(),
                   stages=toy_stages(), write=toy_write, finalize=lambda store, summary: None, executor="local",
                   progress=False, **kw)

    assert go().exit_code == 0
    keys, created = qa_keys(out), json.loads((out / "run.json").read_text())["created_unix"]
    with pytest.raises(RunFolderError, match="already holds a finished run: replace it with drivegen run --overwrite"):
        go()
    for rel in ("report/index.html", "bench/export_summary.json", "validate/report.json", "card/stats.json"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("{}")
    assert go(overwrite=True).exit_code == 0
    assert qa_keys(out) == keys and check_run(out) == []
    assert json.loads((out / "run.json").read_text())["created_unix"] > created
    for rel in ("report", "bench", "validate", "card"):
        assert not (out / rel).exists(), rel
    # a file drivegen did not write: refused, nothing deleted
    (out / "qa" / "notes.txt").write_text("mine")
    files = sorted(p for p in out.rglob("*") if p.is_file())
    with pytest.raises(RunFolderError, match=r"1 file\(s\) drivegen did not write \(e.g. qa/notes.txt\)"):
        go(overwrite=True)
    assert sorted(p for p in out.rglob("*") if p.is_file() and p.name != "_lock.json") == \
        [p for p in files if p.name != "_lock.json"]
    (out / "qa" / "notes.txt").unlink()
    # an unfinished run (a scene without its manifest): refused, naming --resume
    next(out.glob("manifest/*.json")).unlink()
    with pytest.raises(RunFolderError, match="unfinished run \\(1 scene\\(s\\) not done\\): finish it with drivegen run --resume"):
        go(overwrite=True)
    assert cli(["run", "--resume", str(out), "--overwrite"]) == 2


@pytest.mark.ray
def test_ray_actor_pool_on_two_cpus_matches_in_process(ray2, tmp_path):
    """A model stage as an actor pool (fractional CPUs) next to CPU tasks completes on 2 CPUs (whole-CPU
    actors would starve the read stage and hang) and gives the same rows as the in-process run."""
    ids = [f"s-{i}" for i in range(4)] + ["bad-4"]
    res = run_pipeline(RunStore(tmp_path / "ray"), {"kind": "toy"}, toy_cfg(actor_pool_size=4), ids,
                       toy_stages(actor=True), toy_write, progress=False)
    local = run_pipeline(RunStore(tmp_path / "local"), {"kind": "toy"}, toy_cfg(), ids, toy_stages(), toy_write,
                         executor="local", progress=False)
    assert res.summary.scenes == local.summary.scenes == SceneCounts(total=5, ok=4, failed=1, skipped=0)
    assert qa_keys(tmp_path / "ray") == qa_keys(tmp_path / "local")
    assert check_run(tmp_path / "ray") == []
    assert res.summary.errors[0]["stage"] == "load"


@pytest.mark.ray
def test_ray_work_keeps_to_its_cpus(ray2, tmp_path):
    """A task sizes OpenCV's own thread pool to the CPUs Ray gave it (1 for a 1-CPU task, 2 for a 2-CPU one), as
    Ray sizes OpenMP's; a plan of one operator (CPU stages fused into one task) runs without Ray Data's
    per-operator reservation, which held its second task back, and without the downstream-capacity backpressure,
    which then weighed the driver's few-hundred-byte summary rows and held scenes back for up to 2 s; a plan
    with a model stage keeps both."""
    from generator.pipeline.ray_exec import build_dataset, fit_threads

    def threads():
        import cv2

        return fit_threads(), cv2.getNumThreads()

    assert ray.get(ray.remote(num_cpus=1)(threads).remote()) == (1, 1)
    assert ray.get(ray.remote(num_cpus=2)(threads).remote()) == (2, 2)
    store = RunStore(tmp_path / "run")
    for actor, reserved in ((False, False), (True, True), (False, False)):
        ds = build_dataset(["s-0"], {"kind": "toy"}, toy_stages(actor), SceneFinish(toy_write), toy_cfg(), store)
        assert ds.context.op_resource_reservation_enabled is reserved
        ratio = ds.context.downstream_capacity_backpressure_ratio
        assert (ratio == ray.data.context.DEFAULT_DOWNSTREAM_CAPACITY_BACKPRESSURE_RATIO) if reserved else ratio is None


@pytest.mark.ray
def test_the_end_of_a_ray_run_is_a_ray_task_and_fills_the_drivers_summary(ray2, tmp_path, caplog):
    """On Ray, ``drivegen run``'s end (card, exports, report: every scene's parts read, figures drawn) runs as a
    Ray task, not in the driver, whose memory then stays at its plateau while the scenes stream
    (``bench/scale.py --minimal``); what the end writes into the summary reaches the driver's summary and
    ``summary.json``, the report's line comes back, and what the task logged is logged by the driver."""
    from generator.pipeline import _on_ray

    def finalize(store, summary):
        summary.extra["ended_in"] = os.getpid()
        logging.getLogger("drivegen.pipeline").warning("the card's figures were drawn in %d", os.getpid())

    def report(store):
        return f"report drawn by {os.getpid()}"

    on_ray, report_on_ray = _on_ray(finalize, report, toy_cfg())
    with caplog.at_level("INFO", logger="drivegen"):
        res = run_pipeline(RunStore(tmp_path / "run"), {"kind": "toy"}, toy_cfg(), ["s-0"], toy_stages(), toy_write,
                           progress=False, finalize=on_ray, report=report_on_ray)
    ended_in = res.summary.extra["ended_in"]
    # what the task logged is logged again by the driver (a worker's own log reaches it only under --verbose)
    assert f"the card's figures were drawn in {ended_in}" in caplog.text
    assert isinstance(ended_in, int) and ended_in != os.getpid()
    assert res.report_line.startswith("report drawn by ") and res.report_line != f"report drawn by {os.getpid()}"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["ended_in"] == ended_in


# ------------------------------------------------------------------------------------------ real runs
@pytest.fixture(scope="module")
def cluster3():
    """A 3-node local cluster (CPU-less head + two 2-CPU workers); drivers join it from subprocesses."""
    c = LocalCluster(workers=2)
    yield c
    c.shutdown()


@pytest.mark.ray
@pytest.mark.slow
def test_default_run_embedded(short_default_run, short_logs_cache, short_logs, tmp_path):
    """``drivegen run --out A`` (generated logs, embedded Ray on 2 CPUs, the default config): its summary is its
    tables' counts, every export is there, and the folder refuses a second run. The same run on a cluster of
    ``ray start`` nodes gives the same bytes: tests/pipeline/test_cluster.py; in one process:
    tests/pipeline/test_determinism.py (the same run). The generated logs in the cache are two scenes of every
    sensor cut to their first 7 s (``short_logs``): the counts agree whatever a scene's length."""
    a, r = short_default_run
    assert r.returncode == 0, r.stderr[-3000:]
    assert "scenes: 2 ok, 0 failed, 0 skipped" in r.stdout
    src = json.loads((a / "source.json").read_text())
    assert src["kind"] == "nuscenes" and Path(src["dataroot"]).resolve() == short_logs.resolve()
    assert PipelineConfig.model_validate(__import__("yaml").safe_load((a / "config.yaml").read_text())).ray.num_cpus == 2
    summary = json.loads((a / "summary.json").read_text())
    qa = read_table(a, "qa")
    fam = {d["values"]: d["counts"] for d in qa.column("family").value_counts().to_pylist()}
    assert summary["qa"]["by_family"] == fam and summary["qa"]["total"] == qa.num_rows
    assert summary["frames"] == read_table(a, "frames").num_rows
    assert summary["objects"] == read_table(a, "objects").num_rows
    proj = read_table(a, "projections")
    drops = {d["values"]: d["counts"] for d in proj.column("drop_reason").drop_null().value_counts().to_pylist()}
    assert summary["objects_dropped"] == drops
    assert summary["throughput"]["qa_per_s"] > 0 and summary["wall_s"] > 0
    assert (a / "README.md").exists() and list((a / "wds").glob("scene-0000-*.tar"))
    # the STRIDE-QA-Bench export ran at the end: its groups and questions are the summary's
    ann = a / "bench" / "annotation_files"
    bench_t0 = json.loads((ann / "strideqa_bench_t0.json").read_text())
    assert summary["families"]["stride_qa"]["groups"] > 0
    assert summary["families"]["stride_qa"]["questions"] == sum(len(json.loads((ann / f"strideqa_bench_t{t}.json").read_text()))
                                                       for t in range(4))
    assert len({r["question_id"].split("_g")[1] for r in bench_t0}) == summary["families"]["stride_qa"]["groups"]
    assert check_run(a) == []

    # the run folder refuses a second run; --resume of a finished run does nothing and succeeds (on a copy: the run
    # is shared by the tests)
    a = Path(shutil.copytree(a, tmp_path / "copy"))
    r = drivegen("run", "--out", a, "--scenes", 2, env={"DRIVEGEN_SYNTH_DIR": str(short_logs_cache)})
    assert r.returncode == 2 and "already holds a finished run: replace it with drivegen run --overwrite" in r.stderr
    r = drivegen("run", "--resume", a, "--local")
    assert r.returncode == 0 and "0 ok, 0 failed, 2 skipped" in r.stdout
    r = drivegen("run", "--resume", tmp_path / "nothing")
    assert r.returncode == 2 and "nothing to resume" in r.stderr


@pytest.mark.ray
@pytest.mark.slow
def test_av2_log_in_process_equals_cluster(av2_log, cluster3, tmp_path):
    """The real AV2 log (10 Hz, no images) through the whole pipeline, in-process and on the cluster (the embedded
    Ray gives the in-process bytes: tests/pipeline/test_determinism.py)."""
    a, b = tmp_path / "in-process", tmp_path / "cluster"
    r = drivegen("run", "--out", a, "--source", "av2", "--data", av2_log, "--local")
    assert r.returncode == 0, r.stderr[-3000:]
    r = drivegen("run", "--out", b, "--source", "av2", "--data", av2_log, "--address", cluster3.address)
    assert r.returncode == 0, r.stderr[-3000:]
    assert_same_rows(a, b, "qa", exact=True)
    for folder in ("perception/objects", "attributes"):
        assert_same_rows(a, b, folder, exact=False)
    summary = json.loads((a / "summary.json").read_text())
    assert summary["scenes"]["ok"] == 1 and summary["frames"] == 156 and summary["qa"]["total"] > 0


def test_resources_fit_the_cluster():
    """Actor pools never take every CPU (the read stage must run) nor wait for GPUs that do not exist."""
    from generator.pipeline.ray_exec import ActorPool, plan_resources

    det = Stage("detect", toy_detect, actor=True, gpu=True)
    seg = Stage("perceive", toy_qa, actor=True, gpu=True)
    rc = toy_cfg(actor_pool_size=4).ray  # 0.5 CPU, 1 GPU per actor by default
    r = plan_resources(rc, [Stage("load", toy_load), det, seg], cluster_cpus=2, cluster_gpus_=0)
    assert set(r.actors) == {"detect", "perceive"} and all(a.gpus == 0 and a.size == 4 for a in r.actors.values())
    assert sum(a.size * a.cpus for a in r.actors.values()) + r.task_cpus <= 2 and r.task_cpus > 0 and r.notes
    r = plan_resources(rc, [det, seg], cluster_cpus=16, cluster_gpus_=1)
    assert r.actors == {n: ActorPool(1, 0.5, 0.5, 1) for n in ("detect", "perceive")}  # one GPU, shared by the two
    r = plan_resources(rc, [det, seg], cluster_cpus=64, cluster_gpus_=8)
    assert (r.actors, r.task_cpus, r.notes) == ({n: ActorPool(4, 0.5, 1.0, 4) for n in ("detect", "perceive")}, 1.0, ())
    r = plan_resources(toy_cfg().ray, toy_stages(), cluster_cpus=2, cluster_gpus_=0)  # no actors: untouched
    assert (r.task_cpus, r.actors, r.notes) == (1.0, {}, ())


def test_actor_pools_are_elastic_up_to_the_gpus_the_others_leave():
    """Pools grow from their minimum (placeable) to a maximum derived from the cluster: on GPUs, what the other
    stages' minimums leave at the stage's share; a CPU actor stage and a fixed ``pool_size`` do not grow; an
    explicit ``max_size`` is kept."""
    from generator.pipeline.ray_exec import plan_resources
    from schemas.errors import ConfigError

    det = Stage("detect", toy_detect, actor=True, gpu=True)
    seg = Stage("perceive", toy_qa, actor=True, gpu=True)
    r = plan_resources(toy_cfg().ray, [det, seg], cluster_cpus=32, cluster_gpus_=8)
    assert {n: a.bounds for n, a in r.actors.items()} == {"detect": (1, 7), "perceive": (1, 7)}
    rc = toy_cfg(stage_actors={"perceive": {"min_size": 2, "num_gpus": 0.5}, "detect": {"max_size": 2}}).ray
    r = plan_resources(rc, [det, seg], cluster_cpus=32, cluster_gpus_=4)
    assert {n: a.bounds for n, a in r.actors.items()} == {"detect": (1, 2), "perceive": (2, 6)}
    r = plan_resources(toy_cfg().ray, [det, Stage("perceive", toy_qa, actor=True, gpu=False)], 32, 4)
    assert r.actors["perceive"].bounds == (1, 1) and r.actors["detect"].bounds == (1, 4)
    r = plan_resources(toy_cfg().ray, [det, seg], cluster_cpus=2, cluster_gpus_=0)  # no GPUs: CPU actors, fixed
    assert {a.bounds for a in r.actors.values()} == {(1, 1)}
    with pytest.raises((ConfigError, ValueError), match="pool_size .* or min_size/max_size"):
        toy_cfg(stage_actors={"perceive": {"pool_size": 2, "max_size": 3}})
    with pytest.raises((ConfigError, ValueError), match="below min_size"):
        toy_cfg(stage_actors={"perceive": {"min_size": 3, "max_size": 2}})


def test_stage_actor_pools_are_sized_per_stage_and_always_placeable():
    """``ray.stage_actors``: the slower model gets more actors and several actors share one GPU by fractions;
    whatever is asked, every GPU actor can be placed (Ray Data would otherwise wait for it forever)."""
    from generator.pipeline.ray_exec import ActorPool, gpus_pack, plan_resources

    det = Stage("detect", toy_detect, actor=True, gpu=True)
    seg = Stage("perceive", toy_qa, actor=True, gpu=True)
    cpu_model = Stage("perceive", toy_qa, actor=True, gpu=False)  # a model stage on a CPU backend
    rc = toy_cfg(stage_actors={"perceive": {"pool_size": 3, "num_gpus": 0.25}, "detect": {"num_gpus": 0.25}}).ray
    r = plan_resources(rc, [det, seg], cluster_cpus=16, cluster_gpus_=1)
    assert r.actors == {"detect": ActorPool(1, 0.5, 0.25, 1), "perceive": ActorPool(3, 0.5, 0.25, 3)} and not r.notes
    r = plan_resources(rc, [det, cpu_model], cluster_cpus=16, cluster_gpus_=1)
    assert r.actors["perceive"] == ActorPool(3, 0.5, 0.0, 3)  # a stage that cannot use a GPU never holds one
    # 3 x 0.4 + 0.4 on one GPU does not fit: the pool asking for most shrinks first, to what fits
    rc = toy_cfg(stage_actors={"perceive": {"pool_size": 3, "num_gpus": 0.4}, "detect": {"num_gpus": 0.4}}).ray
    r = plan_resources(rc, [det, seg], cluster_cpus=16, cluster_gpus_=1)
    assert r.actors["perceive"].size == 1 and r.actors["detect"].size == 1 and "'perceive' reduced from 3 to 1" in r.notes[0]
    # sums below the GPU count are not enough: 3 actors of 0.6 on 2 GPUs cannot be placed (0.4 is left on each)
    assert not gpus_pack([0.6, 0.6, 0.6], 2) and gpus_pack([0.6, 0.4, 0.6], 2) and gpus_pack([2, 0.5, 0.5], 3)
    assert not gpus_pack([2, 0.5], 2) and gpus_pack([0.25] * 4, 1) and not gpus_pack([0.3], 0.25)
    rc = toy_cfg(stage_actors={"perceive": {"pool_size": 2, "num_gpus": 0.6}, "detect": {"num_gpus": 0.6}}).ray
    r = plan_resources(rc, [det, seg], cluster_cpus=16, cluster_gpus_=2)
    assert r.actors["perceive"].size == 1 and gpus_pack([0.6, 0.6], 2)
    # whole GPUs per actor on a cluster with fewer: one actor per stage, sharing by equal fractions
    rc = toy_cfg(stage_actors={"perceive": {"num_gpus": 2}}).ray
    r = plan_resources(rc, [det, seg], cluster_cpus=16, cluster_gpus_=1)
    assert (r.actors["perceive"].gpus, r.actors["detect"].gpus) == (0.5, 0.5) and len(r.notes) == 2
    for a, b in [((0.25, 3), (0.25, 1)), ((1, 2), (1, 2)), ((0.5, 5), (1, 1)), ((2, 2), (0.3, 4))]:
        rc = toy_cfg(stage_actors={"perceive": {"num_gpus": a[0], "pool_size": a[1]},
                                   "detect": {"num_gpus": b[0], "pool_size": b[1]}}).ray
        for gpus in (0.5, 1, 2, 3, 4, 8):
            r = plan_resources(rc, [det, seg], cluster_cpus=32, cluster_gpus_=gpus)
            shares = [p.gpus for p in r.actors.values() for _ in range(p.size)]
            assert gpus_pack(shares, gpus), (a, b, gpus, r)


def test_stage_actors_must_name_a_model_stage():
    from schemas.config import config_from_yaml
    from schemas.errors import ConfigError

    with pytest.raises(ConfigError, match=r"ray.stage_actors.*\['percieve'\].*\['detect', 'perceive'\]"):
        config_from_yaml("ray:\n  stage_actors: {percieve: {pool_size: 2}}\n", "my.yaml")
    with pytest.raises(ValidationError, match="whole number"):
        PipelineConfig.model_validate({"ray": {"stage_actors": {"perceive": {"num_gpus": 1.5}}}})


def test_consecutive_cpu_stages_are_one_ray_task():
    """``segments``: runs of CPU stages fuse into one task per scene; each model (actor) stage stands alone, so a
    scene's work is pickled only where an actor takes it over."""
    from generator.pipeline.ray_exec import segments

    def st(name, actor=False):
        return Stage(name, lambda w, e: None, actor=actor)

    names = lambda segs: [[s.name for s in seg] for seg in segs]  # noqa: E731
    cpu = [st("load"), st("detect"), st("perceive"), st("attributes"), st("qa")]
    assert names(segments(cpu)) == [["load", "detect", "perceive", "attributes", "qa"]]
    mixed = [st("load"), st("detect", True), st("perceive", True), st("attributes"), st("qa")]
    assert names(segments(mixed)) == [["load"], ["detect"], ["perceive"], ["attributes", "qa"]]
    assert names(segments([st("detect", True)])) == [["detect"]] and segments([]) == []


def test_settle_heap_freezes_what_lives_at_the_second_scene_and_collects_the_first_scenes_garbage():
    """``settle_heap`` (called as a process begins each scene) freezes, once, at the second scene, what the
    process holds then; the first scene's garbage cycles are collected first, not frozen; objects made later
    stay in the collector's sight. In a fresh interpreter: the freeze is process-wide."""
    import subprocess

    code = """
import gc, weakref
from generator.pipeline.core import settle_heap

class Node:
    pass

assert gc.get_freeze_count() == 0
assert settle_heap() is False and gc.get_freeze_count() == 0  # the first scene: nothing frozen
kept = Node()
a, b = Node(), Node()
a.other, b.other = b, a  # the first scene's garbage: a cycle nothing refers to
dead = weakref.ref(a)
del a, b
assert settle_heap() is True and gc.get_freeze_count() > 0
assert dead() is None, "the first scene's garbage was frozen"
tracked = lambda o: any(x is o for x in gc.get_objects())
later = Node()
assert not tracked(kept) and tracked(later)
frozen = gc.get_freeze_count()
assert settle_heap() is False and gc.get_freeze_count() == frozen  # once per process
print("ok")
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
