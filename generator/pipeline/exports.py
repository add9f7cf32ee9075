"""By-products built from a run folder's committed scenes (``generator.runfolder.RunReader``): the dataset
card and the STRIDE-QA-Bench export. Both are built in a staging folder on the run folder's own filesystem
(or the temp dir for object stores) and committed file by file; a folder is only ever replaced when it is
one drivegen made, and then only the files it lists.
"""
from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from generator.runfolder import RunReader, RunStore
from schemas import layout
from schemas.config import PipelineConfig

log = logging.getLogger("drivegen.pipeline")


# ------------------------------------------------------------------------------------------ owned folders
def check_owned_folder(store: RunStore, rel_dir: str, marker: str, fmt: str, in_run_folder: bool = False) -> list[str]:
    """The files an earlier drivegen folder at ``rel_dir`` lists; RunFolderError for a user's folder
    (``generator.writers.owned.owned_files``, the one rule)."""
    from generator.writers.owned import owned_files

    return owned_files(store, rel_dir, marker, fmt, in_run_folder=in_run_folder)


def replace_owned_folder(store: RunStore, rel_dir: str, built: Path, marker: str, fmt: str,
                         in_run_folder: bool = False) -> list[str]:
    """Commit the files under the local folder ``built`` to ``rel_dir`` of ``store``, replacing an earlier
    folder drivegen made there (its ``marker`` JSON has ``"format": fmt`` and lists its ``files``): files of
    the earlier one that the new one lacks are removed, nothing else. A non-empty folder that is not
    drivegen's is refused (RunFolderError): a user's files are never overwritten or deleted.
    ``in_run_folder``: ``rel_dir`` is a run folder's own by-product folder (bench/), which older drivegen
    versions wrote without a format: accepted, only listed files are removed."""
    marker_rel = f"{rel_dir}/{marker}" if rel_dir else marker
    old_files = check_owned_folder(store, rel_dir, marker, fmt, in_run_folder)
    new_files = []
    for p in sorted(built.rglob("*")):
        if p.is_file() and p.name != marker:
            rel = p.relative_to(built).as_posix()
            store.commit_file(p, f"{rel_dir}/{rel}" if rel_dir else rel)
            new_files.append(rel)
    store.commit_file(built / marker, marker_rel)  # last: the marker lists what is there
    for rel in sorted(set(old_files) - set(new_files) - {marker}):
        store.delete(f"{rel_dir}/{rel}" if rel_dir else rel)
    return new_files


def _release(store: RunStore, built: Path) -> None:
    if store.is_local:
        store.release_staging(built)
    else:
        shutil.rmtree(built, ignore_errors=True)


def _staging(store: RunStore, name: str, beside: bool = False) -> Path:
    """A local folder to build ``name`` in on the target's filesystem: the run folder's ``.staging/``, or
    (``beside``: a folder that is not a run folder, where nothing but the export may appear) a temporary
    folder next to it; the temp dir for object stores."""
    if not store.is_local:
        return Path(tempfile.mkdtemp(prefix=f"drivegen-{name}-"))
    if not beside:
        return store.staging_dir(name)
    import uuid

    root = Path(store.base)
    d = root.parent / f".{root.name}.{uuid.uuid4().hex}.tmp"
    d.mkdir(parents=True)
    return d


# ------------------------------------------------------------------------------------------ bench
def scene_inputs(reader: RunReader, splits: list[str] | None = None):
    """Yield ``SceneInputs`` (bench export) for every finished scene with attributes."""
    import pyarrow.compute as pc

    from generator.writers.bench_export import SceneInputs

    for sid in reader.scene_ids():
        attributes = reader.read_scene("attributes", sid)
        if attributes is None or attributes.num_rows == 0:
            continue
        frames = reader.read_scene("frames", sid)
        projections = reader.read_scene("projections", sid)
        if frames is None or projections is None:
            log.warning("bench export: scene %s lacks perception frames/projections; skipped", sid)
            continue
        qa = reader.read_scene("qa", sid, columns=["scene_id", "keyframe_index", "family", "track_ids",
                                                   "region_ids", "split"])
        if qa is not None:
            keep = pc.equal(qa.column("family"), "ego_spatiotemporal")
            if splits:
                keep = pc.and_(keep, pc.is_in(qa.column("split"), value_set=__import__("pyarrow").array(splits)))
            qa = qa.filter(keep)
            if qa.num_rows == 0:
                continue
        yield SceneInputs(sid, frames, attributes, projections, qa, reader.read_scene("objects", sid))


