"""Dataset card: Table 4/5 statistics streamed over shards, histograms, visibility drops and errors."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from support.writers import make_qa_table
from generator.pipeline.exports import card_extra
from generator.runfolder import RunReader, RunStore, commit_tables, write_error
from generator.writers.card import compute_stats, write_card
from generator.writers.parquet import write_qa_shards
from schemas.config import WriterConfig
from schemas.tables import PROJECTIONS


@pytest.fixture
def shards(tmp_path):
    tables = [make_qa_table(f"scene-{k}", n=120, seed=k, num_keyframes=3) for k in range(3)]
    for t in tables:
        write_qa_shards(t, tmp_path, t["scene_id"][0].as_py(), WriterConfig(parquet_max_rows=17))
    return tmp_path, pa.concat_tables(tables)


def test_counts_match_an_independent_pandas_count(shards):
    run, t = shards
    df = t.to_pandas()
    stats = compute_stats(run / "qa", batch_size=13)  # tiny batches: threads span batches and shards
    assert stats["num_qa"] == len(df)
    assert stats["num_threads"] == df.groupby(["scene_id", "keyframe_index"]).ngroups
    assert stats["num_scenes"] == 3
    for (fam, kind, split), n in df.groupby(["family", "kind", "split"]).size().items():
        assert stats["qa_counts"][fam][kind][split] == n
    # Table 5: unique (scene, keyframe, track) per family and class
    obj = df[["family", "scene_id", "keyframe_index", "track_ids", "class_names"]].copy()
    obj = obj.explode(["track_ids", "class_names"]).drop_duplicates()
    want = obj.groupby(["family", "class_names"]).size()
    got = {(f, c): n for f, d in stats["object_classes"].items() for c, n in d.items()}
    assert got == {k: int(v) for k, v in want.items()}
    # a per-QA count would be larger: the dedup really happened
    per_qa = df.explode("class_names").groupby("family").size()
    assert any(sum(stats["object_classes"][f].values()) < per_qa[f] for f in per_qa.index)


def test_histograms_pick_quantities_by_unit_and_skip_sizes(shards):
    run, t = shards
    df = t.to_pandas()
    stats = compute_stats(run / "qa")
    q = df[df["kind"] == "quantitative"]
    for name, (units, types) in {"distance": ({"m"}, {"distance", "distance_future"}),
                                 "heading": ({"deg"}, {"bearing"}), "velocity": ({"m/s"}, {"speed"})}.items():
        v = q[q["unit"].isin(units) & q["question_type"].isin(types)]["value"].to_numpy()
        h = stats["histograms"][name]
        edges = np.asarray(h["bin_edges"])
        assert h["counts"] == np.histogram(v, bins=edges)[0].tolist()
        assert h["above"] == int((v > edges[-1]).sum()) and h["below"] == int((v < edges[0]).sum())
    assert stats["histograms"]["distance"]["above"] > 0  # helper draws distances up to 120 m


def test_write_card_files_and_run_extra(shards, tmp_path):
    run, t = shards
    # a run folder: a scene whose manifest counts dropped objects, and two failed scene/stage rows
    store = RunStore(tmp_path / "runfolder")
    proj = pa.Table.from_pylist([
        {"scene_id": "scene-0", "frame_index": i, "track_id": i, "camera": "CAM_FRONT", "visible": v,
         "drop_reason": r}
        for i, (v, r) in enumerate([(True, None), (False, "box_iou"), (False, "box_iou"), (False, "coverage")])],
        schema=PROJECTIONS)
    commit_tables(store, "scene-0", {"projections": proj}, counts={"dropped_by_reason": {"box_iou": 2, "coverage": 1}})
    for stage in ("detect", "segment"):
        write_error(store, {"scene_id": "scene-9", "stage": stage, "file": "x", "error_type": "SourceError",
                            "message": "m", "attempt": 1})
    extra = card_extra(RunReader(store))
    assert extra == {"visibility_drops": {"box_iou": 2, "coverage": 1}, "errors": {"detect": 1, "segment": 1}}
    stats = write_card(run / "qa", run, {**extra, "run_id": "r1"})
    card = run / "card"
    on_disk = json.loads((card / "stats.json").read_text())
    assert on_disk == json.loads(json.dumps(stats)) and on_disk["run_id"] == "r1"
    readme = (card / "README.md").read_text()
    assert f"{len(t)} QA pairs" in readme and "| box_iou | 2 |" in readme and "2 failed scene/stage" in readme
    import matplotlib.image as mpimg
    for name in ("distance", "heading", "velocity"):
        img = mpimg.imread(card / f"hist_{name}.png")
        assert img.ndim == 3 and img.shape[0] > 100 and img.std() > 0
        assert f"hist_{name}.png" in readme


def test_table_input_equals_shard_input(shards):
    run, t = shards
    a, b = compute_stats(t), compute_stats(sorted((run / "qa").glob("*.parquet")))
    assert a == b


def test_mismatched_track_and_class_lists_are_refused():
    t = make_qa_table("s", n=5)
    bad = t.set_column(t.schema.get_field_index("class_names"), "class_names",
                       pa.array([["car"]] * 5, pa.list_(pa.string())))
    with pytest.raises(ValueError, match="track_ids and class_names"):
        compute_stats(bad)


def test_card_on_generated_qa(tmp_path):
    """The project's QA generator output (real units 'm', 'degrees', 'm/s', sizes in 'm')."""
    from support.bench import make_bench_run
    from generator.runfolder import read_table

    br = make_bench_run(tmp_path, with_qa="generated")
    stats = write_card(br.run / "qa", br.run, card_extra(RunReader(br.run)))
    df = read_table(br.run, "qa").to_pandas()
    assert stats["num_qa"] == len(df) > 0
    assert sum(n for f in stats["qa_counts"].values() for k in f.values() for n in k.values()) == len(df)
    q = df[df["kind"] == "quantitative"]
    sizes = q["question_type"].isin(["width", "height", "length"])
    assert sum(stats["histograms"]["distance"]["counts"]) + stats["histograms"]["distance"]["above"] == \
        int(((q["unit"] == "m") & ~sizes).sum())
    assert sum(stats["histograms"]["heading"]["counts"]) == int((q["unit"] == "degrees").sum()) > 0
    assert sum(stats["histograms"]["velocity"]["counts"]) + stats["histograms"]["velocity"]["above"] == \
        int((q["unit"] == "m/s").sum()) > 0

