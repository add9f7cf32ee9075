"""Segmentation backends (cpu: LiDAR points + morphology; sam2: box prompts, random weights) and RLE helpers."""
from __future__ import annotations

import numpy as np
import pytest

from actors.segment import build_segmenter, rle
from actors.segment.cpu import mask_from_points
from generator.types import CropMasks
from schemas.config import SegmentationConfig


def _ring_points(x0, y0, x1, y1, rows=6, step=6.0):
    """LiDAR-like rows of points across a rectangle (an object's silhouette)."""
    ys = np.linspace(y0 + 2, y1 - 2, rows)
    xs = np.arange(x0 + 1, x1 - 1, step)
    return np.array([[x, y] for y in ys for x in xs])


def test_rle_round_trip_and_boxes():
    rng = np.random.default_rng(0)
    m = rng.random((3, 37, 53)) > 0.7
    m[2] = False
    enc = rle.encode(m)
    assert [r["size"] for r in enc] == [[37, 53]] * 3 and all(isinstance(r["counts"], str) for r in enc)
    assert np.array_equal(rle.decode(enc), m) and np.array_equal(rle.decode(enc[0]), m[0])
    assert np.array_equal(rle.area(enc), m.sum(axis=(1, 2)))
    one = np.zeros((20, 30), dtype=bool)
    one[5:9, 10:25] = True
    box = rle.to_bbox_xyxy(rle.encode(one))[0]
    assert np.array_equal(box, [10, 5, 25, 9])
    assert np.isnan(rle.to_bbox_xyxy([enc[2]])).all()


def _sparse_masks(rng, n, h, w):
    """n masks of random blobs (some empty, some touching the edges), as a segmenter gives them."""
    m = np.zeros((n, h, w), bool)
    for i in range(n):
        if rng.random() < 0.2:
            continue
        y0, x0 = rng.integers(0, h), rng.integers(0, w)
        m[i, y0:y0 + rng.integers(1, 30), x0:x0 + rng.integers(1, 30)] = True
        m[i] &= rng.random((h, w)) < 0.8
    return m


def test_rle_encodes_each_mask_band_as_the_whole_mask():
    """``encode`` copies only each mask's bounding band into pycocotools' column-major input: the counts equal
    pycocotools' own encoding of the whole masks, on random masks of any size."""
    from pycocotools import mask as mask_utils

    rng = np.random.default_rng(1)
    for _ in range(100):
        m = _sparse_masks(rng, int(rng.integers(1, 6)), int(rng.integers(1, 70)), int(rng.integers(1, 70)))
        whole = mask_utils.encode(np.asfortranarray(m.transpose(1, 2, 0).astype(np.uint8)))
        assert [r["counts"] for r in rle.encode(m)] == [r["counts"].decode("ascii") for r in whole]


def test_rle_of_crops_equals_pycocotools_on_whole_masks():
    """``encode`` counts each mask's runs in its crop: equal to pycocotools' encoding of the whole masks where
    runs cross from one column's bottom row to the next column's top (full-height crops), where the image's
    first or last pixel is set, and for crops with empty margins as the cpu segmenter draws them."""
    from pycocotools import mask as mask_utils

    rng = np.random.default_rng(3)
    for _ in range(100):
        n, h, w = int(rng.integers(1, 5)), int(rng.integers(1, 40)), int(rng.integers(1, 40))
        m = rng.random((n, h, w)) < rng.uniform(0.3, 0.95)  # dense: runs span columns
        m[0, -1, -1] = m[0, 0, 0] = True
        if n > 1:
            m[1] = False
        whole = [r["counts"].decode("ascii") for r in
                 mask_utils.encode(np.asfortranarray(m.transpose(1, 2, 0).astype(np.uint8)))]
        assert [r["counts"] for r in rle.encode(m)] == whole
        # the same masks as crops larger than their pixels (False margins), at their origins
        origins = np.zeros((n, 2), np.int64)
        crops = tuple(m[i] for i in range(n))
        assert [r["counts"] for r in rle.encode(CropMasks(h, w, origins, crops))] == whole
    H, W = 90, 160  # a segmenter's crops: each mask in its box's crop
    img = np.zeros((H, W, 3), np.uint8)
    boxes = np.array([[10.0, 20, 60, 70], [100, 0, 160, 90], [150, 85, 170, 95], [0, 0, 0, 0]])
    pts = [_ring_points(15, 25, 55, 65), _ring_points(105, 0, 160, 90), _ring_points(150, 85, 160, 90),
           np.zeros((0, 2))]
    seg = build_segmenter(SegmentationConfig(backend="cpu"))
    (crops, scores), = seg.segment_crops([(img, boxes, pts)])
    dense, dense_scores = seg(img, boxes, pts)
    assert isinstance(crops, CropMasks) and np.array_equal(crops.dense(), dense)
    assert np.array_equal(scores, dense_scores) and dense[:3].any(axis=(1, 2)).all() and not dense[3].any()
    whole = mask_utils.encode(np.asfortranarray(dense.transpose(1, 2, 0).astype(np.uint8)))
    assert [r["counts"] for r in rle.encode(crops)] == [r["counts"].decode("ascii") for r in whole]


