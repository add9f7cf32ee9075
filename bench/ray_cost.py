"""What Ray costs and gives as a user pays it: ``drivegen run`` on N generated scenes (default 12: the default
logs, ``generator.synth``, cached), in-process on one core (``--local``, the process pinned to one CPU) against
the embedded Ray on every core (``ray.num_cpus`` unset), each a fresh ``drivegen run`` process from start to exit:
imports, Ray's start and stop, every run-level output (card, exports, report).

Per run: wall seconds and the CPU seconds of the whole process tree, Ray's daemons and workers included: every
0.2 s the bench reads the user + system time of the driver and of each of its descendants (``psutil``), and a
process counts with the last time read for it (what it spent in its last 0.2 s is missed; Ray's raylet does not
wait for its workers, so the kernel's children times would miss them whole). The runs alternate (in-process,
Ray, in-process, Ray, ...) so that both see the same machine; the ratios are per pair, then their median. Both
runs must hold the same QA count.

Issue #56's goals: Ray on the machine's cores >= 1.7x one in-process core (wall), and Ray's CPU <= 1.15x the
in-process CPU for the same output.

    python bench/ray_cost.py [--scenes 12] [--pairs 2] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SAMPLE_S = 0.2


class TreeCPU(threading.Thread):
    """The CPU seconds (user + system) of process ``pid`` and its descendants, read every ``SAMPLE_S``: per
    process the last reading and kind (``seen``); ``stop`` returns their sum."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.seen: dict[tuple[int, float], tuple[float, str]] = {}  # (pid, create time) -> (CPU s, kind)
        self._halt = threading.Event()

    def _read(self, p: psutil.Process) -> None:
        try:
            t = p.cpu_times()
            # the last title: a Ray worker takes its ``ray::`` one once started
            self.seen[(p.pid, p.create_time())] = (t.user + t.system, _kind(p))
        except psutil.Error:  # ended between the listing and the reading
            pass

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:  # the driver has ended
                procs = []
            for p in procs:
                self._read(p)
            self._halt.wait(SAMPLE_S)

    def by_kind(self) -> dict[str, tuple[int, float]]:
        """{kind of process: (how many, CPU s)}, the dearest first."""
        out: dict[str, list] = {}
        for cpu, kind in self.seen.values():
            k = out.setdefault(kind, [0, 0.0])
            k[0] += 1
            k[1] += cpu
        return {n: (c, t) for n, (c, t) in sorted(out.items(), key=lambda kv: -kv[1][1])}

    def stop(self) -> float:
        self._halt.set()
        self.join()
        return sum(cpu for cpu, _ in self.seen.values())


def _kind(p: psutil.Process) -> str:
    """What a process of the tree is: the driver, Ray's task workers, a Ray actor or daemon by its ``ray::`` title,
    else by its script's or executable's name."""
    cmd = p.cmdline()
    if not cmd:
        return p.name()
    if cmd[0].startswith("ray::"):
        title = cmd[0].split("(")[0].split()[0]
        # a task worker is titled by what it runs now (IDLE between tasks, at the end)
        return "Ray task workers" if title in ("ray::IDLE", "ray::MapBatches") else title
    if any(Path(c).name in ("default_worker.py", "setup_worker.py") for c in cmd[1:3]):
        return "Ray task workers"  # not started yet, or never used
    if "generator.cli" in cmd:
        return "driver (drivegen run)"
    script = next((Path(c).name for c in cmd[1:3] if c.endswith(".py")), "")
    return script or Path(cmd[0]).name


def run_once(label: str, scenes: int, out: Path, one_core: bool) -> dict:
    """One ``drivegen run`` process and everything it starts: wall s, CPU s of the tree, QA count."""
    args = [sys.executable, "-m", "generator.cli", "run", "--scenes", str(scenes), "--out", str(out),
            "--overwrite", "--no-progress"] + (["--local"] if one_core else [])
    env = {**os.environ, "TQDM_DISABLE": "1"}
    env.pop("RAY_ADDRESS", None)
    pre = (lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})) if one_core else None
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=pre)
    tree = TreeCPU(proc.pid)
    tree.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    cpu = tree.stop()
    if proc.returncode != 0:
        raise SystemExit(f"{label}: drivegen run exited {proc.returncode}:\n{err[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    res = {"wall": wall, "cpu": cpu, "qa": summary["qa"]["total"], "ok": summary["scenes"]["ok"],
           "processes": len(tree.seen)}
    print(f"  {label:<28s} {wall:6.1f} s wall  {cpu:6.1f} CPU s in {res['processes']} process(es)  "
          f"scenes ok {res['ok']}/{scenes}  QA {res['qa']:,}", flush=True)
    if res["processes"] > 1:
        print("    " + "; ".join(f"{name} {n} x {t:.1f} s" for name, (n, t) in tree.by_kind().items() if t >= 0.5))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenes", type=int, default=12, help="generated scenes (default 12)")
    ap.add_argument("--pairs", type=int, default=2, help="in-process / Ray pairs, alternating (default 2)")
    ap.add_argument("--keep", default=None, help="keep the run folders here (default: a temporary folder)")
    args = ap.parse_args(argv)

    from generator.pipeline import synth_logs

    work = Path(args.keep or tempfile.mkdtemp(prefix="drivegen-raycost-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    logs = synth_logs(args.scenes, seed=0)  # the logs `drivegen run --scenes N` reads (generated once, cached)
    cores = len(os.sched_getaffinity(0))
    print(f"drivegen Ray cost bench: `drivegen run --scenes {args.scenes}` ({logs}, ready in "
          f"{time.perf_counter() - t0:.0f} s), {cores} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    speedups, cpu_ratios = [], []
    for k in range(1, args.pairs + 1):
        print(f"pair {k}")
        local = run_once("in-process, 1 core", args.scenes, work / f"local-{k}", one_core=True)
        ray_ = run_once(f"embedded Ray, {cores} CPUs", args.scenes, work / f"ray-{k}", one_core=False)
        if local["qa"] != ray_["qa"]:
            raise SystemExit(f"pair {k}: the runs differ: {local['qa']} QA in-process, {ray_['qa']} on Ray")
        speedups.append(local["wall"] / ray_["wall"])
        cpu_ratios.append(ray_["cpu"] / local["cpu"])
        print(f"  -> Ray speed-up {speedups[-1]:.2f}x, Ray CPU / in-process CPU {cpu_ratios[-1]:.2f}x")
    print(f"summary ({args.pairs} pairs): Ray on {cores} CPUs vs one in-process core: speed-up "
          f"{statistics.median(speedups):.2f}x (goal >= 1.7x; each pair: {', '.join(f'{s:.2f}' for s in speedups)}); "
          f"CPU {statistics.median(cpu_ratios):.2f}x (goal <= 1.15x; each pair: "
          f"{', '.join(f'{r:.2f}' for r in cpu_ratios)})")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("ray_cost"):
        sys.exit(main())