def export_bench(run: str | RunReader, out: str | None = None, cfg: PipelineConfig | None = None,
                 splits: list[str] | None = None, image_root: str | None = None) -> dict:
    """Export a run folder's ego-spatiotemporal groups as STRIDE-QA-Bench files into ``out`` (any
    filesystem; default ``RUN/bench``). ``cfg`` defaults to the run's config; ``splits`` restricts the QA rows
    used as candidates (e.g. ["val"] for a held-out bench). Returns the summary (``export_summary.json``)."""
    from generator.writers.anonymize import ScenePublisher
    from generator.writers.bench_export import EXPORT_FORMAT, EXPORT_SUMMARY, scene_groups, write_bench

    reader = run if isinstance(run, RunReader) else RunReader(run)
    cfg = cfg or reader.config()
    drops: Counter = Counter()
    groups = []
    publishers = {}
    for inp in scene_inputs(reader, splits):
        new = scene_groups(inp, cfg, drops)
        if new:
            publishers[inp.scene_id] = ScenePublisher.from_tables(inp.scene_id, inp.frames, inp.objects, cfg.anonymize)
        groups.extend(new)
    target = RunStore(out) if out is not None else reader.store
    rel_dir = "" if out is not None else layout.BENCH_DIR
    check_owned_folder(target, rel_dir, EXPORT_SUMMARY, EXPORT_FORMAT, in_run_folder=out is None)
    built = _staging(target, "bench", beside=out is not None)
    try:
        summary = write_bench(groups, built, cfg.qa.decimals, image_root, drops, publishers)
        if not groups:
            summary["why_empty"] = _why_no_groups(reader, drops)
            (built / EXPORT_SUMMARY).write_text(json.dumps(summary, indent=2))
        replace_owned_folder(target, rel_dir, built, EXPORT_SUMMARY, EXPORT_FORMAT, in_run_folder=out is None)
    finally:
        _release(target, built)
    return summary


def _why_no_groups(reader: RunReader, drops: Counter) -> str:
    """Why an export holds no group, in words: the reason most candidates were dropped for (with its
    count and what it means, ``bench_export.DROP_REASONS``), then the other reasons' counts."""
    from generator.writers.bench_export import DROP_REASONS

    if not reader.scene_ids():
        return "the run has no finished scene"
    drops = Counter({k: v for k, v in drops.items() if v})
    if drops:
        (top, n), *rest = drops.most_common()
        others = "; also " + ", ".join(f"{k}={v}" for k, v in rest) if rest else ""
        return (f"every candidate group was dropped, most for {top}={n}: {DROP_REASONS.get(top, top)}{others} "
                "(see 'dropped' in export_summary.json)")
    return "no ego_spatiotemporal QA rows (targets visible in the front camera) to build groups from"


# ------------------------------------------------------------------------------------------ intention
def intention_tables(reader: RunReader, cfg: PipelineConfig | None = None, splits: list[str] | None = None,
                     maps: dict | None = None):
    """Yield each finished scene's Intention-Drive export tables (``generator.writers.intention_export``);
    ``maps``: each scene's drivable map (``road_maps``)."""
    from generator.writers.intention_export import read_run_scene

    cfg = cfg or reader.config()
    for sid in reader.scene_ids():
        out = read_run_scene(reader, sid, cfg, splits, maps)
        if out is not None:
            yield out


