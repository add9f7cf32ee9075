"""QA of camera-only videos (``drivegen run --source jaad``): the ``pie`` and ``drama_x`` families' questions asked
of a video's own labels, rendered with the same templates (``generator/qa/templates/{pie,drama_x}.yaml``) into
the same QA schema as 3D runs.

* ``pie``, from the benchmark's samples (``schemas.tables.PIE_SAMPLES``), at each sample's last observed frame:
  ``crossing`` per action sample (JAAD's ``crossing``: the pedestrian crosses in front 1-3 s later; value 1/0)
  and ``risk_region`` per risk sample (the event-risk class and side ``pie.risk_horizon_frames`` later; value =
  the class).
* ``drama_x``, from ``schemas.tables.DRAMA_VIDEO`` at its sampled frames: ``intent`` and ``risk`` per labelled
  pedestrian, and ``action`` per frame about the ego (the most severe of its pedestrians' actions).

Keyframes are those frames. ``Region [X]`` numbers every pedestrian and bystander box of a keyframe
(``generator.attributes.drama.VIDEO_INTENT_LABELS``) from the bottom of the image up (the nearest first, as
3D runs number by distance), then by id, the same numbering for both families. A row about a pedestrian is
grounded in its annotated box on that frame, a row about the ego in the frame alone: camera ``front``, the
frame the run extracted (null when it extracted none), track id = the pedestrian's index among the video's
sorted ids, ``instance_tokens`` = its JAAD id. Template choice per row is ``hash(seed, video, frame,
family/type, track)`` as for 3D runs; the split is the samples' (JAAD's), else ``scene_split``'s.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import KeyIndex, codes
from generator.attributes.drama import VIDEO_INTENT_LABELS, frame_risk
from generator.qa.families import drama_x as dx
from generator.qa.families import pie
from generator.qa.fields import UNIT_TEXT, QuestionType
from generator.qa.generate import hash_fields, scene_split, stable_hash, vocabulary
from generator.qa.render import FieldColumns, render
from generator.qa.templates import TemplateSet
from schemas.tables import QA
from schemas.vocab import DRAMA_ACTIONS, INTENT_LATERAL, INTENT_VERTICAL, VIDEO_CAMERA

CAMERA = VIDEO_CAMERA


@dataclass
class _Batch:
    qt: QuestionType
    frame: np.ndarray  # keyframe per row
    ped: np.ndarray  # target's JAAD id per row ('' = about the ego)
    value: np.ndarray
    text: dict  # field -> (vocabulary, codes)


def _regions(boxes: pa.Table, frames: np.ndarray) -> dict:
    """Per pedestrian box on ``frames``: frame, ped id, region number, xyxy (arrays; sorted by frame, region)."""
    b = boxes.filter(pc.and_(pc.is_in(boxes.column("label"), pa.array(VIDEO_INTENT_LABELS)),
                             pc.is_in(boxes.column("frame"), pa.array(frames.astype(np.int32)))))
    fr = b.column("frame").to_numpy().astype(np.int64)
    pid = b.column("ped_id").to_numpy(zero_copy_only=False).astype(str)
    xyxy = np.stack([b.column(c).to_numpy() for c in ("x1_px", "y1_px", "x2_px", "y2_px")], axis=1).astype(np.float64)
    order = np.lexsort((pid, -xyxy[:, 3], fr))  # per frame: lowest box bottom first (nearest), then id
    fr, pid, xyxy = fr[order], pid[order], xyxy[order]
    first = np.r_[0, np.flatnonzero(np.diff(fr)) + 1] if len(fr) else np.empty(0, np.int64)
    start = np.repeat(first, np.diff(np.r_[first, len(fr)]))
    return {"frame": fr, "ped": pid, "region": np.arange(len(fr)) - start, "xyxy": xyxy}


def _frame_images(samples: pa.Table) -> tuple[np.ndarray, pa.Array]:
    """(frames, image paths) of the frames the samples name an image for, sorted by frame."""
    paths = samples.column("image_paths").combine_chunks()
    if samples.num_rows == 0 or paths.null_count == len(paths):
        return np.empty(0, np.int64), pa.array([], pa.string())
    frames = pc.list_flatten(samples.column("frames").combine_chunks().filter(paths.is_valid())).to_numpy()
    flat = pc.list_flatten(paths.filter(paths.is_valid()))
    uniq, first = np.unique(frames.astype(np.int64), return_index=True)
    return uniq, flat.take(pa.array(first))


def _pie_batches(samples: pa.Table, cfg) -> list[_Batch]:
    p = cfg.pie
    task = samples.column("task").to_numpy(zero_copy_only=False)
    end = samples.column("end_frame").to_numpy().astype(np.int64)
    ped = samples.column("ped_id").to_numpy(zero_copy_only=False).astype(str)
    out = []
    sel = np.flatnonzero(task == "action")
    if len(sel):
        yes = samples.column("crossing").to_numpy(zero_copy_only=False)[sel] == 1
        code = np.where(yes, 0, 1)
        out.append(_Batch(pie.TYPES["crossing"], end[sel], ped[sel], yes.astype(float), {
            "horizon": vocabulary((pie.seconds_text(p.tte_max_frames / p.fps),), np.zeros(len(sel), np.int64)),
            "yes_no": vocabulary(pie.YES_NO, code), "crossing_phrase": vocabulary(pie.CROSSING_PHRASES, code)}))
    sel = np.flatnonzero(task == "risk")
    if len(sel):
        rc = samples.column("risk_class").to_numpy(zero_copy_only=False)[sel].astype(np.int64)
        right = samples.column("risk_region").to_numpy(zero_copy_only=False)[sel] >= p.risk_regions // 2
        out.append(_Batch(pie.TYPES["risk_region"], end[sel], ped[sel], rc.astype(float), {
            "horizon": vocabulary((pie.seconds_text(p.risk_horizon_frames / p.fps),), np.zeros(len(sel), np.int64)),
            "where_phrase": vocabulary(pie.WHERE, pie.where_code(rc, right))}))
    return out


def _drama_batches(drama: pa.Table) -> list[_Batch]:
    fr = drama.column("frame_index").to_numpy().astype(np.int64)
    ped = drama.column("ped_id").to_numpy(zero_copy_only=False).astype(str)
    lat = pc.index_in(drama.column("lateral_intent"), pa.array(INTENT_LATERAL)).to_numpy(zero_copy_only=False)
    ver = pc.index_in(drama.column("vertical_intent"), pa.array(INTENT_VERTICAL)).to_numpy(zero_copy_only=False)
    pair = lat.astype(np.int64) * len(INTENT_VERTICAL) + ver.astype(np.int64)
    yes = drama.column("risk").to_numpy(zero_copy_only=False).astype(bool)
    code = np.where(yes, 0, 1)
    fa = frame_risk(drama.select(["scene_id", "frame_index", "risk", "suggested_action"]))
    act = pc.index_in(fa.column("suggested_action"), pa.array(DRAMA_ACTIONS)).to_numpy(zero_copy_only=False)
    return [
        _Batch(dx.TYPES["intent"], fr, ped, pair.astype(float), {
            "lateral": vocabulary(INTENT_LATERAL, lat), "vertical": vocabulary(INTENT_VERTICAL, ver),
            "intent_phrase": vocabulary(dx.intent_phrases(), pair)}),
        _Batch(dx.TYPES["risk"], fr, ped, yes.astype(float), {
            "yes_no": vocabulary(dx.YES_NO, code), "risk_phrase": vocabulary(dx.RISK_PHRASES, code)}),
        _Batch(dx.TYPES["action"], fa.column("frame_index").to_numpy().astype(np.int64),
               np.full(fa.num_rows, ""), act.astype(float), {"action": vocabulary(DRAMA_ACTIONS, act)}),
    ]


def video_qa(video_id: str, samples: pa.Table, boxes: pa.Table, cfg, templates: TemplateSet,
             drama: pa.Table | None = None) -> pa.Table:
    """The QA rows (``schemas.tables.QA``) of one video: ``pie`` from its PIE samples (``PIE_SAMPLES``) and
    ``drama_x`` from its ``DRAMA_VIDEO`` rows (None or empty: none), each when ``cfg.qa.families`` selects it;
    ``boxes`` (``VIDEO_BOXES``) number the regions."""
    batches = []
    if "pie" in cfg.qa.families and samples.num_rows:
        batches += _pie_batches(samples, cfg)
    if "drama_x" in cfg.qa.families and drama is not None and drama.num_rows:
        batches += _drama_batches(drama)
    batches = [b for b in batches if len(b.frame)]
    if not batches:
        return QA.empty_table()
    split = next((s for s in samples.column("split").to_pylist() if s), None) or \
        scene_split([video_id], cfg.qa.val_fraction)[0]
    keyframes = np.unique(np.concatenate([b.frame for b in batches]))
    reg = _regions(boxes, keyframes)
    peds = pa.array(np.unique(reg["ped"]), pa.string())  # a track id is the index among these
    span = int(keyframes.max()) + 1
    box_of = KeyIndex(codes(pa.array(reg["ped"], pa.string()), peds) * span + reg["frame"])
    regions_text = pa.array([f"Region [{k}]" for k in range(int(reg["region"].max(initial=0)) + 1)], pa.string())
    img_frames, img_paths = _frame_images(samples)
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
    return _table(video_id, split, parts, cfg.pie.fps) if parts else QA.empty_table()


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
