"""``drivegen publish``: a run folder as a release the ecosystem reads unchanged (``datasets.load_dataset``,
``webdataset``), sized shards shuffled across scenes, exactly once and resumable to the same bytes, and refused
with nothing written where the run or the destination is not fit."""
from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import json
import os
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from generator.pipeline.publish import CHECKSUMS, MARKER, publish

MB = 2**20


def _run_cli(*argv) -> tuple[int, str, str]:
    from generator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_publish_of_the_default_run_is_read_by_datasets_and_webdataset(default_run, tmp_path, monkeypatch):
    """``make run``'s output published with a 1 MB and a 0.1 MB target: ``datasets.load_dataset(DEST)`` gives the
    run's QA rows (the same multiset of ids); every Parquet shard and tar is within 1.5x of the target but the
    last of a split (or a single sample larger than the target: a tar of its own); every Parquet shard holds rows
    of more than one scene; ``webdataset`` reads every tar, each sample whole; ``sha256sum`` agrees."""
    import datasets
    import webdataset as wds

    run = default_run[0]
    run_ids = collections.Counter(pq.read_table(run / "qa", columns=["qa_id"]).column(0).to_pylist())
    run_samples = sum(len(list(wds.WebDataset(str(t), shardshuffle=False))) for t in sorted((run / "wds").glob("*.tar")))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for target_mb in (1.0, 0.1):
        dest = tmp_path / f"release-{target_mb}"
        code, out, err = _run_cli("publish", run, "--out", dest, "--target-shard-mb", target_mb)
        assert code == 0, err[-2000:]
        assert out.startswith("published ") and str(dest) in out
        got = datasets.load_dataset(str(dest), cache_dir=str(tmp_path / "hf-cache"))
        assert list(got) == ["train"]
        assert collections.Counter(got["train"]["qa_id"]) == run_ids
        target = target_mb * MB
        by_split: dict[str, list[Path]] = collections.defaultdict(list)
        for f in sorted(dest.rglob("*.parquet")) + sorted(dest.rglob("*.tar")):
            by_split[f"{f.parent.name}/{f.name.split('-')[0]}"].append(f)
        for group, files in by_split.items():
            for f in files[:-1]:
                size = f.stat().st_size
                if f.suffix == ".tar" and len({m.split(".")[0] for m in _tar_names(f)}) == 1:
                    continue  # one sample bigger than the target
                assert target / 1.5 <= size <= 1.5 * target, (f, size, target)
            for f in files:
                if f.suffix == ".parquet" and pq.read_metadata(f).num_rows > 1:
                    scenes = set(pq.read_table(f, columns=["scene_id"]).column(0).to_pylist())
                    assert len(scenes) > 1, f
        samples = 0
        for t in sorted((dest / "wds").glob("*.tar")):
            for s in wds.WebDataset(str(t), shardshuffle=False):
                meta = json.loads(s["json"])
                assert all(im["member"] in s for im in meta["images"] if im["member"])  # each sample whole
                samples += 1
        assert samples == run_samples
        sums = (dest / CHECKSUMS).read_text().splitlines()
        assert sums and all(hashlib.sha256((dest / line.split("  ", 1)[1]).read_bytes()).hexdigest()
                            == line.split("  ", 1)[0] for line in sums)
        card = (dest / "README.md").read_text()
        assert "path: qa/train-*.parquet" in card and "## This release" in card
    qa_small = sorted((tmp_path / "release-0.1" / "qa").glob("*.parquet"))
    assert len(qa_small) > 2  # the 0.1 MB target cut the QA rows into several shards


def _tar_names(path: Path) -> list[str]:
    import tarfile

    with tarfile.open(path) as tf:
        return tf.getnames()


def test_killed_publish_resumed_gives_the_same_bytes(labelled_run, tmp_path):
    """A publish stopped after two shards (as a killed one) leaves an unfinished release that the same command
    finishes: every file equals a clean publish's byte for byte. The same seed gives the same bytes; another
    seed another order; a second publish of another seed replaces the first's files only."""
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    res = publish(str(labelled_run), str(clean), target_mb=0.05)
    assert res.files > 4 and res.written == res.files  # an empty folder: every file written now, the marker too
    assert f"published {res.files} files (" in res.line() and f"; {res.files} written now) to " in res.line()
    with pytest.raises(Exception, match="stopped after 2"):
        publish(str(labelled_run), str(killed), target_mb=0.05, stop_after=2)
    assert json.loads((killed / MARKER).read_text())["state"] == "writing"
    assert not (killed / CHECKSUMS).exists()
    again = publish(str(labelled_run), str(killed), target_mb=0.05)
    assert again.written == res.written - 2 and "2 in place from an interrupted publish" in again.line()
    assert _files(killed) == _files(clean)
    same = tmp_path / "same"
    publish(str(labelled_run), str(same), target_mb=0.05)
    assert _files(same) == _files(clean)
    other = publish(str(labelled_run), str(same), target_mb=0.05, seed=7)
    assert other.written == other.files and _files(same) != _files(clean)
    a = pq.read_table(sorted(clean.glob("qa/*.parquet"))[0], columns=["qa_id"]).column(0).to_pylist()
    b = pq.read_table(sorted(same.glob("qa/*.parquet"))[0], columns=["qa_id"]).column(0).to_pylist()
    assert a[:20] != b[:20]


