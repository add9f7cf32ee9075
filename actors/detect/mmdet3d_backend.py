"""``mmdet3d`` backend: CenterPoint (LiDAR) or BEVFusion (LiDAR + six cameras) inference with mmdetection3d.

The model is built once per detector with ``mmdet3d.apis.init_model(config, checkpoint, device)``
(``device: auto`` = ``cuda:0`` when torch sees a GPU, else ``cpu``). Frames are batched
(``detection.mmdet3d.batch_size``) through the config's own test pipeline and ``model.test_step``.

Input per frame: the sweep from ``generator.sources.io.load_lidar_ego`` moved back into the LiDAR frame
(``frame.ego_SE3_lidar``; the models are trained in it), as (N, 5) [x, y, z, intensity, time lag = 0].
The pipeline's ``LoadPointsFromFile`` becomes ``LoadPointsFromDict`` (so any log format works) and
``LoadPointsFromMultiSweeps`` is removed: one sweep per frame (the nuScenes-trained models see 10 sweeps;
padding with copies of the same sweep, mmdet3d's fallback, costs 10x for no information). For camera
models the frame's images and calibration are passed in mmdet3d's info layout
(``images[cam] = {img_path, cam2img, lidar2cam}``), which BEVFusion's ``BEVLoadMultiViewImageFromFiles``
reads.

Output: ``LiDARInstance3DBoxes`` (bottom-centre z, yaw about the LiDAR z axis, velocity (vx, vy) for
nuScenes heads) converted to ego-frame ``Boxes3D`` with the box's geometric centre.

Using BEVFusion (not in the mmdet3d wheel; its ``bev_pool`` op needs CUDA)::

    git clone https://github.com/open-mmlab/mmdetection3d   # v1.4.0, the installed version
    export PYTHONPATH=$PWD/mmdetection3d:$PYTHONPATH        # makes ``projects.BEVFusion`` importable
    (cd mmdetection3d && python projects/BEVFusion/setup.py develop)   # builds bev_pool / voxel ops

    # drivegen config
    detection:
      backend: mmdet3d
      mmdet3d:
        config: mmdetection3d/projects/BEVFusion/configs/bevfusion_lidar-cam_voxel0075_second_secfpn_8xb4-cyclic-20e_nus-3d.py
        checkpoint: /models/bevfusion_lidar-cam_voxel0075_second_secfpn_8xb4-cyclic-20e_nus-3d.pth
        device: auto

The config's ``custom_imports`` (``projects.BEVFusion.bevfusion``) registers the model's modules when
``init_model`` reads it. CenterPoint needs no extra code: its configs ship in the wheel under
``mmdet3d/.mim/configs/centerpoint/`` (voxel variants also need ``spconv``).
"""
from __future__ import annotations

import copy

import numpy as np

from actors.detect.base import Detector
from generator.geometry import SE3
from generator.types import Boxes3D, DrivegenError, Frame
from schemas.config import DETECTION_CLASSES, DetectionConfig


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda:0' when torch sees a GPU, else 'cpu'; anything else is returned as given."""
    if device != "auto":
        return device
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def lidar_boxes_to_ego(bboxes: np.ndarray, scores: np.ndarray, labels: np.ndarray, classes: list[str],
                       ego_SE3_lidar: SE3) -> Boxes3D:
    """mmdet3d LiDAR boxes (N, 7 or 9) [x, y, z_bottom, l, w, h, yaw(, vx, vy)] -> ego-frame Boxes3D.

    Labels index ``classes`` (the model's class list); names outside the nuScenes detection classes are
    dropped. Velocity is NaN when the head predicts none (7 columns)."""
    b = np.asarray(bboxes, dtype=np.float64).reshape(-1, np.shape(bboxes)[-1] if np.size(bboxes) else 7)
    names = np.array([classes[int(k)] if 0 <= int(k) < len(classes) else "" for k in labels], dtype=object)
    keep = np.isin(names.astype(str), DETECTION_CLASSES) & np.isfinite(b[:, :7]).all(axis=1)
    b, names, scores = b[keep], names[keep], np.asarray(scores, dtype=np.float64)[keep]
    centre_lidar = b[:, :3] + np.column_stack([np.zeros((len(b), 2)), b[:, 5] / 2])  # bottom -> geometric centre
    R = ego_SE3_lidar.rotation
    heading = np.column_stack([np.cos(b[:, 6]), np.sin(b[:, 6]), np.zeros(len(b))]) @ R.T
    if b.shape[1] >= 9:
        vel = (np.column_stack([b[:, 7:9], np.zeros(len(b))]) @ R.T)[:, :2]
    else:
        vel = np.full((len(b), 2), np.nan)
    return Boxes3D(ego_SE3_lidar.transform_points(centre_lidar), b[:, 3:6], np.arctan2(heading[:, 1], heading[:, 0]),
                   names, score=np.clip(scores, 0, 1), velocity_mps=vel)


