"""Projection and frame conventions checked on a real nuScenes keyframe (mmdet3d demo info + sweep + images).

mmdet3d computed ``cam_instances`` (2D boxes) from the nuScenes annotations with the devkit's recipe; our
``project_boxes`` must reproduce every one of them from the 3D boxes read by ``load_mmdet_info``.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from generator.geometry import SE3, points_in_boxes
from generator.projection import box_iou_xyxy, project_boxes
from generator.sources.io import load_image, load_lidar_ego
from generator.sources.mmdet_info import load_mmdet_info
from generator.types import CameraCalib

PKL = "n015-2018-07-24-11-22-45+0800.pkl"


@pytest.fixture(scope="module")
def demo(nuscenes_demo):
    scene = load_mmdet_info(nuscenes_demo / PKL)
    with open(nuscenes_demo / PKL, "rb") as fh:
        item = pickle.load(fh)["data_list"][0]
    return scene, item


def _gt(item):
    """bbox_3d of the instances that have a detection class (the ones load_mmdet_info keeps, in order)."""
    return np.array([i["bbox_3d"] for i in item["instances"] if i["bbox_label_3d"] >= 0])


def _match(item, cam, boxes_lidar_centre):
    """Index of the 3D instance behind each listed 2D box: nearest centre in the camera frame."""
    l2c = np.asarray(item["images"][cam]["lidar2cam"])
    pc = boxes_lidar_centre @ l2c[:3, :3].T + l2c[:3, 3]
    listed = np.array([ci["bbox_3d"][:3] for ci in item["cam_instances"][cam]])
    # camera boxes carry their bottom centre (y down); the lidar boxes were read with z as centre
    d = np.linalg.norm(pc[None] - listed[:, None], axis=2)
    return d.argmin(axis=1), d.min(axis=1)


def test_every_listed_2d_box_is_reproduced(demo):
    scene, item = demo
    frame = scene.frames[0]
    labels = frame.labels
    # 69 instances, one of a category outside the ten detection classes (label -1), which is ignored
    assert len(item["instances"]) == 69 and len(labels) == 68 and len(frame.cameras) == 6
    b = _gt(item)
    worst = {}
    for cam, cal in frame.cameras.items():
        box2d, depth, in_image = project_boxes(labels, cal)
        idx, dist = _match(item, cam, b[:, :3])
        assert dist.max() < 1.0, f"{cam}: a listed box has no 3D instance nearby"
        listed = np.array([ci["bbox"] for ci in item["cam_instances"][cam]])
        assert in_image[idx].all(), f"{cam}: a listed object is reported as not in the image"
        iou = box_iou_xyxy(listed, box2d[idx])
        worst[cam] = iou.min()
        assert (iou >= 0.9).all(), f"{cam}: IoU {np.round(iou, 3)}"
        # the listed depth is the camera-frame depth of the box's reference point: same object, same depth
        assert np.allclose(depth[idx], [ci["depth"] for ci in item["cam_instances"][cam]], atol=1.5)
    assert len(worst) == 6


def test_objects_not_listed_for_a_camera_are_out_of_its_view(demo):
    """The converter lists an object when its hull meets the image; anything we see must be listed (or tiny)."""
    scene, item = demo
    b = _gt(item)
    for cam, cal in scene.frames[0].cameras.items():
        box2d, _, in_image = project_boxes(scene.frames[0].labels, cal)
        idx, _ = _match(item, cam, b[:, :3])
        extra = np.setdiff1d(np.nonzero(in_image)[0], idx)
        area = (box2d[extra, 2] - box2d[extra, 0]) * (box2d[extra, 3] - box2d[extra, 1])
        # mmdet3d drops objects whose corners are all behind the camera but keeps everything else:
        # an unlisted object may only be one whose visible part is a sliver at the image border
        assert (area < 0.01 * cal.width_px * cal.height_px).all(), f"{cam}: unlisted visible objects {extra}"


def test_hull_clipping_beats_bbox_clipping_on_truncated_boxes(demo):
    """The nuScenes recipe (hull ∩ canvas) matters: plain clipping of the corner bbox fails the 0.9 bar."""
    scene, item = demo
    b = _gt(item)
    cal = scene.frames[0].cameras["CAM_FRONT_LEFT"]
    labels = scene.frames[0].labels
    from generator.projection import corners_in_camera
    from generator.geometry import project_to_image

    pc = corners_in_camera(labels, cal)
    uv, _ = project_to_image(pc, cal.K)  # NaN for corners behind the camera
    uv[~np.isfinite(uv).all(axis=2).any(axis=1)] = 0.0  # boxes wholly behind: any finite value
    naive = np.stack([np.nanmin(uv[..., 0], 1), np.nanmin(uv[..., 1], 1), np.nanmax(uv[..., 0], 1),
                      np.nanmax(uv[..., 1], 1)], axis=1)
    naive = np.stack([np.clip(naive[:, 0], 0, cal.width_px), np.clip(naive[:, 1], 0, cal.height_px),
                      np.clip(naive[:, 2], 0, cal.width_px), np.clip(naive[:, 3], 0, cal.height_px)], axis=1)
    idx, _ = _match(item, "CAM_FRONT_LEFT", b[:, :3])
    listed = np.array([ci["bbox"] for ci in item["cam_instances"]["CAM_FRONT_LEFT"]])
    ours = project_boxes(labels, cal)[0][idx]
    assert box_iou_xyxy(listed, naive[idx]).min() < 0.9 <= box_iou_xyxy(listed, ours).min()


def test_motion_compensated_extrinsics_are_needed(demo):
    """Using the static calibration (cam2ego) instead of lidar2cam misplaces boxes on a moving ego."""
    scene, item = demo
    b = _gt(item)
    rec = item["images"]["CAM_FRONT"]
    cal = scene.frames[0].cameras["CAM_FRONT"]
    static = CameraCalib("CAM_FRONT", cal.K, SE3.from_matrix(np.asarray(rec["cam2ego"])), cal.width_px,
                         cal.height_px)
    idx, _ = _match(item, "CAM_FRONT", b[:, :3])
    listed = np.array([ci["bbox"] for ci in item["cam_instances"]["CAM_FRONT"]])
    iou_static = box_iou_xyxy(listed, project_boxes(scene.frames[0].labels, static)[0][idx])
    iou_ours = box_iou_xyxy(listed, project_boxes(scene.frames[0].labels, cal)[0][idx])
    assert (iou_static >= 0.9).mean() < 0.5 and (iou_ours >= 0.9).all()


def test_box_centre_convention_matches_lidar_point_counts(demo):
    """bbox_3d z is the box centre: points inside the ego-frame boxes reproduce num_lidar_pts."""
    scene, _ = demo
    frame = scene.frames[0]
    pts = load_lidar_ego(frame)
    assert pts.shape == (34688, 4) and pts.dtype == np.float32
    lab = frame.labels
    counts = points_in_boxes(pts, lab.center_m, lab.size_lwh_m, lab.yaw_rad).sum(axis=1)
    assert np.mean(counts == lab.num_lidar_pts) > 0.8
    assert np.abs(counts - lab.num_lidar_pts).sum() < 0.1 * lab.num_lidar_pts.sum()
    centre_if_z_were_bottom = lab.center_m + np.array([0, 0, 0.5]) * lab.size_lwh_m[:, 2:3]
    counts_if_bottom = points_in_boxes(pts, centre_if_z_were_bottom, lab.size_lwh_m, lab.yaw_rad).sum(axis=1)
    assert np.mean(counts_if_bottom == lab.num_lidar_pts) < 0.5


def test_real_images_load_with_calibrated_size(demo):
    scene, _ = demo
    frame = scene.frames[0]
    img = load_image(frame, "CAM_FRONT")
    assert img.shape == (900, 1600, 3) and img.dtype == np.uint8
    # ego frame: the ground under the car is about 0 m in z (LiDAR is mounted ~1.8 m up)
    pts = load_lidar_ego(frame)
    near = np.linalg.norm(pts[:, :2], axis=1) < 10
    assert abs(np.percentile(pts[near, 2], 5)) < 0.5
