"""Small valid tables for the writer tests: QA rows with groundings (real pycocotools RLE masks),
attributes, frames and projections for a tiny run folder. Built from seeded random numbers, never
from expected outputs."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from pycocotools import mask as mask_utils

from schemas.tables import QA

FAMILIES = ("object_spatial", "ego_spatial", "ego_spatiotemporal")
CLASSES = ("car", "pedestrian", "truck", "bicycle")
CAMERAS = ("CAM_FRONT", "CAM_FRONT_LEFT")
QUESTION_TYPES = ("distance", "bearing", "speed", "height", "distance_future")
QUANTITY = {"distance": (1.0, 120.0, "m"), "bearing": (-180.0, 180.0, "deg"), "speed": (0.0, 35.0, "m/s"),
            "height": (0.5, 4.0, "m"), "distance_future": (0.5, 60.0, "m")}


def rle_of_box(box_xyxy, height: int = 90, width: int = 160) -> dict:
    """COCO RLE (string counts) of a filled box, as pycocotools encodes it."""
    m = np.zeros((height, width), dtype=np.uint8, order="F")
    x1, y1, x2, y2 = (int(round(v)) for v in box_xyxy)
    m[max(0, y1):min(height, y2), max(0, x1):min(width, x2)] = 1
    r = mask_utils.encode(np.asfortranarray(m))
    return {"size": [int(r["size"][0]), int(r["size"][1])], "counts": r["counts"].decode("ascii")}


def make_qa_rows(scene_id: str, n: int, seed: int = 0, num_keyframes: int = 4, pad_question: int = 0,
                 split: str | None = None) -> list[dict]:
    """``n`` QA rows of one scene; the scene is in one split as the generator assigns them
    (``generator.qa.scene_split``, half the scenes in 'val' here) unless ``split`` says which."""
    from generator.qa import scene_split

    split = split or scene_split([scene_id], 0.5)[0]
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        fam = FAMILIES[i % 3]
        kf = int(rng.integers(0, num_keyframes)) * 4 + 4
        kind = "quantitative" if rng.random() < 0.6 else "qualitative"
        ntr = 2 if fam == "object_spatial" else 1
        tids = rng.choice(np.arange(10), size=ntr, replace=False).astype(int).tolist()
        grounding = []
        roles = ["current"] + (["context", "future"] if fam == "ego_spatiotemporal" else [])
        for role in roles:
            fi = kf + {"current": 0, "context": -2, "future": 2}[role]
            cam = CAMERAS[int(rng.integers(0, 2))]
            for r, t in enumerate(tids):
                x1, y1 = rng.uniform(0, 100), rng.uniform(0, 50)
                box = [x1, y1, x1 + rng.uniform(5, 50), y1 + rng.uniform(5, 35)]
                grounding.append({"role": role, "frame_index": fi, "timestamp_us": 1_000_000 + fi * 500_000,
                                  "camera": cam, "image_path": f"samples/{cam}/{scene_id}_{fi}.jpg",
                                  "track_id": t, "region_id": r, "box_xyxy": box, "mask_rle": rle_of_box(box)})
        qtype = QUESTION_TYPES[i % len(QUESTION_TYPES)]
        lo, hi, unit = QUANTITY[qtype]
        value = float(rng.uniform(lo, hi)) if kind == "quantitative" else None
        pad = "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz "), size=pad_question)) if pad_question else ""
        q = f"How far is Region [0] from the ego vehicle? {pad}"
        rows.append({
            "qa_id": f"{scene_id}-{i:06d}", "scene_id": scene_id, "split": split,
            "keyframe_index": kf, "timestamp_us": 1_000_000 + kf * 500_000, "family": fam, "kind": kind,
            "question_type": qtype, "template_id": f"t{i % 7}",
            "question": q, "answer": f"About {value:.2f} {unit}." if value is not None else "Yes.",
            "value": value, "unit": unit if value is not None else None,
            "horizon_s": float(i % 4) if fam == "ego_spatiotemporal" else None,
            "region_ids": list(range(ntr)), "track_ids": tids,
            "class_names": [CLASSES[t % len(CLASSES)] for t in tids],
            "out_of_view": bool(rng.random() < 0.1), "grounding": grounding,
        })
    return rows


def make_qa_table(scene_id: str = "scene-0001", n: int = 50, seed: int = 0, **kw) -> pa.Table:
    return pa.Table.from_pylist(make_qa_rows(scene_id, n, seed, **kw), schema=QA)


def write_images_for(table: pa.Table, root, height: int = 90, width: int = 160, seed: int = 0) -> dict:
    """Write a distinct JPEG for every grounding image_path of ``table`` under ``root``; returns
    {relative path: jpeg bytes}."""
    import cv2

    rng = np.random.default_rng(seed)
    out = {}
    for gl in table.column("grounding").to_pylist():
        for g in gl or []:
            rel = g["image_path"]
            if rel in out:
                continue
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            img = rng.integers(0, 255, size=(height, width, 3), dtype=np.uint8)
            assert cv2.imwrite(str(p), img)
            out[rel] = p.read_bytes()
    return out
