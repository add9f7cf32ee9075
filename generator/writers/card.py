"""Dataset card: ``README.md`` at the run folder's root, ``card/stats.json`` and histogram PNGs (STRIDE-QA App. A.2).

The card is the dataset as published: its Hugging Face front matter names one config per table a user loads
(``qa`` the default, and the per-scene tables the run folder holds), each with the splits its rows carry and
``data_files`` relative to the root, so ``datasets.load_dataset(RUN)`` and ``load_dataset(RUN, "labels",
split="val")`` read the folder as it is. Its sections: provenance (source, its licence, the detector, tracker
and segmenter backends, and a plain statement when answers come from the logs' annotations), the schema of
every table with the units its column names declare, the splits with counts, example rows per family,
validation metrics when ``drivegen validate`` has run, anonymisation, limitations, then the statistics.

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

The card is written into a local folder (a run's staging folder; the run folder commits it). What it says
about the run beyond the QA rows comes in ``info`` (``generator.pipeline.exports.card_info`` builds it from a
run folder); without it the card describes the QA shards alone.
"""
from __future__ import annotations

import json
import os
import re
from collections import defaultdict
import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import yaml

from schemas import tables as T
from schemas.config import LabelNoiseConfig
from schemas.layout import CARD, CARD_DIR, TABLES, split_glob
from generator.qa.families import registered
from schemas.vocab import QA_KINDS


def qa_families() -> tuple[str, ...]:
    """The registered QA families' names, in canonical order."""
    return tuple(registered())


def family_title(name: str) -> str:
    fam = registered().get(name)
    return fam.title if fam is not None else name


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
EXAMPLE_COLUMNS = ["qa_id", "split", "family", "question_type", "question", "answer", "value", "unit"]
EXAMPLES_PER_FAMILY = 2  # the rows with the smallest qa_id of each family: the same whatever the shard order
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
    return merge_stats([partial_stats(source, batch_size)])


def partial_stats(source, batch_size: int = 65_536) -> dict:
    """The card statistics of ``source``'s QA rows in a form that adds up (JSON-able): counts, histogram bins,
    unique objects and threads per family/split, and each family's example candidates. Parts of rows that share
    no scene add up exactly (``merge_stats``): the end of a run computes one part per scene on its workers and
    merges the parts, never the rows."""
    dset = _as_dataset(source)
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    hist = {name: np.zeros(len(edges) - 1, dtype=np.int64) for name, (_, edges) in HISTOGRAMS.items()}
    outside = {name: [0, 0] for name in HISTOGRAMS}
    objects: list[pa.Table] = []
    pending = 0
    threads: list[pa.Table] = []
    n_rows = 0
    examples: dict[str, pa.Table] = {}
    for rb in dset.to_batches(columns=_QA_COLUMNS + ["qa_id"], batch_size=batch_size):
        if rb.num_rows == 0:
            continue
        b = pa.Table.from_batches([rb])
        _keep_examples(examples, b.select(["qa_id", "family", "scene_id"]))
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
        threads.append(pa.table({"scene_id": b.column("scene_id"), "keyframe_index": b.column("keyframe_index"),
                                 "split": split})
                       .group_by(["scene_id", "keyframe_index", "split"]).aggregate([]))
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
    object_classes = [] if obj is None else [
        [r["family"], r["class_name"] or "unknown", r["count_all"]]
        for r in obj.group_by(["family", "class_name"]).aggregate([([], "count_all")]).to_pylist()]
    per_split = [] if thr is None else [
        [r["split"], r["scene_id_count_distinct"], r["count_all"]]
        for r in thr.group_by("split").aggregate([("scene_id", "count_distinct"), ([], "count_all")]).to_pylist()]
    return {"num_qa": n_rows, "counts": [[f, k, sp, n] for (f, k, sp), n in counts.items()],
            "histograms": {name: hist[name].tolist() for name in HISTOGRAMS}, "outside": outside,
            "object_classes": object_classes, "split_scenes_threads": per_split,
            "num_threads": 0 if thr is None else _distinct(thr.select(["scene_id", "keyframe_index"])).num_rows,
            "num_scenes": 0 if thr is None else len(pc.unique(thr.column("scene_id"))),
            "examples": _example_rows(dset, examples)}


