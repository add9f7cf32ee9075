"""By-products built from a run folder's committed scenes (``generator.runfolder.RunReader``): the dataset
card and the STRIDE-QA-Bench export. Both are built in a staging folder on the run folder's own filesystem
(or the temp dir for object stores) and committed file by file; a folder is only ever replaced when it is
one drivegen made, and then only the files it lists.
"""
from __future__ import annotations

import logging
from collections import Counter
import fnmatch

import pyarrow.dataset as pads
import yaml

from generator.qa import scene_split
from generator.runfolder import RunReader, RunStore, release_staging, staging
from generator.runfolder.parts import PartSpec, build_parts, read_parts, report_spec
from generator.sources import source_licence
from generator.writers.card import CONFIG_TABLES, merge_stats, partial_stats, write_card
from schemas import layout
from schemas.config import PipelineConfig
from schemas.families import families, family_counts
from schemas.summary import CameraOnly, CardEntry, RunSummary
from schemas.vocab import QA_SPLITS

log = logging.getLogger("drivegen.pipeline")


# ------------------------------------------------------------------------------------------ card
def card_extra(reader: RunReader, summary: RunSummary | None = None) -> dict:
    """Visibility drops per reason and failed scene/stage counts per stage of a run folder, from its
    summary (the manifests' counts summed by the driver) or, without one, its manifests; and its errors table."""
    drops: Counter = Counter()
    if summary is not None:
        drops.update(summary.objects_dropped)
    else:
        for m in reader.manifests():
            drops.update(m.get("counts", {}).get("dropped_by_reason", {}))
    extra = {"visibility_drops": dict(sorted(drops.items())),
             "errors": dict(sorted(Counter(e["stage"] for e in reader.errors()).items()))}
    if summary is not None:
        sc = summary.scenes  # the dataset's scenes, not this command's: a resumed end of a run writes the same card
        extra.update(scenes={"total": sc.total, "finished": sc.ok + sc.skipped, "failed": sc.failed},
                     frames=summary.frames, objects=summary.objects)
    return extra


def _split_order(splits) -> list[str]:
    return sorted(splits, key=lambda sp: (QA_SPLITS.index(sp) if sp in QA_SPLITS else len(QA_SPLITS), sp))


def card_configs(reader: RunReader, cfg: PipelineConfig | None = None) -> list[dict]:
    """The card's configs over this run folder's committed files (``generator.writers.card.CONFIG_TABLES``
    that it holds itself: a derived folder's tables read from its parent are not part of it), ``qa`` first:
    per split, the glob of the split's files (``schemas.layout.split_glob``: the tables the card publishes are
    stored by split), so the card does not grow with the run. A scene's split is the one its QA rows carry
    (``generator.qa.scene_split`` of the config for a scene without QA rows); where a folder holds files named
    before their table was stored by split, that table's files are listed one by one. Rows per split from the
    manifests."""
    qa_folder = layout.TABLES["qa"].folder + "/"
    split_of_scene: dict[str, str] = {}
    per_table: dict[str, dict[str, list[tuple[str, int]]]] = {}
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
            per_table.setdefault("qa", {}).setdefault(split, []).append((f["path"], f.get("rows") or 0))
    names = [n for n in CONFIG_TABLES if reader.table_owner(n) is reader]
    folders = {layout.TABLES[n].folder: n for n in names if n != "qa"}
    val_fraction = cfg.qa.val_fraction if cfg is not None else 0.0
    for m in reader.manifests():
        sid = m["scene_id"]
        for f in m.get("files", []):
            folder, _, base = f["path"].rpartition("/")
            name = folders.get(folder)
            if name is None or not base.endswith("." + layout.TABLES[name].ext):
                continue
            head = base.split("-", 1)[0]
            if head in QA_SPLITS and f["path"] == layout.scene_file(name, sid, split=head):
                split = head
            else:  # named before the table was stored by split
                split = split_of_scene.get(sid) or scene_split([sid], val_fraction)[0]
            per_table.setdefault(name, {}).setdefault(split, []).append((f["path"], f.get("rows") or 0))
    return [_card_config(n, per_table[n]) for n in names if per_table.get(n)]


