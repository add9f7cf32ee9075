"""``mmdet3d`` backend: CenterPoint (LiDAR) or BEVFusion (LiDAR + six cameras) inference with mmdetection3d.

The model is built once per detector with ``mmdet3d.apis.init_model(config, checkpoint, device)``
(``device: auto`` = ``cuda:0`` when torch sees a GPU, else ``cpu``). Frames are batched
(``detection.mmdet3d.batch_size``) through the config's own test pipeline and ``model.test_step``.

Input per frame: the point tensor the config's own test pipeline would build, built by
``actors.detect.sweeps`` from the config's ``LoadPointsFromFile`` and ``LoadPointsFromMultiSweeps``
arguments: the frame's sweep in its LiDAR frame (``load_dim`` values per point, columns ``use_dim``) plus
the frame's earlier sweeps (``Frame.lidar_sweeps``: the nuScenes-trained CenterPoint / BEVFusion configs
take 9 of them, 10 sweeps in all, with the time lag in column 4), moved into the keyframe's LiDAR frame as
mmdet3d does (``detection.mmdet3d.sweep_alignment``) and chosen as it does (9 of 10 at random without
``test_mode``, seeded per frame by ``detection.mmdet3d.sweep_seed``). A frame whose source lists no sweeps
(``lidar_sweeps`` None: the demo keyframe's info file) is padded with copies of its sweep when the config
says ``pad_empty_sweeps``, as mmdet3d does. ``tests/actors/test_detect_mmdet3d.py`` checks the tensor against
mmdet3d's own ``NuScenesDataset`` + test pipeline on the same samples. The pipeline's two loading steps
become one ``LoadPointsFromDict`` fed with that tensor, so any log format works (AV2 feather sweeps too).
Files shared by the frames of one call are read once (``sweeps.CachedReader``). For camera models the
frame's images and calibration are passed in mmdet3d's info layout (``images[cam] = {img_path, cam2img,
lidar2cam}``), which BEVFusion's ``BEVLoadMultiViewImageFromFiles`` reads.

Arithmetic: ``detection.mmdet3d.precision`` (default ``auto``: bfloat16 autocast on a GPU, float32 on the
CPU) covers the network; the heads' decoding and NMS run in float32 (``_decode_in_float32``).

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

from concurrent.futures import ThreadPoolExecutor
import copy

import numpy as np

from actors.detect.base import Detector
from actors.detect.sweeps import CachedReader, PointsSpec, model_points
from actors.device import autocast_args, resolve_device
from generator.geometry import SE3
from generator.types import Boxes3D, DrivegenError, Frame
from schemas.config import DETECTION_CLASSES, DetectionConfig


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


def _test_pipeline(model_cfg, spec: PointsSpec) -> list[dict]:
    """The config's test pipeline with its point loading (``LoadPointsFromFile`` and
    ``LoadPointsFromMultiSweeps``) replaced by ``LoadPointsFromDict`` of the ready tensor (``spec``)."""
    out = []
    for t in copy.deepcopy(model_cfg.test_dataloader.dataset.pipeline):
        if t["type"] == "LoadPointsFromFile":
            t = dict(type="LoadPointsFromDict", coord_type=spec.coord_type, load_dim=spec.num_features,
                     use_dim=list(range(spec.num_features)))
        elif t["type"] == "LoadPointsFromMultiSweeps":
            continue
        out.append(t)
    return out


def frame_input(frame: Frame, points: np.ndarray, use_camera: bool, box_type_3d, box_mode_3d) -> dict:
    """One frame in mmdet3d's data-info layout (LiDAR frame), ready for the test pipeline; ``points``
    (N, C) float32 is the model's point tensor (``sweeps.model_points``)."""
    pts = np.asarray(points, dtype=np.float32)
    info = dict(points=pts, timestamp=frame.timestamp_us / 1e6, sample_idx=frame.token,
                lidar_points=dict(lidar_path=frame.lidar_path, num_pts_feats=pts.shape[1],
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
            cam_SE3_lidar = cam.cam_SE3_ego.compose(frame.ego_SE3_lidar)
            images[name] = dict(img_path=path, cam2img=cam.K.tolist(), lidar2cam=cam_SE3_lidar.as_matrix(),
                                cam2ego=cam.ego_SE3_cam.as_matrix())
        info["images"] = images
    return info


def _float32(x):
    """``x`` (a tensor, or lists / tuples / dicts of them) with its floating tensors in float32."""
    import torch  # torch: seconds to import; only the model backends need it

    if isinstance(x, torch.Tensor):
        return x.float() if x.is_floating_point() else x
    if isinstance(x, dict):
        return {k: _float32(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_float32(v) for v in x)
    return x


def _decode_in_float32(model) -> None:
    """Under reduced precision only the network runs in it: each head's ``predict_by_feat`` (box decoding,
    score thresholds, NMS, whose CUDA ops take float32) gets float32 inputs and runs with autocast off."""
    import torch  # torch: seconds to import; only the model backends need it

    device_type = next(model.parameters()).device.type
    for module in model.modules():
        decode = getattr(module, "predict_by_feat", None)
        if decode is None or getattr(decode, "_drivegen_float32", False):
            continue

        def in_float32(*args, _decode=decode, **kwargs):
            with torch.autocast(device_type=device_type, enabled=False):
                return _decode(*_float32(args), **_float32(kwargs))

        in_float32._drivegen_float32 = True
        module.predict_by_feat = in_float32


class Mmdet3dDetector(Detector):
    name = "mmdet3d"

    def __init__(self, cfg: DetectionConfig):
        super().__init__(cfg)
        import torch  # torch: seconds to import; only the model backends need it
        from mmdet3d.apis import init_model  # mmdet3d: optional model stack (extra 'mmdet3d'), only for its backend
        from mmdet3d.structures import get_box_type
        from mmengine.dataset import Compose  # mmengine: optional model stack (extra 'mmdet3d'), only for its backend

        mc = cfg.mmdet3d
        if not mc.config:
            raise ValueError("detection.mmdet3d.config is required for the mmdet3d backend (a CenterPoint config "
                             "from mmdet3d/.mim/configs/centerpoint/ or a projects/BEVFusion config)")
        self.device = resolve_device(mc.device)
        self.model = init_model(mc.config, mc.checkpoint, device=self.device)
        mcfg = self.model.cfg
        self.points_spec = PointsSpec.from_pipeline(mcfg.test_dataloader.dataset.pipeline)
        steps = _test_pipeline(mcfg, self.points_spec)
        self.use_camera = any("Image" in t["type"] for t in steps)
        self.pipeline = Compose(steps)
        self.box_type_3d, self.box_mode_3d = get_box_type(mcfg.test_dataloader.dataset.get("box_type_3d", "LiDAR"))
        meta = getattr(self.model, "dataset_meta", None) or {}
        self.classes = list(meta.get("classes") or mc.model_classes)
        self.autocast = autocast_args(torch.device(self.device).type, mc.precision)
        if self.autocast["enabled"]:
            _decode_in_float32(self.model)

    def points(self, frame: Frame, read=None) -> np.ndarray:
        """The point tensor (N, C) float32 this frame gives the model (LiDAR frame; see the module docstring)."""
        mc = self.cfg.mmdet3d
        return model_points(frame, self.points_spec, read or CachedReader(frame.scene_id), mc.sweep_alignment,
                            mc.sweep_seed)

    def __call__(self, frames: list[Frame]) -> list[Boxes3D]:
        """Boxes per frame. A batch's input (sweeps read and stacked, the test pipeline) is built on a second
        thread while the model runs on the batch before, so the GPU does not wait on the CPU between batches."""
        import torch  # torch: seconds to import; only the model backends need it
        # mmengine: optional model stack (extra 'mmdet3d'), only for its backend
        from mmengine.dataset import pseudo_collate

        bs = self.cfg.mmdet3d.batch_size
        read = CachedReader(frames[0].scene_id if frames else None)
        chunks = [frames[i:i + bs] for i in range(0, len(frames), bs)]

        def batch_input(chunk: list[Frame]) -> list[dict]:  # one thread only: ``read`` is not shared
            data = [self.pipeline(frame_input(fr, self.points(fr, read), self.use_camera, self.box_type_3d,
                                              self.box_mode_3d)) for fr in chunk]
            read.next_batch()
            return data

        out: list[Boxes3D] = []
        with ThreadPoolExecutor(1, thread_name_prefix="detect-inputs") as inputs:
            nxt = inputs.submit(batch_input, chunks[0]) if chunks else None
            for k, chunk in enumerate(chunks):
                data = nxt.result()
                nxt = inputs.submit(batch_input, chunks[k + 1]) if k + 1 < len(chunks) else None
                with torch.no_grad(), torch.autocast(**self.autocast):
                    results = self.model.test_step(pseudo_collate(data))
                for fr, res in zip(chunk, results):
                    pred = res.pred_instances_3d
                    boxes = lidar_boxes_to_ego(pred.bboxes_3d.tensor.detach().cpu().numpy(),
                                               pred.scores_3d.detach().cpu().numpy(),
                                               pred.labels_3d.detach().cpu().numpy(), self.classes, fr.ego_SE3_lidar)
                    out.append(self._postfilter(boxes))
        return out
