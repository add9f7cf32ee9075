"""Logs on object storage: generated nuScenes-format logs on a real S3-compatible server (moto's server mode on
127.0.0.1, tests/support/s3.py), read through the node cache (``generator.sources.remote``); and the cache's
rules on a local filesystem."""
from __future__ import annotations

import json
import os
import time

import numpy as np
import pyarrow.fs as pafs
import pytest

from generator.runfolder import RunReader
from generator.sources.remote import NodeCache
from support.data import SYNTH_VERSION
from support.pipeline import LIGHT, assert_same_rows, drivegen, write_config
from schemas.errors import SourceError

TABLES = ("frames", "objects", "projections", "attributes", "labels")


@pytest.fixture(scope="module")
def small_logs(tmp_path_factory):
    """One generated scene, LiDAR keyframes only, its first 12 s (24 keyframes: every stage and export of a scene
    at about 60 % of its cost; the two frames damaged below stay under ``failures.max_failed_frame_share``)."""
    from generator.synth import make_dataset

    root = tmp_path_factory.mktemp("s3logs") / "logs"
    make_dataset(root, num_scenes=1, seed=3, version=SYNTH_VERSION, sweep_hz=0, num_keyframes=24)
    return root


def _rows(out, name: str) -> str:
    """A run table's rows as JSON text, in a fixed order (grounding strings decoded)."""
    from schemas.tables import plain_schema

    t = RunReader(str(out)).read_table(name)
    t = t.cast(plain_schema(t.schema))
    rows = t.to_pylist()
    rows.sort(key=lambda r: json.dumps(r, sort_keys=True, default=str))
    return json.dumps(rows, sort_keys=True, default=str)


def _logs(data, cfg):
    return ("--source", "nuscenes", "--data", data, "--version", SYNTH_VERSION, "--config", cfg, "--no-progress")


