"""The camera-only stages of ``drivegen run`` (``--source jaad``): one scene per video, no LiDAR, no poses.

    stage   needs -> makes     pure function                                               runs as
    load    -> video           JaadSource.load_video: the annotation XMLs as Arrow tables   task
    video   video              generator.attributes.pie.build_samples (PIE/JAAD action and  task
                               risk samples); generator.attributes.drama.video_image_intent
                               (DRAMA-X image intent, Farneback-compensated) over the
                               frames decoded at drama_x.image_intent.video_fps, with
                               position, risk and action (video_risk); generator.qa.video
                               (the pie and drama_x questions of both; templates loaded
                               once per process)
    write   (all)              pie_samples/, video_boxes/, drama_video/, issues/, qa/ per  task
                               video; the frames the samples observe, extracted to
                               images/<video>/

A video whose clip (``clips/<video>.mp4``) is not there runs from its annotations alone (``pie.require_clips``
false, the default): samples without image paths, no image intent, one ``issues`` row (reason ``no_clip``,
frame_index -1: the whole video). A clip that cannot be decoded, like broken annotations, fails its video
with an errors row naming the file; the other videos go on, and the run exits 1.

The run folder keeps the layout of 3D runs (config, source, scenes, manifests, errors, summary, dataset card,
report). ``drivegen regenerate`` rebuilds its QA from pie_samples/, video_boxes/ and drama_video/;
``drivegen export_pie --run OUT`` and ``drivegen export_drama OUT`` export it, ``drivegen score pie|drama-x`` scores
against those exports.
"""
from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.pipeline.core import SceneWork, Stage, StageEnv
from schemas import layout
from schemas.config import PipelineConfig
from schemas.tables import ISSUES, write_parquet
from schemas.vocab import VIDEO_CAMERA

log = logging.getLogger("drivegen.pipeline")


@dataclass
class Video:
    """load: one video's JAAD tables (``generator.sources.jaad.read_video``), its clip as a local file (None: not
    there) and where the clip is as the tables name it (``location``: path or URI, there or not); video: its PIE
    samples, DRAMA-X rows, issues rows and QA."""

    tables: dict[str, pa.Table]
    clip: str | None
    location: str
    samples: pa.Table | None = None
    intent: pa.Table | None = None
    issues: pa.Table | None = None
    qa: pa.Table | None = None

    @property
    def meta(self) -> dict:
        return self.tables["videos"].to_pylist()[0]


def load(work: SceneWork, env: StageEnv) -> None:
    from generator.pipeline.stages import cached_source

    src = cached_source(json.dumps(work.source, sort_keys=True))
    tables = src.load_video(work.scene_id, env.cfg.pie)
    work.video = Video(tables, src.clip(work.scene_id), src.clip_location(work.scene_id))
    work.counts["frames"] = int(work.video.meta["num_frames"])
    work.counts["boxes"] = tables["boxes"].num_rows
    work.counts["pedestrians"] = len(set(tables["boxes"].column("ped_id").to_pylist()))
    work.counts["clips"] = int(work.video.clip is not None)


def image_rel(video_id: str, frame: int, fmt: str) -> str:
    """Where an extracted frame lives in the run folder (JAAD's own ``images/<video>/<frame:05d>.png``)."""
    return f"{layout.IMAGES_DIR}/{layout.safe_name(video_id)}/{int(frame):05d}.{fmt}"


@contextmanager
def _named(work: SceneWork):
    """A SourceError raised inside names the object instead of its cached copy (logs on object storage)."""
    from generator.pipeline.stages import cached_source
    from schemas.errors import SourceError

    try:
        yield
    except SourceError as err:
        raise cached_source(json.dumps(work.source, sort_keys=True)).named(err) from None


def _with_images(samples: pa.Table, video_id: str, clip: str | None, env: StageEnv) -> pa.Table:
    """The samples' ``image_paths`` (full URIs of the frames this run extracts; null when it extracts none) and
    ``video_path`` (the clip read; null without one)."""
    pie = env.cfg.pie
    n = samples.num_rows
    if clip is not None and pie.extract_frames and n:
        frames = samples.column("frames").combine_chunks()
        flat = pc.list_flatten(frames).to_numpy().astype(np.int64)
        uniq, inv = np.unique(flat, return_inverse=True)
        names = pa.array([env.store.uri_of(image_rel(video_id, f, pie.frame_format)) for f in uniq.tolist()], pa.string())
        paths = pa.ListArray.from_arrays(frames.offsets, names.take(pa.array(inv)))
    else:
        paths = pa.nulls(n, samples.schema.field("image_paths").type)
    samples = samples.set_column(samples.schema.get_field_index("image_paths"), "image_paths", paths)
    return samples.set_column(samples.schema.get_field_index("video_path"), "video_path",
                              pa.array([clip] * n, pa.string()))


