"""Camera-only runs (``drivegen run --source jaad``): what one JAAD-sized video costs in each stage.

    python bench/video.py [--seconds 10] [--pedestrians 6] [--width 1920]

Writes a synthetic JAAD folder (the annotation XMLs and one clip made with OpenCV at 30 fps: a textured street
panning left, pedestrians walking across it), runs it in this process (``executor='local'``, one core) and
prints each stage's seconds from the manifest: load (XMLs), video (samples, frame decoding at
``drama_x.image_intent.video_fps``, Farneback flows at ``video_max_width_px``, QA) and write (tables and the PNG
frames the samples observe), and per second of video. Also the same run without frame extraction
(``pie.extract_frames: false``), to separate the PNG writing.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import argparse  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def write_folder(root: Path, seconds: float, n_peds: int, width: int) -> str:
    """One JAAD video (XMLs and clip) under ``root``; returns its id."""
    import cv2

    vid, fps = "video_0001", 30
    n = int(round(seconds * fps))
    h = width * 9 // 16
    rng = np.random.default_rng(0)
    pan = max(1, width // 640)
    street = cv2.GaussianBlur(rng.integers(0, 255, (h, width + pan * n), dtype=np.uint8), (0, 0), 2.0)
    bw, bh = width // 48, h // 6
    person = cv2.GaussianBlur(rng.integers(0, 255, (bh, bw), dtype=np.uint8), (0, 0), 1.0)
    x0 = rng.uniform(0.1, 0.8, n_peds) * width
    speed = rng.uniform(-2, 2, n_peds) * pan
    y0 = int(h * 0.55)
    for d in ("annotations", "annotations_attributes", "annotations_vehicle", "clips"):
        (root / d).mkdir(parents=True, exist_ok=True)
    vw = cv2.VideoWriter(str(root / "clips" / f"{vid}.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, h))
    tracks = {k: [] for k in range(n_peds)}
    for f in range(n):
        img = street[:, pan * f:pan * f + width].copy()
        for k in range(n_peds):
            x = float(np.clip(x0[k] + speed[k] * f, bw, width - 2 * bw))
            img[y0:y0 + bh, int(x):int(x) + bw] = person
            tracks[k].append((f, x, y0, x + bw, y0 + bh))
        vw.write(cv2.cvtColor(img, cv2.COLOR_GRAY2BGR))
    vw.release()
    body = []
    for k, boxes in tracks.items():
        pid = f"0_1_{k}b"
        cross = "crossing" if k == 0 else "not-crossing"
        body.append('<track label="pedestrian">' + "".join(
            f'<box frame="{f}" keyframe="1" occluded="0" outside="0" xtl="{a:.1f}" ytl="{b}" xbr="{c:.1f}" ybr="{d}">'
            f'<attribute name="id">{pid}</attribute><attribute name="cross">{cross}</attribute></box>'
            for f, a, b, c, d in boxes) + "</track>")
    (root / "annotations" / f"{vid}.xml").write_text(
        f"<annotations><meta><task><size>{n}</size><original_size><width>{width}</width><height>{h}</height>"
        f"</original_size></task></meta>{''.join(body)}</annotations>")
    (root / "annotations_attributes" / f"{vid}_attributes.xml").write_text("<ped_attributes>" + "".join(
        f'<pedestrian id="0_1_{k}b" crossing="{1 if k == 0 else 0}" crossing_point="{n // 2 if k == 0 else -1}" '
        f'decision_point="-1" group_size="1" num_lanes="2" />' for k in range(n_peds)) + "</ped_attributes>")
    (root / "annotations_vehicle" / f"{vid}_vehicle.xml").write_text(
        "<vehicle_info>" + "".join(f'<frame action="moving_slow" id="{f}" />' for f in range(n)) + "</vehicle_info>")
    return vid


def run_once(data: Path, out: Path, extract: bool) -> dict:
    from generator.pipeline import run
    from generator.runfolder import RunReader
    from schemas.config import parse_config

    cfg = parse_config({"pie": {"extract_frames": extract}, "report": {"on_run": False}})
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    res = run(str(out), source="jaad", data=str(data), cfg=cfg, executor="local", progress=False)
    wall = time.perf_counter() - t0
    assert res.exit_code == 0, res.summary.errors
    m = RunReader(str(out)).manifests()[0]
    return {"wall": wall, **m["timings_s"], "counts": m["counts"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="video length (default 10 s, JAAD's typical)")
    ap.add_argument("--pedestrians", type=int, default=6)
    ap.add_argument("--width", type=int, default=1920, help="frame width (16:9; JAAD: 1920)")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="drivegen-video-bench-"))
    try:
        t0 = time.perf_counter()
        write_folder(work / "jaad", a.seconds, a.pedestrians, a.width)
        print(f"drivegen video bench: one {a.seconds:g} s {a.width}x{a.width * 9 // 16} clip at 30 fps, "
              f"{a.pedestrians} pedestrians (written in {time.perf_counter() - t0:.1f} s), one core")
        for extract in (True, False):
            r = run_once(work / "jaad", work / f"run-{extract}", extract)
            c = r["counts"]
            print(f"  frames extracted: {'yes' if extract else 'no '}  load {r['load']:.2f} s  video {r['video']:.2f} s "
                  f"({c.get('intent_frames', 0)} frames decoded for the flow, {c.get('image_intent', 0)} intent rows)"
                  f"  write {r['write']:.2f} s ({c.get('images', 0)} PNG frames)  -> "
                  f"{(r['load'] + r['video'] + r['write']) / a.seconds:.2f} s per second of video; QA {c.get('qa', 0)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("video"):
        sys.exit(main())
