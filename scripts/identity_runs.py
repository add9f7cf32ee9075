"""Checksums of the data files of three runs, to show that a restructuring changed no output byte.

    python scripts/identity_runs.py OUT            # runs them, writes OUT/checksums.json
    python scripts/identity_runs.py --compare A/checksums.json B/checksums.json

The runs: the default run (``make run``: the embedded generated logs, default config), a JAAD run of the shared
excerpt (``--source jaad --local``: every video's annotations, camera-only), and the example family plugin
(``tests/plugins/lane_keeping``, installed by an entry point as ``pip`` would) on one generated scene. Every file of
each run folder is hashed but the run-specific ones (the same list as the tests': config, run and summary records,
manifests, parts, the report). Run it at the commit before and after; ``--compare`` prints the files that differ
and exits 1 when any does.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from support.pipeline import data_checksums  # noqa: E402  (the tests' own rule of which files are data)

JAAD = REPO.parent / "shared" / "data" / "jaad"
PLUGIN = REPO / "tests" / "plugins" / "lane_keeping"


def _plugin_path(tmp: Path) -> str:
    """A site folder where the example family is installed by its entry point, as ``pip install`` would."""
    info = tmp / "site" / "drivegen_lane_keeping-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: drivegen-lane-keeping\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[drivegen.families]\nlane_keeping = drivegen_lane_keeping:FAMILY\n")
    return os.pathsep.join([str(tmp / "site"), str(PLUGIN)])


def _drivegen(args: list, env: dict | None = None) -> None:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "generator.cli", *map(str, args), "--no-progress"], cwd=REPO,
                       env={**os.environ, **(env or {})}, capture_output=True, text=True)
    print(f"  drivegen {' '.join(map(str, args[:1]))} ... exit {r.returncode} in {time.monotonic() - t0:.0f} s")
    if r.returncode != 0:
        sys.exit(f"drivegen {' '.join(map(str, args))} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")


def run_all(out: Path) -> dict[str, dict[str, str]]:
    out.mkdir(parents=True, exist_ok=True)
    runs = {}
    print("default run (make run)")
    _drivegen(["run", "--out", out / "default", "--overwrite"])
    runs["default"] = data_checksums(out / "default")
    if JAAD.is_dir():
        print("JAAD run (the shared excerpt)")
        _drivegen(["run", "--out", out / "jaad", "--overwrite", "--source", "jaad", "--data", JAAD, "--local"])
        runs["jaad"] = data_checksums(out / "jaad")
    else:
        print(f"JAAD run skipped: {JAAD} is absent")
    print("example family plugin (lane_keeping), one scene")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "lk.yaml"
        cfg.write_text("lane_keeping:\n  horizon_s: 1.5\nwriters:\n  webdataset: false\n")
        _drivegen(["run", "--out", out / "plugin", "--overwrite", "--scenes", 1, "--config", cfg],
                  env={"PYTHONPATH": _plugin_path(Path(tmp))})
    runs["plugin"] = data_checksums(out / "plugin")
    (out / "checksums.json").write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
    for name, sums in runs.items():
        print(f"{name}: {len(sums)} data files")
    return runs


def compare(a: Path, b: Path) -> int:
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    bad = 0
    for name in sorted(set(ra) | set(rb)):
        sa, sb = ra.get(name, {}), rb.get(name, {})
        diff = sorted(k for k in set(sa) | set(sb) if sa.get(k) != sb.get(k))
        same = len(set(sa) & set(sb)) - len([k for k in diff if k in sa and k in sb])
        print(f"{name}: {same} files identical, {len(diff)} differ or are missing on one side")
        for k in diff[:20]:
            print(f"  {k}: {'missing' if k not in sa else sa[k][:12]} -> {'missing' if k not in sb else sb[k][:12]}")
        bad += len(diff)
    print("identical" if not bad else f"{bad} file(s) differ")
    return 1 if bad else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", type=Path)
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args = p.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        p.error("give OUT or --compare A B")
    run_all(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
