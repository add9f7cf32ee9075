"""The camera-only stages of ``drivegen run`` (``--source jaad``): one scene per video, no LiDAR, no poses.

    stage   needs -> makes     pure function                                               runs as
    load    -> video           VideoSource.load_video: the annotations as Arrow tables      task
    video   video              every registered paper family's ``derive_video`` (its tables of the  task
                               video, ``schemas.families``), then ``generator.qa.video`` (their
                               questions; templates loaded once per process)
    write   (all)              video_boxes/, the families' tables, issues/, qa/ per video; task
                               the frames the families' rows name (``frames_to_extract``),
                               extracted to images/<video>/

How videos are read (JAAD's split variant, track gaps, fps, frame extraction) is the settings of the family
that declares them (``video_settings``). A video whose clip (``clips/<video>.mp4``) is not there runs from its
annotations alone: no frames are extracted, and one ``issues`` row (reason ``no_clip``, frame_index -1: the
whole video) says so. Two more facts of the annotations are kept as given and reported the same way: a video
listed in no split file (``no_split``: its QA rows take the hashed split of 3D runs, ``qa.val_fraction``) and a
pedestrian whose ``decision_point`` comes after its ``crossing_point`` (``decision_after_crossing``, at the
decision's frame: drivegen's samples use the crossing point alone). A clip that cannot be decoded, like broken
annotations, fails its video with an errors row naming the file; the other videos go on, and the run exits 1.

The run folder keeps the layout of 3D runs (config, source, scenes, manifests, errors, summary, dataset card,
report). ``drivegen regenerate`` rebuilds its QA from the families' tables and video_boxes/.
"""
from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from generator.pipeline.core import SceneWork, Stage, StageEnv
from generator.pipeline.exports import finalize_run
from generator.pipeline.stages import build_templates, cached_source, qa_counts
from generator.qa.generate import scene_split
from generator.qa.video import video_qa
from generator.sources.base import VideoSource
from generator.sources.clips import iter_frames
from generator.writers.parquet import write_qa_shards
from schemas import layout
from schemas.config import PipelineConfig
from schemas.errors import ConfigError, SourceError
from schemas.families import add_family_counts, declared_output, families
from schemas.tables import ISSUES, write_parquet
from schemas.vocab import VIDEO_CAMERA

log = logging.getLogger("drivegen.pipeline")


@dataclass
class Video:
    """One camera-only video as the families' ``derive_video`` hooks see it (``schemas.families``): its
    annotation tables (``VideoSource.load_video``; JAAD's: videos, boxes, pedestrians, vehicle), its clip as a
    local file (None: not there) and where the clip is as the tables name it (``location``), the frame rate, and
    where the run extracts a frame (``image_uri``; None when it extracts none). ``derived``: the families' tables;
    ``issues``/``qa``: the stage's."""

    video_id: str
    tables: dict[str, pa.Table]
    clip: str | None
    location: str
    fps: float
    image_uri: object = None  # frame -> URI of the extracted frame, or None
    attributes_file: str = ""  # where its attributes file and its split lists are (``VideoSource.annotation_files``)
    splits_file: str = ""
    derived: dict = None
    extract: np.ndarray | None = None  # the frames the families' rows show (``frames_to_extract``)
    issues: pa.Table | None = None
    qa: pa.Table | None = None

    @property
    def meta(self) -> dict:
        return self.tables["videos"].to_pylist()[0]

    def gray_frames(self, frames: np.ndarray, max_width: int) -> tuple[list[np.ndarray], float]:
        """``frames`` of the clip decoded one at a time, grayscale, scaled to at most ``max_width`` px wide; also
        the factor from the annotation's pixels to theirs (a clip may be smaller than the annotated image)."""
        return _gray_frames(self.clip, self.video_id, frames, max_width, int(self.meta["width_px"]))


def video_settings(cfg: PipelineConfig):
    """How camera-only videos are read (JAAD's split variant, track gaps, fps, frame extraction): the settings
    of the paper family that declares them (``PaperFamily.video_settings``). InputError when none does."""
    for fam in families().values():
        settings = fam.video_settings(cfg)
        if settings is not None:
            return settings
    raise ConfigError("no registered paper family says how camera-only videos are read (video_settings)")