def _card_config(name: str, per_split: dict[str, list[tuple[str, int]]]) -> dict:
    """One config of the card: per split the glob of its files when it names them and no file of another split
    (``schemas.layout.split_glob``), else the files themselves; the rows per split."""
    order = _split_order(per_split)
    globs = {sp: layout.split_glob(name, sp) for sp in order}
    data_files: dict[str, str | list[str]] = {}
    for sp in order:
        ours = [p for p, _ in per_split[sp]]
        theirs = (p for other in order if other != sp for p, _ in per_split[other])
        exact = all(fnmatch.fnmatch(p, globs[sp]) for p in ours) and \
            not any(fnmatch.fnmatch(p, globs[sp]) for p in theirs)
        data_files[sp] = globs[sp] if exact else sorted(ours)
    return {"name": name, "table": layout.TABLES[name].name, "data_files": data_files,
            "rows": {sp: sum(n for _, n in per_split[sp]) for sp in order}}


def validation_summary(reader: RunReader) -> dict | None:
    """The headline figures of ``validate/report.json`` when ``drivegen validate`` wrote one into the run."""
    rel = f"{layout.VALIDATE_DIR}/report.json"
    if not reader.store.exists(rel):
        return None
    try:
        r = reader.store.read_json(rel)
    except (ValueError, OSError) as err:
        log.warning("card: %s is unreadable (%s); the card leaves validation out", reader.store.uri_of(rel), err)
        return None
    d, t, a = r.get("detection") or {}, r.get("tracking") or {}, r.get("label_agreement") or {}
    out = {"scenes evaluated": len((r.get("scenes") or {}).get("evaluated", [])),
           "detection mAP": d.get("mAP"), "detection NDS": d.get("NDS"),
           "tracking AMOTA": t.get("AMOTA"), "tracking IDSW": t.get("IDSW"),
           "QA answers within tolerance (labels)": a.get("agreement")}
    return {k: v for k, v in out.items() if v is not None}


def card_info(reader: RunReader, summary: RunSummary | None = None) -> dict:
    """What the dataset card says about a run beyond its QA rows (``generator.writers.card.render_readme``):
    configs and splits, licence and provenance from ``source.json`` and the config, validation figures, the
    config's anonymisation section."""
    cfg = reader.config() if reader.store.exists(layout.CONFIG) else None
    src = reader.source()
    raw = yaml.safe_load(reader.config_text() or b"") or {}
    sections = [sec for sec in (f.card_section(reader, cfg) for f in families().values()) if sec] if cfg else []
    info: dict = {"configs": card_configs(reader, cfg), "licence": source_licence(src) if src else None,
                  "family_sections": sections,
                  "validation": validation_summary(reader),
                  "anonymize": raw.get("anonymize", _anonymize_entry(summary or reader.summary()))}
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


def _anonymize_entry(summary: RunSummary | None):
    """The anonymisation entry a summary.json of an earlier drivegen kept (before config.yaml held it)."""
    return summary.extra.get("anonymize", "absent") if summary is not None else "absent"


CARD_PART = "card"


def card_part(part, cfg) -> dict | None:
    """One scene's part of the card's statistics (``generator.writers.card.partial_stats`` of its QA rows; a
    ``generator.runfolder.parts`` builder); None for a scene without QA rows."""
    files = part.reader.files("qa")
    if not files:
        return None
    owner = part.reader.table_owner("qa")
    return partial_stats(pads.dataset([owner.store.full(p) for p in files], format="parquet",
                                      filesystem=owner.store.fs))


def write_run_card(reader: RunReader, summary: RunSummary | None = None, parts: bool = False) -> dict | None:
    """The dataset card (``README.md`` at the run folder's root, its stats and plots in ``card/``) over the
    committed QA shards; None when there are none. ``parts``: the statistics are merged from the scenes' card
    parts (``generator.runfolder.parts``, built by ``finalize_run``) instead of read from the rows."""
    files = reader.files("qa")
    if not files:
        return None
    stats = None
    if parts:
        stats = merge_stats(rec for _, rec in read_parts(reader.store, CARD_PART, reader.scene_ids()))
        dataset = None
    else:
        owner = reader.table_owner("qa")
        dataset = pads.dataset([owner.store.full(p) for p in files], format="parquet", filesystem=owner.store.fs)
    store = reader.store
    built = staging(store, "card")
    try:
        stats = write_card(dataset, built, extra=card_extra(reader, summary), info=card_info(reader, summary),
                           stats=stats)
        store.commit_tree(built)
        old = f"{layout.CARD_DIR}/{layout.CARD}"  # where drivegen wrote the card before it moved to the root
        if store.exists(old):
            store.delete(old)
    finally:
        release_staging(store, built)
    return stats