def export_intention(run: str | RunReader, out: str | None = None, cfg: PipelineConfig | None = None,
                     splits: list[str] | None = None, source=None) -> dict:
    """Write a run folder's Intention-Drive export (``generator.writers.intention_export``) into ``out`` (any
    filesystem; default ``RUN/intention``); a folder is replaced only when it is an earlier such export.
    Returns the summary (``export_summary.json``). ``source``: the run's logs, already opened (default: opened
    again from ``source.json`` for their maps)."""
    import pyarrow as pa

    from generator.writers.intention_export import (EXPORT_FORMAT, EXPORT_SUMMARY, OBJECTS_FILE, SAMPLES_FILE,
                                                    road_maps)
    from schemas.tables import INTENTION_OBJECTS, INTENTION_SAMPLES, write_parquet

    reader = run if isinstance(run, RunReader) else RunReader(run)
    cfg = cfg or reader.config()
    maps, road_note = road_maps(source or reader.source(), reader.scene_ids()) if cfg.intention.road_edges else \
        ({}, "intention.road_edges is off")
    parts = list(intention_tables(reader, cfg, splits, maps))
    samples = pa.concat_tables([p[0] for p in parts]) if parts else INTENTION_SAMPLES.empty_table()
    objects = pa.concat_tables([p[1] for p in parts]) if parts else INTENTION_OBJECTS.empty_table()
    target = RunStore(out) if out is not None else reader.store
    rel_dir = "" if out is not None else layout.INTENTION_DIR
    check_owned_folder(target, rel_dir, EXPORT_SUMMARY, EXPORT_FORMAT)
    built = _staging(target, "intention", beside=out is not None)
    try:
        write_parquet(built / SAMPLES_FILE, samples)
        write_parquet(built / OBJECTS_FILE, objects)
        kinds = Counter(samples.column("kind").to_pylist())
        summary = {"format": EXPORT_FORMAT, "run": reader.uri, "samples": samples.num_rows,
                   "keyframes": samples.group_by(["scene_id", "frame_index"]).aggregate([]).num_rows,
                   "objects": objects.num_rows, "by_kind": dict(sorted(kinds.items())),
                   "splits": dict(sorted(Counter(samples.column("split").to_pylist()).items())),
                   "road_edges": {"samples_with_map": samples.num_rows - samples.column("map_path").null_count,
                                  "maps": sorted({m["kind"] for m in maps.values()}),
                                  **({"note": road_note} if road_note else {})},
                   "files": [SAMPLES_FILE, OBJECTS_FILE],
                   # what the samples were made with: the scorer classifies and checks with the same
                   "config": {"labels": cfg.labels.model_dump(mode="json"),
                              "intention": cfg.intention.model_dump(mode="json"),
                              "ego": cfg.ego.model_dump(mode="json")}}
        if not samples.num_rows:
            summary["why_empty"] = ("the run has no ego_intention QA rows (is 'ego_intention' in qa.families, and "
                                    "do keyframes have 3 s of log after them?)")
        (built / EXPORT_SUMMARY).write_text(json.dumps(summary, indent=2))
        replace_owned_folder(target, rel_dir, built, EXPORT_SUMMARY, EXPORT_FORMAT)
    finally:
        _release(target, built)
    return summary


# ------------------------------------------------------------------------------------------ card
def card_extra(reader: RunReader, summary: dict | None = None) -> dict:
    """Visibility drops per reason and failed scene/stage counts per stage of a run folder, from its
    manifests and errors table."""
    drops: Counter = Counter()
    for m in reader.manifests():
        drops.update(m.get("counts", {}).get("dropped_by_reason", {}))
    extra = {"visibility_drops": dict(sorted(drops.items())),
             "errors": dict(sorted(Counter(e["stage"] for e in reader.errors()).items()))}
    if summary is not None:
        extra.update({k: summary[k] for k in ("scenes", "frames", "objects") if k in summary})
    return extra


def _split_order(splits) -> list[str]:
    from schemas.vocab import QA_SPLITS

    return sorted(splits, key=lambda sp: (QA_SPLITS.index(sp) if sp in QA_SPLITS else len(QA_SPLITS), sp))


