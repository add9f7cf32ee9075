"""A paper family that lives outside drivegen: ``tests/plugins/lane_keeping`` ("ego lane keeping": the ego's
lateral offset from its logged path per keyframe, one QA type, an export and a scorer), registered the way
``pip install`` registers it: a ``*.dist-info`` folder whose ``entry_points.txt`` names it in the group
``drivegen.families``, on the ``PYTHONPATH`` of the drivegen processes (driver and Ray workers). No file of
drivegen names it: it appears in ``run`` (Ray), the summary, the card, the report, ``regenerate``, ``export`` and
``score`` only because the registry finds the entry point, and is absent without it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from support.data import SYNTH_VERSION
from support.pipeline import drivegen, write_config

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "lane_keeping"


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict:
    """The environment of a process where the example family is installed (its dist-info and package)."""
    site = tmp_path_factory.mktemp("site")
    info = site / "drivegen_lane_keeping-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: drivegen-lane-keeping\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[drivegen.families]\nlane_keeping = drivegen_lane_keeping:FAMILY\n")
    paths = [str(site), str(PLUGIN), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _offsets_by_hand(frames: pa.Table, horizon_s: float) -> dict[tuple[str, int], tuple[float, float]]:
    """(lateral, forward) offset per keyframe, one frame at a time: the pose horizon_s later interpolated
    linearly between the two frames around it, expressed in the keyframe's ego frame."""
    out = {}
    rows = sorted(frames.select(["scene_id", "frame_index", "timestamp_us", "is_anchor", "city_SE3_ego"]).to_pylist(),
                  key=lambda r: (r["scene_id"], r["timestamp_us"]))
    for sid in sorted({r["scene_id"] for r in rows}):
        scene = [r for r in rows if r["scene_id"] == sid]
        t = np.array([r["timestamp_us"] for r in scene]) / 1e6
        pose = [np.array(r["city_SE3_ego"]).reshape(4, 4) for r in scene]
        for i, r in enumerate(scene):
            q = t[i] + horizon_s
            if not r["is_anchor"] or q > t[-1] + 1e-9:
                continue
            j = min(int(np.searchsorted(t, q)), len(t) - 1)
            w = 0.0 if t[j] == t[j - 1] else (q - t[j - 1]) / (t[j] - t[j - 1])
            later = pose[j - 1][:2, 3] * (1 - w) + pose[j][:2, 3] * w if j else pose[0][:2, 3]
            d = later - pose[i][:2, 3]
            yaw = np.arctan2(pose[i][1, 0], pose[i][0, 0])
            out[(sid, r["frame_index"])] = (-np.sin(yaw) * d[0] + np.cos(yaw) * d[1],
                                            np.cos(yaw) * d[0] + np.sin(yaw) * d[1])
    return out


def _table(folder: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(folder.glob("*.parquet"))])


@pytest.fixture(scope="module")
def lane_logs(tmp_path_factory) -> Path:
    """One generated 20 s scene (seed 0: the first scene of the embedded default's logs) with light sensors (the
    minimal scenes' LiDAR keyframes only and 320x180 images): the family reads the ego's poses, which are the same
    at any sensor density, and needs a whole scene of keyframes 1.5 s apart from its end."""
    from generator.synth import MINIMAL_SCENES, make_dataset

    root = tmp_path_factory.mktemp("lane-logs")
    make_dataset(root, num_scenes=1, seed=0, version=SYNTH_VERSION, **{**MINIMAL_SCENES, "num_keyframes": 40})
    return root


