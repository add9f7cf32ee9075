"""The one rule for what drivegen may delete (``generator.runfolder.store``: ``RunStore.deletable``): only a path it
wrote, inside the folder it owns, reached through no link, whatever a marker file lists. Each command that deletes
is given hostile marker files and links, and must leave every file outside its folder as it was."""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from generator.runfolder import RunLock, RunStore, clear_run, remove_leftovers
from schemas import layout
from schemas.errors import RunFolderError

SECRET = b"a file outside the folder"


def _cli(*argv) -> tuple[int, str, str]:
    from generator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder beside the one a command owns, with a file a hostile marker names: it must stay as it is."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_bytes(SECRET)
    (d / "sub").mkdir()
    (d / "sub" / "more.txt").write_bytes(SECRET)
    return d


def _hostile(folder: Path, outside: Path) -> list[str]:
    """Paths a marker in ``folder`` could list to reach ``outside``: '..' parts, an absolute path, and a link
    inside the folder leading out (made here)."""
    (folder / "link").symlink_to(outside, target_is_directory=True)
    up = os.path.relpath(outside / "secret.txt", folder)
    return [up, "qa/../" + up, str(outside / "secret.txt"), "link/secret.txt", "link"]


# ------------------------------------------------------------------------------------------ the rule itself
_PART = st.sampled_from(["..", ".", "", "a", "qa", "link", "secret.txt", "x.parquet"])


@settings(max_examples=150, deadline=None, database=None)
@given(parts=st.lists(_PART, min_size=1, max_size=5), absolute=st.booleans())
def test_the_store_deletes_nothing_outside_whatever_the_path(tmp_path_factory, parts, absolute):
    """Any '/'-joined path of these parts (``..``, ``.``, empty, names, a link out), absolute or not, given to
    ``delete`` and ``delete_dir``: nothing outside the folder is removed, and a refused path is a RunFolderError
    that names it."""
    root = tmp_path_factory.mktemp("rule")
    out = root / "outside"
    out.mkdir()
    (out / "secret.txt").write_bytes(SECRET)
    (out / "a").mkdir()
    (out / "a" / "secret.txt").write_bytes(SECRET)
    run = root / "run"
    (run / "qa").mkdir(parents=True)
    (run / "link").symlink_to(out, target_is_directory=True)
    rel = ("/" if absolute else "") + "/".join(parts)
    store = RunStore(str(run))
    for op in (store.delete, store.delete_dir):
        try:
            op(rel)
        except RunFolderError as err:
            assert repr(rel) in str(err)
    assert _tree(out) == {"secret.txt": SECRET, "a/secret.txt": SECRET}
    assert (run / "link").is_symlink()


def test_a_folder_is_deleted_without_following_the_links_in_it(tmp_path, outside):
    run = tmp_path / "run"
    (run / "parts" / "x").mkdir(parents=True)
    (run / "parts" / "x" / "a.json").write_text("{}")
    (run / "parts" / "x" / "out").symlink_to(outside, target_is_directory=True)
    store = RunStore(str(run))
    assert "parts/x/out" in store.list("", recursive=True) and store.links("") == ["parts/x/out"]
    store.delete_dir("parts")
    assert not (run / "parts").exists() and _tree(outside) == {"secret.txt": SECRET, "sub/more.txt": SECRET}


# ------------------------------------------------------------------------------------------ each command
def test_publish_report_and_exports_refuse_a_marker_listing_files_outside(labelled_run, tmp_path, outside):
    """``publish.json``, ``report/report.json`` and every export's marker listing a path out of their folder
    (``..``, absolute, through a link): the command is refused (exit 2) naming the marker, nothing outside goes."""
    from generator.pipeline.publish import MARKER, publish
    from generator.report import build_report
    from schemas.families import exports

    dest = tmp_path / "release"
    publish(str(labelled_run), str(dest), target_mb=1.0)
    for bad in _hostile(dest, outside):
        marker = json.loads((dest / MARKER).read_text())
        (dest / MARKER).write_text(json.dumps({**marker, "plan": "another", "files": marker["files"] + [bad]}))
        with pytest.raises(RunFolderError, match="refusing to delete"):
            publish(str(labelled_run), str(dest), target_mb=1.0, seed=1)
    (dest / "link").unlink()

    report = tmp_path / "report"
    report.mkdir()
    for bad in _hostile(report, outside):
        (report / "report.json").write_text(json.dumps({"format": "drivegen-report", "files": ["index.html", bad]}))
        with pytest.raises(RunFolderError, match="report.json"):
            build_report(str(labelled_run), str(report))

    for _, exp in exports():  # STRIDE-QA-Bench (bench/export_summary.json), Intention-Drive, DRAMA-X, PIE
        out = tmp_path / f"export-{exp.name}"
        code, _, err = _cli("export", exp.name, labelled_run, "--out", out)
        if code != 0:
            continue  # an export this run cannot make (a camera-only family)
        markers = [p for p in out.glob("*.json") if isinstance(json.loads(p.read_text()).get("files"), list)]
        assert len(markers) == 1, (exp.name, markers)
        for bad in _hostile(out, outside):
            data = json.loads(markers[0].read_text())
            markers[0].write_text(json.dumps({**data, "files": data["files"] + [bad]}))
            code, _, err = _cli("export", exp.name, labelled_run, "--out", out)
            assert code == 2 and "refusing to delete" in err and markers[0].name in err, (exp.name, err[-500:])
    assert _tree(outside) == {"secret.txt": SECRET, "sub/more.txt": SECRET}