def card_configs(reader: RunReader, cfg: PipelineConfig | None = None) -> list[dict]:
    """The card's configs over this run folder's committed files (``generator.writers.card.CONFIG_TABLES``
    that it holds itself: a derived folder's tables read from its parent are not part of it): ``qa`` with
    one glob per split (``schemas.layout.split_glob``; the files listed one by one where the folder holds
    shards named before splits led the names), each per-scene table with its files listed per split, a
    scene's split being the one its QA rows carry (``generator.qa.scene_split`` of the config for a scene
    without QA rows). Rows per split from the manifests."""
    import fnmatch

    from generator.qa import scene_split
    from generator.writers.card import CONFIG_TABLES
    from schemas.vocab import QA_SPLITS

    qa_folder = layout.TABLES["qa"].folder + "/"
    split_of_scene: dict[str, str] = {}
    qa_files: dict[str, list[tuple[str, int]]] = {}
    for m in reader.manifests():
        for f in m.get("files", []):
            if not (f["path"].startswith(qa_folder) and f["path"].endswith(".parquet")):
                continue
            head = f["path"][len(qa_folder):].split("-", 1)[0]
            if head in QA_SPLITS:
                split = head
            else:  # shards named before splits led the names: the split the rows carry
                col = reader.store.read_parquet(f["path"], columns=["split"]).column("split")
                split = (col.unique().to_pylist() or ["train"])[0]
            split_of_scene[m["scene_id"]] = split
            qa_files.setdefault(split, []).append((f["path"], f.get("rows") or 0))
    configs = []
    if qa_files and reader.table_owner("qa") is reader:
        data_files = {}
        for sp in _split_order(qa_files):
            glob = layout.split_glob("qa", sp)
            paths = [p for p, _ in qa_files[sp]]
            data_files[sp] = glob if all(fnmatch.fnmatch(p, glob) for p in paths) else sorted(paths)
        configs.append({"name": "qa", "table": "qa", "data_files": data_files,
                        "rows": {sp: sum(n for _, n in qa_files[sp]) for sp in data_files}})
    val_fraction = cfg.qa.val_fraction if cfg is not None else 0.0
    for name in CONFIG_TABLES:
        if name == "qa" or reader.table_owner(name) is not reader:
            continue
        t = layout.TABLES[name]
        per_split: dict[str, list[tuple[str, int]]] = {}
        for m in reader.manifests():
            sid = m["scene_id"]
            for f in m.get("files", []):
                if f["path"] == layout.scene_file(name, sid):
                    sp = split_of_scene.get(sid) or scene_split([sid], val_fraction)[0]
                    per_split.setdefault(sp, []).append((f["path"], f.get("rows") or 0))
        if per_split:
            order = _split_order(per_split)
            configs.append({"name": name, "table": t.name,
                            "data_files": {sp: sorted(p for p, _ in per_split[sp]) for sp in order},
                            "rows": {sp: sum(n for _, n in per_split[sp]) for sp in order}})
    return configs


def validation_summary(reader: RunReader) -> dict | None:
    """The headline figures of ``validate/report.json`` when ``drivegen validate`` wrote one into the run."""
    rel = f"{layout.VALIDATE_DIR}/report.json"
    if not reader.store.exists(rel):
        return None
    try:
        r = reader.store.read_json(rel)
    except (ValueError, OSError) as err:
        log.warning("card: %s is unreadable (%s); the card leaves validation out", reader.store.full(rel), err)
        return None
    d, t, a = r.get("detection") or {}, r.get("tracking") or {}, r.get("label_agreement") or {}
    out = {"scenes evaluated": len((r.get("scenes") or {}).get("evaluated", [])),
           "detection mAP": d.get("mAP"), "detection NDS": d.get("NDS"),
           "tracking AMOTA": t.get("AMOTA"), "tracking IDSW": t.get("IDSW"),
           "QA answers within tolerance (labels)": a.get("agreement")}
    return {k: v for k, v in out.items() if v is not None}


