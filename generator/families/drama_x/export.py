"""DRAMA-X-format export (``../shared/seeds/000_cca7d6292c5feb99.txt`` App. A.2): one JSON object per frame,
one file per scene.

Layout of an export folder::

    DIR/drama_x_export.json        marker: format, source run, counts, the files it wrote (written last)
    DIR/samples/<scene_id>.json    {"<scene_id>_<frame_index:04d>": sample, ...}

A sample (the paper's fields, plus the keys that tie it to the run)::

    {"scene_id": "scene-0001", "frame_index": 12, "timestamp_us": 1546300806000000,
     "image_path": "samples/CAM_FRONT/....jpg", "video_path": "", "camera": "CAM_FRONT",  # (1)
     "Risk": "Yes", "suggested_action": "yield",
     "Pedestrians": {"7": {"Box": [x1, y1, x2, y2], "Class": "pedestrian",
                           "Intent": ["goes to the left", "stationary"], "Position": "Front",
                           "Description": "A pedestrian ahead of the ego vehicle, 12 m away, ...",
                           "time_to_conflict_s": 1.5}},
     "Cyclists": {}}

(1) ``image_path`` is relative to the logs' root, which the marker names (``image_root``; 3D runs); a camera-only
run's samples name the extracted frame and ``video_path`` the clip.

A frame is exported when at least one VRU (pedestrian, bicycle, motorcycle) with an intent label is visible
in the front camera (DRAMA-X keeps only frames with valid VRU detections). ``Risk`` / ``suggested_action``
are the frame's (``generator.families.drama_x.attributes.frame_risk``: any object, vehicles included; the most severe
action); ``Box`` is the projected 3D box (``projections.box2d_proj_xyxy``) in pixels; ``Intent`` is the
3D-track intent of the labels table; ``Position`` Left / Front / Right from the bearing.

Descriptions are rendered with the QA sandboxed template language (``generator.qa.templates`` /
``generator.qa.render``) from ``DESCRIPTION_TEMPLATES``, whose fields are declared by ``DESCRIPTION_TYPE``.

This module does not import the run folder (layering): ``records_from_run`` takes any object with
``read_table(name)`` and ``config()`` (a ``generator.runfolder.RunReader``), ``write_export`` any store with
``list / exists / read_json / write_bytes / delete`` (a ``generator.runfolder.RunStore``).
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from generator.attributes.arrays import fixed_list_to_numpy
from generator.families.drama_x.attributes import frame_risk, image_position, relative_position, risk_table
from generator.qa.fields import Field, QuestionType
from generator.qa.render import FieldColumns, render_parts
from generator.qa.templates import parse_template_text
from generator.sources import front_camera_images
from generator.writers.owned import owned_files
from generator.families.drama_x.config import DramaXConfig
from schemas.config import EgoBodyConfig
from generator.families.drama_x.vocab import DRAMA_ACTION_A2_TEXT, DRAMA_ACTIONS, DRAMA_GROUPS, DRAMA_POSITIONS
from schemas.vocab import VIDEO_CAMERA, VRU_CLASSES

EXPORT_FORMAT = "drivegen-drama-x/1"
EXPORT_MARKER = "drama_x_export.json"
SAMPLES_DIR = "samples"
MERGED = "drama_x.json"  # every sample in one JSON object: the file DRAMA-X's public evaluation scripts read
GROUPS = ("Pedestrians", "Cyclists")

DESCRIPTION_TYPE = QuestionType(
    "drama_x", "description", "qualitative",
    (Field("class_text", "text", doc="'pedestrian' / 'cyclist' / 'motorcyclist'"),
     Field("where", "text", doc="'ahead of' / 'to the left of' / 'to the right of'"),
     Field("distance_m", "quantity", unit="m"),
     Field("going", "text", doc="the intent pair in words"),
     Field("why", "text", doc="why it matters: the conflict with the ego's path or its absence")),
    None, "text", doc="DRAMA-X motion description of one object")
DESCRIPTION_TEMPLATES = {
    "drama_x_description_0": "A {class_text} {where} the ego vehicle, {distance_m:.0f} away, {going}; {why}.",
}
# camera-only logs: no distance (no 3D), the rest alike
VIDEO_DESCRIPTION_TEMPLATES = {
    "drama_x_video_description_0": "A {class_text} {where} the ego vehicle, {going}; {why}.",
}
_CLASS_TEXT = {"pedestrian": "pedestrian", "bicycle": "cyclist", "motorcycle": "motorcyclist"}
_WHERE = ("to the left of", "ahead of", "to the right of")  # DRAMA_POSITIONS order
_LAT_TEXT = {"goes to the left": "going to the left", "goes to the right": "going to the right",
             "stationary": None}
_VER_TEXT = {"moves towards ego vehicle": "moving towards the ego vehicle",
             "moves away from ego vehicle": "moving away from the ego vehicle", "stationary": None}


def _parsed_templates(video: bool = False) -> list[tuple]:
    templates = VIDEO_DESCRIPTION_TEMPLATES if video else DESCRIPTION_TEMPLATES
    return [parse_template_text(text, DESCRIPTION_TYPE, file="generator/families/drama_x/export.py",
                                line_of=lambda pos: 1, tid=tid, role="answer")
            for tid, text in sorted(templates.items())]


def going_text(lateral: list[str], vertical: list[str]) -> list[str]:
    out = []
    for la, ve in zip(lateral, vertical):
        parts = [p for p in (_LAT_TEXT.get(la), _VER_TEXT.get(ve)) if p]
        out.append(" and ".join(parts) if parts else "standing still")
    return out


def why_text(risk: list[bool], ttc_s: list[float | None]) -> list[str]:
    return [f"its path enters the ego vehicle's path in {t:.1f} s" if r and t is not None
            else "it stays clear of the ego vehicle's path" for r, t in zip(risk, ttc_s)]


def describe(class_name: list[str], position: np.ndarray, distance_m: np.ndarray | None, lateral: list[str],
             vertical: list[str], risk: list[bool], ttc_s: list[float | None]) -> list[str]:
    """One motion description per object (class, where relative to the ego, where it is going, why it
    matters), rendered through the QA template language. ``position``: codes into DRAMA_POSITIONS;
    ``distance_m`` None: a camera-only log's (``VIDEO_DESCRIPTION_TEMPLATES``)."""
    n = len(class_name)
    if n == 0:
        return []
    cols = FieldColumns(DESCRIPTION_TYPE, {
        "class_text": pa.array([_CLASS_TEXT.get(c, c) for c in class_name], pa.string()),
        "where": (pa.array(_WHERE, pa.string()), np.asarray(position, np.int64)),
        "going": pa.array(going_text(lateral, vertical), pa.string()),
        "why": pa.array(why_text(risk, ttc_s), pa.string()),
    }, {} if distance_m is None else {"distance_m": np.asarray(distance_m, np.float64)}, 2)
    parts = _parsed_templates(video=distance_m is None)
    variant = np.arange(n) % len(parts)
    out = [None] * n
    for v, p in enumerate(parts):
        idx = np.nonzero(variant == v)[0]
        if len(idx) == 0:
            continue
        sub = cols if len(parts) == 1 else _subset(cols, idx)
        rendered = render_parts(p, sub, len(idx)).to_pylist()
        for i, s in zip(idx, rendered):
            out[i] = s
    return out


