"""Parquet storage of drivegen tables: every schema round-trips with null fixed-size lists at every depth.

pyarrow 25.0.1 writes a fixed-size list column holding a null but cannot read it back; these tests show
the bug on plain ``pq.write_table``/``pq.read_table`` (so they fail, on purpose, the day pyarrow fixes it)
and that the one storage pair (``schemas.tables.write_parquet``/``read_parquet``) and the run-folder
writers built on it (``runfolder.atomic_write_table``, ``RunStore``) give back the exact declared table.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from generator.runfolder import RunReader, RunStore, commit_tables, read_table
from schemas import layout
from schemas.tables import ALL, OBJECTS, PROJECTIONS, from_storage, read_parquet, storage_schema, write_parquet

N_ROWS = 4


def _has_fixed(t: pa.DataType) -> bool:
    if pa.types.is_fixed_size_list(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_fixed(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_fixed(f.type) for f in t)
    return False


def _value(t: pa.DataType, i: int):
    """A value of type ``t`` for row/element ``i``: fixed-size lists are null when ``i`` is odd, at every
    depth; a variable list holds two elements (``i``, ``i + 1``), so each has a null one and a full one."""
    if pa.types.is_fixed_size_list(t):
        return None if i % 2 else [_value(t.value_type, 2 * (i + k)) for k in range(t.list_size)]
    if pa.types.is_list(t):
        return [_value(t.value_type, i), _value(t.value_type, i + 1)]
    if pa.types.is_struct(t):
        return {f.name: _value(f.type, i) for f in t}
    if pa.types.is_dictionary(t):  # grounding strings (categorical)
        return _value(t.value_type, i)
    if pa.types.is_string(t):
        return f"v{i}"
    if pa.types.is_boolean(t):
        return i % 3 == 0
    if pa.types.is_integer(t):
        return i % 100
    if pa.types.is_floating(t):
        return i + 0.25
    raise AssertionError(f"no test value for {t}")


def _table(schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([{f.name: _value(f.type, i) for f in schema} for i in range(N_ROWS)], schema=schema)


def _null_count_fixed(arr: pa.Array) -> int:
    """Null fixed-size lists in ``arr`` at any depth (checks that ``_table`` really holds the bug's trigger)."""
    t = arr.type
    if pa.types.is_fixed_size_list(t):
        return arr.null_count + _null_count_fixed(arr.flatten())
    if pa.types.is_list(t):
        return _null_count_fixed(arr.flatten())
    if pa.types.is_struct(t):
        return sum(_null_count_fixed(arr.field(k)) for k in range(t.num_fields))
    return 0


def _assert_exact(back: pa.Table, want: pa.Table, schema: pa.Schema) -> None:
    assert back.schema.equals(schema, check_metadata=True), f"{back.schema}\n!=\n{schema}"
    assert back.equals(want)


FIXED = {name: [f.name for f in sch if _has_fixed(f.type)] for name, sch in ALL.items()}


def test_every_declared_fixed_list_is_covered():
    """Guard for the tests below: the schemas do have fixed-size lists (top level and nested) and the test
    tables put nulls in every one of them."""
    assert FIXED["projections"] == ["box2d_proj_xyxy", "mask_rle", "mask_box_xyxy"]
    assert "cameras" in FIXED["frames"] and "grounding" in FIXED["qa"] and "future_xy_ego_m" in FIXED["labels"]
    for name, cols in FIXED.items():
        t = _table(ALL[name])
        for c in cols:
            assert _null_count_fixed(t.column(c).combine_chunks()) > 0, f"{name}.{c} holds no null fixed list"


@pytest.mark.parametrize("name", sorted(ALL))
def test_plain_pyarrow_cannot_read_null_fixed_lists_back(name, tmp_path):
    """The bug, column by column: when this fails, pyarrow reads them back and the storage cast can go."""
    schema = ALL[name]
    t = _table(schema)
    for c in FIXED[name]:
        p = tmp_path / f"{c}.parquet"
        pq.write_table(t.select([c]), p)
        with pytest.raises(pa.ArrowInvalid, match="Expected all lists to be of size"):
            pq.read_table(p)
    if not FIXED[name]:  # no fixed-size list: plain pyarrow round-trips the table exactly
        pq.write_table(t, tmp_path / "all.parquet")
        _assert_exact(pq.read_table(tmp_path / "all.parquet"), t, schema)


@pytest.mark.parametrize("name", sorted(ALL))
def test_write_read_pair_round_trips_exact_types(name, tmp_path):
    schema = ALL[name]
    t = _table(schema)
    p = tmp_path / "t.parquet"
    write_parquet(p, t)
    stored = pq.read_schema(p)  # plain Parquet: same names, nullability and metadata, no fixed-size list
    assert stored.names == schema.names and stored.metadata == schema.metadata
    assert [f.nullable for f in stored] == [f.nullable for f in schema]
    assert not any(_has_fixed(f.type) for f in stored)
    _assert_exact(read_parquet(p), t, schema)  # schema from the file's drivegen.schema metadata
    _assert_exact(read_parquet(p, schema), t, schema)
    _assert_exact(read_parquet([p, p]), pa.concat_tables([t, t]), schema)
    cols = FIXED[name][::-1] + [schema.names[0]]
    sub = pa.schema([schema.field(c) for c in cols], metadata=schema.metadata)
    _assert_exact(read_parquet(p, columns=cols), t.select(cols), sub)
    sink = pa.BufferOutputStream()  # buffers too
    write_parquet(sink, t)
    _assert_exact(read_parquet(pa.BufferReader(sink.getvalue())), t, schema)


@pytest.mark.parametrize("name", sorted(ALL))
def test_run_folder_writers_round_trip(name, tmp_path):
    """``write_parquet``, ``RunStore.write_table`` and the commit store the same way; ``RunStore.read_parquet``
    and the run-folder reader ``runfolder.read_table`` give back the declared types."""
    schema = ALL[name]
    t = _table(schema)
    write_parquet(tmp_path / "t.parquet", t)
    _assert_exact(read_parquet(tmp_path / "t.parquet"), t, schema)

    store = RunStore(tmp_path / "run")
    rel = f"{name}/s-0.parquet"
    store.write_table(rel, t)
    _assert_exact(store.read_parquet(rel), t, schema)
    if name in layout.TABLES:  # the run folder's own tables: committed, then read through the one reader
        if "scene_id" in t.column_names:  # one scene's rows (QA shards are written per scene)
            t = t.set_column(t.schema.get_field_index("scene_id"), t.schema.field("scene_id"),
                             pa.array(["s-0"] * t.num_rows, pa.string()))
        if "split" in t.column_names:  # ... and a scene is in one split (its QA shards are named by it)
            t = t.set_column(t.schema.get_field_index("split"), t.schema.field("split"),
                             pa.array(["train"] * t.num_rows, pa.string()))
        if layout.TABLES[name].by_split and name != "qa":  # named by the scene's split: without one, refused
            with pytest.raises(ValueError, match=f"s-0.*{name}.*give its split"):
                commit_tables(store, "s-0", {name: t})
        commit_tables(store, "s-0", {name: t}, split="train")
        files = RunReader(store).files(name)
        if name == "qa":
            assert layout.scene_file(name, "s-0", 0, "train") in files
        else:
            assert files == [layout.scene_file(name, "s-0", split="train")]
        _assert_exact(read_table(store, name), t, schema)
        _assert_exact(read_table(RunStore((tmp_path / "run").as_uri()), name, schema), t, schema)  # file:// URI


def test_storage_schema_keeps_names_nullability_metadata():
    s = storage_schema(PROJECTIONS)
    assert s.metadata == PROJECTIONS.metadata
    assert [(f.name, f.nullable) for f in s] == [(f.name, f.nullable) for f in PROJECTIONS]
    assert s.field("mask_box_xyxy").type == pa.list_(pa.float64())
    assert s.field("mask_rle").type == pa.struct([("size", pa.list_(pa.int32())), ("counts", pa.string())])
    assert storage_schema(s) == s  # idempotent
    assert storage_schema(ALL["scenes"]) == ALL["scenes"]


def test_from_storage_without_metadata_and_unknown_names():
    plain = pa.table({"x": pa.array([[1.0, 2.0], None], pa.list_(pa.float64()))})
    assert from_storage(plain) is plain  # not a drivegen table: nothing to cast back to
    with pytest.raises(ValueError, match="unknown drivegen.schema 'nope'"):
        from_storage(plain.replace_schema_metadata({"drivegen.schema": "nope"}))
    with pytest.raises(ValueError, match="missing"):
        from_storage(plain, OBJECTS, where="x.parquet")


def test_wrong_stored_length_names_the_file(tmp_path):
    t = _table(OBJECTS)
    bad = t.cast(storage_schema(OBJECTS))
    i = OBJECTS.get_field_index("center_ego_m")
    bad = bad.set_column(i, bad.schema.field(i), pa.array([[1.0, 2.0]] * N_ROWS, pa.list_(pa.float64())))
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"bad\.parquet.*objects"):
        read_parquet(tmp_path / "bad.parquet")