def _gray_frames(clip: str, video_id: str, frames: np.ndarray, max_width: int, width_px: int
                 ) -> tuple[list[np.ndarray], float]:
    """``frames`` of the clip decoded one at a time, grayscale, scaled to at most ``max_width`` px wide; also the
    factor from the annotation's pixels (an image ``width_px`` wide) to theirs (a clip may be smaller)."""
    import cv2

    from generator.sources.jaad import iter_frames

    out, scale = [], 1.0
    for _, img in iter_frames(clip, frames, video_id):
        h, w = img.shape[:2]
        scale = min(1.0, max_width / w)
        g = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
        out.append(g if scale == 1.0 else cv2.resize(g, (int(round(w * scale)), int(round(h * scale))),
                                                     interpolation=cv2.INTER_AREA))
    return out, (out[0].shape[1] / width_px if out else 1.0)


def video(work: SceneWork, env: StageEnv) -> None:
    from generator.attributes.drama import video_image_intent, video_intent_frames, video_risk
    from generator.attributes.pie import build_samples

    v, cfg, vid = work.need("video", "video"), env.cfg, work.scene_id
    t = v.tables
    samples, _ = build_samples(t["videos"], t["boxes"], t["pedestrians"], t["vehicle"], cfg.pie)
    v.samples = _with_images(samples, vid, v.location if v.clip is not None else None, env)
    for task in ("action", "risk"):
        work.counts[f"pie_{task}_samples"] = int(pc.sum(pc.equal(samples.column("task"), task)).as_py() or 0)
    work.counts["pie_crossing_samples"] = int(pc.sum(pc.and_(pc.equal(samples.column("task"), "action"),
                                                             pc.equal(samples.column("crossing"), 1))).as_py() or 0)
    if v.clip is None:
        v.issues = pa.Table.from_pylist([{
            "scene_id": vid, "frame_index": -1, "stage": "video", "reason": "no_clip", "camera": VIDEO_CAMERA,
            "file": v.location,
            "message": f"{vid}: no clip: samples from the annotations alone, without frames or image intent"}],
            schema=ISSUES)
        work.counts["issues"] = 1
    else:
        th = cfg.drama_x.image_intent
        frames = video_intent_frames(t["boxes"], cfg.pie.fps, th)
        with _named(work):
            gray, scale = _gray_frames(v.clip, vid, frames, th.video_max_width_px, int(v.meta["width_px"]))
        v.intent = video_risk(video_image_intent(vid, t["boxes"], frames, gray, scale, cfg.pie.fps, th), t,
                              cfg.pie.fps, cfg.drama_x)
        work.counts["intent_frames"] = len(frames)
        work.counts["image_intent"] = v.intent.num_rows
    from generator.pipeline.stages import qa_counts
    from generator.qa.video import video_qa

    v.qa = video_qa(vid, v.samples, t["boxes"], cfg, env.model, drama=v.intent)
    work.counts.update(qa_counts(v.qa))


def write_video(work: SceneWork, env: StageEnv, staging: Path) -> None:
    """The video's files, built under ``staging``: its tables and the frames its samples observe."""
    v, cfg, vid = work.need("video", "write"), env.cfg, work.scene_id
    comp = cfg.writers.cache_compression
    tables = {"pie_samples": v.samples, "video_boxes": v.tables["boxes"], "drama_video": v.intent,
              "issues": v.issues}
    for name, table in tables.items():
        if table is None:
            continue
        path = staging / layout.scene_file(name, vid)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_parquet(path, table, compression=comp)
    if v.qa is not None:
        from generator.writers.parquet import write_qa_shards

        write_qa_shards(v.qa, staging, vid, cfg.writers, fsync=False)  # fsynced as they are committed
    work.counts["images"] = 0
    if v.clip is None or not cfg.pie.extract_frames or not v.samples.num_rows:
        return
    import cv2

    from generator.sources.jaad import iter_frames

    wanted = np.unique(pc.list_flatten(v.samples.column("frames")).to_numpy())
    with _named(work):
        for f, img in iter_frames(v.clip, wanted, vid):
            path = staging / image_rel(vid, f, cfg.pie.frame_format)
            path.parent.mkdir(parents=True, exist_ok=True)
            if not cv2.imwrite(str(path), img):
                raise OSError(f"{vid}: could not write frame {f} to {path}")
            work.counts["images"] += 1


def stages(cfg: PipelineConfig) -> list[Stage]:
    from generator.pipeline.stages import build_templates

    return [Stage("load", load, makes="video"), Stage("video", video, needs=("video",), build=build_templates)]


def finalize(store, summary: dict, source=None) -> None:
    """End of a camera-only run: its PIE and image-intent figures over every finished video, and the dataset
    card when ``writers.card`` (as 3D runs; the card says what camera-only logs can and cannot answer)."""
    from generator.pipeline.exports import add_run_card
    from generator.runfolder import RunReader

    reader = RunReader(store, require=False)
    add_run_card(reader, summary)
    total: dict[str, int] = {}
    for m in reader.manifests():
        for k in ("clips", "pie_action_samples", "pie_crossing_samples", "pie_risk_samples", "image_intent",
                  "images"):
            total[k] = total.get(k, 0) + int(m.get("counts", {}).get(k, 0))
    summary["camera_only"] = total


__all__ = ["Video", "stages", "write_video", "finalize", "image_rel"]