def test_rle_keeps_apart_masks_whose_runs_meet():
    """All masks' runs are found in one array: a mask's last run ending where the next mask's first run starts
    (one column's bottom, the next column's top) stays two masks' runs, and empty masks between them keep
    their one run of 0s."""
    from pycocotools import mask as mask_utils

    H, W = 6, 5
    a, b = np.zeros((H, W), bool), np.zeros((H, W), bool)
    a[3:, 1] = True  # down to column 1's bottom
    b[:2, 2] = True  # from column 2's top
    full = np.ones((H, W), bool)
    m = np.stack([a, np.zeros((H, W), bool), b, full, a])
    whole = [r["counts"].decode("ascii") for r in
             mask_utils.encode(np.asfortranarray(m.transpose(1, 2, 0).astype(np.uint8)))]
    assert [r["counts"] for r in rle.encode(m)] == whole
    crops = CropMasks(H, W, np.array([[1, 3], [0, 0], [2, 0], [0, 0]]),
                      (np.ones((3, 1), bool), np.zeros((0, 0), bool), np.ones((2, 1), bool), full))
    assert [r["counts"] for r in rle.encode(crops)] == whole[:4]
    assert np.array_equal(rle.decode(rle.encode(crops)), m[:4])


def test_crop_masks_refuse_a_crop_outside_the_image():
    with pytest.raises(ValueError, match="leaves the 10 x 5 image"):
        CropMasks(5, 10, np.array([[8, 0]]), (np.ones((2, 3), bool),))
    with pytest.raises(ValueError, match="2 origins for 1 crops"):
        CropMasks(5, 10, np.zeros((2, 2)), (np.ones((2, 3), bool),))


def test_cpu_mask_closes_lidar_rows_into_the_silhouette():
    H, W = 200, 300
    img = np.zeros((H, W, 3), np.uint8)
    obj = (100, 60, 200, 140)  # the object's silhouette
    box = np.array([90.0, 50, 215, 150])  # its projected 3D box (a bit larger)
    seg = build_segmenter(SegmentationConfig(backend="cpu"))
    masks, scores = seg(img, box[None], [_ring_points(*obj)])
    assert masks.shape == (1, H, W) and masks.dtype == bool
    sil = np.zeros((H, W), bool)
    sil[obj[1]:obj[3], obj[0]:obj[2]] = True
    iou = (masks[0] & sil).sum() / (masks[0] | sil).sum()
    assert iou > 0.85
    assert not masks[0][:50].any() and not masks[0][:, :90].any()  # clipped to the box
    assert 0.8 < scores[0] <= 1.0  # many points, the mask fills most of the box


def test_cpu_score_falls_with_few_points_and_empty_prompts():
    H, W = 200, 300
    img = np.zeros((H, W, 3), np.uint8)
    box = np.array([[90.0, 50, 215, 150], [10, 10, 40, 40], [250, 150, 400, 260], [50, 50, 50, 80]])
    few = np.array([[150.0, 100], [160, 102], [170, 99]])
    masks, scores = build_segmenter(SegmentationConfig(backend="cpu"))(
        img, box, [few, np.zeros((0, 2)), np.array([[260.0, 160], [270, 170]]), np.array([[50.0, 60]])])
    assert 0 < scores[0] < 0.3  # three points: a small blob in a big box
    assert scores[1] == 0 and not masks[1].any()  # no points
    assert masks[2].any() and not masks[2][:, :250].any()  # box partly outside the image: clipped
    assert scores[3] == 0 and not masks[3].any()  # zero-width box
    with pytest.raises(ValueError, match="point sets"):
        build_segmenter(SegmentationConfig(backend="cpu"))(img, box, [few])


