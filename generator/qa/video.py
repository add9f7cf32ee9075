"""QA of camera-only videos (``drivegen run --source jaad``): the ``pie`` family's questions asked of the
benchmark's own samples, rendered with the same templates (``generator/qa/templates/pie.yaml``) and stored in
the same QA schema as 3D runs.

* ``crossing``, per action sample: at the observation's last frame, will the pedestrian cross in front of the
  ego vehicle within the action horizon (``pie.tte_max_frames`` / ``pie.fps``, 3 s)? The sample's label: JAAD's
  ``crossing`` attribute, the event 1-3 s ahead (``generator.attributes.pie.build_samples``). Value 1/0.
* ``risk_region``, per risk sample: where its box centre will be ``pie.risk_horizon_frames`` later (or its last
  visible box), as the event-risk class and side. Value = the class.

Keyframes are the samples' last observed frames. ``Region [X]`` numbers every pedestrian box of that frame
(``pie`` tracks, and ``ped`` bystanders when ``pie.include_bystanders``) from the bottom of the image up (the
nearest first, as 3D runs number by distance), then by id. Each row is grounded in its pedestrian's annotated
box on that frame: camera ``front``, the extracted frame's path (null when the run extracted none), track id =
the pedestrian's index among the video's sorted ids, ``instance_tokens`` = its JAAD id. Template choice per row
is ``hash(seed, video, frame, family/type, track)`` as for 3D runs.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.qa.families.pie import CROSSING_PHRASES, NAME, TYPES, WHERE, YES_NO, _seconds, where_code
from generator.qa.fields import UNIT_TEXT
from generator.qa.generate import hash_fields, stable_hash, vocabulary
from generator.qa.render import FieldColumns, render
from generator.qa.templates import TemplateSet
from schemas.tables import QA
from schemas.vocab import VIDEO_CAMERA

CAMERA = VIDEO_CAMERA


def _regions(boxes: pa.Table, frames: np.ndarray, labels: list[str]) -> dict:
    """Per pedestrian box on ``frames``: frame, ped id, region number, xyxy (arrays)."""
    b = boxes.filter(pc.and_(pc.is_in(boxes.column("label"), pa.array(labels)),
                             pc.is_in(boxes.column("frame"), pa.array(frames.astype(np.int32)))))
    fr = b.column("frame").to_numpy().astype(np.int64)
    pid = b.column("ped_id").to_numpy(zero_copy_only=False).astype(str)
    xyxy = np.stack([b.column(c).to_numpy() for c in ("x1_px", "y1_px", "x2_px", "y2_px")], axis=1).astype(np.float64)
    order = np.lexsort((pid, -xyxy[:, 3], fr))  # per frame: lowest box bottom first (nearest), then id
    fr, pid, xyxy = fr[order], pid[order], xyxy[order]
    first = np.r_[0, np.flatnonzero(np.diff(fr)) + 1] if len(fr) else np.empty(0, np.int64)
    start = np.repeat(first, np.diff(np.r_[first, len(fr)]))
    return {"frame": fr, "ped": pid, "region": np.arange(len(fr)) - start, "xyxy": xyxy}


def video_qa(video_id: str, samples: pa.Table, boxes: pa.Table, cfg, templates: TemplateSet) -> pa.Table:
    """The QA rows (``schemas.tables.QA``) of one video's PIE samples (``schemas.tables.PIE_SAMPLES``) and its 2D
    boxes (``VIDEO_BOXES``). The keyframe's image is the one the sample names for its last frame (null when the
    run extracted none); the split is the samples' (JAAD's), else ``scene_split``'s."""
    from generator.qa.generate import scene_split

    pie = cfg.pie
    if samples.num_rows == 0:
        return QA.empty_table()
    split = next((s for s in samples.column("split").to_pylist() if s), None) or \
        scene_split([video_id], cfg.qa.val_fraction)[0]
    paths = samples.column("image_paths").combine_chunks()  # the last entry of each sample: its end frame
    last = _last(paths)
    task = samples.column("task").to_numpy(zero_copy_only=False)
    end = samples.column("end_frame").to_numpy().astype(np.int64)
    ped = samples.column("ped_id").to_numpy(zero_copy_only=False).astype(str)
    labels = ["pedestrian", "ped"] if pie.include_bystanders else ["pedestrian"]
    reg = _regions(boxes, np.unique(end), labels)
    peds = np.unique(reg["ped"])
    key = reg["frame"] * len(peds) + np.searchsorted(peds, reg["ped"])
    korder = np.argsort(key)
    want = end * len(peds) + np.searchsorted(peds, ped)
    pos = np.searchsorted(key[korder], want)
    hit = (pos < len(key)) & (key[korder][np.minimum(pos, len(key) - 1)] == want)
    row = korder[np.minimum(pos, len(key) - 1)]

    batches = []  # (question type, sample rows, value, text fields)
    horizon = vocabulary((_seconds(pie.tte_max_frames / pie.fps),), np.zeros(0, np.int64))[0]
    sel = np.flatnonzero((task == "action") & hit)
    if len(sel):
        yes = samples.column("crossing").to_numpy(zero_copy_only=False)[sel] == 1
        code = np.where(yes, 0, 1)
        batches.append((TYPES["crossing"], sel, yes.astype(float), {
            "horizon": (horizon, np.zeros(len(sel), np.int64)),
            "yes_no": vocabulary(YES_NO, code), "crossing_phrase": vocabulary(CROSSING_PHRASES, code)}))
    sel = np.flatnonzero((task == "risk") & hit)
    if len(sel):
        rc = samples.column("risk_class").to_numpy(zero_copy_only=False)[sel].astype(np.int64)
        right = samples.column("risk_region").to_numpy(zero_copy_only=False)[sel] >= pie.risk_regions // 2
        r_h = vocabulary((_seconds(pie.risk_horizon_frames / pie.fps),), np.zeros(0, np.int64))[0]
        batches.append((TYPES["risk_region"], sel, rc.astype(float), {
            "horizon": (r_h, np.zeros(len(sel), np.int64)), "where_phrase": vocabulary(WHERE, where_code(rc, right))}))
    if not batches:
        return QA.empty_table()

    parts = []
    scene_hash = np.uint64(stable_hash(video_id))
    for bi, (qt, sel, value, text) in enumerate(batches):
        n = len(sel)
        r = row[sel]
        track = np.searchsorted(peds, ped[sel]).astype(np.int64)
        text = {"region": (pa.array([f"Region [{k}]" for k in range(int(reg["region"].max()) + 1)], pa.string()),
                           reg["region"][r]),
                "class_name": vocabulary(("pedestrian",), np.zeros(n, np.int64)), **text}
        variants = templates.variants(NAME, qt.name)
        h = hash_fields(cfg.qa.seed, np.full(n, scene_hash), end[sel], np.full(n, stable_hash(f"{NAME}/{qt.name}"),
                        np.uint64), track, np.full(n, -1), np.full(n, -1))
        var = (h % np.uint64(len(variants))).astype(np.int64)
        order = np.argsort(var, kind="stable")
        cols = FieldColumns(qt, {k: (v[0], v[1][order]) for k, v in text.items()}, {}, cfg.qa.decimals)
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
        ids = np.array([variants[v].id for v in var], dtype=object)
        parts.append({"sel": sel, "bi": np.full(n, bi), "region": reg["region"][r], "track": track,
                      "value": value, "qt": qt, "tpl": ids,
                      "q": pa.chunked_array(q_parts, pa.string()).take(pa.array(back)),
                      "a": pa.chunked_array(a_parts, pa.string()).take(pa.array(back)),
                      "xyxy": reg["xyxy"][r]})
    return _table(video_id, split, parts, end, ped, pie.fps, last)