def test_resume_and_recommit_refuse_an_intent_or_manifest_listing_files_outside(labelled_run, tmp_path, outside):
    """``_pending/<scene>.json`` (read by ``run --resume``: ``remove_leftovers``) and a scene's manifest (read when
    the scene is committed again: ``regenerate`` into the same folder) listing a path out of the run folder, or one
    no commit writes (``config.yaml``): refused naming the file, nothing deleted."""
    import pyarrow as pa

    from generator.runfolder import commit_tables

    run = tmp_path / "run"
    shutil.copytree(labelled_run, run)
    store = RunStore(str(run))
    scene = json.loads((run / layout.SCENES).read_text())["scene_ids"][0]
    manifest = run / layout.manifest_file(scene)
    (run / layout.PENDING_DIR).mkdir()
    for bad in _hostile(run, outside) + [layout.CONFIG]:
        pending = run / layout.PENDING_DIR / "ghost.json"
        pending.write_text(json.dumps({"scene_id": "ghost", "files": [bad]}))
        with pytest.raises(RunFolderError, match="ghost.json"):
            remove_leftovers(store)
        pending.unlink()
        m = json.loads(manifest.read_text())
        manifest.write_text(json.dumps({**m, "files": m["files"] + [{"path": bad, "rows": 1}]}))
        with pytest.raises(RunFolderError, match=manifest.name):
            commit_tables(store, scene, {"frames": pa.table({"x": [1]})}, split="train")
        manifest.write_text(json.dumps(m))
    assert (run / layout.CONFIG).exists()
    assert _tree(outside) == {"secret.txt": SECRET, "sub/more.txt": SECRET}


def test_overwrite_and_clean_delete_only_the_runs_own_files(labelled_run, tmp_path, outside):
    """``run --overwrite`` emptied the folder ``OUT/report`` links to (a web root); ``make clean`` removed a whole
    OUT holding a user's notes. Now a link is never followed: ``--overwrite`` refuses a folder holding one (or any
    file not drivegen's) and ``drivegen clean`` deletes the run's files, keeping the notes and the link."""
    run = tmp_path / "out"
    shutil.copytree(labelled_run, run)
    before = _tree(run)
    (run / "report").symlink_to(outside, target_is_directory=True)
    store = RunStore(str(run))
    with RunLock(store, "test"), pytest.raises(RunFolderError, match="report .a link to"):
        clear_run(store)
    assert _tree(run) == before and (run / "report").is_symlink()  # nothing deleted
    (run / "notes.md").write_text("mine")
    code, out, err = _cli("clean", run)
    assert code == 0 and "kept 2 file(s)" in out, err
    assert sorted(os.listdir(run)) == ["notes.md", "report"] and (run / "report").is_symlink()
    assert _tree(outside) == {"secret.txt": SECRET, "sub/more.txt": SECRET}
    # a folder that is not a drivegen run (a run.json of someone else's) is left as it is
    (run / layout.RUN_STATE).write_text('{"name": "my project"}')
    code, _, err = _cli("clean", run)
    assert code == 2 and "not a drivegen run folder" in err and (run / layout.RUN_STATE).exists()


def test_make_clean_keeps_a_users_file(labelled_run, tmp_path):
    """The issue's reproduction: ``echo x > out/notes.md; make clean`` deleted notes.md with the run."""
    out = tmp_path / "out"
    shutil.copytree(labelled_run, out)
    (out / "notes.md").write_text("x\n")
    venv = Path(sys.executable).parent.parent
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(["make", "-s", "-C", str(root), "clean", f"OUT={out}", f"VENV={venv}"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _tree(out) == {"notes.md": b"x\n"} and "kept 1 file(s)" in r.stdout