def _subset(cols: FieldColumns, idx: np.ndarray) -> FieldColumns:
    text = {k: (v[0], v[1][idx]) if isinstance(v, tuple) else v.take(pa.array(idx)) for k, v in cols.text.items()}
    return FieldColumns(cols.qt, text, {k: v[idx] for k, v in cols.quantities.items()}, cols.decimals)


def sample_id(scene_id: str, frame_index: int) -> str:
    return f"{scene_id}_{int(frame_index):04d}"


def _front_cameras(frames: pa.Table, preferred: str) -> dict[tuple[str, int], tuple[str, str, int, int]]:
    """(scene_id, frame_index) -> (front camera name, image path, width px, height px)
    (``sources.front_camera_images``)."""
    t = front_camera_images(frames, preferred)
    return {(s, f): (n, p or "", w, h) for s, f, n, p, w, h in zip(*(t.column(c).to_pylist() for c in (
        "scene_id", "frame_index", "name", "image_path", "width_px", "height_px")))}


def a2_filter(boxes: np.ndarray, width_px: np.ndarray, height_px: np.ndarray, cfg: DramaXConfig) -> np.ndarray:
    """(N,) which of the (N, 4) xyxy boxes pass App. A.2's filters (i) and (ii) in their images (N,) sizes:
    ``min_box_inside_share`` of the area inside the image, height and width at least ``min_box_height_share`` /
    ``min_box_width_share`` of the image's."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    w, h = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    iw = np.clip(np.minimum(b[:, 2], width_px) - np.maximum(b[:, 0], 0), 0, None)
    ih = np.clip(np.minimum(b[:, 3], height_px) - np.maximum(b[:, 1], 0), 0, None)
    inside = np.divide(iw * ih, w * h, out=np.zeros(len(b)), where=(w > 0) & (h > 0))
    return ((inside >= cfg.min_box_inside_share) & (h >= cfg.min_box_height_share * height_px)
            & (w >= cfg.min_box_width_share * width_px) & (w > 0) & (h > 0))


def build_records(frames: pa.Table, objects: pa.Table, projections: pa.Table, labels: pa.Table,
                  cfg: DramaXConfig | None = None, preferred_camera: str = "CAM_FRONT",
                  risk: pa.Table | None = None, body: EgoBodyConfig | None = None) -> dict[str, dict[str, dict]]:
    """{scene_id: {sample_id: sample}} from a run's tables (pure; see the module docstring); ``body``: the ego
    body (the config's ``ego``) risk is computed with."""
    cfg = cfg or DramaXConfig()
    risk = risk if risk is not None else risk_table(frames, objects, cfg, body)
    fr = {(s, f): (r, a) for s, f, r, a in zip(*(frame_risk(risk).column(c).to_pylist()
                                                 for c in ("scene_id", "frame_index", "risk", "suggested_action")))}
    obj_risk = {(s, f, t): (r, c) for s, f, t, r, c in zip(*(risk.column(c).to_pylist() for c in (
        "scene_id", "frame_index", "track_id", "risk", "time_to_conflict_s")))}
    front = _front_cameras(frames, preferred_camera)
    ts = dict(zip(zip(frames.column("scene_id").to_pylist(), frames.column("frame_index").to_pylist()),
                  frames.column("timestamp_us").to_pylist()))
    lab = labels.to_pydict() if labels is not None else {k: [] for k in ("subject",)}
    intent = {}
    for s, f, sub, t, cls, la, ve in zip(lab.get("scene_id", []), lab.get("frame_index", []), lab["subject"],
                                         lab.get("track_id", []), lab.get("class_name", []),
                                         lab.get("intent_lateral", []), lab.get("intent_vertical", [])):
        if sub == "agent" and cls in VRU_CLASSES and la is not None and ve is not None:
            intent[(s, f, t)] = (cls, la, ve)
    centers = fixed_list_to_numpy(objects.column("center_ego_m"), 3) if objects.num_rows else np.zeros((0, 3))
    where = {(s, f, t): i for i, (s, f, t) in enumerate(zip(objects.column("scene_id").to_pylist(),
                                                            objects.column("frame_index").to_pylist(),
                                                            objects.column("track_id").to_pylist()))}
    rows = []  # (scene, frame, track, camera, box)
    p = projections.to_pydict() if projections is not None else {}
    for s, f, t, cam, box, vis in zip(p.get("scene_id", []), p.get("frame_index", []), p.get("track_id", []),
                                      p.get("camera", []), p.get("box2d_proj_xyxy", []), p.get("visible", [])):
        key = (s, f, t)
        if vis and key in intent and key in where and front.get((s, f), (None,))[0] == cam and box is not None \
                and all(np.isfinite(box)):
            rows.append((key, box))
    rows.sort(key=lambda r: r[0])
    if not rows:
        return {}
    # App. A.2: boxes big enough and mostly inside the image, at most max_objects_per_class per class and frame
    size = np.array([front[(k[0], k[1])][2:] for k, _ in rows], dtype=np.float64)  # (N, 2) image width, height
    boxes = np.array([b for _, b in rows], dtype=np.float64)
    ok = a2_filter(boxes, size[:, 0], size[:, 1], cfg)
    kept: dict[tuple, int] = {}
    for i in np.argsort(-(boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]), kind="stable"):  # largest first
        (s, f, t), _ = rows[i]
        group = (s, f, DRAMA_GROUPS[intent[(s, f, t)][0]])
        ok[i] &= kept.get(group, 0) < cfg.max_objects_per_class
        kept[group] = kept.get(group, 0) + int(ok[i])
    rows, boxes, size = [r for r, keep in zip(rows, ok) if keep], boxes[ok], size[ok]
    if not rows:
        return {}
    idx = np.array([where[k] for k, _ in rows])
    xy = centers[idx, :2]
    if cfg.position_rule == "image_thirds":  # the box centre's x in its front image (the authors' annotation)
        pos = image_position((boxes[:, 0] + boxes[:, 2]) / 2, size[:, 0], cfg.image_front_share)
    else:
        pos = relative_position(xy[:, 0], xy[:, 1], cfg.front_position_deg)
    cls = [intent[k][0] for k, _ in rows]
    lat = [intent[k][1] for k, _ in rows]
    ver = [intent[k][2] for k, _ in rows]
    rk = [bool(obj_risk.get(k, (False, None))[0]) for k, _ in rows]
    ttc = [obj_risk.get(k, (False, None))[1] for k, _ in rows]
    desc = describe(cls, pos, np.hypot(xy[:, 0], xy[:, 1]), lat, ver, rk, ttc)
    out: dict[str, dict[str, dict]] = {}
    for j, ((s, f, t), box) in enumerate(rows):
        sid = sample_id(s, f)
        scene = out.setdefault(s, {})
        if sid not in scene:
            cam, img = front[(s, f)][:2]
            r, a = fr.get((s, f), (False, "continue"))
            scene[sid] = {"scene_id": s, "frame_index": int(f), "timestamp_us": int(ts[(s, f)]), "image_path": img,
                          "video_path": "", "camera": cam, "Risk": "Yes" if r else "No", "suggested_action": a,
                          **{g: {} for g in GROUPS}}
        scene[sid][DRAMA_GROUPS[cls[j]]][str(int(t))] = {
            "Box": [int(round(float(v))) for v in box],  # integer pixels, as App. A.2's
            "Class": cls[j], "Intent": [lat[j], ver[j]],
            "Position": DRAMA_POSITIONS[int(pos[j])], "Description": desc[j],
            "time_to_conflict_s": None if ttc[j] is None or not rk[j] else round(float(ttc[j]), 3)}
    return out