@pytest.mark.ray
@pytest.mark.slow
def test_third_party_family_end_to_end(lane_logs, plugin_env, tmp_path):
    # without its entry point drivegen knows nothing of it: its config section is refused, no scorer, no export
    bad = write_config(tmp_path / "lk.yaml", {"lane_keeping": {"horizon_s": 1.5}})
    r = drivegen("run", "--out", tmp_path / "refused", "--config", bad)
    assert r.returncode == 2 and "lane_keeping" in r.stderr, r.stderr[-2000:]
    assert "lane-keeping" not in drivegen("score", "-h").stdout
    assert "lane_keeping" not in drivegen("export", "-h").stdout

    # drivegen run on Ray, with the family's own setting
    cfg = write_config(tmp_path / "lk.yaml", {"lane_keeping": {"horizon_s": 1.5}, "ray": {"num_cpus": 2},
                                              "writers": {"webdataset": False}})
    out = tmp_path / "run"
    r = drivegen("run", "--out", out, "--source", "nuscenes", "--data", lane_logs, "--version", SYNTH_VERSION,
                 "--scenes", 1, "--config", cfg, env=plugin_env)
    assert r.returncode == 0, r.stderr[-3000:]
    offsets = _table(out / "lane_offsets")
    by_hand = _offsets_by_hand(_table(out / "perception" / "frames"), 1.5)
    got = {(s, f): (lat, fwd) for s, f, lat, fwd in zip(*(offsets.column(c).to_pylist() for c in (
        "scene_id", "frame_index", "lateral_offset_m", "forward_m")))}
    assert set(got) == set(by_hand) and len(got) >= 10
    assert np.allclose([got[k] for k in sorted(got)], [by_hand[k] for k in sorted(got)], atol=1e-9)
    assert any(abs(v[1]) > 1.0 for v in got.values())  # the ego moves: a real path, not zeros
    # the summary, its printed line and the manifests' counts
    summary = json.loads((out / "summary.json").read_text())
    kept = sum(abs(lat) <= 0.5 for lat, _ in got.values())
    assert summary["families"]["lane_keeping"] == {"keyframes": len(got), "kept": kept, "folder": "lane_keeping"}
    assert f"Ego lane keeping: {len(got)} keyframes, {kept} within the lane (lane_keeping/)" in r.stdout
    assert yaml_section(out / "config.yaml") == {"horizon_s": 1.5, "keep_within_m": 0.5, "export": True}
    # its QA rows: one per keyframe with an offset, the value its size, the answer its side
    qa = _table(out / "qa")
    mine = qa.filter(pc.equal(qa.column("family"), "ego_lane_keeping")).sort_by("qa_id")
    assert mine.num_rows == len(got) == summary["qa"]["by_family"]["ego_lane_keeping"]
    for row in mine.to_pylist():
        lat = got[(row["scene_id"], int(row["qa_id"].split(":")[1]))][0]
        assert row["value"] == pytest.approx(abs(lat), abs=1e-9) and row["unit"] == "m"
        assert f"to the {'left' if lat >= 0 else 'right'}" in row["answer"] and "1.50 s" in row["question"]
    # the card's section and the report's sample pages
    card = (out / "README.md").read_text()
    assert "## Ego lane keeping\n\nThe ego's lateral offset 1.5 s after each keyframe" in card
    assert f"{len(got)} keyframes, {kept} within 0.5 m" in card
    assert (out / "report" / "samples-ego_lane_keeping-1.html").exists()
    assert 'data-family="ego_lane_keeping"' in (out / "report" / "index.html").read_text()
    # the export written at the end of the run: the scenes' parts merged
    exported = pq.read_table(out / "lane_keeping" / "offsets.parquet")
    assert exported.equals(offsets.cast(exported.schema))

    # regenerate rebuilds its QA rows (from the committed lane_offsets table) bit for bit
    r = drivegen("regenerate", out, "--out", tmp_path / "regen", env=plugin_env)
    assert r.returncode == 0, r.stderr[-3000:]
    again = _table(tmp_path / "regen" / "qa")
    again = again.filter(pc.equal(again.column("family"), "ego_lane_keeping")).sort_by("qa_id")
    assert again.equals(mine)

    # drivegen export into a folder of its own, then score against it and against the run folder
    r = drivegen("export", "lane_keeping", out, "--out", tmp_path / "exp", env=plugin_env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert pq.read_table(tmp_path / "exp" / "offsets.parquet").equals(exported)
    keys = sorted(got)
    pred = [{"scene_id": s, "frame_index": f, "lateral_offset_m": got[(s, f)][0] + (0.25 if i % 2 else -0.25)}
            for i, (s, f) in enumerate(keys[1:])]  # the first keyframe is missing
    pred.append({"scene_id": "nowhere", "frame_index": 0, "lateral_offset_m": 0.0})
    (tmp_path / "pred.json").write_text(json.dumps(pred))
    for target in (tmp_path / "exp", out):
        r = drivegen("score", "lane-keeping", "--pred", tmp_path / "pred.json", target, "--out", tmp_path / "s",
                     env=plugin_env)
        assert r.returncode == 0, r.stderr[-3000:]
        score = json.loads((tmp_path / "s" / "score.json").read_text())
        assert score["scored"] == len(keys) - 1 and score["missing"] == 1 and score["mae_m"] == pytest.approx(0.25)
        assert [p["item"] for p in score["problems"]] == [len(pred) - 1]
    r = drivegen("score", "lane-keeping", "--pred", "baseline:straight", tmp_path / "exp", env=plugin_env)
    mae = np.mean([abs(got[k][0]) for k in keys])
    assert r.returncode == 0 and f"MAE {mae:.3f} m over {len(keys)} of {len(keys)}" in r.stdout


def yaml_section(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())["lane_keeping"]


BROKEN_PLUGINS = {  # entry point name -> (its module's text, what `drivegen families` says of it)
    "broken_import": ("import drivegen_no_such_module\n", "ModuleNotFoundError"),
    "broken_syntax": ("FAMILY = (\n", "SyntaxError"),
    "not_a_family": ("FAMILY = 42\n", "is not a named schemas.families.PaperFamily"),
    "exits_at_import": ("import sys\nsys.exit(3)\n", "SystemExit(3) at import"),
}


@pytest.fixture(scope="module")
def broken_env(tmp_path_factory) -> dict:
    """A process where the example family and four broken ones are installed (an import error, a syntax error,
    an object that is no family, a module that calls sys.exit at import)."""
    site = tmp_path_factory.mktemp("broken-site")
    info = site / "drivegen_plugins-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: drivegen-plugins\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[drivegen.families]\nlane_keeping = drivegen_lane_keeping:FAMILY\n" + "".join(
        f"{name} = drivegen_{name}:FAMILY\n" for name in BROKEN_PLUGINS))
    for name, (text, _) in BROKEN_PLUGINS.items():
        (site / f"drivegen_{name}.py").write_text(text)
    paths = [str(site), str(PLUGIN), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def test_a_plugins_export_and_score_go_by_its_name(plugin_env, tmp_path):
    """A family with only an ``Export`` (no command of its own) gets ``drivegen export <its name>`` with the generic
    RUN/--out/--config, listed beside the built-in ones; ``drivegen score`` takes its name too (a run folder that is
    none is refused by the scorer, not by the parser)."""
    from support.pipeline import drivegen

    r = drivegen("export", "lane_keeping", "-h", env=plugin_env)
    assert r.returncode == 0 and "RUN/<folder>" in r.stdout and "--config" in r.stdout, r.stderr[-2000:]
    assert "lane_keeping (Ego lane keeping)" in drivegen("export", "-h", env=plugin_env).stdout
    r = drivegen("export", "lane-keeping", tmp_path / "nothing", env=plugin_env)
    assert r.returncode == 2 and "not a drivegen run folder" in r.stderr, r.stderr[-2000:]
    r = drivegen("score", "lane_keeping", tmp_path / "nothing", "--pred", "baseline:x", env=plugin_env)
    assert r.returncode == 2 and "invalid choice" not in r.stderr, r.stderr[-2000:]


def test_a_broken_plugin_breaks_only_itself(broken_env, tmp_path):
    """Issue 57 #14: one broken family plugin made every command die, ``--help`` included. Now each broken one is
    listed with its error (``drivegen families``, ``--help``), what is its own is refused naming it (its scorer,
    its config section), and the rest works: the help, the commands, the good plugin with its scorer and export."""
    from support.pipeline import drivegen

    r = drivegen("--help", env=broken_env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert all(f"broken paper family, left out: {name} " in r.stdout for name in BROKEN_PLUGINS), r.stdout
    r = drivegen("families", env=broken_env)
    assert r.returncode == 1, r.stderr[-3000:]
    broken = {line.split()[1]: line for line in r.stdout.splitlines() if line.startswith("BROKEN ")}
    assert set(broken) == set(BROKEN_PLUGINS), r.stdout
    assert all(said in broken[name] for name, (_, said) in BROKEN_PLUGINS.items()), broken
    assert any(line.startswith("lane_keeping: Ego lane keeping;") and "score lane-keeping" in line
               for line in r.stdout.splitlines()), r.stdout
    assert "5 paper families loaded, 4 could not be loaded" in r.stdout
    # what belongs to a broken one is refused by name
    r = drivegen("score", "broken-import", tmp_path, "--pred", "baseline:x", env=broken_env)
    assert r.returncode == 2 and "broken_import (entry point" in r.stderr and "ModuleNotFoundError" in r.stderr, \
        r.stderr[-2000:]
    cfg = write_config(tmp_path / "c.yaml", {"not_a_family": {"x": 1}})
    r = drivegen("run", "--out", tmp_path / "out", "--config", cfg, "--local", env=broken_env)
    assert r.returncode == 2 and "section of the paper family not_a_family" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "out").exists()
