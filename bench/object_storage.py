"""Requests a run makes on object storage: ``drivegen run --out s3://...`` against moto's S3 server on 127.0.0.1
(a test dependency: ``pip install -e '.[test]'``), its request log counted by method.

Runs the minimal generated scenes (``generator.synth.MINIMAL_SCENES``) in-process (``--local``) twice, with
``--scenes A`` and ``--scenes B``, and prints each run's requests by method, its wall time, and the requests one
more scene adds (the difference divided by B - A): what grows with a run on S3, where every request is a round
trip (tens of milliseconds to a real bucket, a few on moto here).

    python bench/object_storage.py [--scenes 1 4] [--keep DIR] [--docs]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from generator.synth import MINIMAL_SCENES, make_dataset  # noqa: E402
from support.s3 import moto_env, start_moto_server  # noqa: E402  (the tests' moto server, the same way)

VERSION = "v1.0-drivegen"
_REQUEST = re.compile(r'"(GET|HEAD|PUT|POST|DELETE) ')


def _requests(log: Path, start: int) -> Counter:
    with open(log, "rb") as fh:
        fh.seek(start)
        return Counter(m.group(1) for m in _REQUEST.finditer(fh.read().decode("utf-8", "replace")))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenes", type=int, nargs=2, default=[1, 4], metavar=("A", "B"))
    ap.add_argument("--keep", help="keep the logs and moto's request log in this folder")
    args = ap.parse_args(argv)
    a, b = sorted(args.scenes)
    if a < 1 or b <= a:
        ap.error("--scenes A B needs 1 <= A < B")
    work = Path(args.keep or tempfile.mkdtemp(prefix="drivegen-s3-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    if not (logs / VERSION).is_dir():
        make_dataset(logs, num_scenes=b, seed=0, version=VERSION, **MINIMAL_SCENES)
    moto_log = work / "moto.log"
    try:
        proc, endpoint = start_moto_server(moto_log)
    except RuntimeError as err:
        sys.exit(str(err))
    env = {**os.environ, **moto_env(endpoint), "TQDM_DISABLE": "1"}
    try:
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket="bench")
        counts, walls = {}, {}
        for n in (a, b):
            start = moto_log.stat().st_size
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "generator.cli", "run", "--out", f"s3://bench/run-{n}",
                                "--source", "nuscenes", "--data", str(logs), "--version", VERSION, "--scenes", str(n),
                                "--local", "--no-progress"], cwd=REPO, env=env, capture_output=True, text=True)
            walls[n] = time.perf_counter() - t0
            if r.returncode != 0:
                sys.exit(f"drivegen run --scenes {n} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
            time.sleep(0.5)  # the server's last log lines
            counts[n] = _requests(moto_log, start)
    finally:
        proc.terminate()
        proc.wait(10)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for n in (a, b):
        by = "  ".join(f"{m} {counts[n][m]}" for m in ("PUT", "POST", "GET", "HEAD", "DELETE"))
        print(f"{n} scene(s): {sum(counts[n].values())} requests ({by}), {walls[n]:.1f} s")
    per = (sum(counts[b].values()) - sum(counts[a].values())) / (b - a)
    print(f"summary: {per:.0f} requests per further scene; a run of {a} scene(s) {sum(counts[a].values())} in all")
    return 0


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("object_storage"):
        sys.exit(main())
