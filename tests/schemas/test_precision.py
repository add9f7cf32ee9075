"""Reduced precision (``Precision``: ``detection.mmdet3d.precision``, ``segmentation.sam2.precision``): bfloat16
autocast gives the boxes and masks float32 gives, within stated tolerances, on the CPU with random weights.

On a GPU ``auto`` runs bfloat16; the CPU's autocast runs the same type, so the comparison runs here. Random
weights are the hard case: CenterPoint's heatmaps sit at 0.50-0.55 for every candidate and SAM's logits near
zero, so a rounding flips more than it would with trained weights. Each test also shows its check can fail:
the same comparison against a second model with other random weights falls outside the tolerance."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from schemas.config import DetectionConfig, SegmentationConfig

PKL = "n015-2018-07-24-11-22-45+0800.pkl"


def _centerpoint(seed: int, precision: str):
    try:
        import mmdet3d
        from mmdet3d.apis import init_model  # noqa: F401
    except Exception as err:  # pragma: no cover - depends on the optional install
        pytest.skip(f"mmdet3d is not importable here ({type(err).__name__}: {err}); see README for the install")
    import torch

    from actors.detect import build_detector

    config = (Path(mmdet3d.__file__).parent / ".mim/configs/centerpoint/"
              "centerpoint_pillar02_second_secfpn_8xb4-cyclic-20e_nus-3d.py")
    torch.manual_seed(seed)
    return build_detector(DetectionConfig(backend="mmdet3d", score_threshold=0.0, mmdet3d={
        "config": str(config), "checkpoint": None, "precision": precision}))


def _box_agreement(a, b) -> dict:
    """Each box of ``a`` matched to the nearest centre of ``b``: shares that agree."""
    from scipy.spatial import cKDTree

    dist, j = cKDTree(b.center_m).query(a.center_m)
    dyaw = np.abs(np.angle(np.exp(1j * (a.yaw_rad - b.yaw_rad[j]))))
    return {"centre_10cm": float((dist < 0.1).mean()),
            "size_10cm": float((np.abs(a.size_lwh_m - b.size_lwh_m[j]).max(1) < 0.1).mean()),
            "score_002": float((np.abs(a.score - b.score[j]) < 0.02).mean()),
            "class": float((a.class_name == b.class_name[j]).mean()),
            "yaw_01rad": float((dyaw < 0.1).mean())}


TOLERANCE = {"centre_10cm": 0.99, "size_10cm": 0.98, "score_002": 0.98, "class": 0.97, "yaw_01rad": 0.90}
"""share of boxes that must agree: centre and size within 10 cm, score within 0.02, the class, yaw within 0.1
rad (random heads regress sin and cos near zero, where atan2 turns small changes into large angles)"""


def test_centerpoint_in_bfloat16_gives_the_float32_boxes(nuscenes_demo):
    from actors.device import autocast_args
    from generator.sources.mmdet_info import load_mmdet_info

    frame = load_mmdet_info(nuscenes_demo / PKL).frames[0]
    det = _centerpoint(0, "bf16")
    assert det.autocast["enabled"]
    (half,) = det([frame])
    det.autocast = autocast_args("cpu", "fp32")
    (full,) = det([frame])
    assert len(half) == len(full) > 100
    agree = _box_agreement(half, full)
    assert all(agree[k] >= v for k, v in TOLERANCE.items()), agree
    assert agree["centre_10cm"] < 1.0 or agree["score_002"] < 1.0  # bfloat16 did change the arithmetic
    (other,) = _centerpoint(1, "fp32")([frame])  # other weights: the check fails
    worse = _box_agreement(other, full)
    assert not all(worse[k] >= v for k, v in TOLERANCE.items()), worse


def _sam(seed: int, precision: str):
    try:
        import sam2  # noqa: F401
        from actors.segment.sam2_backend import Sam2Segmenter  # noqa: F401
    except Exception as err:  # pragma: no cover
        pytest.skip(f"sam2 is not importable here ({type(err).__name__}: {err})")
    import torch

    from actors.segment import build_segmenter

    torch.manual_seed(seed)
    return build_segmenter(SegmentationConfig(backend="sam2", sam2={
        "model_config_name": "configs/sam2.1/sam2.1_hiera_t.yaml", "checkpoint": None, "device": "cpu",
        "precision": precision}))


def _mask_agreement(a, b) -> tuple[np.ndarray, float]:
    """Per prompt the IoU of two masks (1 where both are empty), and the largest score difference."""
    (ma, sa), (mb, sb) = a, b
    inter = (ma & mb).sum((1, 2))
    union = (ma | mb).sum((1, 2))
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0), float(np.abs(sa - sb).max())


MASK_IOU = 0.9
"""every mask's IoU with its float32 mask at least this; scores within ``SCORE_DIFF``"""
SCORE_DIFF = 0.05


def test_sam_in_bfloat16_gives_the_float32_masks(nuscenes_demo):
    import cv2

    from actors.device import autocast_args

    img = cv2.imread(str(next(nuscenes_demo.glob("*CAM_FRONT__*.jpg"))))
    boxes = np.array([[100.0, 100, 300, 250], [500, 400, 700, 600], [1200, 450, 1260, 520], [700, 380, 980, 560]])
    pts = [np.zeros((0, 2))] * len(boxes)
    seg = _sam(0, "bf16")
    assert seg.autocast["enabled"]
    half = seg(img, boxes, pts)
    seg.autocast = autocast_args("cpu", "fp32")
    full = seg(img, boxes, pts)
    assert all(m.any() for m in full[0])  # a non-trivial comparison: every mask has pixels
    iou, dscore = _mask_agreement(half, full)
    assert (iou >= MASK_IOU).all() and dscore <= SCORE_DIFF, (iou, dscore)
    assert (iou < 1).any() or dscore > 0  # bfloat16 did change the arithmetic
    iou2, dscore2 = _mask_agreement(_sam(1, "fp32")(img, boxes, pts), full)  # other weights: the check fails
    assert not ((iou2 >= MASK_IOU).all() and dscore2 <= SCORE_DIFF), (iou2, dscore2)
