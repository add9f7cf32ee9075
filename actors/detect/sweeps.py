"""Multi-sweep LiDAR input: a frame's sweep plus its earlier sweeps in one point array.

Two users:

* the ``mmdet3d`` backend builds the point tensor exactly as the model config's test pipeline does
  (``LoadPointsFromFile`` then ``LoadPointsFromMultiSweeps``; ``PointsSpec.from_pipeline`` reads their
  arguments) and hands it to the rest of that pipeline: CenterPoint and BEVFusion nuScenes checkpoints are
  trained on the keyframe plus 9 earlier sweeps with a time-lag channel;
* the ``lidar`` backend accumulates sweeps in the ego frame (``sweeps_in_ego``) to see sparse objects
  better and to measure motion.

mmdet3d 1.4's multi-sweep loading, restated (``mmdet3d/datasets/transforms/loading.py``):

1. keyframe records (``load_dim`` float32 values per point) -> columns ``use_dim`` (optionally
   ``tanh`` of intensity / elongation); column 4 (the nuScenes ring index) is overwritten with 0, the
   keyframe's time lag;
2. with no sweep list at all and ``pad_empty_sweeps``: ``sweeps_num`` copies of the keyframe points (each
   through the close-point filter when ``remove_close``); an empty list adds nothing;
3. otherwise the sweeps to use: all when there are at most ``sweeps_num``, else the first ``sweeps_num``
   (nearest in time) with ``test_mode``, else ``np.random.choice(len, sweeps_num, replace=False)``
   (the CenterPoint nuScenes configs do not set ``test_mode``: 9 of 10 sweeps at random, at test time too);
4. each sweep: its records, the points with ``|x| < 1 and |y| < 1`` in its own frame dropped when
   ``remove_close``, moved into the keyframe's LiDAR frame and given the time lag
   ``t_key - t_sweep`` (s) in column 4;
5. keyframe first, then the sweeps in list order (newest first), then columns ``use_dim`` of the sweep
   step.

Step 4's motion, from the info file's ``lidar2sensor`` = [[R^T, -R^T t]] (float32) where (R, t) =
``sensor2lidar`` (sweep LiDAR -> keyframe LiDAR), is ``p @ R^T + R^T t``: the translation is rotated by
R^T, where the rigid motion is ``R p + t`` (mmdetection3d PR #3007, open). The difference is |(R^T - I) t|:
zero when driving straight, decimetres in a turn. ``alignment='mmdet3d'`` reproduces mmdet3d (what models
trained with mmdet3d 1.x pipelines saw); ``alignment='rigid'`` applies the rigid motion (the v0.x
pipelines, nuscenes-devkit's ``from_file_multisweep``).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from generator.geometry import SE3
from generator.sources.io import read_lidar_records

REMOVE_CLOSE_RADIUS_M = 1.0  # LoadPointsFromMultiSweeps._remove_close's default radius (a square, |x|, |y| < 1)
TIME_LAG_COLUMN = 4  # the column LoadPointsFromMultiSweeps overwrites with the time lag (nuScenes: ring index)


@dataclass(frozen=True)
class SweepsSpec:
    """``LoadPointsFromMultiSweeps`` arguments (defaults: mmdet3d 1.4's)."""

    sweeps_num: int = 10
    load_dim: int = 5
    use_dim: tuple[int, ...] = (0, 1, 2, 4)
    pad_empty_sweeps: bool = False
    remove_close: bool = False
    test_mode: bool = False


@dataclass(frozen=True)
class PointsSpec:
    """``LoadPointsFromFile`` arguments (defaults: mmdet3d 1.4's) and the multi-sweep step, if any."""

    coord_type: str = "LIDAR"
    load_dim: int = 6
    use_dim: tuple[int, ...] = (0, 1, 2)
    norm_intensity: bool = False
    norm_elongation: bool = False
    sweeps: SweepsSpec | None = None

    @property
    def num_features(self) -> int:
        """Columns of the final point array."""
        return len(self.sweeps.use_dim) if self.sweeps is not None else len(self.use_dim)

    @staticmethod
    def from_pipeline(pipeline: list[dict]) -> "PointsSpec":
        """The point loading of a config's test pipeline. Raises ValueError when it loads no points from a
        file, or asks for a loading option drivegen does not reproduce (shift_height, use_color)."""
        load = next((t for t in pipeline if t["type"] == "LoadPointsFromFile"), None)
        multi = next((t for t in pipeline if t["type"] == "LoadPointsFromMultiSweeps"), None)
        if load is None:
            raise ValueError("the model's test pipeline has no LoadPointsFromFile step: not a LiDAR model config")
        if load.get("shift_height") or load.get("use_color"):
            raise ValueError("LoadPointsFromFile with shift_height or use_color is not supported (indoor configs)")
        if multi is not None and (multi.get("load_dim", 5) < TIME_LAG_COLUMN + 1):
            raise ValueError(f"LoadPointsFromMultiSweeps needs load_dim >= 5 (time lag in column {TIME_LAG_COLUMN})")
        sweeps = None if multi is None else SweepsSpec(
            sweeps_num=int(multi.get("sweeps_num", 10)), load_dim=int(multi.get("load_dim", 5)),
            use_dim=_dims(multi.get("use_dim", [0, 1, 2, 4])),
            pad_empty_sweeps=bool(multi.get("pad_empty_sweeps", False)),
            remove_close=bool(multi.get("remove_close", False)), test_mode=bool(multi.get("test_mode", False)))
        spec = PointsSpec(coord_type=load.get("coord_type", "LIDAR"), load_dim=int(load.get("load_dim", 6)),
                          use_dim=_dims(load.get("use_dim", [0, 1, 2])),
                          norm_intensity=bool(load.get("norm_intensity", False)),
                          norm_elongation=bool(load.get("norm_elongation", False)), sweeps=sweeps)
        return spec


def _dims(use_dim) -> tuple[int, ...]:
    return tuple(range(use_dim)) if isinstance(use_dim, int) else tuple(int(d) for d in use_dim)


def choice_seed(seed: int, token: str) -> int:
    """The seed of a frame's random sweep choice (step 3 without ``test_mode``): from the config's seed and
    the frame token, so a frame always gets the same sweeps. ``np.random.RandomState(choice_seed(...))``
    draws what ``np.random.seed(choice_seed(...))`` then mmdet3d's ``np.random.choice`` draws."""
    return (int(seed) + zlib.crc32(str(token).encode())) % 2 ** 32


def sweep_to_key(key_city_SE3_ego: SE3, key_ego_SE3_lidar: SE3, sweep_city_SE3_ego: SE3,
                 sweep_ego_SE3_lidar: SE3) -> SE3:
    """keyLiDAR_SE3_sweepLiDAR: sweep LiDAR -> sweep ego -> city -> keyframe ego -> keyframe LiDAR."""
    return key_ego_SE3_lidar.inverse().compose(key_city_SE3_ego.inverse()).compose(sweep_city_SE3_ego) \
        .compose(sweep_ego_SE3_lidar)


def remove_close(points: np.ndarray, radius_m: float = REMOVE_CLOSE_RADIUS_M) -> np.ndarray:
    """Points (N, C) without those with |x| < r and |y| < r (a square around the sensor)."""
    return points[~((np.abs(points[:, 0]) < radius_m) & (np.abs(points[:, 1]) < radius_m))]


def align_sweep(points: np.ndarray, key_SE3_sweep: SE3, alignment: str) -> np.ndarray:
    """Sweep records (N, C) float32, sensor frame -> the keyframe's LiDAR frame (a copy; other columns kept).

    'mmdet3d': ``p @ R^T + R^T t`` in float32 with the float32 ``lidar2sensor`` matrix, as mmdet3d 1.4
    computes it; 'rigid': ``R p + t`` (see the module docstring)."""
    out = np.array(points, dtype=np.float32, copy=True)
    R, t = key_SE3_sweep.rotation, key_SE3_sweep.translation
    if alignment == "mmdet3d":
        lidar2sensor = np.eye(4)
        lidar2sensor[:3, :3] = R.T
        lidar2sensor[:3, 3] = -(R.T @ t)
        lidar2sensor = lidar2sensor.astype(np.float32)
        out[:, :3] = out[:, :3] @ lidar2sensor[:3, :3]
        out[:, :3] -= lidar2sensor[:3, 3]
    elif alignment == "rigid":
        out[:, :3] = (out[:, :3].astype(np.float64) @ R.T + t).astype(np.float32)
    else:
        raise ValueError(f"unknown sweep alignment {alignment!r}; known: 'mmdet3d', 'rigid'")
    return out


@dataclass(frozen=True)
class SweepInput:
    """One earlier sweep: its records (N, C) float32 in its own LiDAR frame, time (s), pose relative to the key."""

    records: np.ndarray
    time_s: float
    key_SE3_sweep: SE3


def select_sweeps(n_sweeps: int, ms: SweepsSpec, rng: np.random.RandomState | None = None) -> np.ndarray:
    """Indices (K,) of the listed sweeps (newest first) that step 3 uses: all when at most ``sweeps_num``,
    else the nearest ``sweeps_num`` with ``test_mode``, else ``rng.choice(n, sweeps_num, replace=False)``
    (``np.random`` when ``rng`` is None, as mmdet3d)."""
    if n_sweeps <= ms.sweeps_num:
        return np.arange(n_sweeps)
    if ms.test_mode:
        return np.arange(ms.sweeps_num)
    return np.asarray((rng if rng is not None else np.random).choice(n_sweeps, ms.sweeps_num, replace=False))


def multisweep_points(key_records: np.ndarray, key_time_s: float, sweeps: list[SweepInput] | None, spec: PointsSpec,
                      alignment: str = "mmdet3d") -> np.ndarray:
    """The point array mmdet3d's ``LoadPointsFromFile`` + ``LoadPointsFromMultiSweeps`` build (module docstring).

    key_records (N, spec.load_dim) float32 in the keyframe's LiDAR frame; ``sweeps``: the sweeps
    ``select_sweeps`` chose, in that order (None: the log lists none, so ``pad_empty_sweeps`` applies).
    Returns (M, spec.num_features) float32, keyframe LiDAR frame: keyframe points first, then each sweep's."""
    key = np.array(key_records, dtype=np.float32, copy=True).reshape(-1, spec.load_dim)[:, list(spec.use_dim)]
    if spec.norm_intensity:
        key[:, 3] = np.tanh(key[:, 3])
    if spec.norm_elongation:
        key[:, 4] = np.tanh(key[:, 4])
    ms = spec.sweeps
    if ms is None:
        return key
    key[:, TIME_LAG_COLUMN] = 0.0
    parts = [key]
    if sweeps is None:
        if ms.pad_empty_sweeps:
            parts += [remove_close(key) if ms.remove_close else key] * ms.sweeps_num
    else:
        for sw in sweeps:
            pts = np.asarray(sw.records, dtype=np.float32).reshape(-1, ms.load_dim)
            if ms.remove_close:
                pts = remove_close(pts)
            pts = align_sweep(pts, sw.key_SE3_sweep, alignment)
            pts[:, TIME_LAG_COLUMN] = key_time_s - sw.time_s
            parts.append(pts)
    return np.concatenate(parts, axis=0)[:, list(ms.use_dim)]


Reader = Callable[[str, str, SE3, int], np.ndarray]  # (path, lidar_format, ego_SE3_lidar, record_dim) -> records


def frame_sweep_inputs(frame, indices, record_dim: int, read: Reader) -> list[SweepInput]:
    """``frame.lidar_sweeps[indices]`` read with ``read``, posed relative to the frame's LiDAR."""
    out = []
    for i in indices:
        sw = frame.lidar_sweeps[int(i)]
        out.append(SweepInput(read(sw.lidar_path, sw.lidar_format, sw.ego_SE3_lidar, record_dim), sw.timestamp_us / 1e6,
                              sweep_to_key(frame.city_SE3_ego, frame.ego_SE3_lidar, sw.city_SE3_ego, sw.ego_SE3_lidar)))
    return out


def model_points(frame, spec: PointsSpec, read: Reader, alignment: str = "mmdet3d", seed: int = 0) -> np.ndarray:
    """A frame's model input (M, spec.num_features) float32, LiDAR frame: its sweep read with ``read``
    (``spec.load_dim`` values per point) and, for a multi-sweep spec, its ``lidar_sweeps`` chosen by
    ``select_sweeps`` with a generator seeded by ``choice_seed(seed, frame.token)``."""
    key = read(frame.lidar_path, frame.lidar_format, frame.ego_SE3_lidar, spec.load_dim)
    sweeps = None
    if spec.sweeps is not None and frame.lidar_sweeps is not None:
        idx = select_sweeps(len(frame.lidar_sweeps), spec.sweeps, np.random.RandomState(choice_seed(seed, frame.token)))
        sweeps = frame_sweep_inputs(frame, idx, spec.sweeps.load_dim, read)
    return multisweep_points(key, frame.timestamp_us / 1e6, sweeps, spec, alignment)


class CachedReader:
    """``read_lidar_records`` with the files of the last ``keep`` calls' frames kept in memory: a frame's
    sweeps are mostly the previous frames' (nuScenes keyframe k's 10 sweeps reach back past keyframe k-1),
    so a scene read in batches reads each file once. ``next_batch()`` drops what the finished batch did
    not use."""

    def __init__(self, scene: str | None = None):
        self.scene = scene
        self._cache: dict[tuple, np.ndarray] = {}
        self._used: set = set()
        self.reads = 0

    def __call__(self, path: str, lidar_format: str, ego_SE3_lidar: SE3, record_dim: int) -> np.ndarray:
        key = (path, lidar_format, record_dim, ego_SE3_lidar.as_matrix().tobytes())
        if key not in self._cache:
            self._cache[key] = read_lidar_records(path, lidar_format, ego_SE3_lidar, record_dim, scene=self.scene)
            self._cache[key].setflags(write=False)
            self.reads += 1
        self._used.add(key)
        return self._cache[key]

    def next_batch(self) -> None:
        self._cache = {k: v for k, v in self._cache.items() if k in self._used}
        self._used = set()