def load(work: SceneWork, env: StageEnv) -> None:
    """The video from its source (a VideoSource: boxes, attributes, the clip), without its pixels."""
    src = cached_source(json.dumps(work.source, sort_keys=True))
    if not isinstance(src, VideoSource):
        raise SourceError(f"{work.scene_id}: the camera stages read videos, and a {src.name} source has none",
                          scene=work.scene_id, stage="load")
    settings = video_settings(env.cfg)
    tables = src.load_video(work.scene_id, settings)
    clip = src.clip(work.scene_id)
    files = src.annotation_files(work.scene_id, settings)
    uri = None
    if clip is not None and settings.extract_frames:
        def uri(frame, _vid=work.scene_id, _fmt=settings.frame_format, _store=env.store):
            return _store.uri_of(image_rel(_vid, frame, _fmt))
    work.video = Video(work.scene_id, tables, clip, src.clip_location(work.scene_id), float(settings.fps), uri,
                       attributes_file=files.get("attributes", ""), splits_file=files.get("splits", ""))
    work.counts["frames"] = int(work.video.meta["num_frames"])
    work.counts["boxes"] = tables["boxes"].num_rows
    work.counts["pedestrians"] = len(set(tables["boxes"].column("ped_id").to_pylist()))
    work.counts["clips"] = int(work.video.clip is not None)
    work.manifest_info["clip"] = work.video.location if work.video.clip is not None else None


def video_media(reader, video_id: str) -> tuple[dict[int, str], str | None]:
    """What a camera-only run kept of a video's pixels, read back from its manifest: {frame: URI} of the
    frames it extracted (``images/<video>/``) and where the clip it read is (None: it had none). A manifest
    written before drivegen recorded the clip names it through the run's source (``clip_location``)."""
    manifest = reader.manifest(video_id) or {}
    prefix = f"{layout.IMAGES_DIR}/{layout.safe_name(video_id)}/"
    images = {int(f["path"][len(prefix):].split(".", 1)[0]): reader.store.uri_of(f["path"])
              for f in manifest.get("files", []) if f["path"].startswith(prefix)}
    if "clip" in manifest:
        clip = manifest["clip"]
    elif (manifest.get("counts") or {}).get("clips"):
        clip = cached_source(json.dumps(reader.source(), sort_keys=True)).clip_location(video_id)
    else:
        clip = None
    return images, clip


def image_rel(video_id: str, frame: int, fmt: str) -> str:
    """Where an extracted frame lives in the run folder (JAAD's own ``images/<video>/<frame:05d>.png``)."""
    return f"{layout.IMAGES_DIR}/{layout.safe_name(video_id)}/{int(frame):05d}.{fmt}"


@contextmanager
def _named(work: SceneWork):
    """A SourceError raised inside names the object instead of its cached copy (logs on object storage)."""
    try:
        yield
    except SourceError as err:
        raise cached_source(json.dumps(work.source, sort_keys=True)).named(err) from None


def _gray_frames(clip: str, video_id: str, frames: np.ndarray, max_width: int, width_px: int
                 ) -> tuple[list[np.ndarray], float]:
    import cv2  # cv2: about a second to import; only where images are read or drawn

    out, scale = [], 1.0
    for _, img in iter_frames(clip, frames, video_id):
        h, w = img.shape[:2]
        scale = min(1.0, max_width / w)
        g = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
        out.append(g if scale == 1.0 else cv2.resize(g, (int(round(w * scale)), int(round(h * scale))),
                                                     interpolation=cv2.INTER_AREA))
    return out, (out[0].shape[1] / width_px if out else 1.0)


