"""Scale figures: `drivegen run` end to end on generated logs at growing scene counts, up to at least 1 M QA pairs.

The scenes are the generated ones (``generator.synth``, cached) repeated under new scene names and tokens
(``bench/pipeline.py``'s ``repeated_logs``: tables only, the sensor files are shared), so no extra generation is
needed; each copy is processed in full (detection, tracking, masks, attributes, labels, QA, shards). Defaults:
the ``labels`` detection backend and CPU masks (the defaults of a run on this machine), embedded Ray on all CPUs,
every run-level output (bench export, Intention-Drive export, card, report) as ``drivegen run`` writes them.

Per scene count it prints wall time, QA/s, frames/s, the peak RSS of the driver and of the largest Ray worker
process (sampled every 0.2 s) and the QA shards (count, total and largest size), then the time a user should
expect for 1 M QA pairs from the largest run's rate.

    python bench/scale.py [--counts 12,48,330] [--keep DIR]
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default="12,48,330", help="scene counts, comma-separated (default 12,48,330: 330 generated scenes hold about 1 M QA)")
    ap.add_argument("--keep", default=None, help="keep the run folders here (default: a temporary folder)")
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]
    work = Path(args.keep or tempfile.mkdtemp(prefix="drivegen-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
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

    with docs_page("scale"):
        sys.exit(main())
