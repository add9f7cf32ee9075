"""The STRIDE-QA-Bench export of a run folder (``RUN/bench`` at the end of a run when ``bench.export``, or
``drivegen export stride_qa``): the ego-spatiotemporal groups (``bench_export``), built in a staging folder and
committed file by file into a folder drivegen owns (``generator.pipeline.exports``).
"""
from __future__ import annotations

import io
import json
import logging
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from generator.runfolder import (RunReader, RunStore, check_owned_folder, release_staging, replace_owned_folder,
                                 staging)
from schemas.config import PipelineConfig

log = logging.getLogger("drivegen.pipeline")

from generator.families.stride_qa.bench_export import (DROP_REASONS, EXPORT_FORMAT, EXPORT_SUMMARY, SceneInputs,
                                                       merge_bench, scene_groups, scene_images, scene_record)
from generator.runfolder.parts import PartSpec, read_parts, remove_parts, stream_parts
from generator.writers.wds import image_member, shard_members
from schemas import layout

BENCH_DIR = "bench"
BENCH_PART = "bench"  # its per-scene parts: RUN/parts/bench/ (generator.runfolder.parts)
BENCH_PART_BUILDER = "generator.families.stride_qa.export:bench_part"


def scene_inputs(reader: RunReader, splits: list[str] | None = None, scene_ids: list[str] | None = None):
    """Yield ``SceneInputs`` (bench export) for every finished scene (of ``scene_ids``) with attributes."""
    for sid in reader.scene_ids() if scene_ids is None else scene_ids:
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
                keep = pc.and_(keep, pc.is_in(qa.column("split"), value_set=pa.array(splits)))
            qa = qa.filter(keep)
            if qa.num_rows == 0:
                continue
        yield SceneInputs(sid, frames, attributes, projections, qa, reader.read_scene("objects", sid))


def bench_part(part, cfg: PipelineConfig, splits: list[str] | None = None, image_root: str | None = None
               ) -> dict | None:
    """One scene's part of the export (``generator.runfolder.parts``): its groups' records and sheet rows
    (``bench_export.scene_record``), the candidates it dropped and why, and the names of its context images,
    blurred as the config says and put beside the part; None for a scene with no candidate."""
    # lazy: generator.writers.anonymize loads cv2, which this module needs only here
    from generator.writers.anonymize import ScenePublisher

    for inp in scene_inputs(part.reader, splits, [part.scene_id]):
        drops: Counter = Counter()
        groups = scene_groups(inp, cfg, drops)
        images = []
        if groups:
            publish = ScenePublisher.from_tables(inp.scene_id, inp.frames, inp.objects, cfg.anonymize)
            published = shard_images(part.reader, part.scene_id, groups, cfg) if image_root is None else None
            images = scene_images(groups, part.put, image_root, publish, published)
        return {"drops": dict(drops), "images": images, **scene_record(groups, cfg.qa.decimals)}
    return None


def shard_images(reader: RunReader, scene_id: str, groups, cfg: PipelineConfig):
    """``scene_images``'s ``published``: the groups' context images from the scene's WebDataset shards, which
    hold them blurred as ``cfg.anonymize`` says when the run wrote them with that setting (the same images, the
    same publisher: the same bytes; ``tests/families/test_stride_qa_fidelity.py`` compares), so they are not decoded, blurred
    and encoded again; None when the shards were written otherwise or are absent."""
    owner = reader.table_owner("wds")
    files = reader.files("wds", [scene_id])
    if not files or owner.config().anonymize != cfg.anonymize:
        return None
    wanted = {image_member(f, g.front_camera) for g in groups for f in g.context_frames}
    found = shard_members(_shards(owner.store, files), wanted)
    return lambda frame_index, camera: found.get(image_member(frame_index, camera))


def _shards(store: RunStore, files: list[str]):
    """The shards as ``shard_members`` reads them: a local one as the store's open file (tar headers and the
    wanted members read, the rest of its tens of MB skipped), a remote one downloaded once into memory (each
    seek would be a request)."""
    for f in files:
        if store.is_local:
            with store.fs.open_input_file(store.full(f)) as fh:
                yield fh
        else:
            yield io.BytesIO(store.read_bytes(f))


