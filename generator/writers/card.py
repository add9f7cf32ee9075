"""Dataset card: ``card/README.md``, ``card/stats.json`` and histogram PNGs (STRIDE-QA App. A.2).

Statistics, computed in one streaming pass over the QA shards (``pyarrow.dataset`` record batches; only
the needed columns are read, no shard set is materialised):

* ``qa_counts`` (Table 4): QA pairs per family x kind (qualitative/quantitative) x split;
* ``object_classes`` (Table 5): per family and class, the number of unique objects per conversation
  thread, a thread being one keyframe of one scene: an object asked about in several QAs of the same
  keyframe counts once, the same object in two keyframes counts twice (App. A.2's counting);
* ``histograms``: counts over fixed bins of the quantitative answers' values for distance (m), heading /
  bearing angle (deg) and velocity (m/s) (Fig. 9), picked by ``unit`` (sizes, which also answer in
  metres, are recognised by ``question_type`` and left out), drawn as PNGs with matplotlib's Agg canvas;
* ``visibility_drops`` (objects dropped by the visibility filter per reason) and ``errors`` (failed
  scene/stage count per stage) when given in ``extra`` (``generator.pipeline.finalize`` reads them from
  the run folder).

The card is written into a local folder (a run's staging folder; the run folder commits it).
"""
from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from schemas.layout import CARD_DIR
from generator.qa.families import FAMILIES as REGISTERED
from schemas.vocab import QA_KINDS

FAMILIES = tuple(REGISTERED)
FAMILY_TITLES = {name: f.title for name, f in REGISTERED.items()}
KINDS = QA_KINDS
# quantity -> (accepted units, bin edges); values outside the edges are counted as under/overflow
HISTOGRAMS = {
    "distance": ({"m", "meter", "meters", "metre", "metres"}, np.linspace(0.0, 100.0, 51)),
    "heading": ({"deg", "degree", "degrees", "°"}, np.linspace(-180.0, 180.0, 37)),
    "velocity": ({"m/s", "mps", "meters per second"}, np.linspace(0.0, 30.0, 31)),
}
HIST_UNITS = {"distance": "m", "heading": "deg", "velocity": "m/s"}
SIZE_QUESTION = re.compile(r"width|height|length|size|tall|wide|long", re.I)
_QA_COLUMNS = ["scene_id", "split", "keyframe_index", "family", "kind", "question_type", "value", "unit",
               "track_ids", "class_names"]
_DEDUP_EVERY = 1_000_000


def _as_dataset(source) -> ds.Dataset:
    if isinstance(source, ds.Dataset):
        return source
    if isinstance(source, (pa.Table, pa.RecordBatch)):
        return ds.dataset(source if isinstance(source, pa.Table) else pa.Table.from_batches([source]))
    paths = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    paths = [str(p) for p in paths]
    if len(paths) == 1 and Path(paths[0]).is_dir():
        return ds.dataset(paths[0], format="parquet")  # skips '.'/'_' files: temporary shards stay out
    return ds.dataset(paths, format="parquet")


def _quantity_masks(batch: pa.Table) -> dict[str, np.ndarray]:
    unit = batch.column("unit").to_numpy(zero_copy_only=False)
    qtype = batch.column("question_type").to_numpy(zero_copy_only=False)
    quant = pc.equal(batch.column("kind"), "quantitative").to_numpy(zero_copy_only=False)
    quant = np.asarray(quant, dtype=bool) & np.isfinite(batch.column("value").to_numpy(zero_copy_only=False)
                                                        .astype(np.float64))
    is_size = np.array([bool(SIZE_QUESTION.search(q or "")) for q in np.unique(qtype.astype(str))])
    size_types = set(np.unique(qtype.astype(str))[is_size])
    out = {}
    for name, (units, _) in HISTOGRAMS.items():
        m = quant & np.isin(unit.astype(str), list(units))
        if name == "distance" and size_types:
            m &= ~np.isin(qtype.astype(str), list(size_types))
        out[name] = m
    return out