def records_from_run(reader, cfg: DramaXConfig | None = None) -> dict[str, dict[str, dict]]:
    """``build_records`` over a run folder (``reader``: a ``generator.runfolder.RunReader``), with the run's
    ``drama_risk`` table; ``cfg`` other than the run's own recomputes risk with it (as does a run folder
    written before that table existed)."""
    run_cfg = reader.config()
    if getattr(reader, "camera_only", False):
        # lazy: generator.pipeline.video loads pycocotools, scipy, which this module needs only here
        from generator.pipeline.video import video_media

        return build_video_records(reader.read_table("drama_video"),
                                   {vid: video_media(reader, vid) for vid in reader.scene_ids()})
    frames = reader.read_table("frames")
    objects = reader.read_table("objects")
    if frames is None or objects is None:
        return {}
    own = cfg is None or cfg == run_cfg.drama_x
    records = build_records(frames, objects, reader.read_table("projections"), reader.read_table("labels"),
                            cfg or run_cfg.drama_x, run_cfg.qa.front_camera,
                            risk=reader.read_table("drama_risk") if own else None, body=run_cfg.ego)
    return relative_image_paths(records, image_root(reader))


def image_root(reader) -> str:
    """The folder a 3D run's image paths are relative to in its export: the logs' root (``source.json``'s
    ``dataroot``; "" when the run records none)."""
    return str((reader.source() or {}).get("dataroot") or "")


