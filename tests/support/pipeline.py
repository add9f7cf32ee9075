"""Helpers for the pipeline, fault and reliability tests: a local multi-node Ray cluster, the CLI as a
subprocess, reading a run's rows, a log set with one corrupted LiDAR file, finding busy Ray workers."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml

from generator.runfolder import RunReader, read_table

REPO = Path(__file__).resolve().parents[2]
SYNTH_VERSION = "v1.0-drivegen"


def _in_process(args: tuple, env: dict | None) -> bool:
    """Whether ``drivegen ARGS`` can run inside the test process: it starts no Ray (``run --local``, or a
    command without Ray) and needs no environment read at interpreter start (entry points on PYTHONPATH)."""
    a = [str(x) for x in args]
    if env and "PYTHONPATH" in env:
        return False
    if a and a[0] in ("run", "regenerate"):
        return "--local" in a if a[0] == "run" else not any(x in a for x in ("--workers", "--address"))
    return True


def drivegen(*args, timeout: float = 300, env: dict | None = None,
             subprocess_only: bool = False) -> subprocess.CompletedProcess:
    """``drivegen ARGS``: through ``generator.cli.main(argv)`` in this process when it starts no Ray (the exit
    code, stdout and stderr exactly as the command gives them, the driver's log lines in stderr; about 2.5 s
    of imports saved per call), else (or with ``subprocess_only``: a real driver process) in a subprocess,
    failing the test when it hangs."""
    if not subprocess_only and _in_process(args, env):
        return _drivegen_here([str(x) for x in args], env)
    cmd = [sys.executable, "-m", "generator.cli", *map(str, args)]
    full_env = {**os.environ, "TQDM_DISABLE": "1", **(env or {})}
    full_env.pop("RAY_ADDRESS", None)
    try:
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=full_env)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"drivegen {' '.join(map(str, args))} did not finish in {timeout} s (hang?)\n"
                    f"{(err.stderr or b'')[-3000:]}")


def _drivegen_here(argv: list[str], env: dict | None) -> subprocess.CompletedProcess:
    import contextlib
    import io
    import logging

    from generator.cli import main
    from generator.pipeline.core import _MODEL_CACHE
    from generator.pipeline.stages import cached_source
    from generator.report.images import _read_rgb
    from generator.sources.remote import _filesystem

    # what a fresh process would not have: the opened logs, models, decoded report images, object-store clients
    for cache in (cached_source, _read_rgb, _filesystem):
        cache.cache_clear()
    _MODEL_CACHE.clear()
    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    saved_env = dict(os.environ)
    os.environ.update({"TQDM_DISABLE": "1", **(env or {})})
    os.environ.pop("RAY_ADDRESS", None)
    level = root.level
    root.setLevel(logging.INFO)  # as the CLI's own logging.basicConfig sets it in a fresh process
    root.addHandler(handler)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as stop:  # argparse: bad arguments (2), --help (0)
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 2)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["drivegen", *argv], code, out.getvalue(), err.getvalue())


def popen_drivegen(*args) -> subprocess.Popen:
    env = {**os.environ, "TQDM_DISABLE": "1"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen([sys.executable, "-m", "generator.cli", *map(str, args)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def write_config(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


# A lighter pipeline for the fault tests: two cameras, no WebDataset/card/report (same stages otherwise).
LIGHT = {"segmentation": {"cameras": ["CAM_FRONT", "CAM_BACK"]}, "writers": {"webdataset": False, "card": False},
         "report": {"on_run": False}}


def count_parquet_reads(monkeypatch) -> dict[str, int]:
    """From now on (for the test), how many times each run file is read as Parquet (``RunStore.read_parquet``)."""
    from collections import Counter

    from generator.runfolder import RunStore

    reads: Counter = Counter()
    real = RunStore.read_parquet

    def counted(self, rel, schema=None, columns=None):
        reads.update([rel] if isinstance(rel, str) else rel)
        return real(self, rel, schema, columns)

    monkeypatch.setattr(RunStore, "read_parquet", counted)
    return reads


def qa_keys(out) -> list[tuple[str, str]]:
    """Sorted (scene_id, qa_id) of the committed QA rows."""
    t = read_table(str(out), "qa")
    if t is None:
        return []
    return sorted(zip(t.column("scene_id").to_pylist(), t.column("qa_id").to_pylist()))


def qa_rows(out):
    """The committed QA rows (every column), in a canonical order."""
    t = read_table(str(out), "qa")
    return t.sort_by([("scene_id", "ascending"), ("qa_id", "ascending")])


def assert_exactly_once(out, reference_keys: list) -> None:
    """No row missing, none duplicated, no partial shard or temporary file visible."""
    keys = qa_keys(out)
    assert len(keys) == len(set(keys)), "duplicated QA rows"
    assert set(keys) == set(reference_keys), (f"{len(set(reference_keys) - set(keys))} rows missing, "
                                              f"{len(set(keys) - set(reference_keys))} unexpected")
    assert RunReader(str(out)).check() == []
    assert not list(Path(str(out).removeprefix("file://")).rglob("*.tmp"))


# ------------------------------------------------------------------------------------------ cluster
class LocalCluster:
    """``ray.cluster_utils.Cluster``: a head without CPUs (GCS, driver objects) and worker nodes with 2
    logical CPUs each (1-CPU nodes hang Ray Data)."""

    def __init__(self, workers: int = 2, gpus_per_worker: int = 0):
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        # GPUs by resource only: Ray schedules and assigns them (CUDA_VISIBLE_DEVICES) as on real GPU nodes
        self.workers = [self.cluster.add_node(num_cpus=2, num_gpus=gpus_per_worker) for _ in range(workers)]
        self.cluster.wait_for_nodes()
        self.address = self.cluster.address

    def raylet_pid(self, node) -> int:
        from ray._private import ray_constants

        return node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid

    def node_of(self, pid: int):
        """The worker node whose raylet started process ``pid`` (None: the head or unknown)."""
        try:
            parents = {p.pid for p in psutil.Process(pid).parents()}
        except psutil.NoSuchProcess:
            return None
        for node in self.workers:
            if self.raylet_pid(node) in parents:
                return node
        return None

    def remove(self, node) -> None:
        self.cluster.remove_node(node)
        self.workers.remove(node)

    def add_worker(self):
        node = self.cluster.add_node(num_cpus=2)
        self.workers.append(node)
        self.cluster.wait_for_nodes()
        return node

    def shutdown(self) -> None:
        self.cluster.shutdown()


def busy_pipeline_workers() -> list[psutil.Process]:
    """Ray worker processes running a pipeline map task or model actor right now (Ray sets the process
    title to ``ray::MapBatches(...)`` / ``ray::MapWorker(...)`` while it executes one)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info.get("cmdline") or []
        if cmd and cmd[0].startswith("ray::") and "Map" in cmd[0] and "IDLE" not in cmd[0]:
            out.append(p)
    return out


