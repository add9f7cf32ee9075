"""QA Parquet shards: size bounds, deterministic names, atomic replace, three readers agree."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from support.writers import make_qa_table
from generator.writers.parquet import qa_shard_path, read_qa, scene_qa_shards, write_qa_shards
from schemas.config import WriterConfig
from schemas.tables import QA, plain_schema


def _read_all(paths) -> pa.Table:
    return read_qa(list(paths))


def _same_values(a: pa.Table, b: pa.Table) -> bool:
    """Equal value by value: shards read back hold each file's own grounding dictionaries."""
    return a.cast(plain_schema(a.schema)).equals(b.cast(plain_schema(b.schema)))


def _grounding_dictionaries(path) -> dict[str, pa.Array]:
    """A shard's grounding dictionary columns as plain pyarrow reads them back (one file: one dictionary)."""
    g = pq.read_table(path).column("grounding").combine_chunks().flatten()
    return {"image_path": g.field("image_path"), "camera": g.field("camera"),
            "counts": g.field("mask_rle").field("counts")}


def test_row_bound_names_and_roundtrip(tmp_path):
    t = make_qa_table("scene/odd id", n=53, seed=1, split="train")
    paths = write_qa_shards(t, tmp_path, "scene/odd id", WriterConfig(parquet_max_rows=10))
    assert [p.name for p in paths] == [f"train-scene_odd_id-{k:05d}.parquet" for k in range(6)]
    assert all(p.parent == tmp_path / "qa" for p in paths)
    assert [pq.ParquetFile(p).metadata.num_rows for p in paths] == [10, 10, 10, 10, 10, 3]
    back = _read_all(paths)
    assert back.schema.equals(QA, check_metadata=False)
    assert _same_values(back, t)
    for p in paths:  # each shard stores only the image paths and masks its own rows ground on
        for name, arr in _grounding_dictionaries(p).items():
            assert pa.types.is_dictionary(arr.type), name
            used = pc.unique(arr.cast(pa.string()).drop_null())
            assert len(arr.dictionary) == len(used) > 0, (p.name, name)
    raw = pq.read_table(paths[0])  # plain pyarrow: same columns and metadata, boxes as variable lists
    assert raw.column_names == QA.names and raw.schema.metadata[b"drivegen.schema"] == b"qa"
    assert not list((tmp_path / "qa").glob(".*tmp")), "temporary files left behind"


def test_null_boxes_and_masks_round_trip(tmp_path):
    """pyarrow 25 cannot read back null fixed-size lists it wrote; the shards must still read."""
    t = make_qa_table("s1", n=6, seed=9)
    rows = t.to_pylist()
    rows[1]["grounding"][0]["box_xyxy"] = None
    rows[1]["grounding"][0]["mask_rle"] = None
    rows[2]["grounding"] = None
    t = pa.Table.from_pylist(rows, schema=QA)
    paths = write_qa_shards(t, tmp_path, "s1")
    back = _read_all(paths)
    assert _same_values(back, t)
    assert back.to_pylist()[1]["grounding"][0]["box_xyxy"] is None


def test_byte_bound(tmp_path):
    t = make_qa_table("s1", n=40, seed=2, pad_question=20_000)  # incompressible-ish text, ~20 kB per row
    limit = 96 * 1024
    paths = write_qa_shards(t, tmp_path, "s1", WriterConfig(parquet_max_bytes=limit))
    assert len(paths) >= 40 * 15_000 // limit
    for p in paths:
        assert pq.read_table(p).nbytes <= limit
        assert p.stat().st_size <= limit
    assert _same_values(_read_all(paths), t)


def test_rewrite_replaces_scene_exactly(tmp_path):
    cfg = WriterConfig(parquet_max_rows=5)
    other = write_qa_shards(make_qa_table("s1-00001", n=12), tmp_path, "s1-00001", cfg)  # prefix-alike scene
    first = write_qa_shards(make_qa_table("s1", n=23, seed=3), tmp_path, "s1", cfg)
    assert len(first) == 5
    t2 = make_qa_table("s1", n=7, seed=4)
    second = write_qa_shards(t2, tmp_path, "s1", cfg)
    assert second == first[:2]
    assert scene_qa_shards(tmp_path, "s1") == second
    assert _same_values(_read_all(second), t2)
    assert scene_qa_shards(tmp_path, "s1-00001") == other  # untouched
    assert write_qa_shards(t2.slice(0, 0), tmp_path, "s1", cfg) == []
    assert scene_qa_shards(tmp_path, "s1") == []
    assert qa_shard_path(tmp_path, "s1", 3, "val").name == "val-s1-00003.parquet"


