"""QA of camera-only videos (``drivegen run --source jaad``): the registered families' questions asked of a
video's own labels (each family's ``video_qa`` hook gives ``VideoBatch`` es from the tables its
``derive_video`` made), rendered with the same templates into the same QA schema as 3D runs.

Keyframes are the batches' frames. ``Region [X]`` numbers every pedestrian and bystander box of a keyframe
(``schemas.vocab.VIDEO_REGION_LABELS``) from the bottom of the image up (the nearest first, as 3D runs number
by distance), then by id, one numbering for every family. A row about a pedestrian is grounded in its
annotated box on that frame, a row about the ego in the frame alone: camera ``front``, the frame the run
extracted (null when it extracted none), track id = the pedestrian's index among the video's sorted ids,
``instance_tokens`` = its JAAD id. Template choice per row is ``hash(seed, video, frame, family/type, track)``
as for 3D runs; the split is the video's own (JAAD's), else ``scene_split``'s.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import KeyIndex, codes
from generator.qa.fields import UNIT_TEXT, QuestionType
from generator.qa.generate import hash_fields, scene_split, stable_hash, vocabulary
from generator.qa.render import FieldColumns, render
from generator.qa.templates import TemplateSet
from schemas.tables import QA
from schemas.families import families
from schemas.vocab import VIDEO_CAMERA, VIDEO_REGION_LABELS

CAMERA = VIDEO_CAMERA


@dataclass
class VideoBatch:
    """Questions of one type about a camera-only video, from a family's ``video_qa`` hook: per row its
    keyframe, its target's JAAD id ('' = about the ego), its value and its text fields (field -> (vocabulary,
    codes), as ``generator.qa.generate.vocabulary`` makes them)."""

    qt: QuestionType
    frame: np.ndarray  # keyframe per row
    ped: np.ndarray  # target's JAAD id per row ('' = about the ego)
    value: np.ndarray
    text: dict  # field -> (vocabulary, codes)


def _regions(boxes: pa.Table, frames: np.ndarray) -> dict:
    """Per pedestrian box on ``frames``: frame, ped id, region number, xyxy (arrays; sorted by frame, region)."""
    b = boxes.filter(pc.and_(pc.is_in(boxes.column("label"), pa.array(VIDEO_REGION_LABELS)),
                             pc.is_in(boxes.column("frame"), pa.array(frames.astype(np.int32)))))
    fr = b.column("frame").to_numpy().astype(np.int64)
    pid = b.column("ped_id").to_numpy(zero_copy_only=False).astype(str)
    xyxy = np.stack([b.column(c).to_numpy() for c in ("x1_px", "y1_px", "x2_px", "y2_px")], axis=1).astype(np.float64)
    order = np.lexsort((pid, -xyxy[:, 3], fr))  # per frame: lowest box bottom first (nearest), then id
    fr, pid, xyxy = fr[order], pid[order], xyxy[order]
    first = np.r_[0, np.flatnonzero(np.diff(fr)) + 1] if len(fr) else np.empty(0, np.int64)
    start = np.repeat(first, np.diff(np.r_[first, len(fr)]))
    return {"frame": fr, "ped": pid, "region": np.arange(len(fr)) - start, "xyxy": xyxy}


def video_qa(video_id: str, derived: dict[str, pa.Table], boxes: pa.Table, cfg, templates: TemplateSet,
             split: str | None = None, images: dict[int, str] | None = None, fps: float = 30.0) -> pa.Table:
    """The QA rows (``schemas.tables.QA``) of one video from its families' tables (``derived``): every
    registered family's ``video_qa`` batches (``VideoBatch``) of the QA families ``cfg.qa.families`` selects,
    in family order. ``boxes`` (``VIDEO_BOXES``) number the regions; ``split``: the video's own (else
    ``scene_split``'s); ``images``: frame -> URI of the frames the run extracted (a row shows its keyframe's).
    """
    wanted = set(cfg.qa.families)
    batches = [b for fam in families().values() if wanted & set(fam.qa_names)
               for b in fam.video_qa(derived, cfg) if b.qt.family in wanted]
    batches = [b for b in batches if len(b.frame)]
    if not batches:
        return QA.empty_table()
    split = split or scene_split([video_id], cfg.qa.val_fraction)[0]
    keyframes = np.unique(np.concatenate([b.frame for b in batches]))
    reg = _regions(boxes, keyframes)
    peds = pa.array(np.unique(reg["ped"]), pa.string())  # a track id is the index among these
    span = int(keyframes.max()) + 1
    box_of = KeyIndex(codes(pa.array(reg["ped"], pa.string()), peds) * span + reg["frame"])
    regions_text = pa.array([f"Region [{k}]" for k in range(int(reg["region"].max(initial=0)) + 1)], pa.string())
    img_frames = np.array(sorted(images or {}), np.int64)
    img_paths = pa.array([images[f] for f in img_frames.tolist()], pa.string())
    img_of = KeyIndex(img_frames)
    scene_hash = np.uint64(stable_hash(video_id))
    parts = []
    for bi, b in enumerate(batches):
        about_ped = b.ped != ""
        t = codes(pa.array(b.ped, pa.string()), peds)
        hit = box_of.find(np.where(t >= 0, t * span + b.frame, -1))
        keep = (hit >= 0) | ~about_ped  # a row about a pedestrian needs its box on the keyframe
        row = hit[keep]
        frame, track = b.frame[keep], np.where(about_ped, t, -1)[keep]
        text = {k: (v[0], np.asarray(v[1])[keep]) for k, v in b.text.items()}
        n = len(frame)
        if n == 0:
            continue
        region = np.where(row >= 0, reg["region"][np.maximum(row, 0)], -1)
        if about_ped.any():
            text["region"] = (regions_text, np.maximum(region, 0))
            text["class_name"] = vocabulary(("pedestrian",), np.zeros(n, np.int64))
        variants = templates.variants(b.qt.family, b.qt.name)
        h = hash_fields(cfg.qa.seed, np.full(n, scene_hash), frame,
                        np.full(n, stable_hash(f"{b.qt.family}/{b.qt.name}"), np.uint64), track,
                        np.full(n, -1), np.full(n, -1))
        var = (h % np.uint64(len(variants))).astype(np.int64)
        order = np.argsort(var, kind="stable")
        used = {p.name for tpl in variants for p in tpl.question + tpl.answer if hasattr(p, "name")}
        cols = FieldColumns(b.qt, {k: (v[0], v[1][order]) for k, v in text.items() if k in used}, {},
                            cfg.qa.decimals)
        q_parts, a_parts, start = [], [], 0
        for k, tpl in enumerate(variants):
            cnt = int(np.sum(var == k))
            if cnt:
                q, a = render(tpl, cols.slice(start, cnt), cnt)
                q_parts.append(q)
                a_parts.append(a)
                start += cnt
        back = np.empty(n, np.int64)
        back[order] = np.arange(n)
        ip = img_of.find(frame)
        has_img = ip >= 0
        parts.append({"bi": np.full(n, bi), "frame": frame, "region": region, "track": track,
                      "value": b.value[keep], "qt": b.qt, "tpl": np.array([variants[v].id for v in var], dtype=object),
                      "q": pa.chunked_array(q_parts, pa.string()).take(pa.array(back)),
                      "a": pa.chunked_array(a_parts, pa.string()).take(pa.array(back)),
                      "xyxy": np.where((row >= 0)[:, None], reg["xyxy"][np.maximum(row, 0)], np.nan)
                      if len(reg["xyxy"]) else np.full((n, 4), np.nan),
                      "ped": np.where(row >= 0, reg["ped"][np.maximum(row, 0)], "") if len(reg["ped"])
                      else np.full(n, ""),
                      "image": pc.if_else(pa.array(has_img), img_paths.take(pa.array(np.where(has_img, ip, 0)))
                                          if len(img_paths) else pa.nulls(n, pa.string()),
                                          pa.scalar(None, pa.string()))})
    return _table(video_id, split, parts, fps) if parts else QA.empty_table()


def _table(video_id: str, split: str, parts: list[dict], fps: float) -> pa.Table:
    cat = {k: np.concatenate([p[k] for p in parts]) for k in ("bi", "frame", "region", "track", "value", "tpl",
                                                               "xyxy", "ped")}
    order = np.lexsort((cat["region"], cat["bi"], cat["frame"]))  # keyframe, family and type, region
    cat = {k: v[order] for k, v in cat.items()}
    take = pa.array(order)
    q = pa.chunked_array([p["q"] for p in parts]).combine_chunks().take(take)
    a = pa.chunked_array([p["a"] for p in parts]).combine_chunks().take(take)
    image = pa.chunked_array([p["image"] for p in parts], pa.string()).combine_chunks().take(take)
    qts = {int(p["bi"][0]): p["qt"] for p in parts}
    per_batch = [qts.get(b) for b in range(max(qts) + 1)]  # batch number -> question type (None: no rows)

    def of_batch(fn) -> pa.Array:
        return pa.array([fn(qt) if qt else None for qt in per_batch], pa.string()).take(pa.array(cat["bi"]))

    n = len(order)
    frame = cat["frame"]
    ts = np.round(frame / fps * 1e6).astype(np.int64)
    has = cat["track"] >= 0
    offs = pa.array(np.r_[0, np.cumsum(has)].astype(np.int32))
    gbox = pa.FixedSizeListArray.from_arrays(pa.array(cat["xyxy"].reshape(-1)), 4)
    grounding = pa.StructArray.from_arrays([
        pa.array(["current"] * n).dictionary_encode(), pa.array(frame.astype(np.int32)), pa.array(ts),
        pa.array([CAMERA] * n).dictionary_encode(), image.dictionary_encode(), pa.array(cat["track"]),
        pa.array(cat["region"].astype(np.int32)),
        pc.if_else(pa.array(has), gbox, pa.scalar(None, gbox.type)),
        pa.nulls(n, QA.field("grounding").type.value_type.field("mask_rle").type)],
        fields=list(QA.field("grounding").type.value_type))
    who = pc.if_else(pa.array(has), pc.cast(pa.array(cat["track"]), pa.string()), pa.scalar("ego"))
    frame_s = pc.cast(pa.array(frame), pa.string())
    qa_id = pc.binary_join_element_wise(pa.array([video_id] * n, pa.string()), frame_s,
                                        of_batch(lambda qt: qt.family), of_batch(lambda qt: qt.name), who, ":")
    table = pa.table({
        "qa_id": qa_id, "scene_id": pa.array([video_id] * n), "split": pa.array([split] * n),
        "keyframe_index": pa.array(frame.astype(np.int32)), "timestamp_us": pa.array(ts),
        "family": of_batch(lambda qt: qt.family), "kind": of_batch(lambda qt: qt.kind),
        "question_type": of_batch(lambda qt: qt.name), "template_id": pa.array(list(cat["tpl"]), pa.string()),
        "question": q, "answer": a, "value": pa.array(cat["value"], pa.float64()),
        "unit": of_batch(lambda qt: UNIT_TEXT.get(qt.unit, qt.unit)),
        "horizon_s": pa.nulls(n, pa.float64()),
        "region_ids": pa.ListArray.from_arrays(offs, pa.array(cat["region"][has].astype(np.int32), pa.int32())),
        "track_ids": pa.ListArray.from_arrays(offs, pa.array(cat["track"][has], pa.int64())),
        "instance_tokens": pa.ListArray.from_arrays(offs, pa.array(cat["ped"][has], pa.string()).dictionary_encode()),
        "class_names": pa.ListArray.from_arrays(offs, pa.array(["pedestrian"] * int(has.sum()), pa.string())),
        "out_of_view": pa.nulls(n, pa.bool_()),
        "grounding": pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), grounding),
    })
    return table.cast(QA)


__all__ = ["video_qa", "CAMERA"]
