"""Listings on object storage that do not grow with the bucket: the driver lists an AV2 root once; a worker's
source (rebuilt from its description) lists nothing when it opens and only the prefix of the log it loads. Requests
are counted by a proxy in front of moto's server (tests/support/s3.py)."""
from __future__ import annotations

import urllib.parse

from generator.sources import frames_table, open_source, source_from_description
from schemas.config import parse_config
from support.s3 import CuttableProxy


def _log_of(request: str, bucket: str) -> str:
    """The log a request touches: the prefix of a listing, the key of an object (relative to the AV2 root)."""
    path, _, query = request.split(" ", 1)[1].partition("?")
    params = urllib.parse.parse_qs(query)
    key = params["prefix"][0] if "prefix" in params else urllib.parse.unquote(path).removeprefix(f"/{bucket}/")
    return key.removeprefix("av2/")


def test_a_worker_lists_only_the_log_it_loads(s3_server, av2_log, tmp_path, monkeypatch):
    bucket = s3_server.new_bucket()
    uri = f"s3://{bucket}/av2"
    s3_server.upload(av2_log, f"{uri}/{av2_log.name}")
    fs = s3_server.filesystem()
    others = [f"{av2_log.name}-copy", "0-other", "zz-other"]  # one whose name the real log's is a prefix of
    for name in others:
        for rel in ("city_SE3_egovehicle.feather", "sensors/lidar/1.feather"):
            with fs.open_output_stream(f"{bucket}/av2/{name}/{rel}") as fh:
                fh.write(b"not read")
    cfg = parse_config({"sources": {"cache_dir": str(tmp_path / "cache")}})
    driver = open_source("av2", uri, cfg)
    assert sorted(driver.scene_ids()) == sorted([av2_log.name, *others])

    proxy = CuttableProxy(s3_server.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    worker = source_from_description(driver.describe())
    assert proxy.requests == []  # opening lists nothing
    scene = worker.load_scene(av2_log.name)
    lists = [r for r in proxy.requests if "list-type=" in r]
    assert len(lists) == 1, proxy.requests
    assert "prefix=" in lists[0] and _log_of(lists[0], bucket) == f"{av2_log.name}/", lists[0]
    touched = {_log_of(r, bucket).split("/", 1)[0] for r in proxy.requests}
    assert touched == {av2_log.name}, proxy.requests
    assert frames_table(scene).equals(frames_table(driver.load_scene(av2_log.name)))
    # an unknown log: one listing of its own prefix, then a clear error
    proxy.requests.clear()
    try:
        worker.load_scene("no-such-log")
    except Exception as err:  # noqa: BLE001 - checked below
        assert "unknown AV2 log 'no-such-log'" in str(err)
    else:
        raise AssertionError("an unknown log loaded")
    assert {_log_of(r, bucket) for r in proxy.requests} == {"no-such-log/"}, proxy.requests
    proxy.cut()
