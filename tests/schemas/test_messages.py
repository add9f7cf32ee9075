"""Every message says what happened (issue 57 #13 and #15): a refusal, an outage, a symlink loop, a bad seed or
a name too long for a file are each told as what they are, before anything is written where they can be, and
never as "a bug in drivegen", "a failing disk", "missing" or "no export here"."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from support.pipeline import drivegen
from support.s3 import CuttableProxy


def test_a_symlink_loop_is_named_as_one(tmp_path):
    """``inspect`` on a symlink loop called it "a network error or a failing disk" (exit 1)."""
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    r = drivegen("inspect", tmp_path / "a")
    assert r.returncode == 2 and "symlink loop" in r.stderr, r.stderr[-2000:]
    assert "failing disk" not in r.stderr and "bug in drivegen" not in r.stderr


@pytest.mark.parametrize("argv, said", [
    (["--seed", "-1"], "a seed is a whole number from 0 to 2**63 - 1, got -1"),  # was "a bug in drivegen"
    (["--target-shard-mb", "1e-9"], "must be from 0.01 to 16384 MB"),  # planned 19,376 one-row files
])
def test_publish_refuses_a_bad_seed_or_shard_size_before_any_work(labelled_run, tmp_path, argv, said):
    r = drivegen("publish", labelled_run, "--out", tmp_path / "release", *argv)
    assert r.returncode == 2 and said in r.stderr, r.stderr[-2000:]
    assert "bug in drivegen" not in r.stderr and not (tmp_path / "release").exists()


def test_a_scene_name_too_long_for_a_file_is_refused_before_the_run_folder(synth_root, tmp_path):
    """A 100,000-character scene name made --out, then failed every scene with a 300 KB message: it is refused
    before anything is written, in a message of a few hundred characters naming the logs."""
    logs = tmp_path / "logs"
    version = next(p.parent.name for p in synth_root.glob("*/scene.json"))
    shutil.copytree(synth_root / version, logs / version)
    for entry in synth_root.iterdir():
        if entry.name != version:
            os.symlink(entry, logs / entry.name)
    scenes = json.loads((logs / version / "scene.json").read_text())
    scenes[0]["name"] = "n" * 100_000
    (logs / version / "scene.json").write_text(json.dumps(scenes))
    out = tmp_path / "out"
    r = drivegen("run", "--source", "nuscenes", "--data", logs, "--version", version, "--out", out, "--local",
                 "--no-progress")
    assert r.returncode == 2 and "too long to name the run's files" in r.stderr, r.stderr[-2000:]
    assert len(r.stderr) < 2000 and str(logs) in r.stderr and not out.exists()


def test_score_stride_says_access_was_refused_not_that_no_export_is_there(s3_server, tmp_path):
    """A 403 on ``score stride`` said "no STRIDE-QA-Bench export here"; it says access was refused (exit 2)."""
    proxy = CuttableProxy(s3_server.endpoint)
    proxy.deny()
    (tmp_path / "pred.json").write_text("[]")
    r = drivegen("score", "stride", f"s3://{s3_server.new_bucket()}/run", "--pred", tmp_path / "pred.json",
                 env={"AWS_ENDPOINT_URL": proxy.endpoint})
    assert r.returncode == 2 and "access refused" in r.stderr, r.stderr[-2000:]
    assert "no STRIDE-QA-Bench export" not in r.stderr


def test_an_outage_while_writing_is_a_storage_error_not_a_folder_to_change(s3_server):
    """During an S3 outage the worker's error advised "give an --out folder you can write to": it is the storage
    out of reach (StorageError: exit 1, try again, --resume finishes the run)."""
    from generator.runfolder import RunStore
    from schemas.errors import StorageError

    proxy = CuttableProxy(s3_server.endpoint)
    store = RunStore(f"s3://{s3_server.new_bucket()}/run?endpoint_override=127.0.0.1:{proxy.port}&scheme=http")
    store.write_json("manifest/a.json", {"x": 1})
    proxy.cut()
    with pytest.raises(StorageError, match="could not be reached") as err:
        store.write_json("manifest/b.json", {"x": 2})
    assert "--resume" in str(err.value) and "give an --out folder" not in str(err.value)
    assert err.value.file.endswith("/run/manifest/b.json?endpoint_override=127.0.0.1:%d&scheme=http" % proxy.port)
