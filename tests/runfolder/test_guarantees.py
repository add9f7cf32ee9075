"""What drivegen guarantees about a run folder (docs/operations/guarantees.md): never lose a user's data, never
say "ok" about wrong output. Each test reproduces what a careful user once found, on generated logs. Bounds on
what a source reads, damaged sensor files and the synth command's arguments are in tests/sources/test_source_bounds.py."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pytest

from generator.runfolder import RunLock, RunReader, RunStore, read_table
from schemas import layout
from support.data import SYNTH_VERSION
from support.pipeline import LIGHT, damaged_lidar_logs, drivegen, popen_drivegen, wait_for, write_config

LOGS = ("--source", "nuscenes", "--version", SYNTH_VERSION)


@pytest.fixture(scope="module")
def light_cfg(tmp_path_factory) -> Path:
    return write_config(tmp_path_factory.mktemp("cfg") / "light.yaml", LIGHT)


@pytest.fixture(scope="module")
def finished(synth_root, light_cfg, tmp_path_factory) -> Path:
    """A finished two-scene run folder (the light config, in-process); tests copy it before changing it."""
    from generator.pipeline import run
    from schemas.config import load_config

    out = tmp_path_factory.mktemp("finished") / "run"
    res = run(str(out), source="nuscenes", data=str(synth_root), version=SYNTH_VERSION, cfg=load_config(light_cfg),
              executor="local", progress=False)
    assert res.exit_code == 0
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run, dst)
    return dst


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------ 1
def test_export_bench_never_deletes_a_users_folder(finished, tmp_path):
    """`drivegen export_bench RUN --out DIR` deleted an existing DIR and everything in it, exit 0."""
    user = tmp_path / "mine"
    user.mkdir()
    (user / "thesis.tex").write_text("three years of work")
    r = drivegen("export_bench", finished, "--out", user)
    assert r.returncode == 2 and "not a drivegen-strideqa-bench/1 folder" in r.stderr
    assert _files(user) == {"thesis.tex": b"three years of work"}
    # an export may replace an earlier export, and only the files that export made
    out = tmp_path / "bench"
    assert drivegen("export_bench", finished, "--out", out).returncode == 0
    (out / "notes.txt").write_text("mine")
    assert drivegen("export_bench", finished, "--out", out).returncode == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "annotation_files" / "strideqa_bench_t0.json").exists()
    assert not list(tmp_path.glob(".bench.*.tmp")) and not list(out.glob(".*"))


# ------------------------------------------------------------------------------------------ 2
def test_two_runs_on_one_folder(synth_root, light_cfg, tmp_path):
    """Two `drivegen run` on the same --out started 2 s apart both said "2 ok" and left a broken run."""
    out = tmp_path / "run"
    first = popen_drivegen("run", "--out", out, *LOGS, "--data", synth_root, "--config", light_cfg, "--local",
                           "--no-progress")
    try:
        wait_for(lambda: (out / layout.LOCK).exists() or first.poll() is not None, 120, "the first run's lock")
        second = drivegen("run", "--out", out, *LOGS, "--data", synth_root, "--config", light_cfg, "--local")
        assert second.returncode == 2, second.stderr[-2000:]
        assert "is being written by" in second.stderr and f"pid {first.pid}" in second.stderr
        resumed = drivegen("run", "--resume", out, "--local")  # a resume is a writer too
        assert resumed.returncode == 2 and "is being written by" in resumed.stderr
        assert first.wait(300) == 0, first.stderr.read()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
    reader = RunReader(out)
    assert reader.scene_ids() == ["scene-0000", "scene-0001"] and reader.check() == []
    assert read_table(out, "qa").num_rows == sum(m["counts"]["qa"] for m in reader.manifests()) > 0
    assert not (out / layout.LOCK).exists()


# ------------------------------------------------------------------------------------------ 3
def test_run_refuses_a_folder_that_is_not_a_run(synth_root, light_cfg, tmp_path):
    """`drivegen run --out` on an existing folder that is not a run deleted every *.tmp file in it and
    .staging/, without checking what the folder is."""
    out = tmp_path / "work"
    (out / ".staging").mkdir(parents=True)
    (out / ".staging" / "draft.txt").write_text("draft")
    (out / "notes.tmp").write_text("mine")
    (out / "qa").mkdir()
    (out / "qa" / f".x.{'a' * 32}.tmp").write_text("looks like ours, is not")
    before = _files(out)
    r = drivegen("run", "--out", out, *LOGS, "--data", synth_root, "--config", light_cfg, "--local")
    assert r.returncode == 2 and "not empty and not a drivegen run folder" in r.stderr
    assert _files(out) == before


# ------------------------------------------------------------------------------------------ 4
def test_run_folder_on_another_filesystem_than_the_temp_dir(synth_root, tmp_path):
    """The card was built in the temp dir and moved with os.replace, which fails across filesystems; the
    bench export never ran; exit 0."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs a temp dir on another filesystem than the run folder (/dev/shm here)")
    tmpdir = shm / f"drivegen-test-{os.getpid()}"
    tmpdir.mkdir(exist_ok=True)
    try:
        cfg = write_config(tmp_path / "cfg.yaml", {**LIGHT, "writers": {"webdataset": False, "card": True}})
        out = tmp_path / "run"
        r = drivegen("run", "--out", out, *LOGS, "--data", synth_root, "--config", cfg, "--local", "--scenes", "1",
                     env={"TMPDIR": str(tmpdir)})
        assert r.returncode == 0, r.stderr[-3000:]
        assert (out / "README.md").exists() and (out / "bench" / "export_summary.json").exists()
        assert "STRIDE-QA-Bench export:" in r.stdout and not list(tmpdir.iterdir())
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def test_a_failed_card_or_export_is_not_ok(finished, tmp_path):
    """A by-product that fails makes the run's exit code 1 and says so in the summary."""
    from generator.pipeline import run
    from generator.pipeline.core import Stage

    def boom(store, summary):
        raise OSError("disk full while writing the card")

    res = run(str(tmp_path / "run"), cfg=RunReader(finished).config(), data=str(RunReader(finished).source()["dataroot"]),
              source="nuscenes", version=SYNTH_VERSION, executor="local", progress=False, scenes=1,
              stages=[Stage("load", lambda w, e: None)], write=lambda *a: None, finalize=boom)
    assert res.exit_code == 1 and "disk full" in res.summary.finalize_error