def compute_stats(source, batch_size: int = 65_536) -> dict:
    """Stream the QA rows of ``source`` (a folder or list of Parquet shards, a ``pyarrow.dataset``, or a
    table) and return the card statistics (see module docstring)."""
    dset = _as_dataset(source)
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    hist = {name: np.zeros(len(edges) - 1, dtype=np.int64) for name, (_, edges) in HISTOGRAMS.items()}
    outside = {name: [0, 0] for name in HISTOGRAMS}
    objects: list[pa.Table] = []
    pending = 0
    threads: list[pa.Table] = []
    n_rows = 0
    for rb in dset.to_batches(columns=_QA_COLUMNS, batch_size=batch_size):
        if rb.num_rows == 0:
            continue
        b = pa.Table.from_batches([rb])
        n_rows += b.num_rows
        split = pc.fill_null(b.column("split"), "unspecified")
        grp = pa.table({"family": b.column("family"), "kind": b.column("kind"), "split": split})
        for r in grp.group_by(["family", "kind", "split"]).aggregate([([], "count_all")]).to_pylist():
            counts[(r["family"], r["kind"], r["split"])] += r["count_all"]
        # unique objects per (family, thread = scene + keyframe)
        tids = b.column("track_ids").combine_chunks()
        cls = b.column("class_names").combine_chunks()
        if not pc.all(pc.equal(pc.fill_null(pc.list_value_length(tids), 0),
                               pc.fill_null(pc.list_value_length(cls), 0))).as_py():
            raise ValueError("QA rows whose track_ids and class_names differ in length; they must pair up")
        parent = pc.list_parent_indices(tids)
        objects.append(pa.table({
            "family": pc.take(b.column("family"), parent), "scene_id": pc.take(b.column("scene_id"), parent),
            "keyframe_index": pc.take(b.column("keyframe_index"), parent),
            "track_id": pc.list_flatten(tids), "class_name": pc.list_flatten(cls)}))
        threads.append(pa.table({"scene_id": b.column("scene_id"), "keyframe_index": b.column("keyframe_index")})
                       .group_by(["scene_id", "keyframe_index"]).aggregate([]))
        pending += objects[-1].num_rows
        if pending > _DEDUP_EVERY:
            objects = [_distinct(pa.concat_tables(objects))]
            threads = [_distinct(pa.concat_tables(threads))]
            pending = objects[0].num_rows
        # histograms
        values = b.column("value").to_numpy(zero_copy_only=False).astype(np.float64)
        for name, m in _quantity_masks(b).items():
            edges = HISTOGRAMS[name][1]
            v = values[m]
            hist[name] += np.histogram(v, bins=edges)[0]
            outside[name][0] += int((v < edges[0]).sum())
            outside[name][1] += int((v > edges[-1]).sum())
    obj = _distinct(pa.concat_tables(objects)) if objects else None
    thr = _distinct(pa.concat_tables(threads)) if threads else None
    object_classes: dict[str, dict[str, int]] = {f: {} for f in FAMILIES}
    if obj is not None and obj.num_rows:
        for r in obj.group_by(["family", "class_name"]).aggregate([([], "count_all")]).to_pylist():
            object_classes.setdefault(r["family"], {})[r["class_name"] or "unknown"] = r["count_all"]
    splits = sorted({k[2] for k in counts})
    fams = list(FAMILIES) + sorted({k[0] for k in counts} - set(FAMILIES))
    qa_counts = {f: {k: {s: counts.get((f, k, s), 0) for s in splits} for k in KINDS} for f in fams}
    return {
        "num_qa": n_rows,
        "num_threads": 0 if thr is None else thr.num_rows,
        "num_scenes": 0 if thr is None else len(pc.unique(thr.column("scene_id"))),
        "splits": splits,
        "qa_counts": qa_counts,
        "object_classes": {f: dict(sorted(c.items(), key=lambda kv: -kv[1])) for f, c in object_classes.items()},
        "histograms": {name: {"unit": HIST_UNITS[name],
                              "bin_edges": HISTOGRAMS[name][1].tolist(), "counts": hist[name].tolist(),
                              "below": outside[name][0], "above": outside[name][1]}
                       for name in HISTOGRAMS},
    }


