"""GPU scheduling on local Ray clusters whose nodes advertise GPUs by resource (issue #12 item 2): model stages
become actor pools holding GPUs (one model per actor, built once), CPU stages never hold a GPU, two GPU nodes
run two model actors at once, two actors of one stage share one GPU by fractions (``ray.stage_actors``), a cluster without GPUs falls back to CPU actors with a log line, and each actor
resolves its torch device from what Ray assigned it (the real SAM 2.1 model class, random weights).

The stages are the pipeline's own executor (``generator.pipeline.ray_exec.build_dataset``) running probe stages
that report, per scene, what their worker holds; the model stage builds the real ``Sam2Segmenter``."""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import sys
import time
from pathlib import Path

import pytest

from actors.device import device_note, resolve_device
from generator.pipeline.core import SceneFinish, Stage
from schemas.config import PipelineConfig

# the cluster tests start Ray and are marked slow; the device-rule tests take microseconds and run in `make quick`
MODEL_SECONDS = 2.0  # each scene holds its model actor this long: long enough for overlaps to be unambiguous
GROW_WAIT_SECONDS = 180.0  # the elastic pool's first actor waits at most this long for the second to start


# ------------------------------------------------------------------------------- the device rule, pure
@pytest.mark.parametrize("assigned, cuda, want", [
    (None, False, "cpu"), (None, True, "cuda:0"),  # no scheduler: what torch sees
    ([], True, "cpu"),  # Ray gave this worker no GPU: never take another worker's
    (["1"], True, "cuda:0"),  # CUDA_VISIBLE_DEVICES=1: the first visible device
    (["0"], False, "cpu"),  # GPUs by resource only / CPU torch
])
def test_resolve_device_follows_the_assigned_gpus(assigned, cuda, want):
    assert resolve_device("auto", assigned, cuda_available=cuda) == want
    assert resolve_device("cuda:1", assigned, cuda_available=cuda) == "cuda:1"  # explicit: as given


def test_device_note_only_when_assigned_gpus_are_unusable():
    assert device_note(["0"], "cpu") and "GPU(s) ['0']" in device_note(["0"], "cpu")
    assert device_note([], "cpu") is None and device_note(["0"], "cuda:0") is None


