"""Pipeline figures, measured in one run on generated logs (``generator.synth``, cached):

1. overhead: the in-process run of the stages (``executor='local'``) vs the Ray run with one worker
   (embedded Ray, 1 CPU: one scene at a time); goal <= 1.10x (issue #12);
2. scaling: the Ray run with two workers (2 CPUs) vs one worker; goal >= 1.85x (needs 2 free cores), on the N
   scenes repeated ``--scale-copies`` times (default 4: with a handful of unequal scenes the longest one
   alone bounds two workers -- 4 scenes of 4.2, 2.8, 2.5 and 2.8 s cannot split better than 6.8 + 5.6 s, a
   1.81x bound before any overhead). Also the scenes' own work (their stage timings, summed) in both runs:
   when two scenes run at once each runs slower on a machine whose cores share caches and memory, which
   bounds the speed-up at ``T1 / (work2 / 2)`` whatever the scheduling. Every run orders the scenes as
   ``drivegen run`` does, the heaviest first by the source's ``work_estimates``; the two-worker run is
   repeated with the scenes in the source's order, which shows what that ordering is worth;
3. streaming: peak memory (RSS of the driver + every Ray worker process, sampled every 0.2 s) with N vs
   10 N scenes, two workers; goal <= 1.2x. The 10 N scenes are the N generated ones repeated under new
   scene names and tokens (tables only; the sensor files are shared), so no extra generation is needed;
4. the hand-off between stages: consecutive CPU stages run as one Ray task per scene
   (``generator.pipeline.ray_exec.segments``), so the scene's work is pickled only where a model stage on an
   actor takes it over; in one process, the size and the pickle + unpickle time each stage's output would
   cost if it were handed over, for the first scene, against the stages' own time (what fusing saves);
5. Ray Data's per-operator reservation: a plain ``map_batches`` of 8 tasks of 2 s of CPU each on 2 CPUs, with the
   reservation on (Ray Data's default) and off (what a one-operator drivegen plan uses), against the 8 s ideal.

Timed passes run on warm processes: each configuration first runs the same scenes once (imports, model
and template loading, worker start-up), then the timed pass writes a fresh run folder. Cold figures are
printed too. Everything uses one thread per process (OMP/BLAS, and OpenCV's pool through
``generator.pipeline.ray_exec.fit_threads``), as Ray tasks of 1 CPU do.

    python bench/pipeline.py [--scenes 2] [--scale-copies 4] [--repeat 10] [--keep DIR]
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import psutil  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from generator.pipeline import SYNTH_VERSION, RunStore, run_pipeline, synth_logs  # noqa: E402
from generator.pipeline.stages import default_stages, write_scene  # noqa: E402
from generator.runfolder import RunReader  # noqa: E402
from generator.sources import open_source  # noqa: E402
from schemas.config import PipelineConfig  # noqa: E402

# nuScenes tables whose records belong to one scene (everything else -- sensors, calibration, categories,
# attributes, visibility -- is shared by the copies).
SCENE_TABLES = ("scene", "sample", "sample_data", "ego_pose", "sample_annotation", "instance", "log")


def repeated_logs(src: Path, dst: Path, copies: int) -> Path:
    """``src`` (a nuScenes dataroot) with every scene repeated ``copies`` times under new names/tokens."""
    dst.mkdir(parents=True)
    for sub in ("maps", "samples", "sweeps"):
        if (src / sub).exists():
            (dst / sub).symlink_to((src / sub).resolve(), target_is_directory=True)
    tin, tout = src / SYNTH_VERSION, dst / SYNTH_VERSION
    tout.mkdir()
    tables = {p.stem: json.loads(p.read_text()) for p in tin.glob("*.json")}
    own = {r["token"] for t in SCENE_TABLES for r in tables.get(t, [])}

    def remap(v, k):
        if isinstance(v, str) and v in own:
            return f"{v}r{k}"
        if isinstance(v, list):
            return [remap(x, k) for x in v]
        return v

    for name in SCENE_TABLES:
        recs = tables.get(name, [])
        out = []
        for k in range(copies):
            for r in recs:
                c = {key: (remap(val, k) if k else val) for key, val in r.items()}
                if name == "scene" and k:
                    c["name"] = f"{r['name']}-r{k}"
                out.append(c)
        tables[name] = out
    for m in tables.get("map", []):
        m["log_tokens"] = [remap(t, k) if k else t for k in range(copies) for t in m["log_tokens"]]
    for name, recs in tables.items():
        (tout / f"{name}.json").write_text(json.dumps(recs))
    return dst


class PeakMemory(threading.Thread):
    """Samples the RSS of this process (the driver) and its Ray worker processes (``ray::*`` descendants: task
    workers and actors of the embedded Ray started by this process): peaks of their sum (``peak``), of the
    driver (``driver``) and of the largest worker (``worker``); ``timeline``: every sample as (seconds since the
    start, driver RSS, sum), for figures of one phase (``peak_between``)."""

    def __init__(self, interval_s: float = 0.2, pid: int | None = None):
        super().__init__(daemon=True)
        self.interval_s, self.peak, self.driver, self.worker = interval_s, 0, 0, 0
        self.timeline: list[tuple[float, int, int]] = []
        self._t0 = time.perf_counter()
        self._halt = threading.Event()
        self.me = psutil.Process(pid)  # pid: another process is the driver (a `drivegen run` subprocess)

    def sample(self) -> int:
        try:
            driver, workers, children = self.me.memory_info().rss, [0], self.me.children(recursive=True)
        except psutil.Error:  # the driver process has ended
            return 0
        for p in children:
            try:
                if p.cmdline()[:1] and p.cmdline()[0].startswith("ray::"):
                    workers.append(p.memory_info().rss)
            except psutil.Error:
                pass
        self.driver, self.worker = max(self.driver, driver), max(self.worker, *workers)
        self.timeline.append((time.perf_counter() - self._t0, driver, driver + sum(workers)))
        return driver + sum(workers)

    def peak_between(self, start_s: float, end_s: float) -> tuple[int, int]:
        """(driver, sum) peaks of the samples taken ``start_s`` to ``end_s`` seconds after the start."""
        got = [(d, a) for t, d, a in self.timeline if start_s <= t <= end_s]
        return max((d for d, _ in got), default=0), max((a for _, a in got), default=0)

    def run(self):
        while not self._halt.is_set():
            self.peak = max(self.peak, self.sample())
            self._halt.wait(self.interval_s)

    def stop(self) -> int:
        self._halt.set()
        self.join()
        return self.peak


def timed(label, fn):
    t0 = time.perf_counter()
    res = fn()
    dt = time.perf_counter() - t0
    s = res.summary
    print(f"  {label:<34s} {dt:7.1f} s  scenes ok {s.scenes.ok}/{s.scenes.total}  QA {s.qa.total}", flush=True)
    assert s.scenes.failed == 0, s.errors
    return dt, res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenes", type=int, default=2, help="N generated scenes (default 2)")
    ap.add_argument("--scale-copies", type=int, default=4,
                    help="two workers vs one on N x SCALE_COPIES scenes (default 4)")
    ap.add_argument("--repeat", type=int, default=10, help="memory run with N x REPEAT scenes (default 10)")
    ap.add_argument("--keep", default=None, help="keep run folders here (default: a temporary folder)")
    args = ap.parse_args(argv)

    import ray

    from generator.pipeline.ray_exec import fit_threads

    fit_threads()  # the in-process run on one thread, like a 1-CPU Ray task
    work = Path(args.keep or tempfile.mkdtemp(prefix="drivegen-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    logs = synth_logs(args.scenes, seed=0)
    cfg = PipelineConfig()
    cfg.writers.card = False  # a run-level by-product, not a stage
    src = open_source("nuscenes", logs, cfg, version=SYNTH_VERSION)
    ids, desc = src.scene_ids(), src.describe()
    stages = default_stages(cfg)
    print(f"drivegen pipeline bench: {len(ids)} generated scenes ({logs}), {psutil.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)

    estimates = src.work_estimates()

    def go(name, executor="ray", scene_ids=ids, source=desc, order=None):
        """``order``: the work estimates that order the scenes, as ``drivegen run`` passes its source's (default
        the N scenes'); {} keeps the given order."""
        out = work / name
        shutil.rmtree(out, ignore_errors=True)
        return run_pipeline(RunStore(out), source, cfg, scene_ids, stages, write_scene, executor=executor,
                            progress=False, work=estimates if order is None else order)

    print("1. in-process vs Ray with one worker")
    cold_local, _ = timed("in-process (cold)", lambda: go("local-cold", "local"))
    warm_local, _ = timed("in-process (warm)", lambda: go("local", "local"))
    scale = open_source("nuscenes", repeated_logs(Path(logs), work / "logs-scale", args.scale_copies), cfg,
                        version=SYNTH_VERSION)
    scale_ids, scale_desc, scale_work = scale.scene_ids(), scale.describe(), scale.work_estimates()
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    cold_ray1, _ = timed("Ray, 1 worker (cold)", lambda: go("ray1-cold"))
    warm_ray1, _ = timed("Ray, 1 worker (warm)", lambda: go("ray1"))
    scale_ray1, _ = timed(f"Ray, 1 worker, {len(scale_ids)} scenes",
                          lambda: go("scale1", scene_ids=scale_ids, source=scale_desc, order=scale_work))
    ray.shutdown()
    print(f"  -> Ray 1 worker / in-process: {warm_ray1 / warm_local:.2f}x warm (goal <= 1.10x), "
          f"{cold_ray1 / cold_local:.2f}x cold")

    print(f"2. two workers vs one, {len(scale_ids)} scenes (the N scenes x {args.scale_copies})")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    timed("Ray, 2 workers (cold)", lambda: go("ray2-cold"))
    mem_n = PeakMemory()
    mem_n.start()
    timed("Ray, 2 workers (warm)", lambda: go("ray2"))
    peak_n = mem_n.stop()
    scale_ray2, _ = timed(f"Ray, 2 workers, {len(scale_ids)} scenes",
                          lambda: go("scale2", scene_ids=scale_ids, source=scale_desc, order=scale_work))
    listed_ray2, _ = timed(f"Ray, 2 workers, {len(scale_ids)} scenes as listed",
                           lambda: go("scale2-listed", scene_ids=scale_ids, source=scale_desc, order={}))
    print(f"  -> speed-up 2 workers vs 1: {scale_ray1 / scale_ray2:.2f}x (goal >= 1.85x; "
          f"{psutil.cpu_count()} cores shared with other work, load average {os.getloadavg()[0]:.1f}); "
          f"{scale_ray1 / listed_ray2:.2f}x with the scenes in the source's order instead of the heaviest first")
    w1, w2 = scene_work_s(work / "scale1"), scene_work_s(work / "scale2")
    print(f"  -> the scenes' own work: {w1:.1f} s with one worker, {w2:.1f} s with two ({w2 / w1 - 1:+.0%} when two "
          f"run at once): speed-up bound {scale_ray1 / (w2 / 2):.2f}x")
    idle, gaps = idle_workers(work / "scale2", 2)
    print(f"  -> worker time left idle while scenes waited (2 workers): {idle:.1f} s; longest gaps "
          + ", ".join(f"{g:.2f} s at {t:.1f} s" for g, t in gaps))

    print(f"3. streaming memory, N = {len(ids)} vs {args.repeat} N scenes (2 workers)")
    big_logs = repeated_logs(Path(logs), work / "logs-repeated", args.repeat)
    big = open_source("nuscenes", big_logs, cfg, version=SYNTH_VERSION)
    mem_10n = PeakMemory()
    mem_10n.start()
    t_big, res_big = timed(f"Ray, 2 workers, {len(big.scene_ids())} scenes",
                           lambda: go("ray2-big", scene_ids=big.scene_ids(), source=big.describe(),
                                      order=big.work_estimates()))
    peak_10n = mem_10n.stop()
    ray.shutdown()
    print(f"  peak RSS driver+workers: N {peak_n / 2**20:,.0f} MiB, {args.repeat} N {peak_10n / 2**20:,.0f} MiB "
          f"-> {peak_10n / peak_n:.2f}x (goal <= 1.2x)")
    print(f"  throughput at {args.repeat} N: {res_big.summary.qa.total / t_big:,.0f} QA/s, "
          f"{res_big.summary.frames / t_big:.1f} frames/s")
    print("4. hand-off between stages (first scene, in one process)")
    handoff(ids[0], desc, cfg, stages, work / "handoff")
    print("5. Ray Data's per-operator reservation, 8 tasks of 2 s on 2 CPUs (ideal 8.0 s)")
    reservation()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _busy(batch: dict, seconds: float = 2.0) -> dict:
    t0 = time.time()
    while time.time() - t0 < seconds:
        pass
    return {"start": [t0]}


