"""JAAD 2.0 as a camera-only log source: the annotation XMLs of a JAAD folder as Arrow tables, and the frames
of its videos (``clips/video_XXXX.mp4``) decoded on demand with OpenCV.

A JAAD folder (ykotseruba/JAAD layout)::

    annotations/video_XXXX.xml                       CVAT tracks: per-frame boxes of 'pedestrian' (behaviour
                                                     tags), 'ped' (bystanders) and 'people' (groups)
    annotations_attributes/video_XXXX_attributes.xml per behaviour pedestrian: crossing, crossing_point, ...
    annotations_vehicle/video_XXXX_vehicle.xml       the ego vehicle's action per frame
    annotations_traffic/video_XXXX_traffic.xml       road type; per frame crossing, signs, traffic light
    split_ids/<variant>/{train,val,test}.txt         video lists
    clips/video_XXXX.mp4                             the videos (1920x1080 or 1280x720, 30 fps); optional

``read_jaad(root)`` reads every video it finds and returns ``JaadTables`` (one Arrow table per kind, all
videos concatenated) plus one ``SourceError`` per video it could not use (broken XML, a box outside the image,
a track with a gap, missing files): that video is left out, the others continue. ``read_video`` reads one
video and raises. ``read_frames`` (``generator.sources.clips``) decodes only the requested frames of a clip.

Units: pixels in the video's own image (``x1_px``...); frames are 0-based indices at the video's 30 fps.
"""
from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa

from generator.sources.base import VideoSource
from generator.sources.remote import RemoteRoot, is_remote
from schemas.config import SourceLimitsConfig
from schemas.errors import SourceError
from schemas.tables import VIDEO_BOXES
from schemas.files import file_problem
from schemas.vocab import (JAAD_BEHAVIOUR_TAGS, JAAD_BEHAVIOUR_VALUES, JAAD_SPLITS, JAAD_TRACK_LABELS,
                           JAAD_VEHICLE_ACTIONS)

BEHAVIOUR_TAGS = JAAD_BEHAVIOUR_TAGS
PED_ATTRIBUTES_INT = ("crossing", "crossing_point", "decision_point", "group_size", "num_lanes")
PED_ATTRIBUTES_STR = ("intersection", "designated", "signalized", "motion_direction", "traffic_direction",
                      "age", "gender")

@dataclass(frozen=True)
class JaadReading:
    """How the JAAD reader reads a video (any object with these attributes will do: the settings of the
    family that declares how camera-only videos are read, ``generator.pipeline.video.video_settings``).
    Defaults: the PIE/JAAD family's."""

    box_outside_tolerance_px: float = 1.0
    track_gap: str = "keep"
    split_variant: str = "default"
    require_clips: bool = False


def pedestrian_event(label: str, frames: np.ndarray, cross_tags: list, attrs: dict | None
                     ) -> tuple[int, int, int, str]:
    """(event frame, crossing label, intention, how) of one JAAD pedestrian (``label`` its track label,
    ``frames`` and ``cross_tags`` its boxes', ``attrs`` its attributes row): the pedestrian behaviour
    benchmark's crossing event (JAAD's ``crossing_point``; the first frame tagged crossing for a pedestrian
    crossing before its track starts; else its last visible frame), which more than one family labels by."""
    if label != "pedestrian":
        return int(frames[-1]), 0, 0, "bystander: last visible frame"
    crossing = attrs.get("crossing") if attrs else None
    cp = attrs.get("crossing_point") if attrs else None
    y = 1 if crossing == 1 else 0
    if cp is not None and cp >= 0:
        return int(cp), y, 1, "crossing_point"
    if y == 1:  # crossing began before the track: the first frame tagged crossing (else the first frame)
        first = next((int(f) for f, t in zip(frames, cross_tags) if t == "crossing"), int(frames[0]))
        return first, 1, 1, "crossing before the track"
    return int(frames[-1]), 0, 1, "last visible frame"


