"""One rule decides which rows belong to a run: a file belongs to it exactly when the manifest of a finished
scene lists it. A scene whose files were moved into place but never committed (a crash before its
manifest), and a stray file in a table folder, are ignored alike by every command that reads a run."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from generator.cli import main as cli
from generator.runfolder import RunReader, RunStore, read_table
from schemas import layout
from schemas.tables import write_parquet
from support.bench import SCENE, make_bench_run

GHOST, STRAY = "ghost-scene", "stray-scene"


def _renamed(table: pa.Table, scene: str) -> pa.Table:
    i = table.schema.get_field_index("scene_id")
    return table.set_column(i, table.schema.field("scene_id"), pa.array([scene] * table.num_rows, pa.string()))


@pytest.fixture()
def polluted(tmp_path):
    """The scripted bench run (one finished scene) plus the files of a scene that was never committed (its
    commit intent left in _pending/, as a killed worker leaves it) and a stray QA shard and objects file."""
    br = make_bench_run(tmp_path, with_qa="generated")
    store = RunStore(br.run)
    ghost_files = []
    for name, table in br.tables.items():
        rel = layout.scene_file(name, GHOST, 0, "train") if name == "qa" else layout.scene_file(name, GHOST, split="train")
        write_parquet(br.run / rel, _renamed(table, GHOST))
        ghost_files.append(rel)
    store.write_json(f"{layout.PENDING_DIR}/{GHOST}.json", {"scene_id": GHOST, "files": ghost_files})
    write_parquet(br.run / layout.scene_file("qa", STRAY, 0, "train"), _renamed(br.tables["qa"], STRAY))
    write_parquet(br.run / layout.scene_file("objects", STRAY, split="train"), _renamed(br.tables["objects"], STRAY))
    return br


def _scenes(table) -> set[str]:
    return set(pc.unique(table.column("scene_id")).to_pylist())


def test_reader(polluted):
    reader = RunReader(polluted.run)
    assert reader.scene_ids() == [SCENE]
    for name in ("qa", "objects", "frames", "attributes", "projections"):
        assert _scenes(read_table(polluted.run, name)) == {SCENE}, name


def test_inspect_reports_what_it_ignores(polluted, capsys):
    assert cli(["inspect", str(polluted.run)]) == 1
    out = capsys.readouterr().out
    assert "1 finished" in out
    assert f"qa/train-{STRAY}-00000.parquet" in out and f"perception/objects/train-{GHOST}.parquet" in out
    assert f"leftover of a killed writer: _pending/{GHOST}.json" in out


def test_export_bench(polluted, tmp_path):
    assert cli(["export_bench", str(polluted.run), "--out", str(tmp_path / "b")]) == 0
    sheet = (tmp_path / "b" / "annotation_files" / "annotation_sheet.csv").read_text()
    assert SCENE in sheet and GHOST not in sheet and STRAY not in sheet


def test_regenerate(polluted, tmp_path):
    assert cli(["regenerate", str(polluted.run), "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    assert RunReader(tmp_path / "r").scene_ids() == [SCENE]
    assert _scenes(read_table(tmp_path / "r", "qa")) == {SCENE}
    # shards named <split>-<scene>-<k> (the scripted scene hashes into 'train')
    assert {p.name.rsplit("-", 1)[0] for p in (tmp_path / "r" / "qa").glob("*.parquet")} == {f"train-{SCENE}"}


def test_card(polluted):
    from generator.pipeline.exports import write_run_card

    stats = write_run_card(RunReader(polluted.run))
    assert stats["num_scenes"] == 1 and stats["num_qa"] == polluted.tables["qa"].num_rows


def test_validate(polluted):
    from generator.validate.run import read_run

    polluted_store = RunStore(polluted.run)
    polluted_store.write_json("source.json", {"kind": "nuscenes", "dataroot": "/nowhere", "version": "v"})
    rd = read_run(str(polluted.run))
    assert _scenes(rd.objects) == {SCENE} and _scenes(rd.frames) == {SCENE}


def test_resume_reruns_the_uncommitted_scene_only(polluted):
    """``run --resume`` skips the finished scene, runs the uncommitted one again, and first removes what its
    killed writer left (the files its intent names), not the stray file it does not own."""
    from generator.pipeline.driver import run_pipeline
    from generator.pipeline.core import Stage

    seen = []

    def note(work, env):
        seen.append(work.scene_id)
        raise RuntimeError("stop here")  # the test only needs to know which scenes would run

    store = RunStore(polluted.run)
    run_pipeline(store, {"kind": "none"}, RunReader(store).config(), [SCENE, GHOST], [Stage("load", note)],
                 lambda *a: None, executor="local", progress=False)
    assert seen == [GHOST]
    assert not (polluted.run / layout.scene_file("objects", GHOST, split="train")).exists()
    assert (polluted.run / layout.scene_file("objects", STRAY, split="train")).exists()
    assert json.loads((polluted.run / "summary.json").read_text())["scenes"]["skipped"] == 1


def test_run_summary_round_trips_through_summary_json():
    """``RunSummary`` (summary.json typed): to_json -> from_json gives the same object back; a family's entry
    comes back typed by its family (its printed lines), an entry of a family not installed here and keys this
    version does not know are kept as they are; entries print in family order whatever the file's key order."""
    import json

    from generator.families.stride_qa.export import BenchSummary
    from schemas.summary import CardEntry, FamilyEntry, QACounts, RunSummary, SceneCounts

    s = RunSummary(out="file:///x", executor="ray", scenes=SceneCounts(3, 2, 1, 0), frames=40, objects=7,
                   qa=QACounts(9, {"ego_spatial": 9}), card=CardEntry("/x/README.md", {"train": 9}),
                   families={"stride_qa": BenchSummary(2, 5), "someone_elses": FamilyEntry("someone_elses", {"n": 1})},
                   extra={"anonymize": {"faces": "blur"}})
    data = json.loads(json.dumps(s.to_json(), sort_keys=True))
    back = RunSummary.from_json(data)
    assert back == s and back.to_json() == s.to_json()
    assert isinstance(back.families["stride_qa"], BenchSummary) and back.exit_code == 1
    lines = back.lines()
    assert "STRIDE-QA-Bench export: 2 groups, 5 questions (bench/)" in lines and "someone_elses: n=1" in lines
    assert lines.index("STRIDE-QA-Bench export: 2 groups, 5 questions (bench/)") < lines.index("someone_elses: n=1")
    assert data["anonymize"] == {"faces": "blur"} and "extra" not in data
