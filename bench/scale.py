"""Scale figures: `drivegen run` end to end on generated logs at growing scene counts, up to at least 1 M QA pairs.

The scenes are the generated ones (``generator.synth``, cached) repeated under new scene names and tokens
(``bench/pipeline.py``'s ``repeated_logs``: tables only, the sensor files are shared), so no extra generation is
needed; each copy is processed in full (detection, tracking, masks, attributes, labels, QA, shards). Defaults:
the ``labels`` detection backend and CPU masks (the defaults of a run on this machine), embedded Ray on all CPUs,
every run-level output (bench export, Intention-Drive export, card, report) as ``drivegen run`` writes them.

Per scene count it prints wall time, QA/s, frames/s, the peak RSS of the driver and of the largest Ray worker
process (sampled every 0.2 s) and the QA shards (count, total and largest size), then the time a user should
expect for 1 M QA pairs from the largest run's rate.

``--minimal`` measures what grows with the scene count rather than the work per scene: minimal generated
scenes (``generator.synth.MINIMAL_SCENES``: 14 keyframes at 2 Hz without sweeps, 320x180 images, a sparse
LiDAR; masks of the front camera only), repeated under new names, so a scene costs a few tenths of a CPU second and thousands run on two
cores. Each count runs as its own ``drivegen run`` process (embedded Ray, every run-level output), then
``drivegen publish`` of its output. Per count it prints the driver's peak RSS (the ``drivegen run`` process),
the end-of-run work (card, exports, report) per scene, ``publish``'s throughput and the file counts of the run
folder and of the release; then, per count, the peak RSS of the end of the run (card, exports, report) against
the plateau of the scenes' stream, the driver's and that of the driver with its Ray workers (what the end of a
run adds to the memory a node needs); then the ratios of the largest count to the smallest (issue #31's goals:
driver peak <= 1.15x, finalize per scene <= 1.2x).

    python bench/scale.py [--counts 12,48,330] [--keep DIR]
    python bench/scale.py --minimal [--counts 200,2000] [--keep DIR]
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import subprocess  # noqa: E402

import psutil  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from generator.pipeline import DEFAULT_SYNTH_SCENES, SYNTH_VERSION, run, synth_logs  # noqa: E402
from generator.runfolder import RunReader  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_pipeline", REPO / "bench" / "pipeline.py")
bench_pipeline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_pipeline)


def shard_sizes(out: Path) -> tuple[int, int, int]:
    """(QA shard files, their total bytes, the largest) of a run folder, from its manifests."""
    reader = RunReader(str(out))
    files = [f for f in reader.files("qa", reader.scene_ids())]
    sizes = [reader.store.size(f) or 0 for f in files]
    return len(sizes), sum(sizes), max(sizes, default=0)


MINIMAL_BASE_SCENES = 20
MINIMAL_CONFIG = "segmentation:\n  cameras: [CAM_FRONT]\n"


def drivegen(*argv: str) -> list[str]:
    return [sys.executable, "-m", "generator.cli", *argv]


def file_count(root: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def measured(cmd: list[str], env: dict) -> tuple[float, "bench_pipeline.PeakMemory", subprocess.CompletedProcess]:
    """Run ``cmd`` as its own process; (wall s, its peak memory, the finished process)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peaks = bench_pipeline.PeakMemory(pid=proc.pid)
    peaks.start()
    out, _ = proc.communicate()
    peaks.stop()
    return time.perf_counter() - t0, peaks, subprocess.CompletedProcess(cmd, proc.returncode, out)


def end_of_run_bump(peaks: "bench_pipeline.PeakMemory", wall: float, timings: dict
                    ) -> tuple[tuple[int, int], tuple[int, int]]:
    """((driver, all) peak RSS of the streaming plateau, (driver, all) peak RSS of the end of the run) of one
    measured ``drivegen run``: the end of the run is its last ``exports + report`` seconds (its summary's
    timings) and Ray's stop after them, begun 10 s early (the command's start is not the sampler's to the
    second, so the plateau never takes in the end's first seconds); the plateau is the second half of the
    scenes' stream before that."""
    end = wall - timings.get("exports", 0.0) - timings.get("report", 0.0) - 10.0
    plateau = peaks.peak_between(end - timings.get("pipeline", 0.0) / 2, end)
    return plateau, peaks.peak_between(end, wall + 1.0)