def _last(lists: pa.ListArray) -> pa.Array:
    """The last element of every list (null for a null or empty list)."""
    offsets = lists.offsets.to_numpy()
    ok = (offsets[1:] > offsets[:-1]) & lists.is_valid().to_numpy(zero_copy_only=False)
    idx = np.where(ok, offsets[1:] - 1, 0)
    values = lists.values if len(lists.values) else pa.nulls(1, lists.type.value_type)
    return pc.if_else(pa.array(ok), values.take(pa.array(idx)), pa.scalar(None, lists.type.value_type))


def _table(video_id, split, parts, end, ped, fps, image_of_sample: pa.Array) -> pa.Table:
    sel = np.concatenate([p["sel"] for p in parts])
    bi = np.concatenate([p["bi"] for p in parts])
    region = np.concatenate([p["region"] for p in parts])
    order = np.lexsort((region, bi, end[sel]))  # keyframe, question type, region
    cat = {k: np.concatenate([p[k] for p in parts])[order] for k in ("track", "value", "tpl", "region", "xyxy")}
    sel, bi = sel[order], bi[order]
    qts = [p["qt"] for p in parts]
    q = pa.chunked_array([p["q"] for p in parts]).combine_chunks().take(pa.array(order))
    a = pa.chunked_array([p["a"] for p in parts]).combine_chunks().take(pa.array(order))
    n = len(sel)
    frame = end[sel]
    ts = np.round(frame / fps * 1e6).astype(np.int64)
    paths = image_of_sample.take(pa.array(sel))
    one = pa.array(np.arange(n + 1, dtype=np.int32))
    grounding = pa.StructArray.from_arrays([
        pa.array(["current"] * n).dictionary_encode(), pa.array(frame.astype(np.int32)), pa.array(ts),
        pa.array([CAMERA] * n).dictionary_encode(), paths.dictionary_encode(), pa.array(cat["track"]),
        pa.array(cat["region"].astype(np.int32)),
        pa.FixedSizeListArray.from_arrays(pa.array(cat["xyxy"].reshape(-1)), 4),
        pa.nulls(n, QA.field("grounding").type.value_type.field("mask_rle").type)],
        fields=list(QA.field("grounding").type.value_type))
    qt_of = [qts[b] for b in bi]
    table = pa.table({
        "qa_id": pa.array([f"{video_id}:{f}:{NAME}:{qt.name}:{t}" for f, qt, t in zip(frame, qt_of, cat["track"])]),
        "scene_id": pa.array([video_id] * n), "split": pa.array([split] * n),
        "keyframe_index": pa.array(frame.astype(np.int32)), "timestamp_us": pa.array(ts),
        "family": pa.array([NAME] * n), "kind": pa.array([qt.kind for qt in qt_of]),
        "question_type": pa.array([qt.name for qt in qt_of]), "template_id": pa.array(list(cat["tpl"]), pa.string()),
        "question": q, "answer": a, "value": pa.array(cat["value"], pa.float64()),
        "unit": pa.array([UNIT_TEXT.get(qt.unit, qt.unit) for qt in qt_of], pa.string()),
        "horizon_s": pa.nulls(n, pa.float64()),
        "region_ids": pa.ListArray.from_arrays(one, pa.array(cat["region"].astype(np.int32))),
        "track_ids": pa.ListArray.from_arrays(one, pa.array(cat["track"])),
        "instance_tokens": pa.ListArray.from_arrays(one, pa.array(ped[sel]).dictionary_encode()),
        "class_names": pa.ListArray.from_arrays(one, pa.array(["pedestrian"] * n)),
        "out_of_view": pa.nulls(n, pa.bool_()),
        "grounding": pa.ListArray.from_arrays(one, grounding),
    })
    return table.cast(QA)


__all__ = ["video_qa", "CAMERA"]