def reservation(tasks: int = 8) -> None:
    """Wall time of ``tasks`` CPU-bound 2 s tasks through one ``map_batches`` with Ray Data's per-operator reservation
    on and off (each after a warm-up pass), and when each task started."""
    import ray

    from generator.pipeline.ray_exec import configure_data_context

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    configure_data_context(progress_bars=False)
    ctx = ray.data.DataContext.get_current()
    for on in (True, False):
        ctx.op_resource_reservation_enabled = on
        for _ in range(2):  # the first pass starts the workers
            ds = ray.data.from_items([{"i": i} for i in range(tasks)], override_num_blocks=tasks).map_batches(
                _busy, batch_size=1, num_cpus=1, compute=ray.data.TaskPoolStrategy(size=4))
            t0 = time.time()
            starts = sorted(r["start"] - t0 for r in ds.iter_rows())
            wall = time.time() - t0
        print(f"  reservation {'on ' if on else 'off'}  {wall:5.1f} s   tasks started at "
              + " ".join(f"{x:.2f}" for x in starts))
    ray.shutdown()


def idle_workers(run: Path, workers: int) -> tuple[float, list[tuple[float, float]]]:
    """Worker-seconds with fewer than ``workers`` scenes in progress, from the first scene's start to the last
    scene's start (scenes were still waiting then), from the manifests' ``stage_spans_unix``; and the three
    longest such stretches as (seconds, start into the run)."""
    spans = [m["stage_spans_unix"] for m in RunReader(str(run)).manifests()]
    iv = sorted((min(a for a, _ in s.values()), max(b for _, b in s.values())) for s in spans)
    t0, t_last = iv[0][0], iv[-1][0]
    edges = sorted({t for a, b in iv for t in (a, b) if t <= t_last} | {t_last})
    idle, gaps, run_start, run_len = 0.0, [], None, 0.0
    for lo, hi in zip(edges, edges[1:]):
        active = sum(a <= lo and b >= hi for a, b in iv)
        short = max(0, workers - active) * (hi - lo)
        idle += short
        if short > 0:
            run_start = lo if run_start is None else run_start
            run_len = hi - run_start
        elif run_start is not None:
            gaps.append((run_len, run_start - t0))
            run_start = None
    if run_start is not None:
        gaps.append((run_len, run_start - t0))
    return idle, sorted(gaps, reverse=True)[:3]