def relative_image_paths(records: dict[str, dict[str, dict]], root: str) -> dict[str, dict[str, dict]]:
    """``records`` with each ``image_path`` under ``root`` made relative to it, as nuScenes names its files
    (``samples/CAM_FRONT/...jpg``; AV2: ``<log>/sensors/cameras/...``): the export does not depend on where a
    node cached the logs, and the marker's ``image_root`` says where they were. Paths elsewhere stay whole."""
    prefix = root.rstrip("/") + "/" if root else ""
    if not prefix:
        return records
    for scene in records.values():
        for smp in scene.values():
            if smp["image_path"].startswith(prefix):
                smp["image_path"] = smp["image_path"][len(prefix):]
    return records


def build_video_records(drama: pa.Table | None, media: dict[str, tuple[dict[int, str], str | None]]
                        ) -> dict[str, dict[str, dict]]:
    """{video: {sample_id: sample}} of a camera-only run (pure): one sample per sampled frame with a labelled
    pedestrian (``schemas.tables.DRAMA_VIDEO``: image intent, position, risk, action, all from the video
    stage); ``media``: per video, the frames the run extracted ({frame: URI}) and its clip
    (``generator.pipeline.video.video_media``). ``image_path`` is the frame's extracted image, if the run
    extracted it ("" otherwise), ``video_path`` the clip; objects are keyed by their JAAD ids; descriptions
    have no distance."""
    if drama is None or drama.num_rows == 0:
        return {}
    images = {(vid, f): uri for vid, (frames, _) in media.items() for f, uri in frames.items()}
    clips = {vid: clip for vid, (_, clip) in media.items() if clip}
    d = drama.sort_by([("scene_id", "ascending"), ("frame_index", "ascending"), ("ped_id", "ascending")])
    cols = {c: d.column(c).to_pylist() for c in ("scene_id", "frame_index", "t_s", "ped_id", "box_xyxy", "position",
                                                 "lateral_intent", "vertical_intent", "risk", "time_to_conflict_s",
                                                 "suggested_action")}
    pos = np.array([DRAMA_POSITIONS.index(p) for p in cols["position"]], np.int64)
    desc = describe(["pedestrian"] * d.num_rows, pos, None, cols["lateral_intent"], cols["vertical_intent"],
                    [bool(r) for r in cols["risk"]], cols["time_to_conflict_s"])
    severity = {a: i for i, a in enumerate(DRAMA_ACTIONS)}
    out: dict[str, dict[str, dict]] = {}
    for j, (s, f) in enumerate(zip(cols["scene_id"], cols["frame_index"])):
        sid = sample_id(s, f)
        scene = out.setdefault(s, {})
        if sid not in scene:
            scene[sid] = {"scene_id": s, "frame_index": int(f), "timestamp_us": int(round(cols["t_s"][j] * 1e6)),
                          "image_path": images.get((s, f), ""), "video_path": clips.get(s, ""),
                          "camera": VIDEO_CAMERA, "Risk": "No", "suggested_action": DRAMA_ACTIONS[0],
                          **{g: {} for g in GROUPS}}
        sample = scene[sid]
        if cols["risk"][j]:
            sample["Risk"] = "Yes"
        if severity[cols["suggested_action"][j]] > severity[sample["suggested_action"]]:
            sample["suggested_action"] = cols["suggested_action"][j]
        ttc = cols["time_to_conflict_s"][j]
        sample[DRAMA_GROUPS["pedestrian"]][cols["ped_id"][j]] = {
            "Box": [round(float(v), 2) for v in cols["box_xyxy"][j]], "Class": "pedestrian",
            "Intent": [cols["lateral_intent"][j], cols["vertical_intent"][j]], "Position": cols["position"][j],
            "Description": desc[j],
            "time_to_conflict_s": None if ttc is None or not cols["risk"][j] else round(float(ttc), 3)}
    return out