def test_unfit_run_or_destination_is_refused_with_nothing_written(labelled_run, tmp_path, s3_server):
    """Each refusal is exit 2 with a message naming what is wrong, and DEST is left as it was."""
    from generator.runfolder import RunStore
    from generator.runfolder.commit import write_error
    from schemas import layout

    # DEST holding a user's files
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    code, _, err = _run_cli("publish", labelled_run, "--out", dest)
    assert code == 2 and "not an earlier drivegen publish" in err and _files(dest) == {"notes.txt": b"mine"}
    # DEST that cannot be reached
    code, _, err = _run_cli("publish", labelled_run, "--out", "s3://no-such-bucket-here/release")
    assert code == 2 and "no-such-bucket-here" in err and "Traceback" not in err
    # a RUN still being written: its lock held by a live process
    run = tmp_path / "run"
    shutil.copytree(labelled_run, run)
    now = time.time()
    (run / layout.LOCK).write_text(json.dumps({"owner": "x", "host": os.uname().nodename, "pid": os.getpid(),
                                               "command": "drivegen run", "epoch": 9, "started_unix": now,
                                               "heartbeat_unix": now}))
    out = tmp_path / "out"
    code, _, err = _run_cli("publish", run, "--out", out)
    assert code == 2 and "is still being written" in err and not out.exists()
    (run / layout.LOCK).unlink()
    # a RUN with a failed scene: refused, named; --allow-partial publishes the finished ones
    write_error(RunStore(str(run)), {"scene_id": "scene-9999", "stage": "load", "file": "x.pcd",
                                     "error_type": "SourceError", "message": "unreadable LiDAR"})
    code, _, err = _run_cli("publish", run, "--out", out)
    assert code == 2 and "scene-9999: stage load: unreadable LiDAR" in err and "--allow-partial" in err
    assert not out.exists()
    code, stdout, err = _run_cli("publish", run, "--out", out, "--allow-partial")
    assert code == 0 and (out / MARKER).is_file(), err[-2000:]
    # DEST inside RUN
    code, _, err = _run_cli("publish", run, "--out", run / "release", "--allow-partial")
    assert code == 2 and "inside the run folder" in err and not (run / "release").exists()


@pytest.mark.slow
@pytest.mark.ray
def test_shards_built_as_ray_tasks_are_the_same_bytes(labelled_run, tmp_path):
    """``--workers 2``: the shards are Ray tasks on an embedded Ray; the release equals the in-process one."""
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    publish(str(labelled_run), str(local), target_mb=0.05)
    publish(str(labelled_run), str(on_ray), target_mb=0.05, workers=2)
    assert _files(on_ray) == _files(local)


def test_publish_to_object_storage_equals_local(labelled_run, tmp_path, s3_server):
    """DEST on ``s3://`` (the moto server): the same files, byte for byte, as a local DEST."""
    import pyarrow.fs as pafs

    local = tmp_path / "local"
    publish(str(labelled_run), str(local), target_mb=0.05)
    bucket = s3_server.new_bucket()
    publish(str(labelled_run), f"s3://{bucket}/release", target_mb=0.05)
    fs = s3_server.filesystem()
    infos = fs.get_file_info(pafs.FileSelector(f"{bucket}/release", recursive=True))
    got = {i.path[len(f"{bucket}/release/"):]: fs.open_input_stream(i.path).read()
           for i in infos if i.type == pafs.FileType.File}
    assert got == _files(local)


def test_a_changed_run_published_again_leaves_no_stale_shard(labelled_run, tmp_path):
    """Publishing a changed run again into the same release kept the stale shards (44 of 4,424 questions old, exit
    0, SHA256SUMS OK: the plan was keyed by paths and row counts). Keyed by content now: a QA file rewritten with
    the same rows and other answers republishes the QA shards (the other configs' stay), and a temporary file a
    killed publish left in the release goes. The card quotes the run's path as text: a path holding markup gives
    no live HTML in a CommonMark renderer."""
    import pyarrow as pa
    from markdown_it import MarkdownIt

    from generator.runfolder import RunReader
    from schemas import layout

    run = tmp_path / "run`<img src=x onerror=alert(1)>`"
    shutil.copytree(labelled_run, run)
    dest = tmp_path / "release"
    first = publish(str(run), str(dest))  # one shard per config and split: the same plan whatever the bytes
    html = MarkdownIt("commonmark").render((dest / "README.md").read_text())
    assert "<img" not in html and "onerror=alert(1)" in html
    f = sorted((run / "qa").glob("*.parquet"))[0]
    t = pq.read_table(f)
    t = t.set_column(t.schema.get_field_index("answer"), "answer",
                     pa.array([a + " (changed)" for a in t.column("answer").to_pylist()]))
    pq.write_table(t, f)
    leftover = dest / layout.tmp_name("qa/train-00000-of-00001.parquet")
    leftover.write_bytes(b"half a shard")
    again = publish(str(run), str(dest))
    want = RunReader(str(run)).read_table("qa", columns=["qa_id", "answer"]).to_pylist()
    got = pq.read_table(dest / "qa", columns=["qa_id", "answer"]).to_pylist()
    assert sorted(map(str, got)) == sorted(map(str, want))
    qa_files = len(list(dest.glob("qa/*.parquet")))
    assert again.written == qa_files + 3 < first.written  # the QA shards, the card, SHA256SUMS and the marker
    assert not leftover.exists() and not [p for p in dest.rglob("*") if p.name.endswith(".tmp")]