def card_info(reader: RunReader, summary: dict | None = None) -> dict:
    """What the dataset card says about a run beyond its QA rows (``generator.writers.card.render_readme``):
    configs and splits, licence and provenance from ``source.json`` and the config, validation figures, the
    config's anonymisation section."""
    import yaml

    from generator.sources import source_licence

    cfg = reader.config() if reader.store.exists(layout.CONFIG) else None
    src = reader.source()
    raw = yaml.safe_load(reader.config_text() or b"") or {}
    info: dict = {"configs": card_configs(reader, cfg), "licence": source_licence(src) if src else None,
                  "validation": validation_summary(reader),
                  "anonymize": raw.get("anonymize", (summary or reader.summary() or {}).get("anonymize", "absent"))}
    if cfg is not None and reader.camera_only:
        info["provenance"] = {"source": src or {}, "camera_only": True}
        info["limitations"] = [
            "Camera-only logs: there are no 3D positions, distances or speeds; the answers come from the videos' "
            "own 2D annotations (boxes, behaviour tags, crossing attributes) and, for DRAMA-X intent, from the "
            "frames' optical flow.",
            "The frames extracted under `images/` are the videos' own pixels: anonymisation applies to drivegen's "
            "published images (WebDataset, bench export, report), not to them."]
    elif cfg is not None:
        info["provenance"] = {
            "source": src or {},
            "backends": {"detection": cfg.detection.backend, "tracking": cfg.tracking.mode,
                         "segmentation": cfg.segmentation.backend},
            "answers_from_labels": cfg.detection.backend == "labels",
            "label_noise": cfg.detection.labels.model_dump(mode="json"),
        }
    if reader.run_state.get("parent"):
        info["limitations"] = [f"This folder was derived by `drivegen regenerate` from {reader.run_state['parent']}: "
                               "it holds the QA rows only; the per-scene tables are in the parent run."]
    return info


def write_run_card(reader: RunReader, summary: dict | None = None) -> dict | None:
    """The dataset card (``README.md`` at the run folder's root, its stats and plots in ``card/``) over the
    committed QA shards; None when there are none."""
    import pyarrow.dataset as pads

    from generator.writers.card import write_card

    files = reader.files("qa")
    if not files:
        return None
    owner = reader.table_owner("qa")
    dataset = pads.dataset([owner.store.full(p) for p in files], format="parquet", filesystem=owner.store.fs)
    store = reader.store
    built = _staging(store, "card")
    try:
        stats = write_card(dataset, built, extra=card_extra(reader, summary), info=card_info(reader, summary))
        store.commit_tree(built)
        old = f"{layout.CARD_DIR}/{layout.CARD}"  # where drivegen wrote the card before it moved to the root
        if store.exists(old):
            store.delete(old)
    finally:
        _release(store, built)
    return stats


def add_run_card(reader: RunReader, summary: dict) -> None:
    """The dataset card, when the run's config asks for one (``writers.card``), and its path and QA per split in
    ``summary`` (the end of every ``drivegen run``, 3D or camera-only)."""
    if not reader.config().writers.card:
        return
    stats = write_run_card(reader, summary)
    if stats is not None:
        summary["card"] = {"path": reader.store.full(layout.CARD), "splits": {
            sp: sum(k.get(sp, 0) for f in stats["qa_counts"].values() for k in f.values()) for sp in stats["splits"]}}


def finalize_run(store: RunStore, summary: dict, source=None) -> None:
    """End of ``drivegen run``: the dataset card, the STRIDE-QA-Bench and Intention-Drive exports, when the
    config asks; ``source``: the run's opened logs when the caller holds them (their maps are read from it
    instead of opening the logs again)."""
    reader = RunReader(store)
    cfg = reader.config()
    add_run_card(reader, summary)
    if cfg.writers.bench_export:
        result = export_bench(reader, cfg=cfg)
        summary["bench_export"] = {k: result[k] for k in ("groups", "questions", "why_empty") if k in result}
    if cfg.writers.intention_export and "ego_intention" in cfg.qa.families:
        result = export_intention(reader, cfg=cfg, source=source)
        summary["intention_export"] = {k: result[k] for k in ("samples", "keyframes", "why_empty") if k in result}