VIDEOS_SCHEMA = pa.schema([
    ("video_id", pa.string()), ("width_px", pa.int32()), ("height_px", pa.int32()), ("num_frames", pa.int32()),
    ("time_of_day", pa.string()), ("weather", pa.string()), ("location", pa.string()),
    ("road_type", pa.string()), ("split", pa.string()),
])
BOXES_SCHEMA = VIDEO_BOXES  # declared once in schemas.tables: the run folder keeps it (video_boxes/)
PEDESTRIANS_SCHEMA = pa.schema([("video_id", pa.string()), ("ped_id", pa.string()), ("old_id", pa.string())]
                               + [(a, pa.int32()) for a in PED_ATTRIBUTES_INT]
                               + [(a, pa.string()) for a in PED_ATTRIBUTES_STR])
VEHICLE_SCHEMA = pa.schema([("video_id", pa.string()), ("frame", pa.int32()), ("action", pa.string())])
TRAFFIC_SCHEMA = pa.schema([("video_id", pa.string()), ("frame", pa.int32()), ("ped_crossing", pa.int8()),
                            ("ped_sign", pa.int8()), ("stop_sign", pa.int8()), ("traffic_light", pa.string())])


@dataclass
class JaadTables:
    """Every table of a JAAD folder (all videos read without error), plus the errors of the others."""

    root: str
    videos: pa.Table
    boxes: pa.Table
    pedestrians: pa.Table
    vehicle: pa.Table
    traffic: pa.Table
    errors: list[SourceError] = field(default_factory=list)

    @property
    def video_ids(self) -> list[str]:
        return self.videos.column("video_id").to_pylist()


def annotation_path(root: str | os.PathLike, video_id: str, kind: str = "annotations") -> Path:
    suffix = {"annotations": "", "annotations_attributes": "_attributes", "annotations_vehicle": "_vehicle",
              "annotations_traffic": "_traffic"}[kind]
    return Path(root) / kind / f"{video_id}{suffix}.xml"


def clip_path(root: str | os.PathLike, video_id: str) -> Path:
    return Path(root) / "clips" / f"{video_id}.mp4"


def list_videos(root: str | os.PathLike) -> list[str]:
    """The video ids that have an annotation XML, sorted."""
    d = Path(root) / "annotations"
    if not d.is_dir():
        raise SourceError(f"not a JAAD folder: no annotations/ folder in {root}", file=str(d))
    return sorted(p.stem for p in d.glob("video_*.xml"))


SPLIT_CONFLICT = "conflict"  # read_splits' value for a video listed in two split files (read_video refuses it)


MAX_SPLIT_FILE_BYTES = 1 << 20  # a list of video ids (JAAD's: 4 kB)


def split_folder(root: str | os.PathLike, variant: str) -> Path:
    return Path(root) / "split_ids" / variant


def missing_split_files(root: str | os.PathLike, variant: str) -> list[str]:
    """The files of ``split_ids/<variant>/`` (train.txt, val.txt, test.txt) that are not there; [] when the folder
    itself is absent (no split lists: the documented hashed split)."""
    d = split_folder(root, variant)
    if not d.is_dir():
        return []
    return [f"{s}.txt" for s in JAAD_SPLITS if not (d / f"{s}.txt").exists()]


def read_splits(root: str | os.PathLike, variant: str = "default") -> dict[str, str]:
    """video_id -> 'train' | 'val' | 'test' from ``split_ids/<variant>/``; {} when there is no ``split_ids/``
    folder. A video listed in two of the files maps to ``SPLIT_CONFLICT:<files>`` (that video is refused, the
    others go on). SourceError naming the folder or file when ``split_ids/`` holds no such variant, or a split
    file is not a regular file (a FIFO, a symlink loop) or larger than any list of videos."""
    out: dict[str, str] = {}
    d = split_folder(root, variant)
    if not d.is_dir():
        if (Path(root) / "split_ids").is_dir():
            found = sorted(p.name for p in (Path(root) / "split_ids").iterdir() if p.is_dir())
            raise SourceError(f"no split variant {variant!r} in split_ids/ (there: {found}): check the split "
                              "variant setting", file=str(d))
        return out
    for split in JAAD_SPLITS:
        p = d / f"{split}.txt"
        problem = file_problem(p)
        if problem == "missing":
            continue  # a video it would list is refused by read_video, naming it
        if problem is None and p.stat().st_size > MAX_SPLIT_FILE_BYTES:
            problem = f"{p.stat().st_size:,} bytes, larger than any list of videos ({MAX_SPLIT_FILE_BYTES:,})"
        if problem:
            raise SourceError(f"the split file is {problem}: drivegen reads a regular file", file=str(p))
        for line in p.read_text().split():
            vid = line.strip()
            if vid in out and out[vid] != split:
                out[vid] = f"{SPLIT_CONFLICT}:{out[vid]}.txt and {split}.txt"
            else:
                out[vid] = split
    return out