def add_run_card(reader: RunReader, summary: RunSummary, parts: bool = False) -> None:
    """The dataset card, when the run's config asks for one (``writers.card``), and its path and QA per split in
    ``summary`` (the end of every ``drivegen run``, 3D or camera-only)."""
    if not reader.config().writers.card:
        return
    stats = write_run_card(reader, summary, parts)
    if stats is not None:
        summary.card = CardEntry(reader.store.uri_of(layout.CARD), {
            sp: sum(k.get(sp, 0) for f in stats["qa_counts"].values() for k in f.values()) for sp in stats["splits"]})


def finalize_parts(cfg: PipelineConfig, camera_only: bool = False) -> list:
    """The per-scene parts the end of a run merges (``generator.runfolder.parts.PartSpec``): the card's, each
    enabled family export's that declares one (``Export.part``), and the report's. Each scene's worker builds its
    own once the scene is committed (``generator.pipeline.core.build_committed_parts``); ``finalize_run`` builds
    what is missing."""
    specs = [PartSpec(CARD_PART, "generator.pipeline.exports:card_part")] if cfg.writers.card else []
    for fam in families().values():
        for exp in fam.exports():
            if exp.part and not camera_only and exp.enabled(cfg):
                specs.append(PartSpec(exp.name, exp.part))
    if cfg.report.on_run:  # the report follows finalize (``generator.commands.run.write_report``)
        specs.append(report_spec(cfg.report))
    return specs


def summary_filled_by(finalize, store: RunStore, summary: RunSummary) -> RunSummary:
    """``finalize(store, summary)``, then the summary it filled: the end of a run as a Ray task hands it back to
    the driver (``generator.pipeline.ray_tasks.one_task``)."""
    finalize(store, summary)
    return summary


def finalize_run(store: RunStore, summary: RunSummary, source=None, camera_only: bool = False) -> None:
    """End of ``drivegen run``: the per-scene parts of the end-of-run work (``generator.runfolder.parts``: Ray
    tasks over the committed scenes when Ray is up; parts an earlier, killed finalize built are kept), then the
    dataset card and every registered paper family's exports the config asks for (``schemas.families``), each
    merged from the parts, and each family's typed entry of the summary (``summary.families``).
    ``source``: the run's opened logs when the caller holds them (an export without parts that needs them reads
    them from it instead of opening the logs again)."""
    reader = RunReader(store, require=False)
    cfg = reader.config()
    specs = finalize_parts(cfg, camera_only)
    # ray: its batch tasks only where the run started Ray (build_parts decided so before, with Ray imported)
    from generator.pipeline.ray_tasks import tasks_if_running

    build_parts(store, reader.scene_ids(), specs, run_tasks=tasks_if_running(cfg.ray) if specs else None)
    add_run_card(reader, summary, parts=bool(specs) and specs[0].name == CARD_PART)
    results: dict[str, dict[str, dict]] = {}
    for fam in families().values():
        for exp in fam.exports():
            if not camera_only and exp.enabled(cfg):
                opts = {"source": source} if "source" in exp.options else {}
                if exp.part:
                    opts = {"parts": True}
                results.setdefault(fam.name, {})[exp.name] = exp.run(reader, cfg, **opts)
    counts = summary.totals  # the manifests' counts, summed once by the driver
    if camera_only:
        summary.camera_only = CameraOnly(int(counts.get("clips", 0)), int(counts.get("images", 0)))
    for fam in families().values():
        entry = fam.summary(family_counts(counts, fam.name), results.get(fam.name, {}), camera_only)
        if entry is not None:
            summary.families[fam.name] = entry