# ------------------------------------------------------------------------------------------ 5
def test_scene_names_starting_with_dot_or_underscore_stay_visible(tmp_path):
    """Scene names starting with '_' or '.' made their shards invisible to pandas, pyarrow.dataset, datasets
    and the bench export, while the run said "ok" and inspect said consistent."""
    from generator.pipeline.core import Stage
    from generator.pipeline.driver import run_pipeline
    from schemas.config import PipelineConfig
    from schemas.tables import write_parquet

    def load(work, env):
        work.loaded = True

    def write(work, env, staging):
        p = staging / layout.scene_file("qa", work.scene_id, 0, "train")
        p.parent.mkdir(parents=True)
        write_parquet(p, pa.table({"scene_id": [work.scene_id] * 3, "qa_id": [f"{work.scene_id}/{i}" for i in range(3)]}))

    ids = ["_underscored", ".dotted", "..", "normal"]
    out = tmp_path / "run"
    res = run_pipeline(RunStore(out), {"kind": "toy"}, PipelineConfig(), ids, [Stage("load", load)], write,
                       executor="local", progress=False)
    assert res.summary.scenes.ok == 4
    assert not [p for p in (out / "qa").iterdir() if p.name.startswith((".", "_"))]
    assert len(pd.read_parquet(out / "qa")) == 12
    assert pads.dataset(out / "qa", format="parquet").count_rows() == 12
    assert RunReader(out).check() == []
    assert sorted(pd.read_parquet(out / "qa").scene_id.unique()) == sorted(ids)


