"""One frame of an mmdet3d nuScenes info pkl (info_version 1.1) as a ``Scene``.

Used with ``../shared/data/nuscenes-demo`` (a real nuScenes keyframe: sweep, six images, calibration, 69
ground-truth boxes) to check projection and LiDAR conventions against real data.

Conventions of the info file, checked on the real keyframe (tests/perception/test_projection_real.py):
- ``lidar2cam`` already contains the ego-motion compensation between the LiDAR and the camera timestamps
  (mmdet3d's ``obtain_sensor2top``); ``cam2ego`` does not. The camera extrinsic used here is therefore
  ``ego_SE3_cam = lidar2ego o inv(lidar2cam)``, the camera pose in the LiDAR sample's ego frame.
- ``instances[*].bbox_3d`` = [x, y, z, l, w, h, yaw] in the LiDAR frame with (x, y, z) the box's
  geometric centre: nuScenes infos store ``Box.center`` and mmdet3d's NuScenesDataset reads them with
  ``origin=(0.5, 0.5, 0.5)``. (The data README's "z at the box bottom" is the mmdet3d default for other
  datasets; here it contradicts the points: counting sweep points inside the boxes reproduces
  ``num_lidar_pts`` for 88% of the boxes with z as centre and 20% with z as bottom.)
- ``velocity`` is [vx, vy] in the LiDAR frame; NaN when unknown.
- ``lidar_sweeps`` (when the entry has the key): the earlier sweeps, newest first, each with its
  ``lidar_points.lidar2ego``, ``ego2global`` and ``timestamp`` (s) -> ``Frame.lidar_sweeps``. Without the key
  ``Frame.lidar_sweeps`` is None (the demo keyframe has none: mmdet3d then pads with copies of the sweep).
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from generator.geometry import SE3
from generator.types import Boxes3D, CameraCalib, Frame, LidarSweep, Scene, SourceError


def _image_size(path: Path, scene: str) -> tuple[int, int]:
    from PIL import Image  # PIL: only where images are decoded or encoded

    try:
        with Image.open(path) as im:  # reads the header only
            return im.size  # (width, height)
    except (OSError, ValueError) as err:
        raise SourceError(f"image unreadable: {err}", scene=scene, file=str(path), stage="read") from None


def load_mmdet_info(pkl_path, index: int = 0, data_root=None) -> Scene:
    """Sample ``index`` of an mmdet3d info pkl as a one-frame Scene (``source='nuscenes'``).

    Sensor files are looked up in ``data_root`` (default: the pkl's folder) by their file names.
    Labels: ``instances`` as ``Boxes3D`` in the ego frame (classes from ``metainfo.categories``); instances
    labelled -1 (a category outside the ten detection classes) are ignored, as ``NuScenesSource`` does.
    """
    pkl_path = Path(pkl_path)
    root = Path(data_root) if data_root is not None else pkl_path.parent
    scene = pkl_path.stem
    try:
        with open(pkl_path, "rb") as fh:
            info = pickle.load(fh)
        item = info["data_list"][index]
        classes = {v: k for k, v in info["metainfo"]["categories"].items()}
    except (OSError, pickle.UnpicklingError, KeyError, IndexError, EOFError) as err:
        raise SourceError(f"not a readable mmdet3d info file (sample {index}): {type(err).__name__}: {err}",
                          scene=scene, file=str(pkl_path), stage="read") from None
    try:
        ego_SE3_lidar = SE3.from_matrix(np.asarray(item["lidar_points"]["lidar2ego"], dtype=np.float64))
        city_SE3_ego = SE3.from_matrix(np.asarray(item["ego2global"], dtype=np.float64))
        cameras, images = {}, {}
        for cam, rec in item["images"].items():
            path = root / Path(rec["img_path"]).name
            w, h = _image_size(path, scene)
            lidar_SE3_cam = SE3.from_matrix(np.asarray(rec["lidar2cam"], dtype=np.float64)).inverse()
            cameras[cam] = CameraCalib(cam, np.asarray(rec["cam2img"], dtype=np.float64)[:3, :3],
                                       ego_SE3_lidar.compose(lidar_SE3_cam), w, h)
            images[cam] = str(path)
        labels = _instances(item.get("instances", []), classes, ego_SE3_lidar)
        sweeps = None if "lidar_sweeps" not in item else [
            LidarSweep(lidar_path=str(root / Path(sw["lidar_points"]["lidar_path"]).name), lidar_format="nuscenes_bin",
                       timestamp_us=int(round(float(sw["timestamp"]) * 1e6)),
                       city_SE3_ego=SE3.from_matrix(np.asarray(sw["ego2global"], dtype=np.float64)),
                       ego_SE3_lidar=SE3.from_matrix(np.asarray(sw["lidar_points"]["lidar2ego"], dtype=np.float64)))
            for sw in item["lidar_sweeps"]]
    except (KeyError, ValueError, TypeError) as err:
        raise SourceError(f"sample {index}: malformed info entry: {type(err).__name__}: {err}", scene=scene,
                          file=str(pkl_path), stage="read") from None
    frame = Frame(scene_id=scene, frame_index=0, timestamp_us=int(round(float(item["timestamp"]) * 1e6)),
                  token=str(item.get("token", index)), city_SE3_ego=city_SE3_ego, ego_SE3_lidar=ego_SE3_lidar,
                  lidar_path=str(root / Path(item["lidar_points"]["lidar_path"]).name), lidar_format="nuscenes_bin",
                  cameras=cameras, image_paths=images, labels=labels, lidar_sweeps=sweeps)
    return Scene(scene_id=scene, source="nuscenes", log_name=scene, frames=[frame], front_camera="CAM_FRONT")


def _instances(instances: list[dict], classes: dict[int, str], ego_SE3_lidar: SE3) -> Boxes3D:
    instances = [i for i in instances if int(i["bbox_label_3d"]) >= 0]  # -1: not a detection class, ignored
    if not instances:
        return Boxes3D.empty()
    b = np.array([i["bbox_3d"] for i in instances], dtype=np.float64).reshape(-1, 7)
    vel = np.array([i.get("velocity", [np.nan, np.nan]) for i in instances], dtype=np.float64).reshape(-1, 2)
    R = ego_SE3_lidar.rotation
    v3 = np.concatenate([vel, np.zeros((len(vel), 1))], axis=1)
    heading = np.stack([np.cos(b[:, 6]), np.sin(b[:, 6]), np.zeros(len(b))], axis=1) @ R.T  # LiDAR -> ego
    return Boxes3D(center_m=ego_SE3_lidar.transform_points(b[:, :3]), size_lwh_m=b[:, 3:6],
                   yaw_rad=np.arctan2(heading[:, 1], heading[:, 0]),
                   class_name=np.array([classes[int(i["bbox_label_3d"])] for i in instances], dtype=object),
                   velocity_mps=(v3 @ R.T)[:, :2],
                   num_lidar_pts=np.array([i.get("num_lidar_pts", -1) for i in instances], dtype=np.int32))
