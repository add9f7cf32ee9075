"""Writer throughput: QA Parquet shards, the dataset card's streaming statistics, WebDataset shards.

Builds a QA table of ``--rows`` rows (three families, groundings of 1-7 entries with box-shaped COCO RLE
masks of realistic length, 25 keyframes x 12 objects per scene), then times

1. ``write_qa_shards`` per scene (size-bounded, atomic) against a bare ``pyarrow.parquet.write_table`` of
   the same rows,
2. ``compute_stats`` (dataset card) streaming over the shards,
3. ``write_wds_shards`` for one scene (one sample per keyframe, 320x180 JPEGs).

    python bench/writers.py [--rows 400000] [--keep DIR]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from generator.writers.card import compute_stats  # noqa: E402
from generator.writers.parquet import write_qa_shards  # noqa: E402
from generator.writers.wds import write_wds_shards  # noqa: E402
from schemas.config import WriterConfig  # noqa: E402
from schemas.tables import QA  # noqa: E402


def _rle(rng, h=180, w=320):
    from pycocotools import mask as mu

    m = np.zeros((h, w), np.uint8, order="F")
    x, y = rng.integers(0, w - 40), rng.integers(0, h - 30)
    m[y:y + rng.integers(5, 30), x:x + rng.integers(5, 40)] = 1
    r = mu.encode(m)
    return {"size": [h, w], "counts": r["counts"].decode()}


def base_rows(scene: str, img_dir: Path, rng, n_kf=25, n_obj=12) -> list[dict]:
    import cv2

    img_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    fams = [("object_spatial", "distance", "m"), ("ego_spatial", "bearing", "degrees"),
            ("ego_spatial", "height", "m"), ("ego_spatiotemporal", "target_speed", "m/s")]
    for kf in range(n_kf):
        frame = 4 + kf
        for cam_frame in range(frame - 3, frame + 7):
            p = img_dir / f"{scene}_{cam_frame}.jpg"
            if not p.exists():
                cv2.imwrite(str(p), rng.integers(0, 255, (180, 320, 3), dtype=np.uint8))
        for o in range(n_obj):
            for fam, qt, unit in fams:
                roles = [("current", 0)] if fam != "ego_spatiotemporal" else \
                    [("context", -3), ("context", -2), ("context", -1), ("current", 0), ("future", 2), ("future", 4),
                     ("future", 6)]
                g = [{"role": r, "frame_index": frame + d, "timestamp_us": (frame + d) * 500_000, "camera": "CAM_FRONT",
                      "image_path": str(img_dir / f"{scene}_{frame + d}.jpg"), "track_id": o, "region_id": o,
                      "box_xyxy": [1.0, 2.0, 30.0, 40.0], "mask_rle": _rle(rng)} for r, d in roles]
                rows.append({"qa_id": f"{scene}:{kf}:{fam}:{qt}:{o}", "scene_id": scene, "split": "train",
                             "keyframe_index": frame, "timestamp_us": frame * 500_000, "family": fam,
                             "kind": "quantitative", "question_type": qt, "template_id": "t",
                             "question": f"What is the {qt} of Region [{o}] as seen from the ego vehicle?",
                             "answer": f"It is {rng.uniform(0, 50):.2f} {unit}.", "value": float(rng.uniform(0, 50)),
                             "unit": unit, "horizon_s": 1.0, "region_ids": [o], "track_ids": [o],
                             "class_names": ["car"], "out_of_view": False, "grounding": g})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--keep", default=None)
    args = ap.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="drivegen-bench-writers-"))
    rng = np.random.default_rng(0)
    scene_rows = base_rows("scene-0000", root / "img", rng)
    proto = pa.Table.from_pylist(scene_rows, schema=QA)
    n_scenes = max(1, args.rows // proto.num_rows)
    tables = [proto.set_column(1, "scene_id", pa.array([f"scene-{s:04d}"] * proto.num_rows))
              for s in range(n_scenes)]
    total = sum(t.num_rows for t in tables)
    print(f"{total} QA rows, {n_scenes} scenes, {proto.nbytes / proto.num_rows:.0f} B/row in memory")

    run = root / "run"
    cfg = WriterConfig()
    t0 = time.perf_counter()
    for t in tables:
        write_qa_shards(t, run, t.column("scene_id")[0].as_py(), cfg)
    dt_w = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in (run / "qa").glob("*.parquet"))
    bare = root / "bare"
    bare.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    for i, t in enumerate(tables):
        pq.write_table(t, bare / f"{i}.parquet", compression=cfg.compression)
    dt_b = time.perf_counter() - t0
    print(f"write_qa_shards: {total / dt_w / 1e3:.0f} k rows/s, {size / dt_w / 2**20:.1f} MiB/s on disk "
          f"({size / 2**20:.1f} MiB); bare pyarrow write: {total / dt_b / 1e3:.0f} k rows/s -> "
          f"{dt_w / dt_b:.2f}x")

    t0 = time.perf_counter()
    stats = compute_stats(run / "qa")
    dt = time.perf_counter() - t0
    assert stats["num_qa"] == total
    print(f"card statistics (streamed): {total / dt / 1e3:.0f} k rows/s")

    one = tables[0]
    t0 = time.perf_counter()
    paths = write_wds_shards(one, run, "scene-0000", cfg)
    dt = time.perf_counter() - t0
    kfs = len(pc.unique(one.column("keyframe_index")))
    wsize = sum(p.stat().st_size for p in paths)
    print(f"write_wds_shards: {kfs / dt:.1f} keyframe samples/s, {one.num_rows / dt / 1e3:.1f} k QA/s, "
          f"{wsize / dt / 2**20:.1f} MiB/s")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("writers"):
        sys.exit(main())