def _test_pipeline(model_cfg) -> list[dict]:
    """The config's test pipeline with points read from the input dict and no multi-sweep loading."""
    pipeline = copy.deepcopy(model_cfg.test_dataloader.dataset.pipeline)
    out = []
    for t in pipeline:
        kind = t["type"]
        if kind == "LoadPointsFromFile":
            t = dict(t, type="LoadPointsFromDict")
        elif kind == "LoadPointsFromMultiSweeps":
            continue
        out.append(t)
    return out


def frame_input(frame: Frame, points_ego: np.ndarray, use_camera: bool, box_type_3d, box_mode_3d) -> dict:
    """One frame in mmdet3d's data-info layout (LiDAR frame), ready for the test pipeline."""
    lidar_SE3_ego = frame.ego_SE3_lidar.inverse()
    pts = np.zeros((len(points_ego), 5), dtype=np.float32)
    pts[:, :3] = lidar_SE3_ego.transform_points(points_ego[:, :3])
    pts[:, 3] = points_ego[:, 3] if points_ego.shape[1] > 3 else 0.0
    info = dict(points=pts, timestamp=frame.timestamp_us / 1e6, sample_idx=frame.token,
                lidar_points=dict(lidar_path=frame.lidar_path, num_pts_feats=5,
                                  lidar2ego=frame.ego_SE3_lidar.as_matrix()),
                lidar2ego=frame.ego_SE3_lidar.as_matrix(), ego2global=frame.city_SE3_ego.as_matrix(),
                axis_align_matrix=np.eye(4), box_type_3d=box_type_3d, box_mode_3d=box_mode_3d)
    if use_camera:
        images = {}
        for name, cam in frame.cameras.items():
            path = frame.image_paths.get(name, "")
            if not path:
                raise DrivegenError(f"camera model needs an image for {name}; the log has none", scene=frame.scene_id,
                                    stage="detect")
            cam_SE3_lidar = cam.ego_SE3_cam.inverse().compose(frame.ego_SE3_lidar)
            images[name] = dict(img_path=path, cam2img=cam.K.tolist(), lidar2cam=cam_SE3_lidar.as_matrix(),
                                cam2ego=cam.ego_SE3_cam.as_matrix())
        info["images"] = images
    return info


class Mmdet3dDetector(Detector):
    name = "mmdet3d"

    def __init__(self, cfg: DetectionConfig):
        super().__init__(cfg)
        from mmdet3d.apis import init_model
        from mmdet3d.structures import get_box_type
        from mmengine.dataset import Compose

        mc = cfg.mmdet3d
        if not mc.config:
            raise ValueError("detection.mmdet3d.config is required for the mmdet3d backend (a CenterPoint config "
                             "from mmdet3d/.mim/configs/centerpoint/ or a projects/BEVFusion config)")
        self.device = resolve_device(mc.device)
        self.model = init_model(mc.config, mc.checkpoint, device=self.device)
        mcfg = self.model.cfg
        steps = _test_pipeline(mcfg)
        self.use_camera = any("Image" in t["type"] for t in steps)
        self.pipeline = Compose(steps)
        self.box_type_3d, self.box_mode_3d = get_box_type(mcfg.test_dataloader.dataset.get("box_type_3d", "LiDAR"))
        meta = getattr(self.model, "dataset_meta", None) or {}
        self.classes = list(meta.get("classes") or mc.model_classes)

    def __call__(self, frames: list[Frame]) -> list[Boxes3D]:
        import torch
        from mmengine.dataset import pseudo_collate

        from generator.sources import io

        out: list[Boxes3D] = []
        bs = self.cfg.mmdet3d.batch_size
        for i in range(0, len(frames), bs):
            chunk = frames[i:i + bs]
            data = [self.pipeline(frame_input(fr, io.load_lidar_ego(fr), self.use_camera, self.box_type_3d,
                                              self.box_mode_3d)) for fr in chunk]
            with torch.no_grad():
                results = self.model.test_step(pseudo_collate(data))
            for fr, res in zip(chunk, results):
                pred = res.pred_instances_3d
                boxes = lidar_boxes_to_ego(pred.bboxes_3d.tensor.detach().cpu().numpy(),
                                           pred.scores_3d.detach().cpu().numpy(),
                                           pred.labels_3d.detach().cpu().numpy(), self.classes, fr.ego_SE3_lidar)
                out.append(self._postfilter(boxes))
        return out