# ------------------------------------------------------------------------------------------ 6
def test_a_scene_that_crashed_mid_commit_and_then_fails_is_nowhere(synth_root, light_cfg, tmp_path):
    """The bench export read every file in qa/ and attributes/: after a crash mid-commit, a scene that then
    failed on resume still appeared in the bench and in pandas reads."""
    logs = tmp_path / "logs"
    damaged_lidar_logs(synth_root, logs, None, frames=0)  # a copy of the logs this test may break later
    out = tmp_path / "run"
    r = drivegen("run", "--out", out, *LOGS, "--data", logs, "--config", light_cfg, "--local")
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((out / layout.manifest_file("scene-0001")).read_text())
    # a crash between the last file moved into place and the manifest: the files are there, no manifest
    (out / layout.manifest_file("scene-0001")).unlink()
    RunStore(out).write_json(f"{layout.PENDING_DIR}/scene-0001.json",
                             {"scene_id": "scene-0001", "files": [f["path"] for f in m["files"]]})
    assert drivegen("export_bench", out).returncode == 0
    assert "scene-0001" not in (out / "bench" / "annotation_files" / "annotation_sheet.csv").read_text()
    # then 8 of the scene's 40 sweeps break (20 % > failures.max_failed_frame_share), so the resume fails it:
    # nothing of it is left for any reader
    broken = tmp_path / "broken"
    damaged_lidar_logs(synth_root, broken, lambda d: d[:len(d) // 2 // 20 * 20 + 7], frames=8)
    shutil.rmtree(logs / SYNTH_VERSION)
    shutil.copytree(broken / SYNTH_VERSION, logs / SYNTH_VERSION)
    (logs / "corrupt").rmdir()
    (logs / "corrupt").symlink_to(broken / "corrupt", target_is_directory=True)
    r = drivegen("run", "--resume", out, "--local")
    assert r.returncode == 1 and "scene=scene-0001" in r.stdout, r.stdout[-2000:]
    assert set(pd.read_parquet(out / "qa").scene_id) == {"scene-0000"}
    assert pads.dataset(out / "attributes", format="parquet").to_table().column("scene_id").unique().to_pylist() == [
        "scene-0000"]
    assert drivegen("export_bench", out).returncode == 0
    assert "scene-0001" not in (out / "bench" / "annotation_files" / "annotation_sheet.csv").read_text()
    assert RunReader(out).check() == []


# ------------------------------------------------------------------------------------------ 8
def test_yaml_billion_laughs(tmp_path):
    """A YAML "billion laughs" config exhausted memory or flooded stderr (the error printed the whole input)."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\nqa: {seed: *a9}\n")
    t0 = time.monotonic()
    r = drivegen("run", "--out", tmp_path / "run", "--config", bomb, "--local")
    assert r.returncode == 2 and "aliases" in r.stderr or "anchors" in r.stderr
    assert len(r.stderr) < 2000 and time.monotonic() - t0 < 60 and not (tmp_path / "run").exists()
    huge = tmp_path / "huge.yaml"
    huge.write_text("qa: {seed: 1}\n" + "#" * (2 << 20))
    r = drivegen("run", "--out", tmp_path / "run", "--config", huge, "--local")
    assert r.returncode == 2 and "larger than any config" in r.stderr and len(r.stderr) < 2000


# ------------------------------------------------------------------------------------------ 9
def _nan_filled(data: bytes) -> bytes:
    pts = np.frombuffer(data, np.float32).copy()
    pts[0::5] = np.nan  # every x
    return pts.tobytes()


def test_damaged_lidar_is_recorded_with_its_file_and_too_many_fail_the_scene(synth_root, light_cfg, tmp_path):
    """A NaN-filled LiDAR file kept only a count (file and message dropped); a scene whose frames cannot be
    read finished "ok"."""
    one = tmp_path / "one"
    [bad] = damaged_lidar_logs(synth_root, one, _nan_filled, "scene-0000", frames=1)
    out = tmp_path / "run-one"
    r = drivegen("run", "--out", out, *LOGS, "--data", one, "--config", light_cfg, "--local", "--scenes", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "frames skipped by stage (finished scenes): load=1" in r.stdout
    issues = read_table(out, "issues").to_pylist()
    assert {(i["stage"], i["reason"], i["file"]) for i in issues} == {("load", "lidar_unreadable", str(bad))}
    assert all("NaN" in i["message"] and i["scene_id"] == "scene-0000" for i in issues)
    many = tmp_path / "many"
    bads = damaged_lidar_logs(synth_root, many, _nan_filled, "scene-0000", frames=8)  # 8 of 40 frames: 20 %
    out = tmp_path / "run-many"
    r = drivegen("run", "--out", out, *LOGS, "--data", many, "--config", light_cfg, "--local", "--scenes", "1")
    assert r.returncode == 1, r.stderr[-3000:]
    [err] = pd.read_parquet(out / "errors").to_dict("records")
    assert err["stage"] == "perceive" and err["error_type"] == "PartialSceneError"
    assert err["file"] in {str(b) for b in bads} and "8 of 40 frames" in err["message"]
    assert not RunReader(out).scene_ids()


def test_validate_refuses_a_pass_when_scored_frames_lost_their_detections(synth_root, tmp_path):
    """validate scored the frames a failed detector left empty as zeros without saying why."""
    one = tmp_path / "one"
    [bad] = damaged_lidar_logs(synth_root, one, _nan_filled, "scene-0000", frames=1)
    cfg = write_config(tmp_path / "lidar.yaml", {**LIGHT, "detection": {"backend": "lidar"}})
    out = tmp_path / "run"
    r = drivegen("run", "--out", out, *LOGS, "--data", one, "--config", cfg, "--local", "--scenes", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    r = drivegen("validate", out, "--no-tracking", "--no-label-agreement", "--quiet")
    assert r.returncode == 1, r.stderr[-3000:]
    rep = json.loads((out / "validate" / "report.json").read_text())
    gaps = rep["perception_gaps"]
    # the bad sweep is frame 0's and, stacked as an earlier sweep, part of frame 1's detector input
    assert gaps["scored_failed_frames"] == 2 and gaps["scored_without_predictions"] >= 2
    assert [e["frame_index"] for e in gaps["examples"]] == [0, 1], gaps
    assert all(e["file"] == str(bad) for e in gaps["examples"]) and rep["passed"] is False
    assert "2 scored frame(s) have no predictions because perception failed" in r.stderr
    assert "scene-0000 frame 0 (lidar_unreadable)" in r.stderr and "not a pass" in r.stderr
    assert rep["gates"]["perception_complete"]["ok"] is False
    assert "**Not a pass**" in (out / "validate" / "report.md").read_text()


# ------------------------------------------------------------------------------------------ 10
def test_command_line_values_and_unwritable_folders(finished, synth_root, tmp_path):
    """--scenes 0 ran every scene and -1 all but the last; a read-only --out (run, --resume, regenerate),
    export_bench on a corrupt Parquet file and synth --scenes -1 gave tracebacks."""
    for bad in ("0", "-1", "two"):
        r = drivegen("run", "--out", tmp_path / "x", "--scenes", bad, "--local")
        assert r.returncode == 2 and "--scenes" in r.stderr and not (tmp_path / "x").exists()
    r = drivegen("synth", "--scenes", "-1", "--out", tmp_path / "s")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    for args in (("run", "--out", "/sys/drivegen-ro", *LOGS, "--data", synth_root, "--local"),
                 ("regenerate", finished, "--out", "/sys/drivegen-ro")):
        r = drivegen(*args)
        assert r.returncode == 2 and "cannot write" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    broken = _copy(finished, tmp_path)
    [att] = [broken / p for p in RunReader(broken).files("attributes", ["scene-0000"])]
    att.write_bytes(att.read_bytes()[:100])
    r = drivegen("export_bench", broken)
    assert r.returncode == 2 and "attributes" in r.stderr and "Traceback" not in r.stderr
    ro = tmp_path / "ro"
    shutil.copytree(finished, ro)
    if subprocess.run(["mount", "--bind", str(ro), str(ro)], capture_output=True).returncode != 0:
        pytest.skip("bind mounts are not permitted here: the read-only --resume case needs one")
    try:
        assert subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True).returncode == 0
        r = drivegen("run", "--resume", ro, "--local")
        assert r.returncode == 2 and "cannot write" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    finally:
        subprocess.run(["umount", str(ro)], capture_output=True)


# ------------------------------------------------------------------------------------------ 11
@pytest.mark.parametrize("change, field", [
    ({"writers": {"compression": "bogus"}}, "writers.compression"),
    ({"qa": {"horizons_s": [-1.0, 1.0]}}, "qa.horizons_s"),
    ({"ray": {"num_cpus": -1}}, "ray.num_cpus"),
    ({"qa": {"families": ["ego_spatial", "nonsense"]}}, "qa.families"),
    ({"qa": {"template_dirs": ["/nowhere/templates"]}}, "template_dirs"),
])
def test_config_is_checked_before_any_work(synth_root, tmp_path, change, field):
    """writers.compression: bogus and bad qa.horizons_s failed every scene after all the work; ray.num_cpus: -1
    gave Ray's message; a missing template folder left the run folder unusable."""
    cfg = write_config(tmp_path / "cfg.yaml", change)
    out = tmp_path / "run"
    r = drivegen("run", "--out", out, *LOGS, "--data", synth_root, "--config", cfg, "--local")
    assert r.returncode == 2 and field in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not out.exists()  # nothing was written: a corrected run can use the same folder


# ------------------------------------------------------------------------------------------ 12
def test_resume_refuses_a_changed_config_or_source(finished, tmp_path):
    """--resume did not check that config.yaml and source.json were unchanged: a hand edit produced a mixed
    dataset and inspect still said ok."""
    out = _copy(finished, tmp_path)
    cfg = (out / "config.yaml").read_text()
    (out / "config.yaml").write_text(cfg.replace("seed: 42", "seed: 43"))
    r = drivegen("run", "--resume", out, "--local")
    assert r.returncode == 2 and "config.yaml" in r.stderr and "--force" in r.stderr
    r = drivegen("inspect", out)
    assert r.returncode == 1 and "mixed config: 2 scene(s)" in r.stdout
    assert drivegen("run", "--resume", out, "--local", "--force").returncode == 0
    (out / "config.yaml").write_text(cfg)
    src = json.loads((out / "source.json").read_text())
    (out / "source.json").write_text(json.dumps({**src, "dataroot": "/elsewhere"}))
    r = drivegen("run", "--resume", out, "--local")
    assert r.returncode == 2 and "source.json" in r.stderr


# ------------------------------------------------------------------------------------------ 13
def test_workers_of_a_killed_driver_cannot_commit_into_the_resumed_run(finished, tmp_path):
    """After the driver was killed, its Ray workers lived on for seconds and kept committing, racing with an
    immediate --resume. Each writer carries the run epoch of its driver; a resumed run has a newer one. Such a
    worker neither commits nor starts another stage: a stage's attempt marker written after the resumed run had
    cleaned up stayed in the finished folder (``_attempts/``, seen with an in-process --resume)."""
    import socket

    from generator.pipeline.core import Questions, SceneWork, Stage, StageEnv, apply_stage, finish_scene
    from schemas.tables import write_parquet

    out = _copy(finished, tmp_path)
    store = RunStore(out)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    now = time.time()
    store.write_json(layout.LOCK, {"owner": "killed", "host": socket.gethostname(), "pid": dead.pid,
                                   "command": "drivegen run", "epoch": 7, "started_unix": now, "heartbeat_unix": now})
    late = SceneWork("scene-0000", {}, epoch=7, questions=Questions(pa.table({"x": [1]})))
    before = _files(out)

    def write(work, env, staging):
        p = staging / layout.scene_file("qa", work.scene_id, 0, "train")
        p.parent.mkdir(parents=True)
        write_parquet(p, work.questions.qa)

    with RunLock(store, "drivegen run --resume") as lock:  # the dead driver's lock is taken over
        assert lock.epoch == 8
        env = StageEnv(RunReader(out).config(), store)
        ran: list[str] = []
        staged = apply_stage(Stage("attributes", lambda work, env: ran.append(work.scene_id)),
                             SceneWork("scene-0000", {}, epoch=7), env)
        assert staged.error is not None and "epoch 7" in staged.error.message and not ran
        row = finish_scene(late, env, write)
        assert row["status"] == "stale" and "epoch 7" in row["info"]
    after = _files(out)
    assert {k: v for k, v in after.items() if k not in ("_lock.json",)} == \
        {k: v for k, v in before.items() if k not in ("_lock.json",)}


def test_clean_up_removes_every_temporary_name_the_check_flags(tmp_path):
    """A driver killed while a committed scene's parts were written left a bench image's temporary name under
    parts/ on S3; the resumed run's clean-up listed only some folders, so the check flagged it after a
    successful resume. The clean-up now removes a killed writer's name wherever the check finds one."""
    from generator.runfolder.commit import remove_leftovers

    store = RunStore(tmp_path / "run")
    killed = [layout.tmp_name(rel) for rel in ("parts/bench/images/CAM_FRONT/scene-0000_000015.jpg",
                                               "parts/card/scene-0000.json", "report/index.html",
                                               "qa/train-scene-0000-00000.parquet", "summary.json")]
    for rel in killed + ["parts/bench/notes.tmp"]:  # the last one is not a name drivegen writes
        store.mkdirs(str(Path(rel).parent))
        store.write_bytes(rel, b"x")
    flagged = sorted(p.rsplit(": ", 1)[1] for p in RunReader(store, require=False).check() if "temporary" in p)
    assert flagged == sorted(killed)
    assert sorted(remove_leftovers(store)) == sorted(killed)
    assert not any("temporary" in p for p in RunReader(store, require=False).check())
    assert store.exists("parts/bench/notes.tmp")


def test_the_lock_heartbeat_is_not_a_leftover(tmp_path):
    """The holder's heartbeat rewrites the lock through a temporary name. A fresh run's clean-up used to
    delete that file mid-write ("removed 1 leftover(s) of an interrupted writer" on a brand-new folder, and
    a lost heartbeat); a heartbeat left by a killed holder is cleared when the lock is next taken."""
    from generator.runfolder.commit import remove_leftovers

    store = RunStore(tmp_path / "run")
    store.mkdirs("")
    stale = layout.tmp_name(layout.LOCK)
    store.write_bytes(stale, b"{}")
    other = layout.tmp_name(layout.manifest_file("scene-0000"))  # a killed writer's: still a leftover
    store.mkdirs(str(Path(other).parent))
    store.write_bytes(other, b"x")
    with RunLock(store, "drivegen run", heartbeat_s=60.0):
        assert not store.exists(stale)  # cleared before this holder's heartbeat starts
        beating = layout.tmp_name(layout.LOCK)
        store.write_bytes(beating, b"{}")  # the heartbeat, caught between write and rename
        assert remove_leftovers(store) == [other]
        assert store.exists(beating)
        assert not any("temporary" in p for p in RunReader(store, require=False).check())


# ------------------------------------------------------------------------------------------ 14
@pytest.mark.ray
@pytest.mark.slow
def test_embedded_ray_refuses_clients_without_its_token(tmp_path):
    """During a run, gcs_server, raylet, the driver and the workers listened on all interfaces. They now listen on
    127.0.0.1 only (tests/pipeline/test_ray_connect.py); what keeps out another user of the same machine is the token
    authentication: a client without the token is refused. (The clients run in Ray's single-machine mode, as the
    embedded Ray does: otherwise Ray replaces 127.0.0.1 by the machine's address, where nothing listens.)"""
    import ray

    from generator.pipeline.ray_connect import ensure_ray
    from schemas.config import PipelineConfig

    cfg = PipelineConfig()
    cfg.ray.num_cpus = 1
    if ray.is_initialized():
        ray.shutdown()
    assert ensure_ray(cfg)
    try:
        gcs = ray.get_runtime_context().gcs_address
        local = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(local, HOME=str(tmp_path))  # no ~/.ray/auth_token: another user of this machine
        code = f"import ray; ray.init(address={gcs!r}, logging_level='ERROR'); print('CONNECTED')"
        # the client is refused for its token at once, then retries for ~20 s before it gives up: the refusal
        # itself is what is asserted (not a network failure), and the client is stopped there
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        refused = False
        try:
            deadline = time.monotonic() + 120
            for line in proc.stderr:
                if "InvalidAuthToken" in line:
                    refused = True
                    break
                assert time.monotonic() < deadline, "the client neither connected nor was refused"
        finally:
            proc.kill()
            out, _ = proc.communicate(timeout=30)
        assert refused and "CONNECTED" not in out
        # the control: a client with the driver's environment (its token) connects
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**os.environ, **local})
        assert r.returncode == 0 and "CONNECTED" in r.stdout, r.stderr[-2000:]
    finally:
        ray.shutdown()


def test_a_run_whose_description_disappears_is_not_ok(finished, tmp_path):
    """config.yaml deleted from the run folder while the run went on (another client of the bucket): the run
    exited 0 and inspect said ok. Now the run ends with exit 1 naming the file, and inspect reports it."""
    from generator.pipeline import run
    from generator.pipeline.core import Stage

    out = _copy(finished, tmp_path)
    (out / "config.yaml").unlink()
    r = drivegen("inspect", out)
    assert r.returncode == 1 and "config.yaml is missing" in r.stdout, r.stdout[-2000:]

    run2 = tmp_path / "run2"

    def load_then_delete(work, env):  # the scene loads, then another client deletes the file
        (run2 / "config.yaml").unlink(missing_ok=True)

    res = run(str(run2), cfg=RunReader(finished).config(), data=str(RunReader(finished).source()["dataroot"]),
              source="nuscenes", version=SYNTH_VERSION, executor="local", progress=False, scenes=1,
              stages=[Stage("load", load_then_delete)], write=lambda *a: None, finalize=lambda store, summary: None)
    assert res.exit_code == 1 and "config.yaml disappeared" in (res.summary.finalize_error or "")
