"""How well anonymisation blurs faces and plates, measured on generated logs with exact truth.

The generated logs paint a face on the front of every pedestrian's head and a plate on the front and rear of
vehicles (``generator.synth.render.TEXTURES``). ``measure_scenes`` renders keyframes of scripted scenes the way
``generator.synth.writer`` writes them (same scenes, poses, rig, JPEG quality), with the truth label image of
the visible face and plate pixels, anonymises each image with the scene's ground-truth boxes in the ego frame
(what the ``labels`` detection backend gives) through ``generator.writers.anonymize.anonymize_image``, and
counts pixels:

* ``recall`` = true face (plate) pixels inside a blurred rectangle / true face (plate) pixels;
* ``false_share`` = blurred pixels outside every true face and plate / blurred pixels;
* ``blurred_image_share`` = blurred pixels / all pixels (what the false blurring costs a model);
* ``seconds_per_image``: time in ``anonymize_image`` (candidates, cascades, blur) per image.

Printed by ``python bench/anonymize.py``; thresholds in tests/writers/test_anonymize.py; what they mean in
docs/operations/anonymisation.md.
"""
from __future__ import annotations

import time

import cv2
import numpy as np

from generator.geometry import SE3
from generator.synth import rig
from generator.synth.render import TRUTH_FACE, TRUTH_PLATE, CameraRenderer
from generator.synth.roads import marking_quads
from generator.synth.world import TIME_GRID_S, script_scene
from generator.types import Boxes3D
from generator.writers.anonymize import anonymize_image, rect_mask
from schemas.config import AnonymizeConfig
from schemas.vocab import NUSCENES_CAMERAS


def _detection_class(category: str) -> str:
    # nuscenes-devkit: seconds to import (it pulls matplotlib); only to read or score nuScenes
    from nuscenes.eval.detection.utils import category_to_detection_name

    return category_to_detection_name(category) or "ignore"


def _yaw_se3(x, y, yaw):
    c, s = np.cos(yaw), np.sin(yaw)
    return SE3(np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]), np.array([x, y, 0.0]))


def measure_scenes(cfg: AnonymizeConfig | None = None, seed: int = 0, scenes: tuple[int, ...] = (0, 1),
                   times_s: tuple[float, ...] = (2.0, 6.0, 10.0, 14.0, 18.0), cameras=NUSCENES_CAMERAS,
                   width_px: int = 800, jpeg_quality: int = 90) -> dict:
    """Pixel counts and rates over the keyframes at ``times_s`` of scripted ``scenes`` (every camera in
    ``cameras``) at ``width_px`` x 9/16 (see the module docstring). Returns {"face": {...}, "plate": {...},
    "all": {...}, "images": n}."""
    cfg = cfg or AnonymizeConfig()
    cams = rig.camera_rig(width_px, width_px * 9 // 16)
    renderers = {n: CameraRenderer(cams[n], noise_seed=i) for i, n in enumerate(cams) if n in cameras}
    tot = {k: {"truth_px": 0, "hit_px": 0} for k in ("face", "plate")}
    blurred_px = outside_px = images = 0
    images_px = []
    spent = 0.0
    for index in scenes:
        sc = script_scene(seed, index)
        statics = [(s.center_m, s.size_lwh_m, s.yaw_rad, s.color_rgb, s.kind) for s in sc.statics]
        cls = np.array([_detection_class(t.category) for t in sc.tracks], dtype=object)
        size = np.array([[t.size_wlh_m[1], t.size_wlh_m[0], t.size_wlh_m[2]] for t in sc.tracks]).reshape(-1, 3)
        for t in times_s:
            interp = lambda v: np.interp(t, TIME_GRID_S, v)
            ex, ey, eyaw = interp(sc.ego.x), interp(sc.ego.y), interp(sc.ego.yaw)
            local_SE3_ego = _yaw_se3(ex, ey, eyaw)
            ax = np.array([interp(tr.x) for tr in sc.tracks])
            ay = np.array([interp(tr.y) for tr in sc.tracks])
            ayaw = np.array([interp(tr.yaw) for tr in sc.tracks])
            centers = np.column_stack([ax, ay, size[:, 2] / 2]) if len(ax) else np.zeros((0, 3))
            agents = [(centers[a], size[a], ayaw[a], tr.category) for a, tr in enumerate(sc.tracks)]
            boxes = Boxes3D(local_SE3_ego.inverse().transform_points(centers), size, ayaw - eyaw, cls)
            paint = marking_quads(np.array([ex, ey]), 62.0)
            for name, r in renderers.items():
                img, label = r.render(local_SE3_ego.compose(cams[name].ego_SE3_cam), statics, agents, paint, truth=True)
                ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality])
                img = cv2.imdecode(buf, cv2.IMREAD_COLOR)
                t0 = time.perf_counter()
                _, rects = anonymize_image(img, cams[name], boxes, cfg)
                spent += time.perf_counter() - t0
                blurred = rect_mask(rects, *label.shape)
                for kind, code in (("face", TRUTH_FACE), ("plate", TRUTH_PLATE)):
                    truth = label == code
                    tot[kind]["truth_px"] += int(truth.sum())
                    tot[kind]["hit_px"] += int((truth & blurred).sum())
                blurred_px += int(blurred.sum())
                outside_px += int((blurred & (label == 0)).sum())
                images += 1
                images_px.append(label.size)
    n_px = sum(images_px)
    out = {"images": images, "blurred_px": blurred_px, "false_px": outside_px,
           "false_share": outside_px / blurred_px if blurred_px else 0.0,
           "blurred_image_share": blurred_px / n_px if n_px else 0.0,
           "seconds_per_image": spent / images if images else 0.0}
    for kind, v in tot.items():
        out[kind] = {**v, "recall": v["hit_px"] / v["truth_px"] if v["truth_px"] else float("nan")}
    all_t = sum(v["truth_px"] for v in tot.values())
    out["recall"] = sum(v["hit_px"] for v in tot.values()) / all_t if all_t else float("nan")
    return out