def video(work: SceneWork, env: StageEnv) -> None:
    """Every registered family's derive_video over the video, then its QA (generator.qa.video)."""
    v, cfg, vid = work.need("video", "video"), env.cfg, work.scene_id
    v.derived = {}
    with _named(work):
        for fam in families().values():
            tables = declared_output(fam, fam.derive_video(v, cfg), "derive_video")
            v.derived.update(tables)
            add_family_counts(work.counts, fam.name, fam.counts(tables, cfg))
    rows = annotation_issues(v, cfg)
    if v.clip is None:
        rows.append({"scene_id": vid, "frame_index": -1, "stage": "video", "reason": "no_clip", "camera": VIDEO_CAMERA,
                     "file": v.location,
                     "message": f"{vid}: no clip: samples from the annotations alone, without frames or image intent"})
    if rows:
        v.issues = pa.Table.from_pylist(rows, schema=ISSUES)
        work.counts["issues"] = len(rows)
    images = None
    if v.image_uri is not None:
        v.extract = frames_to_extract(v)
        images = {int(f): v.image_uri(int(f)) for f in v.extract}
    v.qa = video_qa(vid, v.derived, v.tables["boxes"], cfg, env.model, split=v.meta.get("split"), images=images,
                    fps=v.fps)
    work.counts.update(qa_counts(v.qa))


def annotation_issues(v: Video, cfg: PipelineConfig) -> list[dict]:
    """``issues`` rows of what a video's annotations hold that drivegen keeps as given (module docstring): no
    split file lists it; a pedestrian decides (``decision_point``) after the frame it crosses at."""
    vid, rows = v.video_id, []
    if v.meta.get("split") is None:
        split = scene_split([vid], cfg.qa.val_fraction)[0]
        rows.append({"scene_id": vid, "frame_index": -1, "stage": "load", "reason": "no_split", "camera": None,
                     "file": v.splits_file,
                     "message": f"{vid}: listed in no split file (train.txt, val.txt, test.txt): its QA rows take "
                                f"the hashed split {split!r} (qa.val_fraction = {cfg.qa.val_fraction:g})"})
    peds = v.tables["pedestrians"].select(["ped_id", "crossing_point", "decision_point"]).to_pylist()
    for p in peds:
        cp, dp = p["crossing_point"], p["decision_point"]
        if cp is not None and dp is not None and 0 <= cp < dp:
            rows.append({"scene_id": vid, "frame_index": int(dp), "stage": "load", "reason": "decision_after_crossing",
                         "camera": None, "file": v.attributes_file,
                         "message": f"{vid}: pedestrian {p['ped_id']}: decision_point {dp} is after crossing_point "
                                    f"{cp}; kept as given (the samples' crossing event is crossing_point alone)"})
    return rows


def frames_to_extract(v: Video) -> np.ndarray:
    """The frames the families' tables name an extracted image for (``PaperFamily.frames_to_extract``)."""
    parts = [np.asarray(f, np.int64) for f in (fam.frames_to_extract(v.derived) for fam in families().values())
             if f is not None]
    return np.unique(np.concatenate(parts)) if parts else np.empty(0, np.int64)


def write_video(work: SceneWork, env: StageEnv, staging: Path) -> None:
    """The video's files, built under ``staging``: its tables and the frames its families' rows name."""
    v, cfg, vid = work.need("video", "write"), env.cfg, work.scene_id
    comp = cfg.writers.cache_compression
    tables = {"video_boxes": v.tables["boxes"], **v.derived, "issues": v.issues}
    for name, table in tables.items():
        if table is None:
            continue
        path = staging / layout.scene_file(name, vid)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_parquet(path, table, compression=comp)
    if v.qa is not None:
        write_qa_shards(v.qa, staging, vid, cfg.writers, fsync=False)  # fsynced as they are committed
    work.counts["images"] = 0
    wanted = v.extract
    if wanted is None or not len(wanted):
        return
    import cv2  # cv2: about a second to import; only where images are read or drawn

    fmt = video_settings(cfg).frame_format
    with _named(work):
        for f, img in iter_frames(v.clip, wanted, vid):
            path = staging / image_rel(vid, f, fmt)
            path.parent.mkdir(parents=True, exist_ok=True)
            if not cv2.imwrite(str(path), img):
                raise OSError(f"{vid}: could not write frame {f} to {path}")
            work.counts["images"] += 1


def stages(cfg: PipelineConfig) -> list[Stage]:
    return [Stage("load", load, makes="video"), Stage("video", video, needs=("video",), build=build_templates)]


def finalize(store, summary, source=None) -> None:
    """End of a camera-only run: the families' figures over every finished video and the dataset card when
    ``writers.card`` (as 3D runs; the card says what camera-only logs can and cannot answer)."""
    finalize_run(store, summary, source, camera_only=True)


__all__ = ["Video", "stages", "write_video", "finalize", "image_rel"]
