"""``drivegen regenerate``: rebuild QA from a run folder's tables with other templates / seed."""
from __future__ import annotations

import hashlib
import json
import re
import textwrap

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from support.attributes import random_scene
from generator.attributes import compute_attributes
from generator.cli import main as cli
from generator.qa import generate_qa, load_templates, reads
from generator.qa.families import selected
from generator.pipeline.regenerate import load_scenes, regenerate
from generator.runfolder import RunReader, RunStore, commit_tables
from generator.writers.parquet import read_qa, scene_qa_shards
from schemas import layout
from schemas.config import PipelineConfig
from schemas.errors import RunFolderError
from schemas.tables import QA, plain_schema

SCENES = ("rg-a", "rg-b", "rg-c")

USER_TEMPLATES = """
family: ego_spatial
templates:
  - id: ego_spatial.distance.plain
    type: distance
    question: "RANGE CHECK: {region}?"
    answer: "Range to {region}: {distance_m:.1f}."
"""


def _digest(folder):
    return {p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture()
def run_dir(tmp_path):
    """A run folder as ``drivegen run`` commits it; scene rg-c has no attributes file (regenerate recomputes
    them from perception/objects)."""
    store = RunStore(tmp_path / "run")
    store.write_bytes("config.yaml", PipelineConfig().to_yaml().encode())
    for i, sid in enumerate(SCENES):
        frames, objects, projections = random_scene(sid, seed=10 + i)
        tables = {"frames": frames, "objects": objects, "projections": projections}
        if sid != "rg-c":
            tables["attributes"] = compute_attributes(objects, frames)
        commit_tables(store, sid, tables, split="train")
    return tmp_path / "run"


def _expected(run_dir, cfg, templates):
    parts = []
    for sid in SCENES:
        # every run table the families read, as regenerate reads them (labels, objects)
        frames, attrs, proj, others = load_scenes(str(run_dir), [sid], reads(selected(cfg.qa.families)))
        parts.append(generate_qa(frames, attrs, proj, cfg, templates, **others))
    return pa.concat_tables(parts)


def test_cli_regenerates_with_user_templates_and_seed(run_dir, tmp_path, capsys):
    tdir = tmp_path / "tpl"
    tdir.mkdir()
    (tdir / "mine.yaml").write_text(textwrap.dedent(USER_TEMPLATES).lstrip())
    before = _digest(run_dir)
    out = tmp_path / "out"
    rc = cli(["regenerate", str(run_dir), "--templates", str(tdir), "--seed", "5", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    assert "regenerated" in capsys.readouterr().out
    assert _digest(run_dir) == before  # the run folder is only read
    for sid in SCENES:
        assert scene_qa_shards(out, sid), sid
    got = read_qa(sorted((out / "qa").glob("*.parquet")))
    cfg = PipelineConfig()
    cfg.qa.seed = 5
    cfg.qa.template_dirs = [str(tdir)]
    want = _expected(run_dir, cfg, load_templates(cfg))
    plain_qa = plain_schema(QA)  # value by value: every shard has its own grounding dictionaries
    assert got.sort_by("qa_id").cast(plain_qa).equals(want.sort_by("qa_id").cast(plain_qa))
    plain = got.filter(pc.equal(got.column("template_id"), "ego_spatial.distance.plain")).to_pylist()
    assert plain and all(r["question"].startswith("RANGE CHECK: Region [") for r in plain)
    for r in plain:
        m = re.fullmatch(r"Range to Region \[\d+\]: (\d+\.\d) m\.", r["answer"])
        assert m and abs(float(m.group(1)) - r["value"]) <= 0.05 + 1e-9, r["answer"]
    assert (out / "regenerate.json").exists() and "seed: 5" in (out / "config.yaml").read_text()
    # the default seed gives other phrasings for the same questions and values
    out2 = tmp_path / "out2"
    assert cli(["regenerate", str(run_dir), "--out", str(out2)]) == 0
    other = read_qa(sorted((out2 / "qa").glob("*.parquet"))).sort_by("qa_id")
    ego = lambda t: t.filter(pc.equal(t.column("family"), "ego_spatiotemporal"))  # noqa: E731
    a, b = ego(got.sort_by("qa_id")), ego(other)
    assert a.column("qa_id").equals(b.column("qa_id")) and a.column("value").equals(b.column("value"))
    assert not a.column("template_id").equals(b.column("template_id"))


def test_bad_template_is_refused_with_file_and_line(run_dir, tmp_path, capsys):
    tdir = tmp_path / "tpl"
    tdir.mkdir()
    bad = tdir / "bad.yaml"
    bad.write_text(textwrap.dedent(USER_TEMPLATES).lstrip().replace("{distance_m:.1f}", "{distnace_m}"))
    rc = cli(["regenerate", str(run_dir), "--templates", str(tdir), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and f"{bad}:6:" in err and "distnace_m" in err, err
    assert not (tmp_path / "o").exists()


def test_refusals(run_dir, tmp_path):
    cfg = PipelineConfig()
    with pytest.raises(RunFolderError, match="run folder itself"):
        regenerate(str(run_dir), str(run_dir), cfg, load_templates(cfg))
    with pytest.raises(RunFolderError, match="not a drivegen run folder"):
        RunReader(tmp_path / "nothing")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match="not a regeneration of"):
        regenerate(str(run_dir), str(tmp_path / "user"), cfg, load_templates(cfg))
    assert (tmp_path / "user" / "notes.txt").read_text() == "mine"
    (run_dir / layout.scene_file("projections", "rg-b", split="train")).unlink()
    with pytest.raises(RunFolderError, match=r"cannot read perception/projections"):
        regenerate(str(run_dir), str(tmp_path / "o"), cfg, load_templates(cfg))


def test_stale_shards_of_a_scene_are_replaced(run_dir, tmp_path):
    cfg = PipelineConfig()
    cfg.writers.parquet_max_rows = 500  # several shards per scene
    out = tmp_path / "o"
    s1 = regenerate(str(run_dir), str(out), cfg, load_templates(cfg), batch_scenes=2)
    n1 = len(scene_qa_shards(out, "rg-a"))
    assert n1 > 1 and s1["qa"] == sum(pq.read_metadata(p).num_rows for p in (out / "qa").glob("*.parquet"))
    cfg.qa.families = ["ego_spatial"]
    s2 = regenerate(str(run_dir), str(out), cfg, load_templates(cfg))
    assert len(scene_qa_shards(out, "rg-a")) < n1
    assert s2["qa"] == read_qa(sorted((out / "qa").glob("*.parquet"))).num_rows
    assert set(s2["by_family"]) == {"ego_spatial"}


def test_ray_workers_write_the_same_shards_as_one_process(run_dir, tmp_path, capsys):
    """``--workers 2``: batches of one scene as Ray tasks on an embedded 2-CPU Ray; the shards hold the same
    rows under the same names as the in-process run, the summary the same counts, and one broken scene
    fails the command with its file named."""
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    assert cli(["regenerate", str(run_dir), "--out", str(local), "--no-progress"]) == 0
    capsys.readouterr()
    assert cli(["regenerate", str(run_dir), "--out", str(on_ray), "--workers", "2", "--batch-scenes", "1",
                "--no-progress"]) == 0
    assert "(ray;" in capsys.readouterr().out
    names = sorted(p.relative_to(local) for p in (local / "qa").glob("*.parquet"))
    assert names and names == sorted(p.relative_to(on_ray) for p in (on_ray / "qa").glob("*.parquet"))
    plain = plain_schema(QA)
    for name in names:
        assert read_qa(on_ray / name).cast(plain).equals(read_qa(local / name).cast(plain)), name
    s_local = json.loads((local / "regenerate.json").read_text())
    s_ray = json.loads((on_ray / "regenerate.json").read_text())
    assert s_ray["executor"] == "ray" and s_local["executor"] == "local"
    assert (s_ray["qa"], s_ray["by_family"], s_ray["scenes"]) == (s_local["qa"], s_local["by_family"], 3)
    assert s_ray["shards"] == s_local["shards"]  # in scene order, however the tasks finished
    (run_dir / layout.scene_file("projections", "rg-b", split="train")).unlink()
    assert cli(["regenerate", str(run_dir), "--out", str(tmp_path / "broken"), "--workers", "2",
                "--batch-scenes", "1", "--no-progress"]) == 2
    assert re.search(r"cannot read perception/projections of .*rg-b", capsys.readouterr().err)


def test_attributes_without_a_column_qa_reads_are_recomputed(run_dir, tmp_path):
    """Attributes committed by a drivegen older than a column QA reads (``instance_token``, issue #17 item 9)
    are recomputed from perception/objects, as for a scene without attributes: the QA is the same as from
    current attributes, source identities included."""
    store = RunStore(run_dir)
    frames, objects, projections = random_scene("rg-a", seed=10)
    old = compute_attributes(objects, frames).drop_columns(["instance_token"])
    commit_tables(store, "rg-a", {"frames": frames, "objects": objects, "projections": projections,
                                  "attributes": old}, split="train")
    cfg = PipelineConfig()
    templates = load_templates(cfg)
    frames_t, attrs, proj, _ = load_scenes(str(run_dir), list(SCENES))
    assert "instance_token" in attrs.column_names
    regenerate(str(run_dir), str(tmp_path / "out"), cfg, templates)
    got = read_qa(sorted((tmp_path / "out" / "qa").glob("*.parquet")))
    want = _expected(run_dir, cfg, templates)
    assert got.cast(plain_schema(got.schema)).equals(want.cast(plain_schema(want.schema)))
    tokens = dict(zip(zip(objects["frame_index"].to_pylist(), objects["track_id"].to_pylist()),
                      objects["instance_token"].to_pylist()))
    rows = [r for r in got.to_pylist() if r["scene_id"] == "rg-a" and r["track_ids"]]
    assert rows and all(r["instance_tokens"] == [tokens[(r["keyframe_index"], t)] or "" for t in r["track_ids"]]
                        for r in rows)