def merge_stats(parts) -> dict:
    """The card statistics (module docstring) of ``partial_stats`` parts whose rows share no scene, read one at
    a time (an iterable: memory holds the sums and the examples, not the parts)."""
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    hist = {name: np.zeros(len(edges) - 1, dtype=np.int64) for name, (_, edges) in HISTOGRAMS.items()}
    outside = {name: [0, 0] for name in HISTOGRAMS}
    classes: dict[str, dict[str, int]] = {f: {} for f in qa_families()}
    per_split: dict[str, list[int]] = {}
    examples: dict[str, list[dict]] = {}
    n_rows = n_threads = n_scenes = 0
    for p in parts:
        n_rows += p["num_qa"]
        n_threads += p["num_threads"]
        n_scenes += p["num_scenes"]
        for f, k, sp, n in p["counts"]:
            counts[(f, k, sp)] += n
        for name in HISTOGRAMS:
            hist[name] += np.asarray(p["histograms"][name], dtype=np.int64)
            outside[name][0] += p["outside"][name][0]
            outside[name][1] += p["outside"][name][1]
        for f, c, n in p["object_classes"]:
            fam = classes.setdefault(f, {})
            fam[c] = fam.get(c, 0) + n
        for sp, scenes, threads in p["split_scenes_threads"]:
            acc = per_split.setdefault(sp, [0, 0])
            acc[0] += scenes
            acc[1] += threads
        for f, rows in p["examples"].items():  # the family's smallest qa_ids so far
            examples[f] = sorted(examples.get(f, []) + rows, key=lambda r: r["qa_id"])[:EXAMPLES_PER_FAMILY]
    splits = sorted({k[2] for k in counts})
    fams = list(qa_families()) + sorted({k[0] for k in counts} - set(qa_families()))
    return {
        "num_qa": n_rows,
        "num_threads": n_threads,
        "num_scenes": n_scenes,
        "splits": splits,
        "split_scenes": {sp: per_split.get(sp, [0, 0])[0] for sp in splits},
        "split_threads": {sp: per_split.get(sp, [0, 0])[1] for sp in splits},
        "qa_counts": {f: {k: {s: counts.get((f, k, s), 0) for s in splits} for k in KINDS} for f in fams},
        "object_classes": {f: dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))) for f, c in classes.items()},
        "examples": {f: examples[f] for f in fams if examples.get(f)},
        "histograms": {name: {"unit": HIST_UNITS[name],
                              "bin_edges": HISTOGRAMS[name][1].tolist(), "counts": hist[name].tolist(),
                              "below": outside[name][0], "above": outside[name][1]}
                       for name in HISTOGRAMS},
    }


def _keep_examples(examples: dict[str, pa.Table], b: pa.Table) -> None:
    """Per family, the ``EXAMPLES_PER_FAMILY`` rows with the smallest ``qa_id`` seen so far (O(rows) a batch)."""
    for fam in pc.unique(b.column("family")).to_pylist():
        rows = b.filter(pc.equal(b.column("family"), fam))
        if fam in examples:
            rows = pa.concat_tables([examples[fam], rows])
        k = min(EXAMPLES_PER_FAMILY, rows.num_rows)
        examples[fam] = pc.take(rows, pc.select_k_unstable(rows, k, [("qa_id", "ascending")])).sort_by("qa_id")