# ------------------------------------------------------------------------------------------------ files
def check_export_folder(store) -> list[str]:
    """Files an earlier export in ``store`` lists ([] for a new or empty folder); RunFolderError for a non-empty
    folder that is not a DRAMA-X export made by drivegen (``generator.writers.owned``)."""
    return owned_files(store, "", EXPORT_MARKER, EXPORT_FORMAT, what="a DRAMA-X export")


def write_export(store, records: dict[str, dict[str, dict]], source: str = "", image_root: str = "") -> dict:
    """Write ``records`` into ``store`` (each file atomically: ``RunStore.write_bytes``), the marker last;
    files of an earlier export that this one lacks are removed, nothing else. Returns the marker."""
    old = check_export_folder(store)
    files = []
    counts = {"samples": 0, "objects": 0, "risk_yes": 0}
    merged = []  # each scene's samples as JSON members, joined into MERGED without a second dict of them all
    for scene_id in sorted(records):
        rel = f"{SAMPLES_DIR}/{scene_id}.json"
        samples = {sid: {**smp, "suggested_action": DRAMA_ACTION_A2_TEXT.get(smp["suggested_action"],
                                                                         smp["suggested_action"])}
                   for sid, smp in records[scene_id].items()}  # App. A.2's strings
        store.write_bytes(rel, (json.dumps(samples, indent=1, sort_keys=False) + "\n").encode())
        files.append(rel)
        merged += [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in samples.items()]
        counts["samples"] += len(samples)
        counts["risk_yes"] += sum(s["Risk"] == "Yes" for s in samples.values())
        counts["objects"] += sum(len(s[g]) for s in samples.values() for g in GROUPS)
    store.write_bytes(MERGED, ("{\n" + ",\n".join(merged) + "\n}\n").encode())
    files.append(MERGED)
    marker = {"format": EXPORT_FORMAT, "source": source, "image_root": image_root, "scenes": sorted(records),
              **counts, "files": files, "merged": MERGED}
    store.write_bytes(EXPORT_MARKER, (json.dumps(marker, indent=2) + "\n").encode())
    for rel in sorted(set(old) - set(files) - {EXPORT_MARKER}):
        if store.exists(rel):
            store.delete(rel)
    return marker


def read_export(store) -> dict[str, dict] | None:
    """{sample_id: sample} of an export folder, or None when ``store`` holds no DRAMA-X export."""
    if not store.exists(EXPORT_MARKER):
        return None
    marker = store.read_json(EXPORT_MARKER)
    if not isinstance(marker, dict) or marker.get("format") != EXPORT_FORMAT:
        return None
    out = {}
    for rel in marker.get("files", []):
        if rel.startswith(f"{SAMPLES_DIR}/"):  # the per-scene files (MERGED holds them again)
            out.update(store.read_json(rel))
    return out