def test_shards_are_named_by_the_scene_split(tmp_path):
    """A scene's split leads its shards' names (one glob per split for the dataset card); a scene moved to
    another split leaves no shard under the old one; rows of several splits in one scene are refused."""
    cfg = WriterConfig(parquet_max_rows=5)
    tr = write_qa_shards(make_qa_table("s1", n=12, split="train"), tmp_path, "s1", cfg)
    va = write_qa_shards(make_qa_table("s2", n=7, split="val"), tmp_path, "s2", cfg)
    assert [p.name for p in tr] == [f"train-s1-{k:05d}.parquet" for k in range(3)]
    assert sorted(p.name for p in (tmp_path / "qa").glob("val-*.parquet")) == [p.name for p in va]
    moved = write_qa_shards(make_qa_table("s1", n=6, split="val"), tmp_path, "s1", cfg)
    assert scene_qa_shards(tmp_path, "s1") == moved and not any(p.exists() for p in tr)
    mixed = pa.concat_tables([make_qa_table("s3", n=3, split="train"), make_qa_table("s3", n=3, split="val")])
    with pytest.raises(ValueError, match=r"scene 's3' carry splits \['train', 'val'\]"):
        write_qa_shards(mixed, tmp_path, "s3", cfg)
    with pytest.raises(ValueError, match="scene 's3' carry splits \\['all'\\]"):
        write_qa_shards(make_qa_table("s3", n=3, split="all"), tmp_path, "s3", cfg)


def test_rejects_bad_input(tmp_path):
    t = make_qa_table("s1", n=4)
    with pytest.raises(ValueError, match="scene 's2'.*scenes"):
        write_qa_shards(t, tmp_path, "s2")
    with pytest.raises(ValueError, match="missing \\['grounding'\\]"):
        write_qa_shards(t.drop_columns(["grounding"]), tmp_path, "s1")


def test_readers_pandas_and_datasets(tmp_path):
    import datasets
    t = pa.concat_tables([make_qa_table("a", n=15, seed=5), make_qa_table("b", n=9, seed=6)])
    cfg = WriterConfig(parquet_max_rows=4)
    pa_paths = write_qa_shards(t.filter(pa.compute.equal(t["scene_id"], "a")), tmp_path, "a", cfg)
    pb_paths = write_qa_shards(t.filter(pa.compute.equal(t["scene_id"], "b")), tmp_path, "b", cfg)
    files = [str(p) for p in pa_paths + pb_paths]
    # pyarrow dataset over the folder
    dset = ds.dataset(tmp_path / "qa", format="parquet")
    assert dset.count_rows() == 24
    # pandas
    import pandas as pd
    df = pd.read_parquet(tmp_path / "qa")
    assert sorted(df["qa_id"]) == sorted(t["qa_id"].to_pylist())
    g0 = df.set_index("qa_id").loc["a-000002", "grounding"]
    assert g0[0]["mask_rle"]["counts"] == t.to_pylist()[2]["grounding"][0]["mask_rle"]["counts"]
    # Hugging Face datasets
    hf = datasets.load_dataset("parquet", data_files=files, split="train",
                               cache_dir=str(tmp_path / "hf_cache"))
    assert hf.num_rows == 24
    rows = {r["qa_id"]: r for r in hf}
    want = {r["qa_id"]: r for r in t.to_pylist()}
    for qid in ("a-000003", "b-000008"):
        assert rows[qid]["question"] == want[qid]["question"]
        assert rows[qid]["value"] == pytest.approx(want[qid]["value"]) if want[qid]["value"] is not None \
            else rows[qid]["value"] is None
        assert [g["box_xyxy"] for g in rows[qid]["grounding"]] == [g["box_xyxy"] for g in want[qid]["grounding"]]


def test_statistics_only_on_the_configured_columns(tmp_path):
    """Min/max statistics on the columns readers filter on, none on long texts and groundings."""
    cfg = WriterConfig(qa_statistics_columns=["scene_id", "family", "value"])
    (path,) = write_qa_shards(make_qa_table("s1", n=20, seed=3), tmp_path, "s1", cfg)
    rg = pq.ParquetFile(path).metadata.row_group(0)
    has_stats = {rg.column(i).path_in_schema: rg.column(i).is_stats_set for i in range(rg.num_columns)}
    assert has_stats["scene_id"] and has_stats["family"] and has_stats["value"]
    assert not has_stats["question"] and not has_stats["answer"] and not has_stats["qa_id"]
    assert not any(v for k, v in has_stats.items() if k.startswith("grounding."))
    assert _same_values(read_qa(path), make_qa_table("s1", n=20, seed=3))
