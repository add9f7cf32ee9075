"""Argoverse 2 sensor logs read from their feather files with pyarrow.

Layout of one log folder (``<root>/<log_id>/``)::

    city_SE3_egovehicle.feather      ego poses (timestamp_ns, qw qx qy qz, tx_m ty_m tz_m)
    calibration/intrinsics.feather   per camera fx_px fy_px cx_px cy_px (k1..k3 radial distortion), size
    calibration/egovehicle_SE3_sensor.feather   per sensor extrinsics (cameras use the optical frame)
    annotations.feather              cuboids at 10 Hz in the ego frame of their LiDAR timestamp
    sensors/lidar/<timestamp_ns>.feather   sweeps (x, y, z, intensity, ...) in the ego frame
    sensors/cameras/<camera>/<timestamp_ns>.jpg   images (absent from the test excerpt)

Frames are the log's LiDAR timestamps, whatever its annotations cover: every sweep file under
``sensors/lidar/`` and every timestamp the annotations name (AV2 annotates sweeps, so those are LiDAR
timestamps too; a frame whose sweep file is absent is still listed, reading its points raises ``SourceError``,
generator.sources.io). Cameras are matched to them. A frame inside the annotations' span (their first to
last timestamp) carries its boxes as labels (none when the annotations list none there: AV2 annotates every
sweep of its span); a frame outside it carries no labels (``Frame.labels`` None: its objects are unknown, not
absent; under the 'labels' detection backend it keeps only its questions about the ego, see
``schemas.errors.UnlabelledFrameError``).
Camera names stay AV2's (``ring_front_center`` ...); ``Scene.front_camera`` names the front one. The
camera model is the pinhole part of AV2's intrinsics (radial distortion is ignored).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather

from generator.geometry import SE3, quat_wxyz_to_matrix, yaw_of_matrix
from generator.sources.av2_classes import AV2_TO_NUSCENES
from generator.sources.base import LogSource
from generator.sources.io import check_lidar
from generator.sources.keyframes import nearest_frame_rows, select_anchors
from generator.sources.limits import check_boxes, check_ego_positions, check_ego_speeds
from generator.sources.remote import RemoteRoot, is_remote
from generator.sources.vehicles import ego_body
from generator.types import Boxes3D, CameraCalib, Frame, FrameIssue, LidarSweep, Scene, SourceError
from schemas.config import EgoBodyConfig, KeyframeConfig, SourceLimitsConfig
from schemas.files import file_problem

FRONT_CAMERA = "ring_front_center"
POSES_FILE = "city_SE3_egovehicle.feather"
ANNOTATIONS_FILE = "annotations.feather"
INTRINSICS_FILE = "calibration/intrinsics.feather"
EXTRINSICS_FILE = "calibration/egovehicle_SE3_sensor.feather"
IMAGE_MATCH_TOL_NS = 50_000_000  # cameras run at 20 Hz, LiDAR at 10 Hz
QUAT_NORM_TOLERANCE = 1e-3  # a pose's quaternion is a rotation: unit length (AV2 stores them to 1e-7)
VELOCITY_MAX_DT_S = 1.5  # one-sided difference; doubled for central differences (as the nuScenes devkit)


def _is_log(p: Path) -> bool:
    return (p / POSES_FILE).is_file() or (p / ANNOTATIONS_FILE).is_file() or (p / "sensors" / "lidar").is_dir()


def _read(path: Path, columns: list[str], scene: str, what: str):
    problem = file_problem(path)  # a FIFO would block the read; it is no missing file either
    if problem:
        raise SourceError(f"{what} file is missing" if problem == "missing" else
                          f"{what} file is {problem}: drivegen reads a regular file", scene=scene, file=str(path),
                          stage="read")
    try:
        table = feather.read_table(str(path))
    except (pa.ArrowInvalid, OSError) as err:
        raise SourceError(f"{what} file is unreadable: {err}", scene=scene, file=str(path), stage="read") from None
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise SourceError(f"{what} file lacks columns {missing}", scene=scene, file=str(path), stage="read")
    return {c: table.column(c).to_numpy(zero_copy_only=False) for c in columns}


def _se3_arrays(cols: dict) -> tuple[np.ndarray, np.ndarray]:
    q = np.stack([cols["qw"], cols["qx"], cols["qy"], cols["qz"]], axis=1).astype(np.float64)
    t = np.stack([cols["tx_m"], cols["ty_m"], cols["tz_m"]], axis=1).astype(np.float64)
    return q, t


def interpolate_poses(pose_ts_ns: np.ndarray, q_wxyz: np.ndarray, t_m: np.ndarray, query_ns: np.ndarray):
    """Poses at ``query_ns`` (M,): rotations slerped (scipy), translations linear. Returns (R (M,3,3), t (M,3)).

    pose_ts_ns (P,) strictly increasing; queries outside [first, last] raise ValueError.
    """
    from scipy.spatial.transform import Rotation, Slerp  # scipy: over a second to import; only where this runs

    q = np.asarray(query_ns, dtype=np.int64)
    if len(q) and (q.min() < pose_ts_ns[0] or q.max() > pose_ts_ns[-1]):
        raise ValueError("timestamps outside the span of the ego poses")
    rel = (pose_ts_ns - pose_ts_ns[0]).astype(np.float64) * 1e-9
    rq = (q - pose_ts_ns[0]).astype(np.float64) * 1e-9
    rot = Rotation.from_quat(q_wxyz[:, [1, 2, 3, 0]])  # scipy wants x, y, z, w
    R = Slerp(rel, rot)(rq).as_matrix() if len(rel) > 1 else np.repeat(rot.as_matrix(), len(rq), axis=0)
    t = np.stack([np.interp(rq, rel, t_m[:, k]) for k in range(3)], axis=1)
    return R, t


def track_velocities(track: np.ndarray, t_s: np.ndarray, p_city: np.ndarray, max_dt_s: float = VELOCITY_MAX_DT_S):
    """Velocities (N, 3) m/s in the city frame from positions along tracks.

    track (N,) int track ids, t_s (N,) times, p_city (N, 3) positions. Central differences between the
    previous and next observation of the same track (one-sided at the ends); NaN for single observations
    and where the time span exceeds ``max_dt_s`` (2x for central differences), as the nuScenes devkit's
    ``box_velocity``.
    """
    n = len(track)
    out = np.full((n, 3), np.nan)
    if n == 0:
        return out
    order = np.lexsort((t_s, track))
    tr, t, p = track[order], t_s[order], p_city[order]
    ar = np.arange(n)
    has_prev = np.r_[False, tr[1:] == tr[:-1]]
    has_next = np.r_[tr[:-1] == tr[1:], False]
    i0 = np.where(has_prev, ar - 1, ar)
    i1 = np.where(has_next, ar + 1, ar)
    dt = t[i1] - t[i0]
    limit = np.where(has_prev & has_next, 2 * max_dt_s, max_dt_s)
    ok = (dt > 0) & (dt <= limit)
    with np.errstate(invalid="ignore", divide="ignore"):
        v = (p[i1] - p[i0]) / dt[:, None]
    out[order] = np.where(ok[:, None], v, np.nan)
    return out


class AV2Source(LogSource):
    """A folder of AV2 sensor logs (or one log folder). ``scene_ids()`` are the log ids. ``limits``: sanity
    bounds on annotations, ego poses and LiDAR files (``SourceLimitsConfig``, default: its defaults); the
    frames carry them to the LiDAR reader. ``check_files``: ``load_scene`` checks every sweep file the log has
    (``generator.sources.io.check_lidar``: size, finite, complete; ~6 ms a sweep): a damaged sweep is a
    ``FrameIssue`` of the scene (``Scene.issues``; too many fail it in the pipeline); an absent sweep is allowed (the frame is listed, reading it raises ``SourceError``).
    ``require_labels``: a log without ``annotations.feather`` is an error (the 'labels' detection backend
    needs annotations; without it the log's frames are unlabelled). ``max_sweeps``: each frame
    lists the LiDAR sweeps of up to this many frames before it whose sweep file exists (``Frame.lidar_sweeps``,
    newest first; AV2 sweeps are already in the ego frame of their time).
    ``list_logs``: find every log when the source opens (the driver plans from them; on object storage one
    recursive listing of the root). False (a source rebuilt on a worker, ``source_from_description``): a log is
    looked up when it loads (on object storage one listing of its prefix), so a worker never lists the logs it does
    not load; ``scene_ids`` and ``work_estimates`` still list every log, on first use."""

    name = "av2"

    def __init__(self, root, cfg: KeyframeConfig | None = None, limits: SourceLimitsConfig | None = None,
                 require_labels: bool = False, check_files: bool = True, max_sweeps: int = 10,
                 list_logs: bool = True):
        if max_sweeps < 0:
            raise ValueError(f"max_sweeps must be >= 0, got {max_sweeps}")
        self.max_sweeps = int(max_sweeps)
        self.cfg = cfg or KeyframeConfig()
        self.limits = limits or SourceLimitsConfig()
        self.require_labels = bool(require_labels)
        self.check_files = bool(check_files)
        self.remote, self._remote_files = None, {}
        self._logs: dict[str, Path] | None = None  # every log, once listed
        if is_remote(root):  # a log's files are fetched into this node's cache when it loads
            self.remote = RemoteRoot(str(root), self.limits)
            self.root = self.remote.mirror
        else:
            self.root = Path(os.path.abspath(root))
            if not self.root.is_dir():
                raise SourceError("AV2 root folder does not exist", file=str(self.root), stage="open")
        if list_logs:
            self._list_logs()

    def _list_logs(self) -> dict[str, Path]:
        """Every log of the root: one recursive listing of a remote root (each log's files kept), the folders of
        a local one. SourceError when there is none."""
        if self._logs is not None:
            return self._logs
        if self.remote is not None:
            logs, self._remote_files = self._remote_logs(self.remote.list(), self.remote.uri)
            where = self.remote.uri
        elif _is_log(self.root):
            logs, where = {self.root.name: self.root}, str(self.root)
        else:
            logs = {p.name: p for p in sorted(self.root.iterdir()) if p.is_dir() and _is_log(p)}
            where = str(self.root)
        if not logs:
            raise SourceError(f"no AV2 logs (folders with {POSES_FILE} or {ANNOTATIONS_FILE}) found", file=where,
                              stage="open")
        self._logs = logs
        return logs

    def _log(self, scene_id: str) -> Path | None:
        """The folder of the log ``scene_id`` (its mirror for a remote root), or None. Without the listing of
        every log (a source rebuilt on a worker), only that log is looked at: a local folder, or one listing of
        the log's prefix on object storage, whose files are kept for its load."""
        if self._logs is not None:
            return self._logs.get(scene_id)
        if not scene_id or scene_id in (".", "..") or "/" in scene_id or "\\" in scene_id:
            return None
        if self.remote is None:
            for log in ((self.root,) if self.root.name == scene_id else ()) + (self.root / scene_id,):
                if log.is_dir() and _is_log(log):
                    return log
            return None
        base = self.remote.uri.rstrip("/").rsplit("/", 1)[-1]
        for prefix in (scene_id, "") if base == scene_id else (scene_id,):  # "": the root is the log
            logs, files = self._remote_logs(self.remote.list(prefix, allow_empty=True), self.remote.uri)
            if scene_id in logs:
                self._remote_files[scene_id] = files[scene_id]
                return logs[scene_id]
        return None

    def scene_ids(self) -> list[str]:
        return list(self._list_logs())

    def work_estimates(self) -> dict[str, float]:
        """LiDAR sweeps per log (its frames), from the listing: a remote root's was made when the source
        opened, a local log's ``sensors/lidar/`` folder is listed now (no file is read). The annotations
        would cost a read of each log's table."""
        out = {}
        for sid, log in self._list_logs().items():
            if self.remote is not None:
                n = sum(1 for f in self._remote_files.get(sid, []) if "sensors/lidar/" in f)
            else:
                lidar = log / "sensors" / "lidar"
                n = sum(1 for _ in os.scandir(lidar)) if lidar.is_dir() else 0
            out[sid] = float(n)
        return out

    def ego_body(self) -> EgoBodyConfig:
        """Argoverse 2's Ford Fusion Hybrid (``generator.sources.vehicles``)."""
        return ego_body("av2")

    def describe(self) -> dict:
        return {"kind": self.name, "root": self.remote.uri if self.remote else str(self.root),
                "keyframes": self.cfg.model_dump(mode="json"),
                "limits": self.limits.model_dump(mode="json"), "require_labels": self.require_labels,
                "check_files": self.check_files, "max_sweeps": self.max_sweeps}

    def load_scene(self, scene_id: str) -> Scene:
        log = self._log(scene_id)
        if log is None:
            raise SourceError(f"unknown AV2 log {scene_id!r}", scene=scene_id, file=str(self.root), stage="read")
        try:
            if self.remote is None:
                return self._load(scene_id, log)
            self.remote.fetch_all(self._remote_files[scene_id])
            return self.remote.loaded(self._load(scene_id, log))
        except SourceError as err:
            raise (self.remote.named(err) if self.remote is not None else err) from None
        except (ValueError, KeyError, IndexError) as err:  # malformed contents not caught by a specific check
            raise SourceError(f"malformed AV2 log: {type(err).__name__}: {err}", scene=scene_id, file=str(log),
                              stage="read") from None

    # -- internals -------------------------------------------------------------------------------------
    def _remote_logs(self, files: list[str], uri: str) -> tuple[dict[str, Path], dict[str, list[str]]]:
        """The logs among the files of a remote root (a log: the folder of a poses or annotations file or of
        sensors/lidar/; the root itself may be one) and each log's files."""
        marks = (POSES_FILE, ANNOTATIONS_FILE, "sensors/lidar/")

        def log_of(rel: str) -> str | None:
            if any(rel == m or rel.startswith(m) for m in marks):
                return ""
            head, _, rest = rel.partition("/")
            return head if rest and any(rest == m or rest.startswith(m) for m in marks) else None

        owned: dict[str, list[str]] = {}
        for f in files:  # one pass: each file to its log (a root that is itself a log owns every file)
            head, _, rest = f.partition("/")
            owned.setdefault(head if rest else "", []).append(f)
        prefixes = sorted({p for p in map(log_of, files) if p is not None})
        logs, out = {}, {}
        for prefix in prefixes:
            name = prefix or uri.rstrip("/").rsplit("/", 1)[-1]
            logs[name] = self.root / prefix if prefix else self.root
            out[name] = files if not prefix else owned.get(prefix, [])
        return logs, out

    def _load(self, scene: str, log: Path) -> Scene:
        ann_path = log / ANNOTATIONS_FILE
        ann = None
        lidar_dir = log / "sensors" / "lidar"
        frame_ns = np.array(sorted(int(p.stem) for p in lidar_dir.glob("*.feather")), dtype=np.int64)
        if file_problem(ann_path) != "missing":  # (one that is no regular file is refused by _read, by name)
            ann = _read(ann_path, ["timestamp_ns", "track_uuid", "category", "length_m", "width_m", "height_m",
                                   "qw", "qx", "qy", "qz", "tx_m", "ty_m", "tz_m", "num_interior_pts"],
                        scene, "annotations")
            frame_ns = np.union1d(frame_ns, ann["timestamp_ns"].astype(np.int64))
        elif self.require_labels:
            raise SourceError(f"the log has no annotations ({ANNOTATIONS_FILE} is missing), and detection.backend "
                              f"'labels' turns annotations into detections: the scene would have no objects and no "
                              f"QA. Add the annotations, or use detection.backend lidar or mmdet3d for unlabelled "
                              f"logs", scene=scene, file=str(ann_path), stage="read")
        if len(frame_ns) == 0:
            raise SourceError("log has no annotated timestamps and no LiDAR sweeps", scene=scene, file=str(log),
                              stage="read")

        poses_path = log / POSES_FILE
        pose = _read(poses_path, ["timestamp_ns", "qw", "qx", "qy", "qz", "tx_m", "ty_m", "tz_m"], scene, "ego pose")
        pose_ns = pose["timestamp_ns"].astype(np.int64)
        if len(pose_ns) == 0:
            raise SourceError("the log has no ego poses", scene=scene, file=str(poses_path), stage="read")
        order = np.argsort(pose_ns, kind="stable")
        pose_ns = pose_ns[order]
        pq, pt = (a[order] for a in _se3_arrays(pose))
        if np.any(np.diff(pose_ns) <= 0) or not (np.isfinite(pq).all() and np.isfinite(pt).all()):
            raise SourceError("ego poses have repeated timestamps or non-finite values", scene=scene,
                              file=str(poses_path), stage="read")
        check_ego_positions(self.limits, pt, scene=scene, file=str(poses_path),
                            row_name=lambda i: f"ego pose at timestamp_ns {pose_ns[i]} (tx_m, ty_m, tz_m)")
        q_norm = np.linalg.norm(pq, axis=1)
        if np.any(np.abs(q_norm - 1) > QUAT_NORM_TOLERANCE):  # no rotation: a zero (or scaled) quaternion
            i = int(np.flatnonzero(np.abs(q_norm - 1) > QUAT_NORM_TOLERANCE)[0])
            raise SourceError(f"ego pose at timestamp_ns {pose_ns[i]}: quaternion (qw, qx, qy, qz) = "
                              f"{tuple(float(v) for v in pq[i])} has norm {q_norm[i]:.6g}, not 1: no rotation; the "
                              "row is corrupt: fix or remove it", scene=scene, file=str(poses_path), stage="read")
        try:
            R_ce, t_ce = interpolate_poses(pose_ns, pq, pt, frame_ns)
        except ValueError:
            raise SourceError(f"frames from {frame_ns[0]} to {frame_ns[-1]} ns are not covered by the ego poses "
                              f"({pose_ns[0]}..{pose_ns[-1]} ns)", scene=scene, file=str(poses_path),
                              stage="read") from None

        # speeds between the frames the pipeline uses: raw poses can be 1 ns apart (the AV2 log has such a pair)
        check_ego_speeds(self.limits, frame_ns // 1000, t_ce,
                         row_name=lambda i: f"ego poses interpolated at LiDAR timestamps {frame_ns[i]} -> "
                                            f"{frame_ns[i + 1]} ns", scene=scene, file=str(poses_path))
        cams = self._cameras(scene, log)
        images = self._image_index(log, list(cams))
        labels = self._labels(scene, ann_path, ann, frame_ns, R_ce, t_ce) if ann is not None else None

        frames = []
        for i, ts in enumerate(frame_ns):
            city_SE3_ego = SE3(R_ce[i], t_ce[i])
            image_paths, frame_cams = {}, {}
            for name, cal in cams.items():
                path, cam_ns = self._nearest_image(images.get(name), ts)
                image_paths[name] = path
                frame_cams[name] = cal
                if path:  # motion-compensate into this frame's ego frame, as for nuScenes
                    Rc, tc = interpolate_poses(pose_ns, pq, pt, np.array([np.clip(cam_ns, pose_ns[0], pose_ns[-1])]))
                    ego_SE3_cam = city_SE3_ego.inverse().compose(SE3(Rc[0], tc[0])).compose(cal.ego_SE3_cam)
                    frame_cams[name] = CameraCalib(name, cal.K, ego_SE3_cam, cal.width_px, cal.height_px)
            frames.append(Frame(scene_id=scene, frame_index=i, timestamp_us=int(ts // 1000), token=str(int(ts)),
                                city_SE3_ego=city_SE3_ego, ego_SE3_lidar=SE3.identity(),
                                lidar_path=str(log / "sensors" / "lidar" / f"{int(ts)}.feather"),
                                lidar_format="av2_feather", cameras=frame_cams, image_paths=image_paths,
                                labels=None if labels is None else labels[i], limits=self.limits))
        issues = []
        if self.check_files:
            for f in frames:
                if os.path.isfile(f.lidar_path):
                    try:
                        check_lidar(f)
                    except SourceError as err:  # recorded for the frame; the run counts such frames
                        issues.append(FrameIssue(f.frame_index, "load", "lidar_unreadable", err.message, f.lidar_path))
        has_lidar = np.array([os.path.isfile(f.lidar_path) for f in frames], dtype=bool)
        for i, fr in enumerate(frames):
            fr.lidar_sweeps = [LidarSweep(frames[j].lidar_path, "av2_feather", frames[j].timestamp_us,
                                          frames[j].city_SE3_ego, frames[j].ego_SE3_lidar)
                               for j in range(i - 1, max(i - 1 - self.max_sweeps, -1), -1) if has_lidar[j]]
        anchors = select_anchors(np.array([f.timestamp_us for f in frames], dtype=np.int64), self.cfg)
        for i in anchors:
            frames[i].is_anchor = True
        return Scene(scene_id=scene, source=self.name, log_name=scene, frames=frames,
                     anchor_indices=[int(i) for i in anchors],
                     front_camera=FRONT_CAMERA if FRONT_CAMERA in cams else (next(iter(cams), FRONT_CAMERA)),
                     issues=issues)

    def _cameras(self, scene: str, log: Path) -> dict[str, CameraCalib]:
        intr = _read(log / INTRINSICS_FILE, ["sensor_name", "fx_px", "fy_px", "cx_px", "cy_px", "width_px",
                                             "height_px"], scene, "camera intrinsics")
        extr = _read(log / EXTRINSICS_FILE, ["sensor_name", "qw", "qx", "qy", "qz", "tx_m", "ty_m", "tz_m"],
                     scene, "sensor extrinsics")
        eq, et = _se3_arrays(extr)
        row = {str(n): i for i, n in enumerate(extr["sensor_name"])}
        cams = {}
        for i, name in enumerate(intr["sensor_name"]):
            name = str(name)
            if name not in row:
                raise SourceError(f"camera {name} has intrinsics but no extrinsics", scene=scene,
                                  file=str(log / EXTRINSICS_FILE), stage="read")
            K = np.array([[intr["fx_px"][i], 0.0, intr["cx_px"][i]], [0.0, intr["fy_px"][i], intr["cy_px"][i]],
                          [0.0, 0.0, 1.0]])
            try:
                cams[name] = CameraCalib(name, K, SE3.from_quat(eq[row[name]], et[row[name]]),
                                         int(intr["width_px"][i]), int(intr["height_px"][i]))
            except ValueError as err:
                raise SourceError(f"calibration of camera {name} is invalid: {err}", scene=scene,
                                  file=str(log / "calibration"), stage="read") from None
        return cams

    @staticmethod
    def _image_index(log: Path, cameras: list[str]) -> dict[str, tuple[np.ndarray, list[Path]]]:
        out = {}
        for name in cameras:
            d = log / "sensors" / "cameras" / name
            if d.is_dir():
                files = sorted(d.glob("*.jpg"), key=lambda p: int(p.stem))
                if files:
                    out[name] = (np.array([int(p.stem) for p in files], dtype=np.int64), files)
        return out

    @staticmethod
    def _nearest_image(index, ts: int) -> tuple[str, int]:
        if index is None:
            return "", 0
        stamps, files = index  # nanoseconds: matched as integers (in seconds they would not fit an int64 in us)
        j = int(nearest_frame_rows(np.zeros(len(stamps)), stamps, np.zeros(1), np.array([ts], np.int64))[0])
        if abs(int(stamps[j]) - int(ts)) > IMAGE_MATCH_TOL_NS:
            return "", 0
        return str(files[j]), int(stamps[j])

    def _labels(self, scene: str, path: Path, ann: dict, frame_ns: np.ndarray, R_ce: np.ndarray,
                t_ce: np.ndarray) -> list[Boxes3D | None]:
        """Each frame's boxes in its ego frame; None for a frame outside the annotations' span (unknown)."""
        cats = ann["category"].astype(str)
        unknown = sorted(set(np.unique(cats)) - set(AV2_TO_NUSCENES))
        if unknown:
            raise SourceError(f"AV2 categories {unknown} have no entry in generator/sources/av2_classes.py",
                              scene=scene, file=str(path), stage="read")
        mapped = np.array([AV2_TO_NUSCENES[c] for c in cats], dtype=object)
        keep = mapped != None  # noqa: E711 (element-wise)
        ts = ann["timestamp_ns"].astype(np.int64)[keep]
        uuid = ann["track_uuid"].astype(str)[keep]
        q, t = (a[keep] for a in _se3_arrays(ann))
        size = np.stack([ann["length_m"], ann["width_m"], ann["height_m"]], axis=1).astype(np.float64)[keep]
        if not (np.isfinite(q).all() and np.isfinite(t).all() and np.isfinite(size).all() and (size > 0).all()):
            raise SourceError("annotations with non-finite or non-positive geometry", scene=scene, file=str(path),
                              stage="read")
        fi = np.searchsorted(frame_ns, ts)
        uniq, track = np.unique(uuid, return_inverse=True)  # stable ids: rank of the uuid in sorted order
        p_city = np.einsum("nij,nj->ni", R_ce[fi], t) + t_ce[fi]
        v_city = track_velocities(track, ts * 1e-9, p_city)
        v_ego = np.einsum("nji,nj->ni", R_ce[fi], v_city)  # R^T v
        rows = np.flatnonzero(keep)
        check_boxes(self.limits, center_m=t, size_m=size, size_fields=("length_m", "width_m", "height_m"),
                    velocity_mps=v_ego, center_field="(tx_m, ty_m, tz_m)",
                    velocity_field="the positions of its track's neighbouring annotations",
                    row_name=lambda i: f"annotation row {rows[i]} (track_uuid {uuid[i]}, timestamp_ns {ts[i]})",
                    scene=scene, file=str(path))
        yaw = yaw_of_matrix(quat_wxyz_to_matrix(q))
        boxes = Boxes3D(center_m=t, size_lwh_m=size, yaw_rad=yaw, class_name=mapped[keep],
                        velocity_mps=v_ego[:, :2], track_id=track.astype(np.int64),
                        num_lidar_pts=ann["num_interior_pts"].astype(np.int32)[keep],
                        instance_token=uuid.astype(object))
        order = np.argsort(fi, kind="stable")
        bounds = np.searchsorted(fi[order], np.arange(len(frame_ns) + 1))
        span = ann["timestamp_ns"].astype(np.int64)
        inside = (frame_ns >= span.min()) & (frame_ns <= span.max()) if len(span) else np.zeros(len(frame_ns), bool)
        return [boxes.subset(order[bounds[k]:bounds[k + 1]]) if inside[k] else None for k in range(len(frame_ns))]
