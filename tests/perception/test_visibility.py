"""Visibility filter on arrays built here: every rule, the order of reasons, coverage/IoU definitions."""
from __future__ import annotations

import numpy as np

from generator.types import CropMasks
from generator.visibility import (DROP_REASONS, decide_visibility, geometric_reasons, mask_boxes_and_coverage,
                                  mask_reasons)
from schemas.config import VisibilityConfig


def _mask(H, W, x1, y1, x2, y2):
    m = np.zeros((H, W), bool)
    m[y1:y2, x1:x2] = True
    return m


def test_mask_box_and_coverage_definitions():
    H, W = 50, 80
    masks = np.stack([_mask(H, W, 10, 10, 30, 20), _mask(H, W, 0, 0, 40, 10), np.zeros((H, W), bool)])
    boxes = np.array([[10.0, 10, 30, 20], [0, 0, 20, 10], [0, 0, 5, 5]])
    mb, cov, area = mask_boxes_and_coverage(masks, boxes)
    assert np.array_equal(mb[0], [10, 10, 30, 20]) and np.array_equal(mb[1], [0, 0, 40, 10]) and np.isnan(mb[2]).all()
    assert cov[0] == 1.0 and cov[1] == 0.5 and np.isnan(cov[2])  # share of the mask inside the box
    assert list(area) == [200, 400, 0]


def test_mask_boxes_from_row_bands_equal_the_whole_mask_definitions():
    """Columns and areas are taken from each mask's band of rows: the same as over the whole masks."""
    rng = np.random.default_rng(2)
    for _ in range(50):
        n, H, W = int(rng.integers(1, 6)), int(rng.integers(1, 60)), int(rng.integers(1, 60))
        masks = np.zeros((n, H, W), bool)
        for i in range(1, n):
            y, x = rng.integers(0, H), rng.integers(0, W)
            masks[i, y:y + rng.integers(1, 25), x:x + rng.integers(1, 25)] = True
            masks[i] &= rng.random((H, W)) < 0.7
        boxes = rng.uniform(-5, 70, (n, 4))
        mb, cov, area = mask_boxes_and_coverage(masks, boxes)
        assert list(area) == list(masks.sum(axis=(1, 2)))
        for i in range(n):
            ys, xs = np.nonzero(masks[i])
            if len(ys):
                assert list(mb[i]) == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
                (bx1, by1), (bx2, by2) = (np.clip(np.ceil(boxes[i].reshape(2, 2) - 0.5), 0, [W, H])).astype(int)
                assert cov[i] == masks[i, by1:by2, bx1:bx2].sum() / len(ys)  # pixel centres inside the box
            else:
                assert np.isnan(mb[i]).all() and np.isnan(cov[i])
        # the same masks as crops with empty margins (as the cpu segmenter draws them): the same figures
        y0, x0 = int(rng.integers(0, H)), int(rng.integers(0, W))
        origins = np.tile([x0, y0], (n, 1))
        crops = tuple(m[y0:, x0:] for m in masks)
        inner = masks.copy()
        inner[:, :y0] = False
        inner[:, :, :x0] = False
        for got, want in zip(mask_boxes_and_coverage(CropMasks(H, W, origins, crops), boxes),
                             mask_boxes_and_coverage(inner, boxes)):
            assert np.array_equal(got, want, equal_nan=True)


def test_geometric_reasons_in_order():
    cfg = VisibilityConfig(min_lidar_points=1, min_box_area_px=16)
    box = np.array([[0.0, 0, 10, 10]] * 6 + [[0, 0, 3, 3]])
    r = geometric_reasons(size_ok=np.array([False, True, True, True, True, True, True]),
                          any_in_front=np.array([False, False, True, True, True, True, True]),
                          in_image=np.array([False, False, False, True, True, True, True]),
                          num_lidar_pts=np.array([0, 0, 0, 0, -1, 5, 5]), box2d_xyxy=box, cfg=cfg)
    assert list(r) == ["zero_size_box", "behind_camera", "outside_image", "too_few_lidar_points", "", "",
                       "box_too_small"]  # -1 = unknown count passes


def test_stride_rules_are_strict_thresholds():
    cfg = VisibilityConfig()
    r = mask_reasons(np.array([0, 10, 10, 10, 10, 10]), np.array([0.9, 0.3, 0.31, 0.9, 0.9, 0.9]),
                     np.array([1, 1, 1, 0.8, 0.81, 0.9]), np.array([0.9, 0.9, 0.9, 0.9, 0.9, 0.8]), cfg)
    assert list(r) == ["empty_mask", "low_box_iou", "", "low_coverage", "", "low_mask_score"]


def test_decide_visibility_with_masks_geometry_only_and_unreadable_image():
    H, W = 60, 100
    cfg = VisibilityConfig()
    box2d = np.array([[10.0, 10, 40, 40], [50, 10, 90, 50], [0, 0, 0, 0], [60, 5, 95, 30]])
    geo = np.array(["", "", "outside_image", ""], dtype=object)
    masks = np.stack([_mask(H, W, 12, 12, 38, 38),  # tight: kept
                      _mask(H, W, 50, 10, 90, 50),  # kept by geometry but low score below
                      _mask(H, W, 0, 0, 100, 60)])  # spills far outside its box: low IoU
    d = decide_visibility(geo, box2d, masks, np.array([0.95, 0.5, 0.99]), cfg)
    assert list(d["visible"]) == [True, False, False, False]
    assert list(d["drop_reason"]) == [None, "low_mask_score", "outside_image", "low_box_iou"]
    assert d["box_iou"][0] == (26 * 26) / (30 * 30) and d["coverage"][0] == 1.0 and np.isnan(d["box_iou"][2])
    g = decide_visibility(geo, box2d, None, None, cfg)  # no image: geometry decides, no mask values
    assert list(g["visible"]) == [True, True, False, True] and np.isnan(g["mask_score"]).all()
    u = decide_visibility(geo, box2d, None, None, cfg, image_ok=False)
    assert list(u["drop_reason"]) == ["image_unavailable", "image_unavailable", "outside_image", "image_unavailable"]
    assert set(DROP_REASONS) >= {x for x in list(d["drop_reason"]) + list(u["drop_reason"]) if x}