MAX_ANNOTATION_BYTES = 64 << 20  # one video's XML; JAAD's largest (video_0135.xml, 600 frames) is 3.5 MB


def _parse(path: Path, video_id: str) -> ET.Element:
    problem = file_problem(path)  # a FIFO would block the read forever, a symlink loop is no missing file
    if problem not in (None, "missing"):
        raise SourceError(f"{video_id}: the annotation file is {problem}: drivegen reads a regular file",
                          scene=video_id, file=str(path))
    if problem is None and path.stat().st_size > MAX_ANNOTATION_BYTES:
        raise SourceError(f"{video_id}: the annotation file is {path.stat().st_size:,} bytes, larger than any "
                          f"video's annotation ({MAX_ANNOTATION_BYTES:,} bytes at most)", scene=video_id,
                          file=str(path))
    try:
        return ET.parse(path).getroot()
    except FileNotFoundError:
        raise SourceError(f"{video_id}: missing annotation file", scene=video_id, file=str(path)) from None
    except ET.ParseError as err:
        raise SourceError(f"{video_id}: broken XML ({err})", scene=video_id, file=str(path)) from None
    except OSError as err:
        raise SourceError(f"{video_id}: cannot read ({err.strerror or err})", scene=video_id, file=str(path)) from None


MAX_IMAGE_SIDE_PX = 16_384  # larger than any camera image: a bigger size is an error, not an allocation
MAX_VIDEO_FRAMES = 1_000_000  # 9 hours at 30 fps (JAAD's clips: 60-600 frames)
_INT32 = 2 ** 31


def _shown(text, limit: int = 40) -> str:
    """A value from the file as a message quotes it: at most ``limit`` characters."""
    t = str(text)
    return repr(t) if len(t) <= limit else repr(t[:limit]) + f"... ({len(t)} characters)"


