"""A run folder on object storage: a real S3-compatible server (moto's server mode on 127.0.0.1, see
tests/support/s3.py). ``drivegen run`` with its driver killed mid-run, ``--resume``, ``regenerate``,
``export_bench``, ``validate`` and ``inspect`` all on ``s3://``, row for row equal to the same work on local
folders."""
from __future__ import annotations

import json
import signal

import pytest

from generator.runfolder import RunReader
from support.data import SYNTH_VERSION
from support.pipeline import LIGHT, assert_same_rows, drivegen, popen_drivegen, wait_for, write_config

pytestmark = [pytest.mark.slow]

TABLES = ("frames", "objects", "projections", "attributes", "labels")


def _finished(uri: str) -> int:
    try:
        return len(RunReader(uri, require=False).scene_ids())
    except Exception:  # noqa: BLE001 - a half-written manifest of the run being polled: try again
        return 0


def test_run_folder_on_s3_equals_local(s3_server, short_logs, tmp_path):
    """Two generated scenes of 7 s at full sensor density (``short_logs``): the second still takes seconds after the
    first is committed, long enough to kill the driver between them. In one process (``--local``): the commit
    protocol is the driver's and the same on Ray, whose workers write a run on S3 in
    tests/sources/test_remote_logs.py (two Ray starts here cost about 25 CPU s and showed nothing more)."""
    cfg = write_config(tmp_path / "cfg.yaml", {**LIGHT, "writers": {**LIGHT["writers"], "card": True}})
    logs = ("--source", "nuscenes", "--data", short_logs, "--version", SYNTH_VERSION, "--config", cfg)
    local = tmp_path / "local"
    r = drivegen("run", "--out", local, *logs, "--local", "--no-progress")
    assert r.returncode == 0, r.stderr[-3000:]

    bucket = s3_server.new_bucket()
    run = f"s3://{bucket}/runs/a"
    proc = popen_drivegen("run", "--out", run, *logs, "--local", "--no-progress")
    try:  # the driver is killed once the first of the two scenes is committed
        wait_for(lambda: _finished(run) >= 1 or proc.poll() is not None, 240, "the first finished scene on S3")
        assert proc.poll() is None, f"driver ended before it could be killed: {proc.stderr.read()[-2000:]}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _finished(run) == 1
    r = drivegen("run", "--resume", run, "--local", "--no-progress")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "1 ok, 0 failed, 1 skipped (of 2)" in r.stdout
    r = drivegen("inspect", run)
    assert r.returncode == 0 and "consistency: ok" in r.stdout, r.stdout[-2000:]
    assert_same_rows(local, run, "qa", exact=True)
    for name in TABLES:
        assert_same_rows(local, run, name, exact=False)
    fs = s3_server.filesystem()
    assert fs.get_file_info(f"{bucket}/runs/a/README.md").size > 0  # the card is committed on S3 too

    # regenerate: S3 -> S3 equals local -> local
    assert drivegen("regenerate", local, "--out", tmp_path / "regen", "--seed", "5", "--no-progress").returncode == 0
    r = drivegen("regenerate", run, "--out", f"s3://{bucket}/runs/a-regen", "--seed", "5", "--no-progress")
    assert r.returncode == 0, r.stderr[-3000:]
    assert_same_rows(tmp_path / "regen", f"s3://{bucket}/runs/a-regen", "qa", exact=True)

    # export_bench: S3 run -> S3 folder, the same files as from the local run
    assert drivegen("export_bench", local, "--out", tmp_path / "bench").returncode == 0
    r = drivegen("export_bench", run, "--out", f"s3://{bucket}/bench")
    assert r.returncode == 0, r.stderr[-3000:]
    want = json.loads((tmp_path / "bench" / "annotation_files" / "strideqa_bench_t1.json").read_text())
    got = json.loads(fs.open_input_stream(f"{bucket}/bench/annotation_files/strideqa_bench_t1.json").read())
    assert len(got) == len(want) > 0 and [q["gt_value"] for q in got] == [q["gt_value"] for q in want]

    # validate: the same metrics from the S3 run as from the local one (reports written beside the run)
    args = ("--tracking-thresholds", "10", "--no-label-agreement", "--quiet")
    assert drivegen("validate", local, *args).returncode == 0
    r = drivegen("validate", run, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    a = json.loads((local / "validate" / "report.json").read_text())
    b = json.loads(fs.open_input_stream(f"{bucket}/runs/a/validate/report.json").read())
    assert b["detection"]["mAP"] == a["detection"]["mAP"] and b["tracking"]["AMOTA"] == a["tracking"]["AMOTA"]


def test_unreachable_and_missing_buckets_are_named(s3_server, tmp_path):
    r = drivegen("inspect", "s3://no-such-bucket-here/run")
    assert r.returncode == 2 and "no-such-bucket-here" in r.stderr and "Traceback" not in r.stderr


def test_bench_export_reads_the_shards_of_a_run_on_s3(s3_server, minimal_logs, tmp_path):
    """The STRIDE-QA-Bench export takes its context images from the run's WebDataset shards; on ``s3://`` each
    shard is downloaded once (``export._shards``' remote branch). The same run folder, local and copied to S3,
    exports the same files."""
    from pyarrow import fs as pafs

    from generator.families.stride_qa.export import export_bench
    from generator.pipeline import run
    from schemas.config import parse_config

    local = tmp_path / "run"
    res = run(str(local), source="nuscenes", data=str(minimal_logs), version=SYNTH_VERSION, scenes=2,
              cfg=parse_config({"writers": {"card": False}, "report": {"on_run": False}}), executor="local",
              progress=False)
    assert res.exit_code == 0, res.summary
    assert list((local / "wds").glob("*.tar"))
    bucket = s3_server.new_bucket()
    pafs.copy_files(str(local), f"{bucket}/runs/w", source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=s3_server.filesystem())
    a = export_bench(str(local), out=str(tmp_path / "from-local"))
    b = export_bench(f"s3://{bucket}/runs/w", out=str(tmp_path / "from-s3"))
    assert a["groups"] == b["groups"] > 0
    files = {p.relative_to(tmp_path / "from-local"): p.read_bytes()
             for p in sorted((tmp_path / "from-local").rglob("*")) if p.is_file()}
    assert any(p.suffix in (".jpg", ".jpeg") for p in files)
    for rel, data in files.items():
        if rel.name != "export_summary.json":  # it names the run it came from
            assert (tmp_path / "from-s3" / rel).read_bytes() == data, rel
    assert sorted(p.relative_to(tmp_path / "from-s3") for p in (tmp_path / "from-s3").rglob("*") if p.is_file()) \
        == sorted(files)