def test_cpu_grabcut_option_runs_on_a_textured_object():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 40, (120, 160, 3), dtype=np.uint8)
    img[30:90, 40:120] = (20, 20, 220)  # a red object on dark noise
    crop, (x0, y0), s = mask_from_points(img, np.array([30.0, 20, 130, 100]), _ring_points(40, 30, 120, 90, 4, 10),
                                         120, 160, dilate_px=4, close_px=25, grabcut_iterations=3)
    full = np.zeros((120, 160), bool)
    full[y0:y0 + crop.shape[0], x0:x0 + crop.shape[1]] = crop
    obj = np.zeros_like(full)
    obj[30:90, 40:120] = True
    assert (full & obj).sum() / (full | obj).sum() > 0.85 and s > 0.5


def test_cpu_masks_on_real_images_from_real_lidar(nuscenes_demo):
    """The car 21 m ahead-left in the real keyframe: its own LiDAR points give a mask inside its 2D box."""
    from generator.geometry import points_in_boxes, project_to_image
    from generator.projection import project_boxes
    from generator.sources import io
    from generator.sources.mmdet_info import load_mmdet_info

    frame = load_mmdet_info(nuscenes_demo / "n015-2018-07-24-11-22-45+0800.pkl").frames[0]
    pts = io.load_lidar_ego(frame)[:, :3]
    gt = frame.labels
    inb = points_in_boxes(pts, gt.center_m, gt.size_lwh_m, gt.yaw_rad)
    seg = build_segmenter(SegmentationConfig(backend="cpu"))
    good = 0
    for cam_name, cam in frame.cameras.items():
        box2d, depth, ok = project_boxes(gt, cam)
        idx = np.nonzero(ok & (inb.sum(1) >= 40))[0]
        if not len(idx):
            continue
        img = io.load_image(frame, cam_name)
        uv = [project_to_image(cam.ego_SE3_cam.inverse().transform_points(pts[inb[i]]), cam.K)[0] for i in idx]
        masks, scores = seg(img, box2d[idx], uv)
        for m, b, s in zip(masks, box2d[idx], scores):
            ys, xs = np.nonzero(m)
            assert len(xs) > 0 and xs.min() >= np.floor(b[0]) and xs.max() <= np.ceil(b[2])
            good += s > 0.5
    assert good >= 2  # the truck and the car (>= 40 points each) get supported masks


