"""Fault tolerance of ``drivegen run`` on generated logs (two scenes of every sensor, their first 7 s:
``short_logs``) and a local multi-node Ray cluster (head + two 2-CPU worker nodes on this machine). Each run is
compared with a clean run by its set of (scene_id, qa_id): no row missing, none duplicated, no partial shard or
temporary file visible.

  * a worker process SIGKILLed while it runs a scene -> Ray retries the task, the run completes;
  * the driver SIGKILLed mid-run, then ``drivegen run --resume`` -> finished scenes skipped, run complete;
  * a worker node removed mid-run -> its tasks and lost blocks are redone elsewhere, the run completes;
  * a scene with a truncated LiDAR file -> an ERRORS row with stage and file, the other scene completes,
    exit code 1.
"""
from __future__ import annotations

import signal
import threading
import time

import pyarrow.parquet as pq
import pytest
import ray

from support.pipeline import (LIGHT, LocalCluster, assert_exactly_once, busy_pipeline_workers,
                               corrupt_lidar_logs, drivegen, manifest_count, popen_drivegen, qa_keys, wait_for,
                               write_config)
from generator.pipeline import run as run_drivegen
from schemas.config import parse_config

pytestmark = [pytest.mark.ray, pytest.mark.slow]
SCENES = 2


@pytest.fixture(scope="module")
def cluster():
    if ray.is_initialized():
        ray.shutdown()
    c = LocalCluster(workers=2)
    ray.init(address=c.address, log_to_driver=False, logging_level="WARNING")
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def light_cfg():
    return parse_config(LIGHT)


@pytest.fixture(scope="module")
def clean(cluster, short_logs, light_cfg, tmp_path_factory):
    out = tmp_path_factory.mktemp("faults") / "clean"
    res = run_drivegen(str(out), source="nuscenes", data=str(short_logs), cfg=light_cfg, progress=False)
    assert res.exit_code == 0, res.summary.errors
    keys = qa_keys(out)
    assert len(keys) > 100 and {s for s, _ in keys} == {"scene-0000", "scene-0001"}
    return keys


class _Saboteur(threading.Thread):
    """Waits until a pipeline worker is busy with a scene, then does ``act(process)`` once."""

    def __init__(self, out, act):
        super().__init__(daemon=True)
        self.out, self.act = out, act
        self.victim = None
        self.finished_before = None
        self.error = None

    def run(self):
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and self.victim is None:
                for p in busy_pipeline_workers():
                    self.finished_before = manifest_count(self.out)
                    if self.act(p):
                        self.victim = p.pid
                        return
                time.sleep(0.02)
        except Exception as err:  # noqa: BLE001 - reported by the test
            self.error = err


def test_worker_sigkilled_mid_run(cluster, clean, short_logs, light_cfg, tmp_path):
    out = tmp_path / "run"

    def kill(p):
        if cluster.node_of(p.pid) is None:  # only this test's cluster (the machine is shared)
            return False
        p.send_signal(signal.SIGKILL)
        return True

    sab = _Saboteur(out, kill)
    sab.start()
    res = run_drivegen(str(out), source="nuscenes", data=str(short_logs), cfg=light_cfg, progress=False)
    sab.join(5)
    assert sab.error is None and sab.victim is not None, "no busy worker was found to kill"
    assert sab.finished_before < SCENES  # it died mid-run
    assert res.exit_code == 0 and res.summary.scenes.ok == SCENES, res.summary.errors
    assert_exactly_once(out, clean)


def test_driver_killed_then_resume(cluster, clean, short_logs, tmp_path):
    """The driver runs one scene at a time; it is killed once the first scene is committed and the second
    is being processed. --resume skips the finished scene and completes the run."""
    cfg = write_config(tmp_path / "cfg.yaml", {**LIGHT, "ray": {"scenes_in_flight": 1}})
    out = tmp_path / "run"
    proc = popen_drivegen("run", "--out", out, "--source", "nuscenes", "--data", short_logs, "--config", cfg,
                          "--address", cluster.address, "--no-progress")
    try:
        wait_for(lambda: manifest_count(out) >= 1 or proc.poll() is not None, 240, "the first finished scene")
        assert proc.poll() is None, f"driver ended before it could be killed: {proc.stderr.read()[-2000:]}"
        def second_started():  # a scene without a manifest has stage attempt markers
            att = out / "_attempts"
            return att.is_dir() and any(not (out / "manifest" / f"{d.name}.json").exists() for d in att.iterdir())

        wait_for(second_started, 60, "the second scene to start")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert manifest_count(out) == 1  # killed mid-run
    r = drivegen("run", "--resume", out, "--address", cluster.address, "--no-progress", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = __import__("json").loads((out / "summary.json").read_text())
    assert summary["scenes"] == {"total": SCENES, "ok": 1, "failed": 0, "skipped": 1}
    assert summary["qa"]["total"] == len(clean)
    assert_exactly_once(out, clean)


def test_bad_input_scene_recorded_run_goes_on(cluster, clean, short_logs, tmp_path):
    bad_root = tmp_path / "logs"
    bad_file = corrupt_lidar_logs(short_logs, bad_root, "scene-0001")
    cfg = write_config(tmp_path / "cfg.yaml", LIGHT)
    out = tmp_path / "run"
    r = drivegen("run", "--out", f"file://{out}", "--source", "nuscenes", "--data", bad_root, "--config", cfg,
                 "--address", cluster.address, "--no-progress", timeout=300)
    assert r.returncode == 1, r.stderr[-3000:]
    err = pq.read_table(out / "errors" / "scene-0001-perceive.parquet").to_pylist()
    assert len(err) == 1
    assert err[0]["scene_id"] == "scene-0001" and err[0]["stage"] == "perceive"
    assert err[0]["error_type"] == "PartialSceneError" and err[0]["file"] == str(bad_file)
    assert "8 of 14 frames" in err[0]["message"] and "truncated" in err[0]["message"]
    assert "error: scene=scene-0001 stage=perceive" in r.stdout
    assert not (out / "manifest" / "scene-0001.json").exists()
    good = [k for k in clean if k[0] == "scene-0000"]
    assert_exactly_once(out, good)


def test_worker_node_removed_mid_run(cluster, clean, short_logs, light_cfg, tmp_path):
    out = tmp_path / "run"
    removed = []

    def remove_its_node(p):
        node = cluster.node_of(p.pid)
        if node is None:
            return False
        cluster.remove(node)
        removed.append(node)
        return True

    sab = _Saboteur(out, remove_its_node)
    sab.start()
    try:
        res = run_drivegen(str(out), source="nuscenes", data=str(short_logs), cfg=light_cfg, progress=False)
    finally:
        sab.join(5)
        if removed:
            cluster.add_worker()  # leave the cluster as the other tests expect it
    assert sab.error is None and removed, "no busy worker node was found to remove"
    assert sab.finished_before < SCENES
    assert res.exit_code == 0 and res.summary.scenes.ok == SCENES, res.summary.errors
    assert_exactly_once(out, clean)