@pytest.mark.slow
@pytest.mark.ray
def test_run_from_s3_logs_to_s3_equals_local_and_names_bad_objects(s3_server, small_logs, tmp_path):
    bucket = s3_server.new_bucket()
    uri = f"s3://{bucket}/logs"
    s3_server.upload(small_logs, uri)
    cache = tmp_path / "cache"
    cfg = write_config(tmp_path / "cfg.yaml", {**LIGHT, "sources": {"cache_dir": str(cache)}})

    local = tmp_path / "local"
    r = drivegen("run", "--out", local, *_logs(small_logs, cfg), "--local")
    assert r.returncode == 0, r.stderr[-3000:]
    run = f"s3://{bucket}/runs/a"  # through Ray: the workers open the logs from the run's source.json
    r = drivegen("run", "--out", run, *_logs(uri, cfg))
    assert r.returncode == 0, r.stderr[-3000:]
    # the same rows; the tables name the logs' files by URI instead of by local path
    for name in ("qa", "frames"):
        want = _rows(local, name).replace(str(small_logs), uri)
        assert str(small_logs) in _rows(local, name) and want == _rows(run, name), name
    for name in ("objects", "projections", "attributes", "labels"):
        assert_same_rows(local, run, name, exact=False)
    reader = RunReader(run)
    assert reader.store.read_json("source.json")["dataroot"] == uri  # workers and --resume reopen the URI
    # the bench export at the end of the run read its images by URI (sources.remote.read_log_file)
    exported = reader.store.read_json("bench/export_summary.json")
    assert exported["images"] > 0 and exported["images"] == _summary(local)["images"]
    cached = [p for p in cache.rglob("*") if p.is_file()]
    assert any(p.name == "scene.json" for p in cached) and sum(p.suffix == ".jpg" for p in cached) >= 40

    # a deleted image and a truncated LiDAR sweep: each the frame's issue, named by its object's URI
    fs = s3_server.filesystem()
    infos = fs.get_file_info(pafs.FileSelector(f"{bucket}/logs/samples", recursive=True))
    image = sorted(i.path for i in infos if i.path.endswith(".jpg") and "CAM_FRONT/" in i.path)[3]
    sweep = sorted(i.path for i in infos if i.path.endswith(".pcd.bin"))[5]
    fs.delete_file(image)
    with fs.open_input_stream(sweep) as fh:
        data = fh.read()
    with fs.open_output_stream(sweep) as fh:
        fh.write(data[: len(data) // 2])
    fresh = tmp_path / "cache2"  # a node that has not seen the logs
    cfg2 = write_config(tmp_path / "cfg2.yaml", {**LIGHT, "sources": {"cache_dir": str(fresh)}})
    out = tmp_path / "damaged"
    r = drivegen("run", "--out", out, *_logs(uri, cfg2), "--local")
    issues = RunReader(out).read_table("issues")
    assert issues is not None, (r.returncode, r.stdout[-3000:])
    named = set(issues.column("file").to_pylist())
    assert f"s3://{image}" in named and f"s3://{sweep}" in named, (named, r.stdout[-2000:])
    assert not any(str(fresh) in (f or "") for f in named)  # never the cache's private path


def test_cache_fetches_whole_files_and_evicts_least_recently_used(tmp_path):
    remote = tmp_path / "remote"
    remote.mkdir()
    for k in range(4):
        (remote / f"f{k}.bin").write_bytes(bytes([k]) * 1000)
    fs = pafs.LocalFileSystem()
    cache = NodeCache(tmp_path / "cache", max_bytes=2500, keep_s=0.0)
    for k in range(3):
        got = cache.fetch(fs, str(remote / f"f{k}.bin"), cache.root / f"f{k}.bin", f"s3://b/f{k}.bin")
        assert got.read_bytes() == bytes([k]) * 1000
        os.utime(got, (time.time() - 100 + k, time.time() - 100 + k))  # f0 the least recently used
    os.utime(cache.root / "f0.bin", None)  # ... until it is used again: now f1 is
    removed = cache.trim()
    assert [p.name for p in removed] == ["f1.bin"]
    assert sorted(p.name for p in cache.root.iterdir() if not p.name.startswith(".")) == ["f0.bin", "f2.bin"]
    # a file used within keep_s stays even over the bound
    keep = NodeCache(tmp_path / "cache", max_bytes=0, keep_s=3600.0)
    assert keep.trim() == []
    # a missing object is an error naming its URI; nothing is left in the cache
    with pytest.raises(SourceError, match="s3://b/none.bin does not exist"):
        cache.fetch(fs, str(remote / "none.bin"), cache.root / "none.bin", "s3://b/none.bin")
    # an object that changed since it was cached (another size) is downloaded again; no temp file stays
    cache.fetch(fs, str(remote / "f2.bin"), cache.root / "f2.bin", "s3://b/f2.bin")
    (remote / "f2.bin").write_bytes(b"x" * 10)
    assert cache.fetch(fs, str(remote / "f2.bin"), cache.root / "f2.bin", "s3://b/f2.bin").read_bytes() == b"x" * 10
    assert not [p for p in cache.root.iterdir() if p.name.endswith(".tmp")]


def test_bad_log_uris_are_named(s3_server, tmp_path):
    """A bucket that does not exist, a prefix with no logs, no version given, an unreachable endpoint: errors naming
    the URI, before anything is written."""
    from generator.sources import open_source
    from schemas.config import parse_config

    cfg = parse_config({"sources": {"cache_dir": str(tmp_path / "cache")}})
    bucket = s3_server.new_bucket()
    for uri in (f"s3://no-such-bucket-{bucket}/logs", f"s3://{bucket}/empty"):
        with pytest.raises(SourceError, match=uri) as err:
            open_source("nuscenes", uri, cfg, version=SYNTH_VERSION)
        assert err.value.file.startswith(uri), err.value.file
    with pytest.raises(SourceError, match="need their nuScenes version"):
        open_source("nuscenes", f"s3://{bucket}/logs", cfg)
    r = drivegen("run", "--out", tmp_path / "out", "--source", "nuscenes", "--data", f"s3://{bucket}/empty",
                 "--version", SYNTH_VERSION, "--no-progress", "--local")
    assert r.returncode == 2 and f"s3://{bucket}/empty" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "out").exists()  # nothing written before the logs open


def test_av2_log_on_s3_loads_as_the_local_one(s3_server, av2_log, tmp_path):
    """The real AV2 log under s3://bucket/av2/<log>/: the same frames, labels and sweeps as from the local folder,
    its files named by URI in the frames table, and its files in the node cache."""
    from generator.sources import frames_table, open_source
    from schemas.config import parse_config

    bucket = s3_server.new_bucket()
    uri = f"s3://{bucket}/av2"
    s3_server.upload(av2_log, f"{uri}/{av2_log.name}")
    cfg = parse_config({"sources": {"cache_dir": str(tmp_path / "cache")}})
    local, remote = open_source("av2", av2_log.parent, cfg, max_sweeps=10), open_source("av2", uri, cfg, max_sweeps=10)
    assert remote.scene_ids() == [av2_log.name] and remote.describe()["root"] == uri
    # the scheduling estimate (its LiDAR sweeps) from the listing, as the local folder gives it
    n_sweeps = len(os.listdir(av2_log / "sensors" / "lidar"))
    assert remote.work_estimates() == local.work_estimates() == {av2_log.name: float(n_sweeps)} and n_sweeps > 0
    a, b = local.load_scene(av2_log.name), remote.load_scene(av2_log.name)
    ta, tb = frames_table(a), frames_table(b)
    assert ta.drop(["cameras", "lidar_path"]).equals(tb.drop(["cameras", "lidar_path"]))
    assert [p.replace(str(av2_log.parent), uri) for p in ta.column("lidar_path").to_pylist()] == \
        tb.column("lidar_path").to_pylist()
    assert any(fa.lidar_sweeps for fa in a.frames)  # sweeps to compare
    for fa, fb in zip(a.frames, b.frames):
        assert np.array_equal(fa.labels.center_m, fb.labels.center_m)
        assert [s.timestamp_us for s in fa.lidar_sweeps] == [s.timestamp_us for s in fb.lidar_sweeps]
        assert fb.lidar_path.startswith(str(tmp_path / "cache"))
        assert os.path.isfile(fb.lidar_path) == os.path.isfile(fa.lidar_path)  # the excerpt has some sweeps
    assert any(os.path.isfile(f.lidar_path) for f in b.frames)
    # an endpoint nobody listens on: refused after the client's retries, the URI named, nothing written
    r = drivegen("run", "--out", tmp_path / "out", "--source", "nuscenes", "--data", f"s3://{bucket}/logs",
                 "--version", SYNTH_VERSION, "--no-progress", "--local", env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9"},
                 timeout=120)
    assert r.returncode == 2 and f"cannot list s3://{bucket}/logs/{SYNTH_VERSION}" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "out").exists()