# ------------------------------------------------------------------------------- probe stages
def _where() -> dict:
    import ray

    ctx = ray.get_runtime_context()
    return {"pid": os.getpid(), "node": ctx.get_node_id(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}


def _cpu_probe(work, env) -> None:
    work.counts["cpu_stage"] = _where()


def _build_sam2(cfg):
    from actors.segment import build_segmenter

    return {"segmenter": build_segmenter(cfg.segmentation), "built_at": time.time(), "pid": os.getpid()}


def _wait_for_a_second_actor(gate: str) -> None:
    """Announce this actor in the folder ``gate`` and hold the scene until a second actor has announced itself
    there, or until the deadline the test wrote there passed. The first actor then cannot finish every queued
    scene while the pool's second actor is still starting (a worker process importing torch and SAM 2 on a loaded
    machine): whether the pool grows no longer depends on the machine's load, and a pool that never grows still
    fails the test, after the deadline."""
    folder = Path(gate)
    (folder / f"actor-{os.getpid()}").touch()
    deadline = float((folder / "deadline").read_text())
    while len(list(folder.glob("actor-*"))) < 2 and time.time() < deadline:
        time.sleep(0.1)


def _model_probe(work, env, gate: str | None = None) -> None:
    if gate is not None:
        _wait_for_a_second_actor(gate)
    t0 = time.time()
    time.sleep(MODEL_SECONDS)
    m = env.model
    work.counts["model_stage"] = {**_where(), "t0": t0, "t1": time.time(), "device": str(m["segmenter"].device),
                                  "model": [m["pid"], m["built_at"], id(m["segmenter"])],
                                  "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


def _write_counts(work, env, staging) -> None:
    (staging / "probe.json").write_text(json.dumps(work.counts))


STAGES = [Stage("cpu_probe", _cpu_probe),
          Stage("model_probe", _model_probe, build=_build_sam2, actor=True, gpu=True)]


def _run(address: str | None, tmp_path, n_scenes: int, pool: int, stage_actors: dict | None = None,
         gate: Path | None = None) -> list[dict]:
    """The probe stages over ``n_scenes`` scenes on the cluster at ``address`` (None: an embedded local Ray of
    2 CPUs and no GPU, what ``drivegen run`` starts on a laptop); ``gate``: the model stage waits for a second
    actor there (``_wait_for_a_second_actor``)."""
    import ray
    from ray import cloudpickle

    from generator.pipeline.ray_connect import ensure_ray
    from generator.pipeline.ray_exec import build_dataset, configure_data_context, iter_summaries
    from generator.runfolder import RunStore

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import the tests folder
    cfg = PipelineConfig.model_validate({
        "segmentation": {"backend": "sam2", "sam2": {"model_config_name": "configs/sam2.1/sam2.1_hiera_t.yaml"}},
        "ray": {"actor_pool_size": pool, "actor_num_gpus": 1, "scenes_in_flight": n_scenes, "num_cpus": 2,
                "stage_actors": stage_actors or {}}})
    ensure_ray(cfg, address=address)
    try:
        configure_data_context(progress_bars=False)
        store = RunStore(str(tmp_path / "out"))
        # ``ray.stage_actors`` takes model stage names only: the probe then stands in for the perceive stage
        stages = [STAGES[0], dataclasses.replace(STAGES[1], name="perceive")] if stage_actors else STAGES
        if gate is not None:
            stages = [stages[0], dataclasses.replace(stages[1], run=functools.partial(_model_probe, gate=str(gate)))]
        ds = build_dataset([f"scene-{k}" for k in range(n_scenes)], {}, stages, SceneFinish(_write_counts), cfg,
                           store)
        rows = list(iter_summaries(ds))
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert [r["status"] for r in rows] == ["ok"] * n_scenes, [r["info"] for r in rows]
    return [json.loads(r["info"])["counts"] for r in rows]


def _overlap(a: dict, b: dict) -> float:
    return min(a["t1"], b["t1"]) - max(a["t0"], b["t0"])


@pytest.fixture
def sam2_installed():
    pytest.importorskip("sam2", reason="sam2 is not installed (setup installs it; see README 'Models')")


@pytest.fixture(scope="module")
def two_gpu_nodes():
    """A cluster of two worker nodes advertising one GPU each, started once for the tests of this module that run
    on it. Each test is a Ray job of its own (``_run`` joins and leaves): its actors and worker processes end with
    it, and the next test finds every GPU free."""
    pytest.importorskip("sam2", reason="sam2 is not installed (setup installs it; see README 'Models')")
    from support.pipeline import LocalCluster

    c = LocalCluster(workers=2, gpus_per_worker=1)
    yield c
    c.shutdown()


@pytest.mark.ray
@pytest.mark.slow
def test_two_gpu_nodes_run_two_model_actors_holding_one_gpu_each(two_gpu_nodes, tmp_path, caplog):
    """A pool of two model actors: one on each GPU node, each building its model once, working at the same time.
    The first actor holds its first scene until the second has started (``_wait_for_a_second_actor``): on a loaded
    machine the first could finish every scene while the second still imported torch (seen on four pytest-xdist
    workers: one actor ran all four scenes)."""
    gate = tmp_path / "gate"  # the nodes are processes of this machine: they share its files
    gate.mkdir()
    (gate / "deadline").write_text(str(time.time() + GROW_WAIT_SECONDS))
    with caplog.at_level(logging.WARNING, logger="drivegen.pipeline"):
        counts = _run(two_gpu_nodes.address, tmp_path, n_scenes=4, pool=2, gate=gate)
    model = [x["model_stage"] for x in counts]
    cpu = [x["cpu_stage"] for x in counts]
    # CPU stages never hold a GPU; every model call ran on an actor holding exactly one
    assert all(x["gpu_ids"] == [] for x in cpu), cpu
    assert all(len(x["gpu_ids"]) == 1 and x["cuda_visible"] == x["gpu_ids"][0] for x in model), model
    # two actors, one per GPU node, each with one model built once for all its scenes
    actors = {x["pid"]: x for x in model}
    assert len(actors) == 2 and len({x["node"] for x in model}) == 2, model
    for pid in actors:
        assert len({tuple(x["model"]) for x in model if x["pid"] == pid}) == 1, "model rebuilt within an actor"
        assert all(x["model"][0] == pid for x in model if x["pid"] == pid)
    # ... working at the same time
    best = max(_overlap(a, b) for a in model for b in model if a["pid"] != b["pid"])
    assert best > MODEL_SECONDS / 2, f"the two model actors never ran together (best overlap {best:.2f} s)"
    # the device follows Ray's assignment: GPUs by resource only and CPU torch -> CPU, said in the log
    assert all(x["device"] == "cpu" for x in model)
    assert not any("no GPUs" in r.getMessage() for r in caplog.records)


@pytest.mark.ray
@pytest.mark.slow
def test_an_elastic_pool_grows_to_the_gpus_it_may_use(two_gpu_nodes, tmp_path):
    """A model stage's pool starts at one actor (``ray.actor_pool_size``) and, with scenes queued for it, grows to
    the two GPUs of a two-node cluster (its default maximum); CPU stages never hold a GPU."""
    gate = tmp_path / "gate"  # the nodes are processes of this machine: they share its files
    gate.mkdir()
    (gate / "deadline").write_text(str(time.time() + GROW_WAIT_SECONDS))
    counts = _run(two_gpu_nodes.address, tmp_path, n_scenes=8, pool=1, gate=gate)
    model = [x["model_stage"] for x in counts]
    assert all(x["cpu_stage"]["gpu_ids"] == [] for x in counts)
    assert all(len(x["gpu_ids"]) == 1 for x in model), model
    assert len({x["pid"] for x in model}) == 2 and len({x["node"] for x in model}) == 2, \
        f"the pool did not grow to the second GPU: {[(x['pid'], x['node']) for x in model]}"


@pytest.mark.ray
@pytest.mark.slow
def test_actors_of_one_stage_share_one_gpu_by_fractions(tmp_path, sam2_installed):
    """``ray.stage_actors``: two actors of the model stage at 0.5 GPU each on a node with one GPU are both
    placed on that device and work at the same time (the way a slower model gets more actors per GPU)."""
    from support.pipeline import LocalCluster

    c = LocalCluster(workers=1, gpus_per_worker=1)
    try:
        counts = _run(c.address, tmp_path, n_scenes=4, pool=1,
                      stage_actors={"perceive": {"pool_size": 2, "num_gpus": 0.5}})
    finally:
        c.shutdown()
    model = [x["model_stage"] for x in counts]
    assert all(x["gpu_ids"] == ["0"] and x["cuda_visible"] == "0" for x in model), model
    assert all(x["cpu_stage"]["gpu_ids"] == [] for x in counts)
    actors = {x["pid"] for x in model}
    assert len(actors) == 2, model
    for pid in actors:
        assert len({tuple(x["model"]) for x in model if x["pid"] == pid}) == 1, "model rebuilt within an actor"
    best = max(_overlap(a, b) for a in model for b in model if a["pid"] != b["pid"])
    assert best > MODEL_SECONDS / 2, f"the two actors sharing the GPU never ran together (best overlap {best:.2f} s)"


@pytest.mark.ray
@pytest.mark.slow
def test_cluster_without_gpus_falls_back_to_cpu_actors_with_a_log_line(tmp_path, sam2_installed, caplog):
    with caplog.at_level(logging.WARNING, logger="drivegen.pipeline"):
        counts = _run(None, tmp_path, n_scenes=2, pool=1)
    model = [x["model_stage"] for x in counts]
    assert all(x["gpu_ids"] == [] and x["device"] == "cpu" for x in model), model
    assert len({x["pid"] for x in model}) == 1 and len({tuple(x["model"]) for x in model}) == 1
    assert any("no GPUs" in r.getMessage() and "model_probe" in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]


def test_gpu_bench_skips_with_a_clear_message_without_a_gpu():
    """``bench/gpu.py`` (issue #12 item 6) on a machine without CUDA: exit 0, saying why and what to do."""
    import subprocess
    import sys
    from pathlib import Path

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: run bench/gpu.py itself")
    bench = Path(__file__).parents[2] / "bench" / "gpu.py"
    r = subprocess.run([sys.executable, str(bench)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "skipped: no CUDA GPU here" in r.stdout and "--allow-cpu" in r.stdout