def export_bench(run: str | RunReader, out: str | None = None, cfg: PipelineConfig | None = None,
                 splits: list[str] | None = None, image_root: str | None = None, parts: bool = False) -> dict:
    """Export a run folder's ego-spatiotemporal groups as STRIDE-QA-Bench files into ``out`` (any
    filesystem; default ``RUN/bench``). ``cfg`` defaults to the run's config; ``splits`` restricts the QA rows
    used as candidates (e.g. ["val"] for a held-out bench). Returns the summary (``export_summary.json``).
    ``parts``: merge the scenes' parts the end of the run built (``generator.runfolder.parts``; their images are
    copied into place by the store, not through this process); otherwise each scene's part is built here, one
    at a time."""
    reader = run if isinstance(run, RunReader) else RunReader(run)
    cfg = cfg or reader.config()
    target = RunStore(out) if out is not None else reader.store
    rel_dir = "" if out is not None else BENCH_DIR
    old_files = check_owned_folder(target, rel_dir, EXPORT_SUMMARY, EXPORT_FORMAT, in_run_folder=out is None)
    built = staging(target, "bench", beside=out is not None)
    drops: Counter = Counter()
    images: list[str] = []
    try:
        if parts:
            records = read_parts(reader.store, BENCH_PART, reader.scene_ids())

            def place(rel: str) -> None:
                reader.store.copy(f"{layout.PARTS_DIR}/{BENCH_PART}/{rel}", f"{BENCH_DIR}/{rel}")
        else:
            def put(rel: str, data: bytes) -> None:
                (built / rel).parent.mkdir(parents=True, exist_ok=True)
                (built / rel).write_bytes(data)

            spec = PartSpec(BENCH_PART, BENCH_PART_BUILDER, {"splits": splits, "image_root": image_root})
            records = stream_parts(reader, spec, cfg, put=put)
            place = None
            if out is None:  # bench/ is about to hold another export than the run's parts describe
                remove_parts(reader.store, BENCH_PART)

        def consume():
            for _, rec in records:
                drops.update(rec["drops"])
                for rel in rec["images"]:
                    if place is not None:
                        place(rel)
                    images.append(rel)
                yield rec

        summary = merge_bench(consume(), built, drops, images)
        if not summary["groups"]:
            summary["why_empty"] = _why_no_groups(reader, drops, splits)
            (built / EXPORT_SUMMARY).write_text(json.dumps(summary, indent=2))
        replace_owned_folder(target, rel_dir, built, EXPORT_SUMMARY, EXPORT_FORMAT, in_run_folder=out is None,
                             placed=images if parts else (), old_files=old_files)
    finally:
        release_staging(target, built)
    return summary


def _why_no_groups(reader: RunReader, drops: Counter, splits: list[str] | None = None) -> str:
    """Why an export holds no group, in words: no scene in the splits asked for; else the reason most
    candidates were dropped for (with its count and what it means, ``bench_export.DROP_REASONS``), then the
    other reasons' counts."""
    if not reader.scene_ids():
        return "the run has no finished scene"
    if splits:
        held = sorted({p.rsplit("/", 1)[-1].split("-", 1)[0] for p in reader.files("qa")})
        if not set(held) & set(splits):
            return (f"no scene of the run is in split {', '.join(splits)} (its QA rows are in "
                    f"{', '.join(held) or 'no split'}; qa.val_fraction decides a scene's split)")
    drops = Counter({k: v for k, v in drops.items() if v})
    if drops:
        (top, n), *rest = drops.most_common()
        others = "; also " + ", ".join(f"{k}={v}" for k, v in rest) if rest else ""
        return (f"every candidate group was dropped, most for {top}={n}: {DROP_REASONS.get(top, top)}{others} "
                "(see 'dropped' in export_summary.json)")
    return "no ego_spatiotemporal QA rows (targets visible in the front camera) to build groups from"




@dataclass(frozen=True)
class BenchSummary:
    """The run summary's STRIDE-QA entry: what the end of the run exported to ``bench/``."""

    groups: int
    questions: int
    why_empty: str | None = None

    @classmethod
    def of(cls, export: dict | None) -> "BenchSummary | None":
        if not export:
            return None
        return cls(int(export.get("groups", 0)), int(export.get("questions", 0)), export.get("why_empty"))

    def to_json(self) -> dict:
        return {"groups": self.groups, "questions": self.questions,
                **({"why_empty": self.why_empty} if self.why_empty else {})}

    def lines(self) -> list[str]:
        return [f"STRIDE-QA-Bench export: {self.groups} groups, {self.questions} questions ({BENCH_DIR}/)"
                + (f": {self.why_empty}" if self.why_empty else "")]