def _example_rows(dset: ds.Dataset, examples: dict[str, pa.Table]) -> dict[str, list[dict]]:
    """The example rows' ``EXAMPLE_COLUMNS``, read in a second pass filtered on their scenes (shards carry
    ``scene_id`` statistics, so only those scenes' row groups are read) and ids."""
    if not examples:
        return {}
    keys = pa.concat_tables(examples.values())
    flt = (pc.field("scene_id").isin(pc.unique(keys.column("scene_id")))
           & pc.field("qa_id").isin(keys.column("qa_id")))
    rows = dset.to_table(columns=EXAMPLE_COLUMNS, filter=flt).sort_by([("family", "ascending"), ("qa_id", "ascending")])
    out: dict[str, list[dict]] = {f: [] for f in examples}
    for r in rows.to_pylist():
        if r["family"] in out and len(out[r["family"]]) < EXAMPLES_PER_FAMILY:
            out[r["family"]].append({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()})
    return out


def _distinct(t: pa.Table) -> pa.Table:
    return t.group_by(t.column_names).aggregate([])


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _plot(hist: dict, name: str, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # matplotlib: seconds to import; only for figures
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
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    _write(path, buf.getvalue())


def _md_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


# Tables the card offers as configs, in this order: QA first (the default config), then the per-scene tables a
# user loads. ``issues`` (frames a stage skipped) is a diagnostic of the run, not data.
CONFIG_TABLES = ("qa", "labels", "attributes", "objects", "projections", "frames")
TABLE_DESCRIPTIONS = {
    "qa": "question-answer pairs with exact values and visual grounding (the dataset)",
    "labels": "behaviour labels per frame: ego maneuver and speed status, VRU intent, future waypoints",
    "attributes": "ego-centric attributes of every tracked object per frame (what the QA answers are computed from)",
    "objects": "3D boxes per frame after detection and tracking",
    "projections": "2D projections, masks and the visibility filter's decision per object and camera",
    "frames": "frames: timestamps, sensor file paths, calibration and ego pose",
}


def default_configs(splits: list[str]) -> list[dict]:
    """The QA config alone, one ``data_files`` glob per split (``schemas.layout.split_glob``)."""
    return [{"name": "qa", "table": "qa", "data_files": {sp: split_glob("qa", sp) for sp in splits}}]


def front_matter(configs: list[dict], licence: dict | None, title: str) -> str:
    """The Hugging Face YAML header: licence, task, and one config per table with ``data_files`` per split."""
    meta: dict = {}
    if licence:
        meta["license"] = licence["id"]
    meta.update({"pretty_name": title, "task_categories": ["visual-question-answering"],
                 "tags": ["autonomous-driving", "spatiotemporal-reasoning", "drivegen"]})
    meta["configs"] = [
        {"config_name": c["name"], **({"default": True} if k == 0 else {}),
         "data_files": [{"split": sp, "path": paths} for sp, paths in c["data_files"].items()]}
        for k, c in enumerate(configs)]
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000) + "---"