def wait_for(pred, timeout: float, what: str, poll: float = 0.05):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(poll)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def manifest_count(out) -> int:
    d = Path(str(out).removeprefix("file://")) / "manifest"
    return len(list(d.glob("*.json"))) if d.is_dir() else 0


# ------------------------------------------------------------------------------------------ logs
def link_synth_cache(synth_root: Path, base: Path, seed: int = 0, n: int = 2) -> Path:
    """Make ``synth_root`` (make_dataset(n=2, seed=0)) the cached generated logs ``drivegen run`` uses, so
    the default run reads the very same files without generating them again."""
    base.mkdir(parents=True, exist_ok=True)
    from generator.pipeline import synth_cache_name

    link = base / synth_cache_name(seed, n)
    if not link.exists():
        link.symlink_to(synth_root, target_is_directory=True)
    (synth_root / ".complete").touch()
    return base


def damaged_lidar_logs(synth_root: Path, dst: Path, damage, scene_name: str = "scene-0001", frames: int = 1,
                       ) -> list[Path]:
    """A copy of the generated log set (tables copied, sensor folders linked) in which the LiDAR files of the
    first ``frames`` keyframes of ``scene_name`` are replaced by ``damage(original bytes) -> bytes``.
    Returns the damaged files' paths."""
    dst.mkdir(parents=True)
    for sub in ("maps", "samples", "sweeps"):
        (dst / sub).symlink_to(synth_root / sub, target_is_directory=True)
    shutil.copytree(synth_root / SYNTH_VERSION, dst / SYNTH_VERSION)
    tables = dst / SYNTH_VERSION
    scene_token = next(s["token"] for s in json.loads((tables / "scene.json").read_text()) if s["name"] == scene_name)
    samples = {s["token"] for s in json.loads((tables / "sample.json").read_text()) if s["scene_token"] == scene_token}
    sd = json.loads((tables / "sample_data.json").read_text())
    recs = [r for r in sd if r["sample_token"] in samples and r["is_key_frame"]
            and r["filename"].startswith("samples/LIDAR_TOP/")]
    recs.sort(key=lambda r: r["timestamp"])
    (dst / "corrupt").mkdir()
    out = []
    for rec in recs[:frames] if damage is not None else []:
        bad = dst / "corrupt" / Path(rec["filename"]).name
        bad.write_bytes(damage((synth_root / rec["filename"]).read_bytes()))
        rec["filename"] = f"corrupt/{bad.name}"
        out.append(bad)
    (tables / "sample_data.json").write_text(json.dumps(sd))
    return out


