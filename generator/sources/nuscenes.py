"""nuScenes-format logs through nuscenes-devkit (the real dataset or drivegen's generated logs).

No process loads the whole table set: it is converted once into a scene index
(``generator.sources.nuscenes_index``); the source reads the scene list from it, and a scene's load reads that
scene's rows and runs the devkit over them (the devkit's own records and de-normalisation, one scene at a time).

Frames are the scene's samples (2 Hz keyframes): the LIDAR_TOP sweep, the six cameras and the ego pose of
the LIDAR_TOP sample_data. Camera extrinsics are motion-compensated into the LiDAR sample's ego frame
(``ego_SE3_cam = inv(city_SE3_ego@lidar) o city_SE3_ego@camera o ego_SE3_cam(calibrated_sensor)``), the
same compensation mmdet3d bakes into ``lidar2cam``; without it a 3D box projects up to tens of pixels
off on a moving car (tests/perception/test_projection_real.py measures it). Labels are the sample's annotations as
``Boxes3D`` in that ego frame.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from generator.geometry import SE3, quat_wxyz_to_matrix, yaw_of_matrix
from generator.sources.base import LogSource
from generator.sources.io import check_lidar, image_file_problem
from generator.sources.keyframes import select_anchors
from generator.sources.limits import check_boxes, check_ego_positions, check_ego_speeds
from generator.sources.nuscenes_index import MAP_RESOLUTION_M, SceneIndex, scene_devkit
from generator.sources.remote import RemoteRoot, is_remote
from generator.sources.vehicles import GENERATED_EGO_VEHICLE, ego_body
from generator.types import Boxes3D, CameraCalib, Frame, FrameIssue, LidarSweep, Scene, SourceError
from schemas.files import file_problem
from schemas.vocab import NUSCENES_CAMERAS
from schemas.config import EgoBodyConfig, KeyframeConfig, SourceLimitsConfig

LIDAR_CHANNEL = "LIDAR_TOP"


def nuscenes_taxonomy() -> frozenset[str]:
    """The general nuScenes category names, as the devkit defines them (its class colormap)."""
    # nuscenes-devkit: seconds to import (it pulls matplotlib); only to read or score nuScenes
    from nuscenes.utils.color_map import get_colormap

    return frozenset(get_colormap())


class NuScenesSource(LogSource):
    """nuScenes tables at ``dataroot/version``, through their scene index (converted on first use: see
    ``generator.sources.nuscenes_index``) and ``nuscenes.NuScenes`` over one scene's rows at a time.

    ``scenes``: optional scene names or tokens to restrict to. ``scene_ids()`` are scene names.
    ``check_files``: ``load_scene`` checks that every image exists and is whole (a JPEG's structure,
    ``generator.sources.io.jpeg_problem``) and that every LiDAR sweep loads: size,
    whole point records, finite and complete (``generator.sources.io.check_lidar``). Each file is read once
    more for it (about 2 ms a sweep; 60-120 ms for a generated 40-keyframe scene with its 240 images). A damaged
    file is a ``FrameIssue`` of the scene (``Scene.issues``: file and message; a damaged image's camera is left
    without an image), so its masks are never silently lost; past ``failures.max_failed_frame_share`` of the
    frames the pipeline fails the scene.
    ``limits``: sanity bounds on annotations, ego poses and LiDAR files (``SourceLimitsConfig``, default: its
    defaults); the scene's frames carry them to the LiDAR reader.
    ``max_sweeps``: each frame lists up to this many earlier LIDAR_TOP sweeps (``Frame.lidar_sweeps``,
    newest first, following ``sample_data.prev`` as mmdet3d's ``create_nuscenes_infos`` does with its
    default 10), for multi-sweep detectors; their files are checked only when a detector reads them.
    """

    name = "nuscenes"

    def __init__(self, dataroot, version: str = "v1.0-mini", cfg: KeyframeConfig | None = None, scenes=None,
                 check_files: bool = True, limits: SourceLimitsConfig | None = None, max_sweeps: int = 10):
        if max_sweeps < 0:
            raise ValueError(f"max_sweeps must be >= 0, got {max_sweeps}")
        self.max_sweeps = int(max_sweeps)
        self._sensor_poses: dict[str, SE3] = {}  # calibrated_sensor token -> pose: one per sensor of a log

        self.version = version
        self.cfg = cfg or KeyframeConfig()
        self.limits = limits or SourceLimitsConfig()
        self.check_files = check_files
        self.remote = None
        if is_remote(dataroot):  # tables mirrored into this node's cache now, sensor files and maps as scenes load
            self.remote = RemoteRoot(str(dataroot), self.limits)
            self.remote.folder(version)
            self.dataroot = self.remote.mirror
        else:
            self.dataroot = Path(os.path.abspath(dataroot))
        table_root = self.dataroot / version
        if file_problem(table_root / "scene.json") == "missing":
            raise SourceError(f"no nuScenes tables for version {version!r} (scene.json missing)",
                              file=str(table_root), stage="open")
        for table in sorted(table_root.glob("*.json")):  # each is read whole when converted: a FIFO would block it
            problem = file_problem(table)
            if problem:
                raise SourceError(f"nuScenes table {table.name} is {problem}: drivegen reads a regular file",
                                  file=str(table), stage="open")
        self.index = SceneIndex.open(table_root, self.limits)  # converted once per table set (its module docstring)
        scenes_t = self.index.scenes
        names, tokens = scenes_t.column("name").to_pylist(), scenes_t.column("token").to_pylist()
        self._row: dict[str, int] = {}  # scene name -> its position in the scene table (and the index)
        for i, name in enumerate(names):
            if not isinstance(name, str):
                raise SourceError(f"row {i} of the scene table has no name (field 'name')", scene=tokens[i],
                                  file=str(table_root / "scene.json"), stage="open")
            if name in self._row:
                raise SourceError(f"two scenes are named {name!r}", scene=name,
                                  file=str(table_root / "scene.json"), stage="open")
            self._row[name] = i
        self._tokens, self._name_of = tokens, dict(zip(tokens, names))
        if scenes is None:
            self._ids = list(names)
        else:
            wanted = [self._name_of.get(s, s) for s in scenes]
            unknown = [s for s in wanted if s not in self._row]
            if unknown:
                raise SourceError(f"unknown scenes {unknown}", file=str(table_root / "scene.json"), stage="open")
            self._ids = list(dict.fromkeys(wanted))
        self._scene_filter = None if scenes is None else list(scenes)

    # -- LogSource --------------------------------------------------------------------------------------
    def scene_ids(self) -> list[str]:
        return list(self._ids)

    def work_estimates(self) -> dict[str, float]:
        """Keyframes + annotated boxes per scene, from the scene index (a scene's stages scale with both: the
        frames read and the objects tracked, segmented and asked about)."""
        samples = self.index.scenes.column("nbr_samples").fill_null(0).to_pylist()
        boxes = self.index.scenes.column("annotations").to_pylist()
        return {sid: float(samples[self._row[sid]] + boxes[self._row[sid]]) for sid in self._ids}

    def describe(self) -> dict:
        return {"kind": self.name, "dataroot": self.remote.uri if self.remote else str(self.dataroot),
                "version": self.version,
                "scenes": self._scene_filter, "check_files": self.check_files, "max_sweeps": self.max_sweeps,
                "keyframes": self.cfg.model_dump(mode="json"), "limits": self.limits.model_dump(mode="json")}

    def ego_body(self) -> EgoBodyConfig:
        """The Renault Zoe of nuScenes' logs, or the generated logs' own ego where every log of the run's scenes
        names it as its vehicle (``generator.sources.vehicles``)."""
        column = self.index.scenes.column("vehicle")  # each scene's log's (the scene index)
        vehicles = {column[self._row[sid]].as_py() for sid in self._ids}
        return ego_body("generated" if vehicles == {GENERATED_EGO_VEHICLE} else "nuscenes")

    def drivable_map(self, scene_id: str) -> dict | None:
        """The scene's log's semantic-prior map (``map.json``; drivable surface and sidewalks at 0.1 m/pixel),
        when its PNG is there."""
        i = self._row.get(scene_id)
        filename = None if i is None else self.index.scenes.column("map_filename")[i].as_py()
        if not filename:
            return None
        path = self.dataroot / filename
        if self.remote is not None:
            self.remote.fetch_all([filename])
        if not path.is_file():
            return None
        category = self.index.scenes.column("map_category")[i].as_py()
        # named by its object on object storage: the node's cache path is no output's
        return {"path": self.remote.uri_of(path) if self.remote is not None else str(path),
                "resolution_m": MAP_RESOLUTION_M, "kind": f"nuScenes {category or 'map'}"}

    def load_scene(self, scene_id: str) -> Scene:
        name = scene_id if scene_id in self._row else self._name_of.get(scene_id)
        if name is None:
            raise SourceError(f"unknown scene {scene_id!r}", scene=scene_id,
                              file=str(self.dataroot / self.version / "scene.json"), stage="read")
        try:
            nusc, instance_rows = self._scene_tables(name)
            scene = self._load(nusc, nusc.get("scene", self._tokens[self._row[name]]), instance_rows)
            return self.remote.loaded(scene) if self.remote is not None else scene
        except SourceError as err:
            raise (self.remote.named(err) if self.remote is not None else err) from None
        except KeyError as err:  # a token or field that is not there
            raise SourceError(f"a table row references a missing token or lacks field {err}", scene=name,
                              file=str(self.dataroot / self.version), stage="read") from None
        except (TypeError, ValueError) as err:  # a field of the wrong type or shape
            raise SourceError(f"malformed table row: {type(err).__name__}: {err}", scene=name,
                              file=str(self.dataroot / self.version), stage="read") from None

    # -- internals -------------------------------------------------------------------------------------
    def _table_file(self, table: str) -> str:
        return str(self.dataroot / self.version / f"{table}.json")

    def _scene_tables(self, name: str):
        """The devkit over the scene's rows of the index (``nuscenes_index.scene_devkit``) and the instances'
        positions in the whole instance table (track ids). Logs on object storage: its maps fetched first (the
        devkit opens their masks)."""
        tables, rows = self.index.tables(self._row[name])
        maps = self._table_file("map")
        if not tables["map"]:  # the devkit's reverse index needs the map listing the scene's log
            log_token = tables["scene"][0].get("log_token") if tables["scene"] else None
            raise SourceError(f"no map lists the scene's log {log_token!r} (field log_tokens)", scene=name,
                              file=maps, stage="read")
        if self.remote is not None:  # one that cannot be fetched stays absent: the devkit's error names the file
            self.remote.fetch_all([m["filename"] for m in tables["map"] if isinstance(m.get("filename"), str)])
        try:
            return scene_devkit(tables, self.dataroot, self.version), rows["instance"]
        except AssertionError as err:  # a map mask that is not there
            raise SourceError(f"{err}", scene=name, file=maps, stage="read") from None

    def _path(self, scene: str, sd: dict) -> str:
        """Absolute path of a sample_data file; refuses rows that point outside the dataroot. Logs on object
        storage: the file is fetched into the node cache; one that cannot be is left absent, for the file
        checks to record (a missing object is the frame's problem, as a missing local file is).

        The check is lexical (``..`` and absolute names), so a dataroot whose ``samples/`` folder is a
        symlink to other storage still works.
        """
        rel = sd.get("filename", "")
        full = os.path.normpath(os.path.join(str(self.dataroot), rel)) if isinstance(rel, str) else ""
        if not rel or os.path.isabs(rel) or os.path.commonpath([full, str(self.dataroot)]) != str(self.dataroot):
            raise SourceError(f"sample_data {sd['token']} ({sd.get('channel')}) filename {rel!r} points outside the "
                              f"dataroot {self.dataroot}", scene=scene, file=self._table_file("sample_data"),
                              stage="read")
        if self.remote is not None:
            self.remote.fetch_all([rel])
        return full

    def _pose(self, nusc, scene: str, sd: dict) -> SE3:
        tok = sd.get("ego_pose_token", "")
        try:
            pose = nusc.get("ego_pose", tok)
        except KeyError:
            raise SourceError(f"no ego pose {tok!r} for sample_data {sd['token']} ({sd.get('channel')})",
                              scene=scene, file=self._table_file("ego_pose"), stage="read") from None
        try:
            se3 = SE3.from_quat(pose["rotation"], pose["translation"])
        except (ValueError, KeyError) as err:
            raise SourceError(f"ego pose {tok} is malformed: {err}", scene=scene,
                              file=self._table_file("ego_pose"), stage="read") from None
        check_ego_positions(self.limits, se3.translation, row_name=lambda _: f"ego_pose {tok} (translation)",
                            scene=scene, file=self._table_file("ego_pose"))
        return se3

    def _calib(self, nusc, scene: str, sd: dict) -> tuple[SE3, dict]:
        """The sensor's pose on the ego and its calibrated_sensor row; the pose built once per sensor (the
        sweeps of a log share it: a scene asks about a thousand times)."""
        cs = nusc.get("calibrated_sensor", sd["calibrated_sensor_token"])
        pose = self._sensor_poses.get(cs["token"])
        if pose is not None:
            return pose, cs
        try:
            pose = self._sensor_poses[cs["token"]] = SE3.from_quat(cs["rotation"], cs["translation"])
            return pose, cs
        except (ValueError, KeyError) as err:
            raise SourceError(f"calibrated_sensor {cs['token']} ({sd.get('channel')}) is malformed: {err}",
                              scene=scene, file=self._table_file("calibrated_sensor"), stage="read") from None

    def _load(self, nusc, rec: dict, instance_rows: dict[str, int]) -> Scene:
        """The scene ``rec`` from ``nusc`` (the devkit over its rows); ``instance_rows``: each instance's position
        in the whole instance table (its track id)."""
        scene = rec["name"]
        log = nusc.get("log", rec["log_token"])
        samples, seen = [], set()
        tok = rec["first_sample_token"]
        while tok:
            if tok in seen:  # a chain that comes back on itself would be followed forever
                back = len(samples) - 1 - [x["token"] for x in samples].index(tok)
                raise SourceError(f"the scene's sample chain loops: sample {samples[-1]['token']} has next {tok!r}, "
                                  f"the sample {back} back in the chain; fix its next field", scene=scene,
                                  file=self._table_file("sample"), stage="read")
            seen.add(tok)
            s = nusc.get("sample", tok)
            samples.append(s)
            tok = s["next"]
        if len(samples) != rec.get("nbr_samples", len(samples)):
            raise SourceError(f"scene lists {rec['nbr_samples']} samples but its sample chain has {len(samples)}",
                              scene=scene, file=self._table_file("sample"), stage="read")
        if not samples:
            raise SourceError(f"scene {scene} has no samples (first_sample_token {rec['first_sample_token']!r}): "
                              f"no frames to generate QA from; remove the scene or restore its samples",
                              scene=scene, file=self._table_file("scene"), stage="read")
        issues: list[FrameIssue] = []
        frames = [self._frame(nusc, scene, i, s, issues, instance_rows) for i, s in enumerate(samples)]
        ts = np.array([f.timestamp_us for f in frames], dtype=np.int64)
        if np.any(np.diff(ts) <= 0):
            raise SourceError("sample timestamps are not strictly increasing", scene=scene,
                              file=self._table_file("sample"), stage="read")
        check_ego_speeds(self.limits, ts, np.array([f.city_SE3_ego.translation for f in frames]),
                         row_name=lambda i: f"ego poses of samples {samples[i]['token']} -> {samples[i + 1]['token']} "
                                            f"({LIDAR_CHANNEL})", scene=scene, file=self._table_file("ego_pose"))
        anchors = select_anchors(ts, self.cfg)
        for i in anchors:
            frames[i].is_anchor = True
        return Scene(scene_id=scene, source=self.name, log_name=log["logfile"], frames=frames,
                     anchor_indices=[int(i) for i in anchors], front_camera="CAM_FRONT", issues=issues)

    def _frame(self, nusc, scene: str, index: int, sample: dict, issues: list, instance_rows: dict) -> Frame:
        if LIDAR_CHANNEL not in sample["data"]:
            raise SourceError(f"sample {sample['token']} has no {LIDAR_CHANNEL} keyframe", scene=scene,
                              file=self._table_file("sample_data"), stage="read")
        lidar_sd = nusc.get("sample_data", sample["data"][LIDAR_CHANNEL])
        city_SE3_ego = self._pose(nusc, scene, lidar_sd)
        ego_SE3_lidar, _ = self._calib(nusc, scene, lidar_sd)
        lidar_path = self._path(scene, lidar_sd)
        ego_SE3_city = city_SE3_ego.inverse()
        cameras, images = {}, {}
        for cam in NUSCENES_CAMERAS:
            if cam not in sample["data"]:
                continue
            sd = nusc.get("sample_data", sample["data"][cam])
            ego_cam_SE3_cam, cs = self._calib(nusc, scene, sd)
            ego_SE3_cam = ego_SE3_city.compose(self._pose(nusc, scene, sd)).compose(ego_cam_SE3_cam)
            try:
                cameras[cam] = CameraCalib(cam, np.asarray(cs.get("camera_intrinsic"), dtype=np.float64),
                                           ego_SE3_cam, int(sd["width"]), int(sd["height"]))
            except (ValueError, TypeError) as err:
                raise SourceError(f"calibration of {cam} (calibrated_sensor {cs['token']}) is invalid: {err}",
                                  scene=scene, file=self._table_file("calibrated_sensor"), stage="read") from None
            images[cam] = self._path(scene, sd)
            if self.check_files:  # a damaged image is this frame's problem: recorded, the camera goes imageless
                problem = image_file_problem(images[cam])
                if problem:
                    issues.append(FrameIssue(index, "load", "image_unreadable",
                                             f"image of {cam} of sample {sample['token']} is unreadable ({problem}); "
                                             "restore it from the log", images[cam], cam))
                    images[cam] = ""
        frame = Frame(scene_id=scene, frame_index=index, timestamp_us=int(sample["timestamp"]), token=sample["token"],
                      city_SE3_ego=city_SE3_ego, ego_SE3_lidar=ego_SE3_lidar, lidar_path=lidar_path,
                      lidar_format="nuscenes_bin", cameras=cameras, image_paths=images,
                      labels=self._labels(nusc, scene, sample, ego_SE3_city, instance_rows), limits=self.limits,
                      lidar_sweeps=self._sweeps(nusc, scene, lidar_sd))
        if self.check_files:
            try:
                check_lidar(frame)
            except SourceError as err:  # recorded for the frame; its detector and visibility inputs fail later
                issues.append(FrameIssue(index, "load", "lidar_unreadable", err.message, frame.lidar_path))
        return frame

    def _sweeps(self, nusc, scene: str, lidar_sd: dict) -> list[LidarSweep]:
        """Up to ``max_sweeps`` LiDAR sample_data before ``lidar_sd``, newest first, with their poses."""
        out = []
        sd = lidar_sd
        while len(out) < self.max_sweeps and sd.get("prev"):
            sd = nusc.get("sample_data", sd["prev"])
            out.append(LidarSweep(lidar_path=self._path(scene, sd), lidar_format="nuscenes_bin",
                                  timestamp_us=int(sd["timestamp"]), city_SE3_ego=self._pose(nusc, scene, sd),
                                  ego_SE3_lidar=self._calib(nusc, scene, sd)[0]))
        return out

    def _labels(self, nusc, scene: str, sample: dict, ego_SE3_city: SE3, instance_rows: dict) -> Boxes3D:
        """The sample's annotations in the ego frame; categories without a detection class are dropped. Track
        ids: the instances' positions in the whole instance table (``instance_rows``)."""
        # nuscenes-devkit: seconds to import (it pulls matplotlib); only to read or score nuScenes
        from nuscenes.eval.detection.utils import category_to_detection_name

        taxonomy = nuscenes_taxonomy()
        anns = [nusc.get("sample_annotation", t) for t in sample["anns"]]
        unknown = sorted({a["category_name"] for a in anns} - taxonomy)
        if unknown:
            raise SourceError(f"annotation categories {unknown} are not in the nuScenes taxonomy", scene=scene,
                              file=self._table_file("category"), stage="read")
        keep = [(a, category_to_detection_name(a["category_name"])) for a in anns]
        keep = [(a, c) for a, c in keep if c is not None]
        if not keep:
            return Boxes3D.empty()
        try:
            t_city = np.array([a["translation"] for a, _ in keep], dtype=np.float64).reshape(-1, 3)
            q_city = np.array([a["rotation"] for a, _ in keep], dtype=np.float64).reshape(-1, 4)
            wlh = np.array([a["size"] for a, _ in keep], dtype=np.float64).reshape(-1, 3)
        except ValueError as err:
            raise SourceError(f"sample {sample['token']}: annotation translation/rotation/size malformed: {err}",
                              scene=scene, file=self._table_file("sample_annotation"), stage="read") from None
        if len(t_city) != len(keep) or not (np.isfinite(t_city).all() and np.isfinite(q_city).all()
                                            and np.isfinite(wlh).all() and (wlh > 0).all()):
            raise SourceError(f"sample {sample['token']}: annotations with non-finite or non-positive geometry",
                              scene=scene, file=self._table_file("sample_annotation"), stage="read")
        R = ego_SE3_city.rotation
        center = ego_SE3_city.transform_points(t_city)
        yaw = yaw_of_matrix(R[None] @ quat_wxyz_to_matrix(q_city))
        v_city = np.array([nusc.box_velocity(a["token"]) for a, _ in keep], dtype=np.float64)
        v_ego = v_city @ R.T
        check_boxes(self.limits, center_m=center, size_m=wlh, size_fields=("size[0] (width)", "size[1] (length)",
                                                                           "size[2] (height)"),
                    velocity_mps=v_ego, center_field="(translation)",
                    velocity_field="the translations of its instance's neighbouring annotations",
                    row_name=lambda i: f"sample {sample['token']}: sample_annotation {keep[i][0]['token']}",
                    scene=scene, file=self._table_file("sample_annotation"))
        inst = [a["instance_token"] for a, _ in keep]
        return Boxes3D(center_m=center, size_lwh_m=wlh[:, [1, 0, 2]], yaw_rad=yaw,
                       class_name=np.array([c for _, c in keep], dtype=object),
                       velocity_mps=v_ego[:, :2],
                       track_id=np.array([instance_rows[t] for t in inst], dtype=np.int64),
                       num_lidar_pts=np.array([a.get("num_lidar_pts", -1) for a, _ in keep], dtype=np.int32),
                       instance_token=np.array(inst, dtype=object))