def _distinct(t: pa.Table) -> pa.Table:
    return t.group_by(t.column_names).aggregate([])


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _plot(hist: dict, name: str, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    edges = np.asarray(hist["bin_edges"])
    ax.bar(edges[:-1], hist["counts"], width=np.diff(edges), align="edge", color="#4C72B0", edgecolor="white")
    ax.set_xlabel(f"{name} ({hist['unit']})")
    ax.set_ylabel("QA pairs")
    ax.set_title(f"{name} answers (n={sum(hist['counts'])}, outside range: {hist['below'] + hist['above']})")
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    _write(path, buf.getvalue())


def _md_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def render_readme(stats: dict, title: str = "drivegen QA dataset") -> str:
    splits = stats["splits"] or ["train"]
    fams = [f for f in stats["qa_counts"]]
    header = ["QA family"] + [f"{k} ({s})" for k in KINDS for s in splits] + ["total"]
    rows, col_tot = [], np.zeros(len(KINDS) * len(splits) + 1, dtype=np.int64)
    for f in fams:
        vals = [stats["qa_counts"][f][k].get(s, 0) for k in KINDS for s in splits]
        vals.append(sum(vals))
        col_tot += np.asarray(vals)
        rows.append([FAMILY_TITLES.get(f, f)] + vals)
    rows.append(["Total"] + col_tot.tolist())
    classes = sorted({c for f in stats["object_classes"].values() for c in f},
                     key=lambda c: -sum(stats["object_classes"][f].get(c, 0) for f in stats["object_classes"]))
    cls_rows = [[c] + [stats["object_classes"].get(f, {}).get(c, 0) for f in FAMILIES] for c in classes]
    parts = [
        "---",
        "task_categories:\n- visual-question-answering",
        "tags:\n- autonomous-driving\n- spatiotemporal-reasoning",
        "configs:\n- config_name: default\n  data_files:\n  - split: all\n    path: qa/*.parquet",
        "---",
        f"# {title}",
        "",
        "Template QA pairs about driving scenes in the three STRIDE-QA families, each with its exact value "
        "and visual grounding (2D boxes and COCO RLE masks in the current, context and future frames). "
        "QA rows are Parquet shards under `qa/` (schema `schemas/tables.py::QA`); WebDataset shards with the "
        "images are under `wds/`.",
        "",
        f"{stats['num_qa']} QA pairs over {stats['num_threads']} keyframes of {stats['num_scenes']} scenes.",
        "",
        "## QA pairs per family, kind and split",
        "",
        _md_table(header, rows),
        "",
        "## Object classes per family",
        "",
        "Unique objects per conversation thread (keyframe): an object counts once per keyframe however many "
        "questions ask about it, so one physical object seen at several keyframes counts several times.",
        "",
        _md_table(["class"] + [FAMILY_TITLES[f] for f in FAMILIES], cls_rows) if cls_rows else "(no objects)",
        "",
        "## Distributions of the quantitative answers",
        "",
    ]
    for name, h in stats["histograms"].items():
        parts.append(f"![{name}](hist_{name}.png)  ")
        parts.append(f"{name}: {sum(h['counts'])} values in [{h['bin_edges'][0]}, {h['bin_edges'][-1]}] "
                     f"{h['unit']}, {h['below']} below, {h['above']} above.")
        parts.append("")
    if "visibility_drops" in stats:
        parts += ["## Objects dropped by the visibility filter", "",
                  _md_table(["reason", "count"], [[k, v] for k, v in stats["visibility_drops"].items()])
                  if stats["visibility_drops"] else "none", ""]
    if "errors" in stats:
        errs = stats["errors"]
        total = errs if isinstance(errs, int) else sum(errs.values())
        parts += ["## Errors", "", f"{total} failed scene/stage records."]
        if isinstance(errs, dict) and errs:
            parts += ["", _md_table(["stage", "count"], [[k, v] for k, v in errs.items()])]
        parts.append("")
    return "\n".join(parts)


def write_card(qa_dataset_paths_or_table, out_dir: str | os.PathLike, extra: dict | None = None,
               title: str = "drivegen QA dataset") -> dict:
    """Write ``out_dir/card/{README.md, stats.json, hist_<quantity>.png}`` and return the stats dict.

    ``qa_dataset_paths_or_table``: a folder of QA shards (e.g. ``RUN/qa``), a list of shard paths, a
    ``pyarrow.dataset.Dataset`` or a ``pa.Table`` (``schemas.tables.QA``). ``extra`` adds
    ``visibility_drops`` ({reason: count}), ``errors`` (count, or {stage: count}) and any other
    JSON-serialisable entries to stats.json. ``out_dir`` is the (staged) run folder root.
    """
    stats = compute_stats(qa_dataset_paths_or_table)
    for k, v in (extra or {}).items():
        stats[k] = v
    card = Path(out_dir) / CARD_DIR
    for name, h in stats["histograms"].items():
        _plot(h, name, card / f"hist_{name}.png")
    _write(card / "stats.json", json.dumps(stats, indent=2, sort_keys=False).encode())
    _write(card / "README.md", render_readme(stats, title).encode())
    return stats
