"""Listing Argoverse 2 logs on object storage: a worker's cost flat in the number of logs in the bucket.

Puts two AV2 roots on moto's S3 server on 127.0.0.1 (a test dependency: ``pip install -e '.[test]'``), of A and B
logs (default 400 and 4,000), each log a few small but valid files (ego poses, empty calibration, three annotated
boxes, one LiDAR sweep), then measures for each, in fresh processes, CPU seconds, wall and requests:

- driver: ``open_source('av2', 's3://...')``, the scene list and the work estimates (one listing of the root:
  it grows with the logs, once per run);
- worker: the source rebuilt from its description (as on a Ray worker) loads ``--load`` logs (the first, middle
  and last): what a worker pays per log.

and prints the ratio B/A of the worker's CPU and requests per log (flat: about 1).

``--code DIR [DIR ...]`` measures the sources of these checkouts of drivegen on the same buckets, one after the
other (a baseline: e.g. ``git archive`` of an older commit unpacked in DIR; default: this checkout).

    python bench/listing.py [--logs 400 4000] [--load 3] [--code DIR ...]
"""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from support.s3 import moto_env, start_moto_server  # noqa: E402  (the tests' moto server, the same way)

_REQUEST = re.compile(r'"(GET|HEAD|PUT|POST|DELETE) ')
T0_NS = 315_967_376_959_702_000

_STEP = """
import json, resource, sys, time
sys.path.insert(0, {code!r})
import generator
from generator.sources import open_source, source_from_description
from schemas.config import parse_config
t0, c0 = time.perf_counter(), time.process_time()
out = {{}}
if {desc!r} is None:
    src = open_source("av2", {uri!r}, parse_config({{"sources": {{"cache_dir": {cache!r}}}}}), check_files=False)
    ids = src.scene_ids()
    src.work_estimates()
    out["desc"], out["logs"] = src.describe(), len(ids)
else:
    src = source_from_description({desc!r})
    for log in {logs!r}:
        assert len(src.load_scene(log).frames) == 3
out.update(cpu=time.process_time() - c0, wall=time.perf_counter() - t0, code=generator.__file__)
print("RESULT " + json.dumps(out))
"""


def _feather(table) -> bytes:
    import pyarrow.feather as feather

    buf = io.BytesIO()
    feather.write_feather(table, buf)
    return buf.getvalue()


def log_files() -> dict[str, bytes]:
    """A small AV2 log: three annotated timestamps 0.1 s apart, their poses, one sweep, no cameras."""
    import numpy as np
    import pyarrow as pa

    ts = T0_NS + np.arange(3, dtype=np.int64) * 100_000_000
    z = np.zeros(3)
    poses = pa.table({"timestamp_ns": ts, "qw": z + 1, "qx": z, "qy": z, "qz": z, "tx_m": np.arange(3.0),
                      "ty_m": z, "tz_m": z})
    ann = pa.table({"timestamp_ns": ts, "track_uuid": ["a"] * 3, "category": ["REGULAR_VEHICLE"] * 3,
                    "length_m": z + 4.5, "width_m": z + 1.9, "height_m": z + 1.6, "qw": z + 1, "qx": z, "qy": z,
                    "qz": z, "tx_m": z + 10, "ty_m": z + 3, "tz_m": z + 0.8,
                    "num_interior_pts": np.full(3, 50, np.int64)})
    intr = pa.table({c: pa.array([], t) for c, t in (("sensor_name", pa.string()), ("fx_px", pa.float64()),
                     ("fy_px", pa.float64()), ("cx_px", pa.float64()), ("cy_px", pa.float64()),
                     ("width_px", pa.int64()), ("height_px", pa.int64()))})
    extr = pa.table({c: pa.array([], pa.string() if c == "sensor_name" else pa.float64())
                     for c in ("sensor_name", "qw", "qx", "qy", "qz", "tx_m", "ty_m", "tz_m")})
    pts = np.random.default_rng(0).uniform(-20, 20, (100, 3)).astype(np.float32)
    sweep = pa.table({"x": pts[:, 0], "y": pts[:, 1], "z": pts[:, 2], "intensity": np.full(100, 10, np.uint8)})
    return {"city_SE3_egovehicle.feather": _feather(poses), "annotations.feather": _feather(ann),
            "calibration/intrinsics.feather": _feather(intr), "calibration/egovehicle_SE3_sensor.feather":
            _feather(extr), f"sensors/lidar/{int(ts[0])}.feather": _feather(sweep)}