def _int(text, what: str, video_id: str, path: Path, lo: int = -_INT32, hi: int = _INT32 - 1) -> int:
    """A whole number in [lo, hi] from the file: '0.7', 'inf', 'nan', '1e12' for a frame index, or text, are
    refused naming the field (never truncated, never a bare Python error)."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise SourceError(f"{video_id}: {what} is not a number ({_shown(text)})", scene=video_id,
                          file=str(path)) from None
    if not math.isfinite(v) or v != int(v):
        raise SourceError(f"{video_id}: {what} is not a whole number ({_shown(text)})", scene=video_id,
                          file=str(path))
    if not lo <= v <= hi:
        raise SourceError(f"{video_id}: {what} {_shown(text)} is outside [{lo}, {hi}]", scene=video_id, file=str(path))
    return int(v)


def _read_annotations(root, video_id: str, cfg: JaadReading) -> tuple[dict, dict[str, list]]:
    path = annotation_path(root, video_id)
    xml = _parse(path, video_id)
    task = xml.find("meta/task")
    if task is None or task.find("original_size/width") is None:
        raise SourceError(f"{video_id}: no meta/task/original_size in the annotation", scene=video_id, file=str(path))
    width = _int(task.findtext("original_size/width"), "image width", video_id, path, 1, MAX_IMAGE_SIDE_PX)
    height = _int(task.findtext("original_size/height"), "image height", video_id, path, 1, MAX_IMAGE_SIDE_PX)
    num_frames = _int(task.findtext("size"), "number of frames", video_id, path, 1, MAX_VIDEO_FRAMES)
    if width <= 0 or height <= 0 or num_frames <= 0:
        raise SourceError(f"{video_id}: image size {width}x{height}, {num_frames} frames", scene=video_id,
                          file=str(path))
    va = task.find("video_attributes")
    meta = {"video_id": video_id, "width_px": width, "height_px": height, "num_frames": num_frames,
            "time_of_day": va.findtext("time_of_day") if va is not None else None,
            "weather": va.findtext("weather") if va is not None else None,
            "location": va.findtext("location") if va is not None else None}
    cols: dict[str, list] = {n: [] for n in BOXES_SCHEMA.names}
    tol = cfg.box_outside_tolerance_px
    seen: set[str] = set()
    for track in xml.iter("track"):
        label = track.get("label")
        if label not in JAAD_TRACK_LABELS:
            raise SourceError(f"{video_id}: track label {str(label)[:40]!r} is not one of {JAAD_TRACK_LABELS}",
                              scene=video_id, file=str(path))
        frames, pid = [], None
        for box in track.iter("box"):
            if box.get("outside") == "1":  # CVAT: the object is out of view in this frame
                continue
            attrs = {a.get("name"): a.text for a in box.iter("attribute")}
            pid = pid or attrs.get("id")
            if not pid:
                raise SourceError(f"{video_id}: a {label} track without an id", scene=video_id, file=str(path))
            if len(pid) > 200:
                raise SourceError(f"{video_id}: a {label} track's id is {len(pid)} characters long "
                                  f"({_shown(pid)})", scene=video_id, file=str(path))
            frame = _int(box.get("frame"), f"frame of {pid}", video_id, path)
            try:
                x1, y1, x2, y2 = (float(box.get(k)) for k in ("xtl", "ytl", "xbr", "ybr"))
            except (TypeError, ValueError):
                raise SourceError(f"{video_id}: {pid} frame {frame}: box coordinates missing or not numbers",
                                  scene=video_id, file=str(path)) from None
            if not (all(map(math.isfinite, (x1, y1, x2, y2))) and x1 < x2 and y1 < y2
                    and x1 >= -tol and y1 >= -tol and x2 <= width + tol and y2 <= height + tol):
                raise SourceError(f"{video_id}: {pid} frame {frame}: box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) outside "
                                  f"the {width}x{height} image or empty", scene=video_id, file=str(path))
            if not 0 <= frame < num_frames:
                raise SourceError(f"{video_id}: {pid} frame {frame} outside the video's {num_frames} frames",
                                  scene=video_id, file=str(path))
            frames.append(frame)
            cols["video_id"].append(video_id)
            cols["ped_id"].append(pid)
            cols["label"].append(label)
            cols["frame"].append(frame)
            cols["x1_px"].append(x1)
            cols["y1_px"].append(y1)
            cols["x2_px"].append(x2)
            cols["y2_px"].append(y2)
            occluded = box.get("occluded")
            if occluded not in (None, "0", "1"):  # CVAT's flag
                raise SourceError(f"{video_id}: {pid} frame {frame}: occluded is {_shown(occluded)}, not 0 or 1",
                                  scene=video_id, file=str(path))
            cols["occluded"].append(occluded == "1")
            for t in BEHAVIOUR_TAGS:
                v = attrs.get(t)
                if v is not None and v not in JAAD_BEHAVIOUR_VALUES[t]:
                    raise SourceError(f"{video_id}: {pid} frame {frame}: {t} is {_shown(v)}, not one of "
                                      f"{JAAD_BEHAVIOUR_VALUES[t]} (JAAD's coding)", scene=video_id, file=str(path))
                cols[t].append(v)
        if not frames:
            continue
        if pid in seen:
            raise SourceError(f"{video_id}: pedestrian {pid} has two tracks", scene=video_id, file=str(path))
        seen.add(pid)
        f = np.asarray(frames)
        d = np.diff(f)
        if (d <= 0).any():
            raise SourceError(f"{video_id}: {pid}: frames repeat or go backwards", scene=video_id, file=str(path))
        if (d > 1).any() and cfg.track_gap == "error":
            i = int(np.argmax(d > 1))
            raise SourceError(f"{video_id}: {pid}: track has a gap: frames {int(f[i]) + 1}-{int(f[i + 1]) - 1} "
                              f"missing", scene=video_id, file=str(path))
    return meta, cols


# JAAD's coding of the attributes (its data interface, jaad_data.py): crossing 1 crossing, 0 not, -1 irrelevant;
# crossing_point / decision_point a frame of the video, -1 for none
_CROSSING_CODES = (-1, 0, 1)


def _read_attributes(root, video_id: str, num_frames: int) -> dict[str, list]:
    path = annotation_path(root, video_id, "annotations_attributes")
    xml = _parse(path, video_id)
    cols: dict[str, list] = {n: [] for n in PEDESTRIANS_SCHEMA.names}
    seen: set = set()
    for p in xml.iter("pedestrian"):
        pid = p.get("id")
        if pid in seen:
            raise SourceError(f"{video_id}: pedestrian {_shown(pid)} is listed twice", scene=video_id, file=str(path))
        seen.add(pid)
        cols["video_id"].append(video_id)
        cols["ped_id"].append(pid)
        cols["old_id"].append(p.get("old_id"))
        for a in PED_ATTRIBUTES_INT:
            v = p.get(a)
            what = f"{_shown(pid)} {a}"
            if v is None:
                cols[a].append(None)
            elif a == "crossing":
                c = _int(v, what, video_id, path)
                if c not in _CROSSING_CODES:
                    raise SourceError(f"{video_id}: {what} is {c}, not one of {_CROSSING_CODES} (irrelevant, not "
                                      "crossing, crossing)", scene=video_id, file=str(path))
                cols[a].append(c)
            elif a in ("crossing_point", "decision_point"):
                cols[a].append(_int(v, f"{what} (a frame of the video's {num_frames}, or -1)", video_id, path, -1,
                                    num_frames - 1))
            else:
                cols[a].append(_int(v, what, video_id, path, 0))
        for a in PED_ATTRIBUTES_STR:
            cols[a].append(p.get(a))
    return cols


def _read_vehicle(root, video_id: str, num_frames: int) -> dict[str, list]:
    path = annotation_path(root, video_id, "annotations_vehicle")
    xml = _parse(path, video_id)
    frames, actions, seen = [], [], set()
    for f in xml.iter("frame"):
        a = f.get("action")
        if a not in JAAD_VEHICLE_ACTIONS:
            raise SourceError(f"{video_id}: vehicle action {str(a)[:40]!r} is not one of {JAAD_VEHICLE_ACTIONS}",
                              scene=video_id, file=str(path))
        frame = _int(f.get("id"), "vehicle frame id", video_id, path)
        if not 0 <= frame < num_frames:
            raise SourceError(f"{video_id}: vehicle frame {frame} outside the video's {num_frames} frames",
                              scene=video_id, file=str(path))
        if frame in seen:
            raise SourceError(f"{video_id}: vehicle frame {frame} is listed twice", scene=video_id, file=str(path))
        seen.add(frame)
        frames.append(frame)
        actions.append(a)
    return {"video_id": [video_id] * len(frames), "frame": frames, "action": actions}


def _read_traffic(root, video_id: str) -> tuple[str | None, dict[str, list]]:
    path = annotation_path(root, video_id, "annotations_traffic")
    cols: dict[str, list] = {n: [] for n in TRAFFIC_SCHEMA.names}
    if file_problem(path) == "missing":  # optional: not every JAAD copy has it (a FIFO is refused by _parse)
        return None, cols
    xml = _parse(path, video_id)
    for f in xml.iter("frame"):
        cols["video_id"].append(video_id)
        cols["frame"].append(_int(f.get("id"), "traffic frame id", video_id, path))
        for k in ("ped_crossing", "ped_sign", "stop_sign"):
            v = f.get(k)
            cols[k].append(None if v in (None, "n/a") else _int(v, k, video_id, path))
        cols["traffic_light"].append(f.get("traffic_light"))
    return xml.findtext("road_type"), cols


def read_video(root: str | os.PathLike, video_id: str, cfg: JaadReading | None = None,
               splits: dict[str, str] | None = None, require_clip: bool = False) -> dict[str, pa.Table]:
    """One video's tables ({videos, boxes, pedestrians, vehicle, traffic}); raises ``SourceError`` naming the
    file and the video. ``splits``: ``read_splits``'s (None: the split is not looked up); ``require_clip``: its
    ``clips/<video>.mp4`` must exist too."""
    cfg = cfg or JaadReading()
    meta, boxes = _read_annotations(root, video_id, cfg)
    peds = _read_attributes(root, video_id, meta["num_frames"])
    vehicle = _read_vehicle(root, video_id, meta["num_frames"])
    road_type, traffic = _read_traffic(root, video_id)
    if require_clip and not clip_path(root, video_id).is_file():
        raise SourceError(f"{video_id}: missing video", scene=video_id, file=str(clip_path(root, video_id)))
    meta["road_type"] = road_type
    meta["split"] = (splits or {}).get(video_id)
    missing = missing_split_files(root, cfg.split_variant) if splits is not None and meta["split"] is None else []
    if missing:  # it may be listed in the missing file: a hashed split would put it in another one silently
        d = split_folder(root, cfg.split_variant)
        raise SourceError(f"{video_id}: listed in no split file of split_ids/{cfg.split_variant}/, and "
                          f"{' and '.join(missing)} of it {'is' if len(missing) == 1 else 'are'} missing: restore "
                          f"{'it' if len(missing) == 1 else 'them'} (JAAD's split lists train, val and test)",
                          scene=video_id, file=str(d / missing[0]))
    if (meta["split"] or "").startswith(SPLIT_CONFLICT):
        files = meta["split"].split(":", 1)[1]
        raise SourceError(f"{video_id}: listed in two splits ({files} of split_ids/)", scene=video_id,
                          file=str(Path(root) / "split_ids"))
    return {"videos": pa.Table.from_pylist([meta], schema=VIDEOS_SCHEMA),
            "boxes": pa.Table.from_pydict(boxes, schema=BOXES_SCHEMA),
            "pedestrians": pa.Table.from_pydict(peds, schema=PEDESTRIANS_SCHEMA),
            "vehicle": pa.Table.from_pydict(vehicle, schema=VEHICLE_SCHEMA),
            "traffic": pa.Table.from_pydict(traffic, schema=TRAFFIC_SCHEMA)}


_SCHEMAS = {"videos": VIDEOS_SCHEMA, "boxes": BOXES_SCHEMA, "pedestrians": PEDESTRIANS_SCHEMA,
            "vehicle": VEHICLE_SCHEMA, "traffic": TRAFFIC_SCHEMA}


def read_jaad(root: str | os.PathLike, cfg: JaadReading | None = None, video_ids: Sequence[str] | None = None,
              require_clips: bool = False) -> JaadTables:
    """Every video of a JAAD folder (or ``video_ids``). A video that cannot be used is left out and its
    ``SourceError`` listed in ``errors``; the others continue."""
    cfg = cfg or JaadReading()
    ids = list(video_ids) if video_ids is not None else list_videos(root)
    splits = read_splits(root, cfg.split_variant)
    parts: dict[str, list[pa.Table]] = {k: [] for k in _SCHEMAS}
    errors: list[SourceError] = []
    for vid in ids:
        try:
            tables = read_video(root, vid, cfg, splits, require_clip=require_clips)
        except SourceError as err:
            errors.append(err)
            continue
        for k, t in tables.items():
            parts[k].append(t)
    out = {k: pa.concat_tables(v) if v else _SCHEMAS[k].empty_table() for k, v in parts.items()}
    return JaadTables(root=str(root), errors=errors, **out)


class JaadSource(VideoSource):
    """A JAAD folder as the log source of ``drivegen run --source jaad``: one scene per annotated video
    (``video_XXXX``). Camera-only: no LiDAR, no poses, no 3D; its videos go through the camera stages
    (``generator.pipeline.video``), not the 3D ones, so ``load_scene`` refuses (``VideoSource``). ``root`` may be
    a URI (``s3://bucket/jaad``): the annotations are mirrored into the node cache when the source opens
    (``generator.sources.remote``), a clip when its video loads; errors and tables name the objects."""

    name = "jaad"

    def __init__(self, root: str | os.PathLike, limits=None):
        self.limits = limits or SourceLimitsConfig()
        self.remote = None
        if is_remote(root):  # the annotations are mirrored into the node cache now, a clip when its video loads
            self.remote = RemoteRoot(str(root), self.limits)
            files = self.remote.list()
            self._clips = {f for f in files if f.startswith("clips/")}
            self.remote.fetch_all(f for f in files if not f.startswith("clips/"))
            self.root = str(self.remote.mirror)
        else:
            self.root = str(Path(root).resolve())
        self._ids = list_videos(self.root)
        if not self._ids:
            raise SourceError(f"no annotations/video_*.xml in {self.shown(self.root)}: not a JAAD folder",
                              file=self.shown(str(Path(self.root) / "annotations")), stage="open")

    def shown(self, path: str | os.PathLike) -> str:
        """A path as the run's tables name it: the object's URI for a file of a folder on object storage."""
        return self.remote.uri_of(path) if self.remote is not None else str(path)

    def named(self, err: SourceError) -> SourceError:
        """``err`` naming the object instead of its cached copy (a folder on object storage)."""
        return self.remote.named(err) if self.remote is not None else err

    def scene_ids(self) -> list[str]:
        return list(self._ids)

    def load_video(self, video_id: str, cfg: JaadReading) -> dict[str, pa.Table]:
        """``read_video``'s tables of one video, its split from ``split_ids/<cfg.split_variant>``; raises
        ``SourceError`` naming the file and the video (``cfg.require_clips``: a missing clip too)."""
        try:
            tables = read_video(self.root, video_id, cfg, read_splits(self.root, cfg.split_variant))
            if cfg.require_clips and self.clip(video_id) is None:
                raise SourceError(f"{video_id}: missing video", scene=video_id, file=self.clip_location(video_id))
        except SourceError as err:
            raise self.named(err) from None
        return tables

    def annotation_files(self, video_id: str, cfg: JaadReading) -> dict[str, str]:
        """Its ``annotations_attributes`` XML and the split lists it was assigned from, as the tables name them."""
        return {"attributes": self.shown(annotation_path(self.root, video_id, "annotations_attributes")),
                "splits": self.shown(split_folder(self.root, cfg.split_variant))}

    def clip_location(self, video_id: str) -> str:
        """Where the video's clip is expected (path or URI), whether or not it is there."""
        return self.shown(clip_path(self.root, video_id))

    def clip(self, video_id: str) -> str | None:
        """The video's clip as a local file (fetched into the node cache from object storage, the cache then
        trimmed), or None when the folder has none."""
        p = clip_path(self.root, video_id)
        if self.remote is None:
            problem = file_problem(p)  # a FIFO would block OpenCV forever: named, never "no clip"
            if problem not in (None, "missing"):
                raise SourceError(f"{video_id}: the clip is {problem}: drivegen reads a regular file",
                                  scene=video_id, file=str(p))
            return str(p) if problem is None else None
        rel = f"clips/{video_id}.mp4"
        if rel not in self._clips:
            return None
        local = self.remote.local(rel)
        self.remote.cache.trim()
        return str(local)

    def describe(self) -> dict:
        return {"kind": self.name, "root": self.remote.uri if self.remote is not None else self.root,
                "limits": self.limits.model_dump(mode="json")}

    def drivable_map(self, scene_id: str) -> None:
        return None