def main_minimal(counts: list[int], work: Path) -> int:
    from generator.synth import MINIMAL_SCENES, make_dataset

    base = work / "minimal-base"
    if not (base / ".complete").exists():
        shutil.rmtree(base, ignore_errors=True)
        make_dataset(base, num_scenes=MINIMAL_BASE_SCENES, seed=0, version=SYNTH_VERSION, **MINIMAL_SCENES)
        (base / ".complete").touch()
    copies = -(-max(counts) // MINIMAL_BASE_SCENES)
    logs = work / f"minimal-logs-{copies}"
    if not (logs / SYNTH_VERSION / "scene.json").exists():
        shutil.rmtree(logs, ignore_errors=True)
        bench_pipeline.repeated_logs(base, logs, copies)
    cfg = work / "minimal.yaml"
    cfg.write_text(MINIMAL_CONFIG)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    print(f"drivegen scale bench, minimal scenes: {MINIMAL_BASE_SCENES} generated scenes of {MINIMAL_SCENES['num_keyframes']} "
          f"keyframes repeated up to {copies * MINIMAL_BASE_SCENES}; {psutil.cpu_count()} CPUs, "
          f"{psutil.virtual_memory().total / 2**30:.0f} GiB, load average {os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'scenes':>6} {'wall s':>7} {'QA':>9} {'driver MiB':>10} {'worker MiB':>10} {'finalize s':>10} "
          f"{'ms/scene':>8} {'run files':>9} {'publish s':>9} {'rows/s':>8} {'MiB/s':>6} {'release files':>13}",
          flush=True)
    rows, bumps = {}, {}
    for n in counts:
        out, pub = work / f"minimal-run-{n}", work / f"minimal-release-{n}"
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(pub, ignore_errors=True)
        wall, peaks, proc = measured(drivegen("run", "--source", "nuscenes", "--data", str(logs), "--version",
                                              SYNTH_VERSION, "--scenes", str(n), "--config", str(cfg), "--out",
                                              str(out), "--no-progress"), env)
        if proc.returncode != 0:
            print(f"drivegen run of {n} scenes exited {proc.returncode}:\n{proc.stdout[-3000:]}")
            return 1
        summary = json.loads((out / "summary.json").read_text())
        t = summary.get("timings", {})
        finalize = t.get("exports", 0.0) + t.get("report", 0.0)
        p_wall, _, p = measured(drivegen("publish", str(out), "--out", str(pub), "--target-shard-mb", "16",
                                         "--workers", str(psutil.cpu_count())), env)
        if p.returncode != 0:
            print(f"drivegen publish of {n} scenes exited {p.returncode}:\n{p.stdout[-3000:]}")
            return 1
        qa = summary["qa"]["total"]
        pub_bytes = sum(f.stat().st_size for f in pub.rglob("*") if f.is_file())
        rows[n] = (peaks.driver, finalize / n)
        bumps[n] = end_of_run_bump(peaks, wall, t)
        print(f"{n:>6} {wall:>7.1f} {qa:>9,} {peaks.driver / 2**20:>10,.0f} {peaks.worker / 2**20:>10,.0f} "
              f"{finalize:>10.1f} {1000 * finalize / n:>8.1f} {file_count(out):>9,} {p_wall:>9.1f} "
              f"{qa / p_wall:>8,.0f} {pub_bytes / 2**20 / p_wall:>6.1f} {file_count(pub):>13,}", flush=True)
    print("end of run against the streaming plateau (peak RSS, MiB; the plateau: the second half of the scenes' "
          "stream, up to 10 s before the end of the run began):")
    print(f"{'scenes':>6} {'driver plateau':>14} {'driver end':>10} {'ratio':>6} {'all plateau':>11} {'all end':>8} "
          f"{'ratio':>6}")
    for n, ((pd, pa_), (ed, ea)) in bumps.items():
        print(f"{n:>6} {pd / 2**20:>14,.0f} {ed / 2**20:>10,.0f} {ed / max(pd, 1):>5.2f}x {pa_ / 2**20:>11,.0f} "
              f"{ea / 2**20:>8,.0f} {ea / max(pa_, 1):>5.2f}x", flush=True)
    lo, hi = min(counts), max(counts)
    if lo != hi:
        rss, per = rows[hi][0] / rows[lo][0], rows[hi][1] / rows[lo][1]
        print(f"{hi} vs {lo} scenes: driver peak RSS {rss:.2f}x (goal <= 1.15x), finalize per scene {per:.2f}x "
              f"(goal <= 1.2x)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default=None, help="scene counts, comma-separated (default 12,48,330: 330 generated "
                    "scenes hold about 1 M QA; with --minimal 200,2000)")
    ap.add_argument("--minimal", action="store_true", help="minimal scenes (generator.synth.MINIMAL_SCENES): what grows with the scene count")
    ap.add_argument("--keep", default=None, help="keep the run folders here (default: a temporary folder)")
    args = ap.parse_args(argv)
    counts = [int(c) for c in (args.counts or ("200,2000" if args.minimal else "12,48,330")).split(",")]
    work = Path(args.keep or tempfile.mkdtemp(prefix="drivegen-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.minimal:
        try:
            return main_minimal(counts, work)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    base = Path(synth_logs(DEFAULT_SYNTH_SCENES, 0))
    n_base = len(json.loads((base / SYNTH_VERSION / "scene.json").read_text()))
    copies = -(-max(counts) // n_base)
    logs = work / "logs"
    if not (logs / SYNTH_VERSION / "scene.json").exists():
        shutil.rmtree(logs, ignore_errors=True)
        bench_pipeline.repeated_logs(base, logs, copies)
    print(f"drivegen scale bench: {n_base} generated scenes repeated up to {copies * n_base}; "
          f"{psutil.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.0f} GiB, load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'scenes':>6} {'wall s':>8} {'QA':>10} {'QA/s':>7} {'frames/s':>8} {'driver MiB':>10} "
          f"{'worker MiB':>10} {'all MiB':>8} {'shards':>6} {'shard MiB':>9} {'largest MiB':>11}", flush=True)
    rows = []
    for n in counts:
        out = work / f"run-{n}"
        shutil.rmtree(out, ignore_errors=True)
        peaks = bench_pipeline.PeakMemory()
        peaks.start()
        t0 = time.perf_counter()
        res = run(str(out), source="nuscenes", data=str(logs), version=SYNTH_VERSION, scenes=n, executor="ray",
                  progress=False)
        wall = time.perf_counter() - t0
        peaks.stop()
        s = res.summary
        if res.exit_code != 0:
            print(f"run of {n} scenes ended with exit code {res.exit_code}: {s.errors}")
            return 1
        qa, frames = s.qa.total, s.frames
        k, total, largest = shard_sizes(out)
        rows.append((n, wall, qa))
        print(f"{n:>6} {wall:>8.1f} {qa:>10,} {qa / wall:>7,.0f} {frames / wall:>8.1f} {peaks.driver / 2**20:>10,.0f} "
              f"{peaks.worker / 2**20:>10,.0f} {peaks.peak / 2**20:>8,.0f} {k:>6} {total / 2**20:>9.1f} "
              f"{largest / 2**20:>11.2f}", flush=True)
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    n, wall, qa = rows[-1]
    rate = qa / wall
    print(f"largest run: {qa:,} QA from {n} scenes in {wall / 60:.1f} min -> 1 M QA pairs take about "
          f"{1e6 / rate / 60:.0f} min on this machine ({rate:,.0f} QA/s, {qa / n:,.0f} QA per scene)")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("scale-minimal" if "--minimal" in sys.argv else "scale"):
        sys.exit(main())
