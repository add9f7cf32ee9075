"""The nuScenes scene index: the memory of the driver and of a worker, flat in the size of a table set.

Writes two nuScenes-format table sets at real trainval density (``generator.synth.tables``: about 7,800 table rows
per scene, no sensor files) of A and B scenes (default 10 and 850: the size of trainval), then measures each in
fresh processes:

- convert: the scene index made (``generator.sources.nuscenes_index``, once per table set): wall and peak memory;
- driver: what a run's driver does with the logs: open them, the scene list, the work estimates, every scene's
  map (the intention export reads them): peak resident memory and wall;
- worker: the source rebuilt from its description (as on a Ray worker) loads ``--load`` scenes spread over the
  set: peak resident memory and wall per scene.

and prints the ratios B/A of the driver's and the worker's peak memory (flat: at most 1.2).

``--code DIR`` measures the log sources of another checkout of drivegen (a baseline, e.g. ``git archive`` of an
older commit unpacked in DIR) on the same table sets; a checkout without the scene index has no convert step.

    python bench/index.py [--scenes 10 850] [--load 3] [--work DIR] [--code DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

from generator.synth.tables import make_tables  # noqa: E402

VERSION = "v1.0-tables"
MiB = 1 << 20

# each step in a fresh process: its peak resident memory (ru_maxrss) is its own
_PRELUDE = """
import json, resource, sys, time
sys.path.insert(0, {code!r})
import generator
t0 = time.perf_counter()
"""
_END = """
out.update(rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, wall=time.perf_counter() - t0,
           code=generator.__file__)
print("RESULT " + json.dumps(out))
"""
_CONVERT = """
try:
    from generator.sources.nuscenes_index import ensure_index, index_root
except ImportError:
    print("RESULT " + json.dumps({{"skipped": True}}))
    sys.exit(0)
from pathlib import Path
from schemas.config import SourceLimitsConfig
path = ensure_index(Path({table_root!r}), index_root(SourceLimitsConfig()))
out = json.loads((path / "meta.json").read_text())
out["bytes"] = sum(f.stat().st_size for f in path.iterdir())
"""
_DRIVER = """
from generator.sources import open_source
src = open_source("nuscenes", {root!r}, None, version={version!r}, check_files=False)
ids = src.scene_ids()
work = src.work_estimates()
maps = sum(src.drivable_map(s) is not None for s in ids)
out = {{"scenes": len(ids), "maps": maps, "desc": src.describe()}}
"""
_WORKER = """
from generator.sources import source_from_description
src = source_from_description({desc!r})
opened = time.perf_counter() - t0
loads = []
for sid in {scenes!r}:
    t = time.perf_counter()
    scene = src.load_scene(sid)
    loads.append(time.perf_counter() - t)
    assert len(scene.frames) == 40 and sum(len(f.labels) for f in scene.frames) > 0
out = {{"open": opened, "loads": loads}}
"""


def _run(code: str, env: dict, what: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    if r.returncode != 0 or not lines:
        sys.exit(f"{what} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main(argv=None) -> int:
    from docs_page import checkout_label  # bench/ is on sys.path when a bench runs as a script

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenes", type=int, nargs=2, default=[10, 850], metavar=("A", "B"))
    ap.add_argument("--load", type=int, default=3, help="scenes the worker loads (default 3)")
    ap.add_argument("--work", help="keep the table sets (and the index cache) in this folder, to reuse them")
    ap.add_argument("--code", default=str(REPO), help="the drivegen checkout whose sources are measured")
    args = ap.parse_args(argv)
    a, b = sorted(args.scenes)
    if a < 1 or b <= a or args.load < 1:
        ap.error("--scenes A B needs 1 <= A < B, and --load at least 1")
    work = Path(args.work or tempfile.mkdtemp(prefix="drivegen-index-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    code = str(Path(args.code).resolve())
    # the index cache of this bench alone (a fresh one per run unless --work keeps it)
    env = {**os.environ, "DRIVEGEN_LOG_CACHE": str(work / "cache"), "PYTHONPATH": code}
    results = {}
    try:
        for n in (a, b):
            root = work / f"tables-{n}"
            if not (root / VERSION / "scene.json").is_file():
                shutil.rmtree(root, ignore_errors=True)
                t = time.perf_counter()
                made = make_tables(root, n, seed=0, version=VERSION,
                                   progress=lambda i, k: print(f"  tables: {i}/{k} scenes", end="\r", flush=True,
                                                               file=sys.stderr))
                print(f"{n} scenes of tables: {made['rows']:,} rows ({made['rows'] / n:,.0f} per scene), "
                      f"{made['bytes'] / MiB:,.0f} MiB of JSON, written in {time.perf_counter() - t:.0f} s")
            conv = _run(_PRELUDE.format(code=code) + _CONVERT.format(table_root=str(root / VERSION)) + _END, env,
                        f"convert ({n} scenes)")
            drv = _run(_PRELUDE.format(code=code) + _DRIVER.format(root=str(root), version=VERSION) + _END, env,
                       f"driver ({n} scenes)")
            ids = [f"scene-{i:05d}" for i in sorted({0, n // 2, n - 1})][:args.load]
            wrk = _run(_PRELUDE.format(code=code) + _WORKER.format(desc=drv["desc"], scenes=ids) + _END, env,
                       f"worker ({n} scenes)")
            results[n] = (conv, drv, wrk)
            if not conv.get("skipped"):
                print(f"{n} scenes: convert {conv['wall']:.1f} s, peak {conv['rss'] / MiB:,.0f} MiB "
                      f"({conv['rows']:,} index rows, {conv['bytes'] / MiB:,.1f} MiB on disk)")
            print(f"{n} scenes: driver peak {drv['rss'] / MiB:,.0f} MiB ({drv['wall']:.1f} s); worker peak "
                  f"{wrk['rss'] / MiB:,.0f} MiB (open {wrk['open']:.1f} s, "
                  f"{sum(wrk['loads']) / len(wrk['loads']):.2f} s per scene over {len(wrk['loads'])})")
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"sources measured: {checkout_label(results[a][1]['code'])}")
    d = results[b][1]["rss"] / results[a][1]["rss"]
    w = results[b][2]["rss"] / results[a][2]["rss"]
    print(f"summary: peak memory at {b} vs {a} scenes: driver {d:.2f}x, worker {w:.2f}x (flat: <= 1.2x)")
    return 0


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("index"):
        sys.exit(main())