def test_files_stored_with_differing_types_read_as_one(tmp_path):
    """An old file with real fixed-size lists (no nulls, plain pq.write_table) next to a stored one: one
    table with the declared types; a plain file holding a null fixed list fails naming that file."""
    t = _table(OBJECTS)
    full = t.filter(pa.array([i % 2 == 0 for i in range(N_ROWS)]))  # rows without null fixed lists
    pq.write_table(full, tmp_path / "old.parquet")
    write_parquet(tmp_path / "new.parquet", t)
    paths = [tmp_path / "old.parquet", tmp_path / "new.parquet"]
    _assert_exact(read_parquet(paths), pa.concat_tables([full, t]), OBJECTS)
    _assert_exact(read_parquet(paths, columns=["center_ego_m"]), pa.concat_tables([full, t]).select(["center_ego_m"]),
                  pa.schema([OBJECTS.field("center_ego_m")], metadata=OBJECTS.metadata))
    pq.write_table(t, tmp_path / "raw.parquet")
    with pytest.raises(pa.ArrowInvalid, match=r"raw\.parquet.*Expected all lists"):
        read_parquet([tmp_path / "new.parquet", tmp_path / "raw.parquet"])


def test_a_parquet_stream_of_many_small_tables_merges_them_and_writes_the_same_bytes(tmp_path):
    """``ParquetStream`` fed one scene's part at a time (thousands of tables of a few rows) keeps them merged
    every ``MERGE_EVERY`` tables, not one small table each (their buffers held ~1 KiB of allocator pages per
    column: the end of a 2,000-scene run grew 150 MiB), and writes the bytes of the same rows added as one
    table (dictionaries that differ per table, fixed-size lists stored as lists)."""
    from schemas.tables import ParquetStream

    schema = pa.schema([("scene_id", pa.dictionary(pa.int32(), pa.string())), ("xy", pa.list_(pa.float64(), 2)),
                        ("n", pa.int64())])
    parts = [pa.table({"scene_id": pa.array([f"s-{k % 7}", f"s-{k}"]).dictionary_encode(),
                       "xy": pa.array([[k, 0.5], [1.0, -k]], pa.list_(pa.float64(), 2)),
                       "n": pa.array([k, -k], pa.int64())}, schema=schema) for k in range(200)]
    with ParquetStream(tmp_path / "many.parquet", schema.empty_table()) as many:
        for t in parts:
            many.add(t)
        assert len(many._buf) <= 64  # merged as they came, not 200 tables kept
    with ParquetStream(tmp_path / "one.parquet", schema.empty_table()) as one:
        one.add(pa.concat_tables(parts))
    assert many.rows == one.rows == 400
    assert (tmp_path / "many.parquet").read_bytes() == (tmp_path / "one.parquet").read_bytes()
    assert pq.read_table(tmp_path / "many.parquet").column("n").to_pylist() == [v for k in range(200) for v in (k, -k)]