def test_sam2_preprocess_matches_totensor_resize_normalize():
    import torch
    try:
        from actors.segment.sam2_backend import preprocess
    except Exception as err:  # pragma: no cover
        pytest.skip(f"sam2 backend not importable: {err}")
    img = np.full((90, 160, 3), (10, 200, 100), np.uint8)  # BGR
    x = preprocess([img], 64, torch.device("cpu"))
    assert tuple(x.shape) == (1, 3, 64, 64)
    want = (np.array([100, 200, 10]) / 255 - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
    assert np.allclose(x[0].mean(dim=(1, 2)).numpy(), want, atol=1e-5)  # RGB order, [0,1], ImageNet stats
    grad = np.tile(np.arange(160, dtype=np.uint8)[None, :, None], (90, 1, 3))
    y = preprocess([grad], 80, torch.device("cpu"))[0, 0].numpy()
    assert np.allclose(y, y[0:1], atol=1e-6) and (np.diff(y[0]) > 0).all()  # a horizontal ramp stays a ramp


def test_sam2_random_weights_box_prompts(nuscenes_demo):
    try:
        import sam2  # noqa: F401
        from actors.segment.sam2_backend import Sam2Segmenter  # noqa: F401
    except Exception as err:  # pragma: no cover
        pytest.skip(f"sam2 is not importable here ({type(err).__name__}: {err})")
    import cv2

    img = cv2.imread(str(next(nuscenes_demo.glob("*CAM_FRONT__*.jpg"))))
    seg = build_segmenter(SegmentationConfig(backend="sam2", sam2={"model_config_name": "configs/sam2.1/sam2.1_hiera_t.yaml",
                                                                   "checkpoint": None, "device": "cpu"}))
    boxes = np.array([[100.0, 100, 300, 250], [500, 400, 700, 600], [1200, 450, 1260, 520]])
    masks, scores = seg(img, boxes, [np.array([[200.0, 170]]), np.zeros((0, 2)), np.zeros((0, 2))])
    assert masks.shape == (3, 900, 1600) and masks.dtype == bool
    assert scores.shape == (3,) and scores.dtype == np.float64 and ((scores >= 0) & (scores <= 1)).all()
    m0, s0 = seg.decode(seg.encode([img])[0], img.shape[:2], boxes[:0], [])
    assert m0.shape == (0, 900, 1600) and s0.shape == (0,)


def _sam2_one_image(seg, feats, hw, boxes, pts):
    """The oracle: one image's prompts through SAM 2's prompt encoder and mask decoder in one call, as
    ``SAM2ImagePredictor.predict`` makes it (box corners labelled 2/3, extra points 1, padded with -1 to the
    image's longest prompt; the image's features repeated per prompt by the decoder)."""
    import torch
    import torch.nn.functional as F

    (H, W), m = hw, len(boxes)
    if m == 0:
        return np.zeros((0, H, W), bool), np.zeros(0)
    k = max(len(p) for p in pts)
    coords = np.zeros((m, 2 + k, 2), np.float32)
    labels = np.full((m, 2 + k), -1, np.int32)
    for i, (b, p) in enumerate(zip(boxes, pts)):
        coords[i, :2], labels[i, :2] = b.reshape(2, 2), (2, 3)
        coords[i, 2:2 + len(p)], labels[i, 2:2 + len(p)] = p, 1
    coords *= np.array([seg.size / W, seg.size / H], np.float32)
    with torch.inference_mode():
        sparse, dense = seg.model.sam_prompt_encoder(points=(torch.from_numpy(coords), torch.from_numpy(labels)),
                                                     boxes=None, masks=None)
        low, iou, _, _ = seg.model.sam_mask_decoder(
            image_embeddings=feats["image_embed"], image_pe=seg.model.sam_prompt_encoder.get_dense_pe(),
            sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense, multimask_output=False,
            repeat_image=m > 1, high_res_features=feats["high_res_feats"])
        masks = F.interpolate(low, size=(H, W), mode="bilinear", align_corners=False)[:, 0] > 0
    return masks.numpy(), iou[:, 0].clamp(0, 1).double().numpy()


def test_sam2_batched_decode_equals_one_call_per_image(nuscenes_demo):
    """``segmentation.sam2.decode_prompts``: the prompts of a batch's images decoded together (in calls of a few
    prompts, an image's prompts split across calls, images of two sizes, prompts with extra points in a group
    of their own, an image without prompts) give what one decoder call per image gives; an image without
    prompts is not encoded."""
    try:
        import sam2  # noqa: F401
        from actors.segment.sam2_backend import Sam2Segmenter  # noqa: F401
    except Exception as err:  # pragma: no cover
        pytest.skip(f"sam2 is not importable here ({type(err).__name__}: {err})")
    import cv2

    paths = sorted(nuscenes_demo.glob("*CAM_*.jpg"))[:4]
    imgs = [cv2.imread(str(p)) for p in paths]
    imgs[1] = cv2.resize(imgs[1], (800, 450))  # a second image size
    seg = build_segmenter(SegmentationConfig(backend="sam2", sam2={
        "model_config_name": "configs/sam2.1/sam2.1_hiera_t.yaml", "checkpoint": None, "device": "cpu"}))
    none = np.zeros((0, 2))
    prompts = [
        (np.array([[100.0, 100, 300, 250], [500, 400, 700, 600], [1200, 450, 1260, 520]]), [none] * 3),
        (np.array([[50.0, 60, 200, 200], [300, 100, 420, 300]]), [none, none]),
        (np.zeros((0, 4)), []),
        (np.array([[400.0, 300, 900, 700], [10, 10, 80, 90]]), [np.array([[650.0, 500]]), none]),  # 1 extra point
    ]
    assert seg.decode_prompts == 0  # 'auto' on the CPU: one decoder call per image
    feats = seg.encode(imgs)
    hws = [im.shape[:2] for im in imgs]
    per_image = [_sam2_one_image(seg, f, hw, b, p) for f, hw, (b, p) in zip(feats, hws, prompts)]
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(per_image, (seg.decode(f, hw, b, p) for f, hw, (b, p)
                                                                        in zip(feats, hws, prompts))))
    for cap in (2, 3, None):
        together = seg.decode_many(feats, hws, prompts, max_prompts=cap)
        for (m1, s1), (m2, s2), (b, _), hw in zip(per_image, together, prompts, hws):
            assert m2.shape == m1.shape == (len(b), *hw) and m2.dtype == bool
            assert np.allclose(s1, s2, atol=1e-4), (cap, s1, s2)
            assert not len(b) or (m1 != m2).mean() < 1e-4, (cap, (m1 != m2).mean())  # float summation order only
            assert all(m.any() for m in m1)  # a non-trivial comparison: every mask has pixels
    # what perception asks for: the same masks as crops (cut from the dense masks once), the image without prompts
    # never encoded (it was: a backbone pass for no mask)
    encoded: list[int] = []
    encode = seg.encode
    seg.encode = lambda images: encoded.append(len(images)) or encode(images)
    crops = seg.segment_crops([(im, b, p) for im, (b, p) in zip(imgs, prompts)])
    assert sum(encoded) == sum(len(b) > 0 for b, _ in prompts) == 3, encoded
    for (m1, s1), (c2, s2) in zip(per_image, crops):
        assert isinstance(c2, CropMasks) and np.array_equal(c2.dense(), m1) and np.allclose(s1, s2, atol=1e-6)