def corrupt_lidar_logs(synth_root: Path, dst: Path, scene_name: str = "scene-0001", frames: int = 8) -> Path:
    """``damaged_lidar_logs`` with ``frames`` LiDAR keyframes truncated mid-record (8 of 40 by default: more
    than ``failures.max_failed_frame_share``, so the scene fails). Returns the first damaged file's path."""
    return damaged_lidar_logs(synth_root, dst, lambda data: data[: (len(data) // 2) // 20 * 20 + 7], scene_name,
                              frames)[0]


def count_values(table, column: str) -> dict:
    return {d["values"]: d["counts"] for d in pc.value_counts(table.column(column)).to_pylist()}


# ------------------------------------------------------------------------------------------ comparing runs
# Files that describe one run rather than its data: timings (summary, manifests, report), the run's epoch and
# config (ray.num_cpus differs between the runs compared), part keys (hash of a manifest), the run's own path.
RUN_SPECIFIC = ("config.yaml", "run.json", "summary.json", "manifest/", "parts/", "report/",
                "intention/export_summary.json")


def data_checksums(out: Path) -> dict[str, str]:
    """SHA-256 of every file of the run folder but the run-specific ones (``RUN_SPECIFIC``)."""
    sums = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if p.is_file() and not any(rel == s or rel.startswith(s) for s in RUN_SPECIFIC):
            sums[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return sums


def _sorted(out, folder) -> pa.Table:
    t = read_table(str(out), folder)
    keys = [k for k in ("scene_id", "frame_index", "track_id", "camera", "subject", "qa_id") if k in t.column_names]
    return t.sort_by([(k, "ascending") for k in keys]).combine_chunks()


def _floats(arr: pa.ChunkedArray):
    """The float leaves of a (nested list) column, or None when it holds none."""
    a = arr.combine_chunks()
    while pa.types.is_list(a.type) or pa.types.is_fixed_size_list(a.type) or pa.types.is_large_list(a.type):
        a = a.flatten()
    return a.to_numpy(zero_copy_only=False).astype(float) if pa.types.is_floating(a.type) else None


def assert_same_rows(a_out, b_out, folder: str, exact: bool) -> None:
    """Same rows in both run folders. ``exact``: bit for bit (QA answers are rounded, so they must be);
    otherwise float columns may differ in the last bit (numpy's SIMD sin/cos/arctan2 give 1-ulp
    differences depending on array alignment in the process) and everything else must be identical."""
    a, b = _sorted(a_out, folder), _sorted(b_out, folder)
    assert a.schema == b.schema and a.num_rows == b.num_rows, folder
    for name in a.column_names:
        fa, fb = _floats(a.column(name)), _floats(b.column(name))
        if fa is None or exact:
            assert a.column(name).to_pylist() == b.column(name).to_pylist() or (
                fa is not None and np.array_equal(fa, fb, equal_nan=True)), f"{folder}.{name}"
        else:
            assert a.column(name).null_count == b.column(name).null_count, f"{folder}.{name}"
            assert np.allclose(fa, fb, rtol=1e-12, atol=1e-12, equal_nan=True), f"{folder}.{name}"