def _requests(log: Path, start: int) -> int:
    with open(log, "rb") as fh:
        fh.seek(start)
        return len(_REQUEST.findall(fh.read().decode("utf-8", "replace")))


def main(argv=None) -> int:
    from docs_page import checkout_label  # bench/ is on sys.path when a bench runs as a script

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", type=int, nargs=2, default=[400, 4000], metavar=("A", "B"))
    ap.add_argument("--load", type=int, default=3, help="logs the worker loads (default 3)")
    ap.add_argument("--code", nargs="+", default=[str(REPO)],
                    help="the drivegen checkouts whose sources are measured (default: this one)")
    args = ap.parse_args(argv)
    a, b = sorted(args.logs)
    if a < 1 or b <= a or args.load < 1:
        ap.error("--logs A B needs 1 <= A < B, and --load at least 1")
    work = Path(tempfile.mkdtemp(prefix="drivegen-listing-bench-"))
    moto_log = work / "moto.log"
    try:
        proc, endpoint = start_moto_server(moto_log)
    except RuntimeError as err:
        sys.exit(str(err))
    codes = [str(Path(c).resolve()) for c in args.code]
    results: dict[str, dict] = {c: {} for c in codes}
    try:
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
        s3.create_bucket(Bucket="bench")
        files = log_files()
        for n in (a, b):
            names = [f"log-{i:05d}" for i in range(n)]
            t = time.perf_counter()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda kv: s3.put_object(Bucket="bench", Key=kv[0], Body=kv[1]),
                              ((f"n{n}/{log}/{rel}", data) for log in names for rel, data in files.items())))
            print(f"{n} logs: {n * len(files):,} objects put in {time.perf_counter() - t:.0f} s")
            uri = f"s3://bench/n{n}"
            for code in codes:
                env = {**os.environ, **moto_env(endpoint), "PYTHONPATH": code}
                step = {}
                for what in ("driver", "worker"):
                    desc, logs = None, []
                    if what == "worker":
                        desc = step["driver"]["desc"]
                        logs = [names[i] for i in sorted({0, n // 2, n - 1})][:args.load]
                    time.sleep(0.5)  # the server's log lines of what came before
                    start = moto_log.stat().st_size
                    snippet = _STEP.format(code=code, desc=desc, uri=uri, cache=str(work / "cache" / what), logs=logs)
                    r = subprocess.run([sys.executable, "-c", snippet], env=env, capture_output=True, text=True)
                    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
                    if r.returncode != 0 or not lines:
                        sys.exit(f"{what} ({n} logs, {code}) failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
                    time.sleep(0.5)
                    step[what] = {**json.loads(lines[-1][len("RESULT "):]), "requests": _requests(moto_log, start),
                                  "loads": len(logs)}
                    shutil.rmtree(work / "cache", ignore_errors=True)
                results[code][n] = step
                d, w = step["driver"], step["worker"]
                print(f"{n} logs, {checkout_label(w['code'])}: driver {d['cpu']:.2f} CPU s, {d['wall']:.1f} s, {d['requests']} "
                      f"requests; worker {w['cpu'] / w['loads']:.3f} CPU s and {w['requests'] / w['loads']:.1f} "
                      f"requests per log loaded ({w['loads']} logs, {w['wall']:.1f} s)")
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    for code in codes:
        wa, wb = results[code][a]["worker"], results[code][b]["worker"]
        cpu = (wb["cpu"] / wb["loads"]) / (wa["cpu"] / wa["loads"])
        req = (wb["requests"] / wb["loads"]) / max(wa["requests"] / wa["loads"], 1e-9)
        print(f"summary ({checkout_label(wa['code'])}): a worker's cost per log at {b} vs {a} logs: CPU {cpu:.2f}x, requests "
              f"{req:.2f}x (flat: about 1)")
    return 0


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("listing"):
        sys.exit(main())