def type_name(t: pa.DataType) -> str:
    """A short Arrow type as a reader of the card needs it: ``list<float64>[4]``, ``struct{a: int32, ...}``;
    dictionary-encoded strings read as plain strings (pandas, ``datasets``)."""
    if pa.types.is_dictionary(t):
        return type_name(t.value_type)
    if pa.types.is_fixed_size_list(t):
        return f"list<{type_name(t.value_type)}>[{t.list_size}]"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{type_name(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct{" + ", ".join(f"{f.name}: {type_name(f.type)}" for f in t) + "}"
    return str(t)


def schema_section(names: list[str]) -> list[str]:
    """One Markdown table per run-folder table: column, Arrow type, unit and frame (from the column names,
    ``schemas.tables.column_unit``), nullable."""
    out = []
    for name in names:
        sch = TABLES[name].schema
        doc = (sch.metadata or {}).get(b"doc", b"").decode()
        rows = []
        for f in sch:
            unit, frame = T.column_unit(f.name)
            if name == "qa" and f.name == "value":
                unit = "the row's `unit` column"
            rows.append([f"`{f.name}`", f"`{type_name(f.type)}`", unit or "", frame or "", "yes" if f.nullable else "no"])
        out += [f"### `{name}` ({TABLES[name].folder}/)", "", f"{doc}.", "",
                _md_table(["column", "type", "unit", "frame", "nullable"], rows), ""]
    return out


# what Markdown reads as syntax inside a line; '_' only at a word's edge (inside a word, as in 'object_spatial',
# it is never emphasis and stays readable in the raw file)
_MARKDOWN = re.compile(r"([\\`*\[\]|#~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def _cell(v, limit: int = 160) -> str:
    """A value quoted from the data (a question, a scene name, a class) as literal text in a Markdown table
    cell: cut to ``limit`` characters, Markdown's syntax characters backslash-escaped and ``& < >`` as HTML
    entities, so no link, image, emphasis or raw HTML (``<img onerror=...>``) of the data reaches a viewer."""
    text = "" if v is None else " ".join(str(v).split())
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN.sub(r"\\\1", text)


def code_span(v) -> str:
    """A value as an inline code span that no backtick in it can close (CommonMark: a longer fence)."""
    text = " ".join(str(v).split())
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if "`" in text else f"`{text}`"


def render_readme(stats: dict, title: str = "drivegen QA dataset", info: dict | None = None) -> str:
    """The card's Markdown. ``info`` (``generator.pipeline.exports.card_info``): ``configs`` (name, table,
    data_files {split: glob or paths}, rows {split: n}), ``licence`` (``generator.sources.source_licence``),
    ``provenance`` (source, backends, answers_from_labels, label_noise), ``validation`` (the validate
    report's summary figures), ``anonymize`` (the run's anonymisation entry; "absent" without one),
    ``limitations`` (extra lines). Missing entries are left out or stated as unknown."""
    info = info or {}
    splits = stats["splits"] or ["train"]
    configs = info.get("configs") or default_configs(stats["splits"])
    licence = info.get("licence")
    other = next((c for c in configs if c["name"] == "labels"), configs[-1])  # the loading example's second config
    fams = [f for f in stats["qa_counts"]]
    header = ["QA family"] + [f"{k} ({s})" for k in KINDS for s in splits] + ["total"]
    rows, col_tot = [], np.zeros(len(KINDS) * len(splits) + 1, dtype=np.int64)
    for f in fams:
        vals = [stats["qa_counts"][f][k].get(s, 0) for k in KINDS for s in splits]
        vals.append(sum(vals))
        col_tot += np.asarray(vals)
        rows.append([family_title(f)] + vals)
    rows.append(["Total"] + col_tot.tolist())
    classes = sorted({c for f in stats["object_classes"].values() for c in f},
                     key=lambda c: (-sum(stats["object_classes"][f].get(c, 0) for f in stats["object_classes"]), c))
    # ties by name: a set's order changes with the process's string hashing, and the card's bytes must not
    cls_rows = [[_cell(c)] + [stats["object_classes"].get(f, {}).get(c, 0) for f in qa_families()] for c in classes]
    parts = [
        front_matter(configs, licence, title),
        f"# {title}",
        "",
        ("Template QA pairs about pedestrians in driving videos, each with its exact value and visual grounding "
         "(the pedestrian's 2D box on the keyframe), made by drivegen from camera-only logs. "
         f"{stats['num_qa']} QA pairs over {stats['num_threads']} keyframes of {stats['num_scenes']} videos."
         if (info.get("provenance") or {}).get("camera_only") else
         "Template QA pairs about driving scenes, each with its exact value and visual grounding (2D boxes and "
         "COCO RLE masks in the current, context and future frames), made by drivegen from driving logs. "
         f"{stats['num_qa']} QA pairs over {stats['num_threads']} keyframes of {stats['num_scenes']} scenes."),
        "",
        "## Loading",
        "",
        "Every path below is relative to this folder (the dataset root). With Hugging Face `datasets`:",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        "qa = load_dataset(\"path/to/this/folder\")  # the default config: qa, one split per name below",
        f"{other['name']} = load_dataset(\"path/to/this/folder\", \"{other['name']}\", "
        f"split=\"{list(other['data_files'])[-1] if other['data_files'] else 'train'}\")",
        "```",
        "",
        "The files are plain Parquet (pyarrow, pandas, DuckDB read them as well). QA shards are named "
        "`qa/<split>-<scene>-<k>.parquet`; the per-scene tables among the configs below "
        "`<table>/<split>-<scene>.parquet`, their split their scene's (the split its QA rows carry). WebDataset "
        "shards with the images are under `wds/` when the run wrote them.",
        "",
        _md_table(["config", "what", "split", "files", "rows"],
                  [[f"`{c['name']}`" + (" (default)" if k == 0 else "") if j == 0 else "",
                    TABLE_DESCRIPTIONS.get(c["table"], "") if j == 0 else "", sp,
                    f"`{p}`" if isinstance(p, str) else f"{len(p)} listed", c.get("rows", {}).get(sp, "")]
                   for k, c in enumerate(configs) for j, (sp, p) in enumerate(c["data_files"].items())]),
        "",
        "## Splits",
        "",
        ("A video is in its dataset's own split (JAAD: `split_ids/<variant>`); one outside those lists "
         "is 'val' when a hash of its id falls below `qa.val_fraction`, else 'train'. No video is in two splits."
         if (info.get("provenance") or {}).get("camera_only") else
         "A scene is in one split: 'val' when a hash of its id falls below `qa.val_fraction` of the run's "
         "config, else 'train' (`generator.qa.scene_split`), so no scene is seen in two splits."),
        "",
        _md_table(["split", "scenes", "keyframes", "QA pairs"],
                  [[sp, stats.get("split_scenes", {}).get(sp, ""), stats.get("split_threads", {}).get(sp, ""),
                    sum(stats["qa_counts"][f][k].get(sp, 0) for f in fams for k in KINDS)] for sp in splits]),
        "",
    ]
    parts += _provenance(info, licence)
    parts += ["## Schema", "",
              "Units ride in column names (`_m` metres, `_deg` degrees, `_rad` radians, `_mps` m/s, `_us` "
              "microseconds, `_s` seconds, `_px` pixels; `_xyxy` boxes in pixels); frames too (`_ego`: the ego "
              "frame of that row's frame, x forward / y left / z up; `_global`: the log's city frame); "
              "`a_SE3_b` is a row-major 4x4 transform from frame b to frame a. Declared in `schemas/tables.py`.",
              ""]
    parts += schema_section([c["table"] for c in configs])
    parts += ["## Example rows", "", "The rows with the smallest `qa_id` of each family.", ""]
    ex_rows = [[family_title(f)] + [_cell(r.get(c)) for c in EXAMPLE_COLUMNS if c != "family"]
               for f, rs in stats.get("examples", {}).items() for r in rs]
    parts += [_md_table(["family"] + [c for c in EXAMPLE_COLUMNS if c != "family"], ex_rows) if ex_rows
              else "(no QA rows)", ""]
    for section in info.get("family_sections") or []:  # each paper family's own part (schemas.families)
        parts += [section.rstrip(), ""]
    parts += _validation(info.get("validation"))
    parts += _anonymisation(info.get("anonymize", "absent"))
    parts += _limitations(info)
    parts += [
        "## QA pairs per family, kind and split",
        "",
        _md_table(header, rows),
        "",
        "## Object classes per family",
        "",
        "Unique objects per conversation thread (keyframe): an object counts once per keyframe however many "
        "questions ask about it, so one physical object seen at several keyframes counts several times.",
        "",
        _md_table(["class"] + [family_title(f) for f in qa_families()], cls_rows) if cls_rows else "(no objects)",
        "",
        "## Distributions of the quantitative answers",
        "",
    ]
    for name, h in stats["histograms"].items():
        parts.append(f"![{name}]({CARD_DIR}/hist_{name}.png)  ")
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
    parts += [f"Statistics as JSON: `{CARD_DIR}/stats.json`.", ""]
    return "\n".join(parts)


def _provenance(info: dict, licence: dict | None) -> list[str]:
    prov = info.get("provenance") or {}
    out = ["## Provenance and licence", ""]
    if licence:
        url = f" ({licence['url']})" if licence.get("url") else ""
        out += [f"Source: {licence['source']}. Licence: **{licence['name']}**{url}, inherited from the source "
                "logs: the questions, answers and groundings are derived from them, and the images and LiDAR "
                "files the rows point to are theirs.", ""]
    else:
        out += ["Source and licence: not recorded (the card was written without the run folder's description); "
                "the data inherits the licence of the logs it was made from.", ""]
    if prov.get("source"):
        src = prov["source"]
        out += ["Source description (`source.json`): " + ", ".join(
            f"{k} {code_span(v)}" for k, v in src.items() if k in ("kind", "version", "dataroot", "root")) + ".", ""]
    if prov.get("backends"):
        out += [_md_table(["stage", "backend"], [[k, code_span(v)] for k, v in prov["backends"].items()]), ""]
    if prov.get("camera_only"):
        out += ["**Camera-only logs**: the answers come from the videos' own 2D annotations and, for DRAMA-X "
                "intent, from their frames (Farneback optical flow), not from a 3D detector.", ""]
    elif prov.get("answers_from_labels"):
        noisy = LabelNoiseConfig.rates_on(prov.get("label_noise") or {})
        out += ["**The answers come from the logs' own 3D annotations, not from perception**: the detection "
                "backend is `labels`, which turns each log's annotated boxes into the detections the QA is "
                "computed from" + (f", with seeded noise ({', '.join(f'{k} {v}' for k, v in noisy.items())})."
                                   if noisy else " (no noise added)."), ""]
    elif prov.get("backends"):
        out += ["The answers come from the perception backends above (detections, tracks and masks computed from "
                "the sensor data), not from the logs' annotations; see the validation metrics for their quality.",
                ""]
    return out


def _validation(v: dict | None) -> list[str]:
    out = ["## Validation", ""]
    if not v:
        return out + ["`drivegen validate` has not been run on this folder (it writes `validate/report.json`; "
                      "the card is rewritten with its figures).", ""]
    rows = [[k, _cell(val if not isinstance(val, float) else round(val, 4))] for k, val in v.items() if k != "note"]
    return out + ["Detection and tracking against the logs' labels (nuScenes devkit), and the share of QA answers "
                  "within tolerance when re-computed on the labels (`validate/report.md`).", "",
                  _md_table(["metric", "value"], rows), ""]


def _anonymisation(anon) -> list[str]:
    """What the run's ``anonymize`` config did to the published images and metadata, and how well the method
    is measured to work (``generator.writers.anonymize.MEASURED_DEFAULT``)."""
    # lazy: generator.writers.anonymize loads cv2, which this module needs only here
    from generator.writers.anonymize import MEASURED_DEFAULT as M

    out = ["## Anonymisation", ""]
    if anon == "absent":
        return out + ["This drivegen version has no anonymisation setting: faces and licence plates in the images "
                      "are not blurred and timestamps are kept.", ""]
    if not anon:
        return out + ["Anonymisation was off in the run's config (`anonymize`): faces and licence plates are not "
                      "blurred and timestamps are kept.", ""]
    items = anon if isinstance(anon, dict) else {"anonymize": anon}
    flags = {k: items.get(k) for k in ("faces", "plates", "strip_timestamps") if k in items}
    lines = ["Anonymisation per the run's config (`anonymize`, STRIDE-QA App. A.4): "
             + ", ".join(f"{k} {'on' if v else 'off'}" for k, v in flags.items()) + "."]
    if items.get("faces") or items.get("plates"):
        lines.append(
            "Faces (the top of pedestrian and rider boxes) and licence plates (the front and rear faces of vehicle "
            "boxes) are blurred in every published image (WebDataset shards, the STRIDE-QA-Bench export, the HTML "
            "report), found with OpenCV's Haar cascades inside those regions; where a cascade finds nothing the "
            f"policy `undetected: {items.get('undetected', 'region')}` applies. Measured with the default config on "
            f"generated logs with painted faces and plates ({M['images']} images of {M['size']}, `{M['command']}`): "
            f"face recall {M['face_recall']:.3f}, plate recall {M['plate_recall']:.3f}, "
            f"{M['blurred_outside_share']:.1%} of blurred pixels outside faces and plates "
            f"({M['image_blurred_share']:.2%} of the image). Only objects with a box are looked at: a face or plate "
            "the boxes miss is not blurred.")
    if items.get("strip_timestamps"):
        lines.append("Timestamps and source image paths are removed from the WebDataset samples' JSON (frame order "
                     "kept in `keyframe_index`/`frame_index`); the run folder's own tables keep them (validation "
                     "matches by time).")
    return out + [" ".join(lines), ""]


def _limitations(info: dict) -> list[str]:
    prov = info.get("provenance") or {}
    lines = [
        "Questions and answers are rendered from templates: the wording is varied but not natural dialogue.",
        "Quantities are exact with respect to the boxes the QA was computed from; those boxes are "
        + ("the logs' annotations, so the answers carry the annotation error and none of a detector's."
           if prov.get("answers_from_labels") or prov.get("camera_only")
           else "a detector's and tracker's output, so they carry its errors."),
    ]
    if not prov.get("camera_only"):
        lines.append("Masks come from the segmentation backend and are approximate; visibility is decided per camera "
                     "by the filter's thresholds (objects dropped per reason are counted below).")
    lines += [
        "The Parquet tables reference images and LiDAR sweeps by path (`grounding.image_path`, `frames`), they do "
        "not embed them (the WebDataset shards under `wds/`, when written, carry the images): the source logs "
        "must be obtained under their own licence to see them.",
    ]
    lines += list(info.get("limitations") or [])
    return ["## Limitations", ""] + [f"- {x}" for x in lines] + [""]


def write_card(qa_dataset_paths_or_table, out_dir: str | os.PathLike, extra: dict | None = None,
               title: str = "drivegen QA dataset", info: dict | None = None, stats: dict | None = None) -> dict:
    """Write ``out_dir/README.md`` (the card) and ``out_dir/card/{stats.json, hist_<quantity>.png}``; return
    the stats dict.

    ``qa_dataset_paths_or_table``: a folder of QA shards (e.g. ``RUN/qa``), a list of shard paths, a
    ``pyarrow.dataset.Dataset`` or a ``pa.Table`` (``schemas.tables.QA``). ``extra`` adds
    ``visibility_drops`` ({reason: count}), ``errors`` (count, or {stage: count}) and any other
    JSON-serialisable entries to stats.json. ``info``: what the card says about the run (``render_readme``).
    ``out_dir`` is the (staged) run folder root. ``stats``: the statistics already merged from per-scene parts
    (``merge_stats``; then ``qa_dataset_paths_or_table`` is not read).
    """
    stats = dict(stats) if stats is not None else compute_stats(qa_dataset_paths_or_table)
    for k, v in (extra or {}).items():
        stats[k] = v
    card = Path(out_dir) / CARD_DIR
    for name, h in stats["histograms"].items():
        _plot(h, name, card / f"hist_{name}.png")
    _write(card / "stats.json", json.dumps(stats, indent=2, sort_keys=False).encode())
    _write(Path(out_dir) / CARD, render_readme(stats, title, info).encode())
    return stats