def test_points_in_boxes_equals_the_every_pair_test():
    """``points_in_boxes`` tests only the points in the x cells a box's half-diagonal reaches; its mask equals the plain test
    of every point against every box, for points on the boxes' corners and faces, NaN points and boxes, flat boxes,
    points sharing their x, infinite x, a box and points beyond the search cells' range, float32 sweeps and empty
    inputs."""
    from generator.geometry import points_in_boxes, points_in_boxes_pairs

    def every_pair(p, c, s, yaw):
        d = p[None, :, :3] - c[:, None, :]
        cy, sn = np.cos(yaw)[:, None], np.sin(yaw)[:, None]
        lx, ly = d[..., 0] * cy + d[..., 1] * sn, -d[..., 0] * sn + d[..., 1] * cy
        return (np.abs(lx) <= s[:, :1] / 2) & (np.abs(ly) <= s[:, 1:2] / 2) & (np.abs(d[..., 2]) <= s[:, 2:3] / 2)

    rng = np.random.default_rng(5)
    inside = 0
    for trial in range(120):
        n_pts, n_box = int(rng.integers(0, 2000)), int(rng.integers(0, 25))
        p = rng.uniform(-20, 20, (n_pts, 3))
        c, s, yaw = rng.uniform(-20, 20, (n_box, 3)), rng.uniform(1e-3, 8, (n_box, 3)), rng.uniform(-4, 4, n_box)
        k = min(n_pts, n_box)  # one point on each box's corner (footprint) at its centre height
        p[:k, 0] = c[:k, 0] + np.cos(yaw[:k]) * s[:k, 0] / 2 - np.sin(yaw[:k]) * s[:k, 1] / 2
        p[:k, 1] = c[:k, 1] + np.sin(yaw[:k]) * s[:k, 0] / 2 + np.cos(yaw[:k]) * s[:k, 1] / 2
        p[:k, 2] = c[:k, 2]
        if k and trial % 4 == 0:
            p[-1], c[-1] = np.nan, np.nan
        if k and trial % 6 == 0:
            s[0, :2] = 0.0
        if n_pts > 10 and n_box > 1 and trial % 5 == 0:  # infinite x; a box and a point beyond the cells' +-8 km
            c[1, 0] = 9e3
            p[-5], p[-4:-1, 0] = c[1], (np.inf, -np.inf, 9e3 + 0.1)
        if n_pts > 100:  # points sharing their x: ties in the sort by x
            p[50:100, 0] = p[50, 0]
        if trial % 2:  # a float32 sweep (as LiDAR files hold them; sorted in its own precision)
            p = p.astype(np.float32)
        got = points_in_boxes(p, c, s, yaw)
        assert got.shape == (n_box, n_pts)
        want = every_pair(p.astype(np.float64), c, s, yaw)
        np.testing.assert_array_equal(got, want)
        box, pt = points_in_boxes_pairs(p, c, s, yaw)  # the pairs: by box, each box's points in sweep order
        wb, wp = np.nonzero(want)
        assert np.array_equal(box, wb) and np.array_equal(pt, wp)
        inside += int(got.sum())
    assert inside > 1000  # the trials do put points inside boxes