def scene_work_s(run: Path) -> float:
    """The stage timings of every finished scene of a run folder, summed (seconds of scene work)."""
    return sum(sum(m["timings_s"].values()) for m in RunReader(str(run)).manifests())


def handoff(scene_id: str, desc: dict, cfg, stages, out: Path) -> None:
    """Each stage's output as the next Ray task receives it: pickled size and pickle + unpickle time (the second
    of two passes: a warm worker's, as in the timed Ray runs)."""
    for _ in range(2):
        shutil.rmtree(out, ignore_errors=True)
        run_s, pass_s, lines = _handoff_pass(scene_id, desc, cfg, stages, RunStore(out))
    print("\n".join(lines))
    print(f"  -> hand-offs {pass_s:.2f} s against {run_s:.2f} s of stages ({pass_s / run_s:.0%}) per scene, if "
          "each stage were its own task; fused, the CPU backends hand over none")


def _handoff_pass(scene_id: str, desc: dict, cfg, stages, store) -> tuple[float, float, list[str]]:
    from generator.pipeline.core import SceneWork, StageEnv, apply_stage
    from generator.pipeline.ray_exec import cached_model

    work = SceneWork(scene_id, desc, None)
    run_s = pass_s = 0.0
    lines = []
    for st in stages:
        env = StageEnv(cfg, store, cached_model(st, cfg))
        t0 = time.perf_counter()
        work = apply_stage(st, work, env)
        t1 = time.perf_counter()
        blob = work.encode()
        work = SceneWork.decode(blob)
        t2 = time.perf_counter()
        run_s, pass_s = run_s + t1 - t0, pass_s + t2 - t1
        lines.append(f"  {st.name:<12s} stage {t1 - t0:6.2f} s   hand-off {len(blob) / 2**20:6.1f} MiB in "
                     f"{(t2 - t1) * 1e3:6.1f} ms")
    return run_s, pass_s, lines


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("pipeline"):
        sys.exit(main())