def _summary(out) -> dict:
    return json.loads((out / "bench" / "export_summary.json").read_text())


@pytest.mark.slow  # each attempt against a cut endpoint takes the S3 client's own retries, about 2 s
def test_an_outage_is_retried_then_fails_the_scene_never_a_missing_file(s3_server, tmp_path, monkeypatch):
    """An S3 endpoint that went away while scenes loaded made every object a 'missing' frame issue: the run
    committed a different dataset and exited 0. Through a proxy that can be cut (tests/support/s3.py): a fetch
    that cannot reach the storage is tried ``sources.fetch_attempts`` times with a doubling wait, then fails
    naming the object and the network error, and ``fetch_all`` (a scene's files) raises it so the scene fails;
    restored during the waits, the fetch succeeds; a missing object is still not retried and left absent."""
    import threading

    from generator.sources.remote import RemoteRoot, UnreachableError, _filesystem
    from schemas.config import SourceLimitsConfig
    from support.s3 import CuttableProxy

    bucket = s3_server.new_bucket()
    data = os.urandom(300_000)
    with s3_server.filesystem().open_output_stream(f"{bucket}/logs/samples/a.bin") as f:
        f.write(data)
    proxy = CuttableProxy(s3_server.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    _filesystem.cache_clear()
    limits = SourceLimitsConfig(cache_dir=str(tmp_path / "cache"), fetch_attempts=3, fetch_backoff_s=0.5)
    root = RemoteRoot(f"s3://{bucket}/logs", limits)
    uri = f"s3://{bucket}/logs/samples/a.bin"

    proxy.cut()
    t0 = time.monotonic()
    with pytest.raises(UnreachableError) as err:
        root.local("samples/a.bin")
    assert time.monotonic() - t0 >= 0.5 + 1.0  # two waits between three attempts
    text = str(err.value)
    assert err.value.file == uri and "3 attempts" in text and "network error" in text and "does not exist" not in text
    once = RemoteRoot(f"s3://{bucket}/logs", limits.model_copy(update={"fetch_attempts": 1}))
    with pytest.raises(UnreachableError):
        once.fetch_all(["samples/a.bin"])  # the scene fails: its --resume redoes it
    assert not (root.mirror / "samples" / "a.bin").exists()

    threading.Timer(0.3, proxy.restore).start()  # back during the first wait
    assert root.local("samples/a.bin").read_bytes() == data

    with pytest.raises(SourceError, match="does not exist") as err:
        root.local("samples/missing.bin")
    assert not isinstance(err.value, UnreachableError)
    root.fetch_all(["samples/missing.bin"])  # a missing object: the frame's problem, recorded by the source
    proxy.cut()


def test_a_replaced_object_is_fetched_again_even_of_the_same_size(s3_server, tmp_path):
    """The cache reused a cached file when its object was replaced by one of the same size (an edited
    ``sample_annotation.json``: the old objects in the output). A file is reused only under the object's identity
    (its ETag on S3); an unchanged object is not downloaded again."""
    from generator.sources.remote import RemoteRoot
    from schemas.config import SourceLimitsConfig

    bucket = s3_server.new_bucket()
    fs = s3_server.filesystem()
    for body in (b'[{"token": "a", "size": [1.0, 2.0, 3.0]}]', b'[{"token": "a", "size": [9.0, 2.0, 3.0]}]'):
        with fs.open_output_stream(f"{bucket}/logs/v1/sample_annotation.json") as f:
            f.write(body)
        root = RemoteRoot(f"s3://{bucket}/logs", SourceLimitsConfig(cache_dir=str(tmp_path / "cache")))
        got = root.local("v1/sample_annotation.json")
        assert got.read_bytes() == body
    inode = got.stat().st_ino
    assert root.local("v1/sample_annotation.json").stat().st_ino == inode  # the same object: the cached file


def test_a_listing_is_retried_with_the_fetches_backoff(s3_server, tmp_path, monkeypatch):
    """A 10 s S3 blip during a source's listing failed the scene at once, without the backoff a fetch gets. The
    listing is tried ``sources.fetch_attempts`` times with the same doubling wait (``NodeCache.retry``, whose
    failure after the last attempt the outage test above checks): restored during a wait, it succeeds."""
    import logging
    import threading

    from generator.sources.remote import RemoteRoot
    from schemas.config import SourceLimitsConfig
    from support.s3 import CuttableProxy

    bucket = s3_server.new_bucket()
    with s3_server.filesystem().open_output_stream(f"{bucket}/logs/samples/a.bin") as f:
        f.write(b"x")
    proxy = CuttableProxy(s3_server.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    root = RemoteRoot(f"s3://{bucket}/logs", SourceLimitsConfig(cache_dir=str(tmp_path / "cache"), fetch_attempts=3,
                                                                fetch_backoff_s=0.5))
    class RestoreOnRetry(logging.Handler):  # the storage is back once the first attempt has failed (~6 s: pyarrow
        def emit(self, record):  # retries a refused connection itself first), as after a blip
            if "trying again" in record.getMessage() and not retried.is_set():
                retried.set()
                proxy.restore()

    retried = threading.Event()
    handler = RestoreOnRetry()
    logging.getLogger("drivegen.sources").addHandler(handler)
    proxy.cut()
    try:
        assert root.list() == ["samples/a.bin"] and retried.is_set()
    finally:
        logging.getLogger("drivegen.sources").removeHandler(handler)
        proxy.cut()


def test_the_intention_export_names_a_map_by_its_object(s3_server, minimal_logs, tmp_path, monkeypatch):
    """The Intention-Drive export's ``map_path`` named the node's cache file of the map (another on every machine)
    instead of its ``s3://`` object. It is the object's URI now, and the road check reads the map from it."""
    from generator.families.intention_drive.export import road_lookup
    from generator.sources import open_source
    from schemas.config import parse_config

    bucket = s3_server.new_bucket()
    for sub in (SYNTH_VERSION, "maps"):  # the tables and the maps (the sensor files are not read here)
        s3_server.upload(minimal_logs / sub, f"s3://{bucket}/logs/{sub}")
    cfg = parse_config({"sources": {"cache_dir": str(tmp_path / "cache")}})
    src = open_source("nuscenes", f"s3://{bucket}/logs", cfg, version=SYNTH_VERSION)
    m = src.drivable_map(src.scene_ids()[0])
    assert m is not None and m["path"].startswith(f"s3://{bucket}/logs/"), m
    monkeypatch.setenv("DRIVEGEN_LOG_CACHE", str(tmp_path / "elsewhere"))  # another machine's cache
    _, read, problems = road_lookup([m["path"]], np.array([m["resolution_m"]]))
    assert read.all() and not problems
