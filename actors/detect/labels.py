"""``labels`` backend: a log's own annotations as detections, with seeded noise (``LabelNoiseConfig``).

Noise, per frame, from a generator seeded by (seed, scene id, frame index) so results do not depend on
batching or on which worker runs the frame:
  * centre += N(0, center_m) per axis; size *= 1 + N(0, size_frac) (kept >= 5 % of the original);
    yaw += N(0, yaw_rad); velocity += N(0, velocity_mps) where the label has one;
  * each box is dropped with probability ``drop_prob``;
  * Poisson(``false_positives_per_frame``) boxes are added with a random class from the config, the
    class's typical size, uniformly placed 3-50 m around the ego vehicle, ``instance_token`` '';
  * noisy boxes get scores uniform in [score_min, 1]; false positives in ``fp_score`` when it is given.

What a real detector does besides, each a seeded process of the scene, so a frame's boxes never depend on
which other frames are detected with it:
  * **ghosts**, recurring false positives at fixed places: sites at ``ghosts_per_ha`` per hectare of the city
    frame (Poisson per 50 m cell, seeded by the cell), each of one random class, size and heading; a site within
    50 m of the ego is detected in a frame with probability ``ghost_presence``, centre jittered by ``center_m``;
  * **one box per object**: annotations of one class that coincide (centres closer than ``coincident_frac`` of
    the narrower width: a duplicate annotation) are detected once, as the one with the smallest token;
  * **missed runs**: an object's detections go missing in runs (occlusion, range), starting at
    ``miss_runs_per_min`` (Poisson in time, seeded by its ``instance_token`` and the minute) and lasting
    Exp(``miss_run_s``) seconds (at most 30).

With every noise parameter 0 the labels pass through unchanged (scores, instance tokens and all), so ground
truth is reproduced exactly.
"""
from __future__ import annotations

import functools
import zlib

import numpy as np

from actors.detect.base import Detector
from actors.detect.priors import size_prior
from generator.types import Boxes3D, Frame
from schemas.config import LabelNoiseConfig
from schemas.errors import UnlabelledFrameError


def frame_rng(seed: int, scene_id: str, frame_index: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(str(scene_id).encode()), int(frame_index)])


def is_noise_free(noise: LabelNoiseConfig) -> bool:
    return not any(getattr(noise, k) for k in LabelNoiseConfig.RATES)


def _fp_scores(noise: LabelNoiseConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    lo, hi = noise.fp_score if noise.fp_score is not None else (noise.score_min, 1.0)
    return rng.uniform(lo, hi, n)


_CELL_M, _GHOST_RANGE_M, _MAX_RUN_S = 50.0, 50.0, 30.0


def ghost_sites(noise: LabelNoiseConfig, scene_id: str, city_xy: np.ndarray, classes: list[str]):
    """The ghost sites within ``_GHOST_RANGE_M`` of ``city_xy`` (the ego's position in the city frame): (centres
    (K, 2) city frame, class names (K,), yaw (K,) city frame), in a fixed order (cell, then site)."""
    cx, cy = np.floor(np.asarray(city_xy, dtype=np.float64) / _CELL_M).astype(np.int64)
    xy, cls, yaw = [], [], []
    for i in range(cx - 1, cx + 2):
        for j in range(cy - 1, cy + 2):
            rng = np.random.default_rng([int(noise.seed), zlib.crc32(str(scene_id).encode()), 0x6057,
                                         int(i) & 0xFFFFFFFF, int(j) & 0xFFFFFFFF])
            k = int(rng.poisson(noise.ghosts_per_ha * _CELL_M * _CELL_M / 1e4))
            xy.append((np.array([i, j]) + rng.random((k, 2))) * _CELL_M)
            cls.append(np.asarray(classes, dtype=object)[rng.integers(0, len(classes), k)])
            yaw.append(rng.uniform(-np.pi, np.pi, k))
    xy, cls, yaw = np.concatenate(xy), np.concatenate(cls), np.concatenate(yaw)
    near = np.hypot(*(xy - city_xy).T) <= _GHOST_RANGE_M
    return xy[near], cls[near], yaw[near]


@functools.lru_cache(maxsize=1 << 16)
def _miss_runs(seed: int, scene: int, token: str, minute: int, rate: float, mean_s: float) -> tuple:
    """(starts, ends) in seconds of one object's runs of misses that start in ``minute``: drawn once, asked by
    every frame of that minute and the next."""
    rng = np.random.default_rng([seed, scene, 0x3155, zlib.crc32(token.encode()), minute & 0xFFFFFFFF])
    k = int(rng.poisson(rate))
    start = (minute + rng.random(k)) * 60.0
    return start, start + np.minimum(rng.exponential(mean_s, k), _MAX_RUN_S)


def in_miss_run(noise: LabelNoiseConfig, scene_id: str, tokens: np.ndarray, t_s: float) -> np.ndarray:
    """(N,) whether each object (by its ``instance_token``) is in a run of missed detections at time ``t_s``."""
    minute = int(np.floor(t_s / 60.0))
    scene = zlib.crc32(str(scene_id).encode())
    out = np.zeros(len(tokens), dtype=bool)
    for n, tok in enumerate(tokens):
        for m in (minute - 1, minute):  # a run is at most 30 s: it may have started in the minute before
            start, end = _miss_runs(int(noise.seed), scene, str(tok), m, noise.miss_runs_per_min, noise.miss_run_s)
            out[n] |= bool(((start <= t_s) & (t_s < end)).any())
    return out


def coincident(labels: Boxes3D, frac: float) -> np.ndarray:
    """(N,) bool: the annotations a detector would not report separately, because another annotation of their
    class coincides with them (bird's-eye centres closer than ``frac`` of the narrower width) and has a smaller
    ``instance_token`` (ties: the later box). Pairs come from a KD-tree within the frame's widest such distance."""
    out = np.zeros(len(labels), dtype=bool)
    if frac <= 0 or len(labels) < 2:
        return out
    from scipy.spatial import cKDTree  # (only here: importing scipy.spatial costs start-up time)

    xy, width = labels.center_m[:, :2], labels.size_lwh_m[:, 1]
    pairs = cKDTree(xy).query_pairs(frac * float(width.max()), output_type="ndarray")
    if not len(pairs):
        return out
    i, j = pairs[:, 0], pairs[:, 1]
    keep = (np.hypot(*(xy[i] - xy[j]).T) < frac * np.minimum(width[i], width[j])) & (
        labels.class_name[i] == labels.class_name[j])
    i, j = i[keep], j[keep]
    tok = labels.instance_token.astype(str)
    out[np.where(tok[i] > tok[j], i, j)] = True
    return out


def ground_z(labels: Boxes3D) -> float:
    """The ground's height in a frame's ego frame: the median bottom of its labelled boxes (0 without any)."""
    return float(np.median(labels.center_m[:, 2] - labels.size_lwh_m[:, 2] / 2)) if len(labels) else 0.0


def ghosts_in_frame(frame: Frame, noise: LabelNoiseConfig, rng: np.random.Generator, classes: list[str],
                    z0: float, with_velocity: bool) -> Boxes3D | None:
    """The ghosts this frame's detector sees (ego frame), or None; static (velocity 0) where the detector gives
    velocities (``with_velocity``), else without one (NaN), as the frame's other boxes."""
    if not noise.ghosts_per_ha or not classes:
        return None
    pose = frame.city_SE3_ego
    xy, cls, yaw = ghost_sites(noise, frame.scene_id, pose.translation[:2], classes)
    seen = rng.random(len(xy)) < noise.ghost_presence
    xy, cls, yaw = xy[seen], cls[seen], yaw[seen]
    if not len(xy):
        return None
    city = np.column_stack([xy, np.full(len(xy), pose.translation[2])])
    ego = pose.inverse().transform_points(city)
    size = size_prior(cls)
    ego[:, :2] += rng.normal(0.0, noise.center_m, (len(xy), 2)) if noise.center_m else 0.0
    ego[:, 2] = z0 + size[:, 2] / 2
    return Boxes3D(ego, size, yaw - pose.yaw_rad, cls, score=_fp_scores(noise, rng, len(xy)),
                   velocity_mps=np.zeros((len(xy), 2)) if with_velocity else np.full((len(xy), 2), np.nan))


def noisy_labels(labels: Boxes3D, noise: LabelNoiseConfig, rng: np.random.Generator, classes: list[str]) -> Boxes3D:
    """Pure core: (N boxes) -> noisy copy (N' boxes); see the module docstring."""
    if is_noise_free(noise):
        return labels.copy()
    n = len(labels)
    b = labels.copy()
    b.center_m = b.center_m + rng.normal(0.0, noise.center_m, (n, 3)) if noise.center_m else b.center_m
    if noise.size_frac:
        b.size_lwh_m = b.size_lwh_m * np.maximum(1 + rng.normal(0.0, noise.size_frac, (n, 3)), 0.05)
    if noise.yaw_rad:
        b.yaw_rad = b.yaw_rad + rng.normal(0.0, noise.yaw_rad, n)
    if noise.velocity_mps:
        b.velocity_mps = b.velocity_mps + rng.normal(0.0, noise.velocity_mps, (n, 2))
    b.score = rng.uniform(noise.score_min, 1.0, n)
    b.num_lidar_pts = b.num_lidar_pts.copy()
    if noise.drop_prob:
        b = b.subset(np.nonzero(rng.random(n) >= noise.drop_prob)[0])
    n_fp = int(rng.poisson(noise.false_positives_per_frame)) if noise.false_positives_per_frame else 0
    if n_fp and classes:
        cls = np.asarray(classes, dtype=object)[rng.integers(0, len(classes), n_fp)]
        size = size_prior(cls)
        r = np.sqrt(rng.uniform(3.0 ** 2, 50.0 ** 2, n_fp))
        ang = rng.uniform(-np.pi, np.pi, n_fp)
        z0 = ground_z(labels)
        center = np.stack([r * np.cos(ang), r * np.sin(ang), z0 + size[:, 2] / 2], axis=1)
        fp = Boxes3D(center, size, rng.uniform(-np.pi, np.pi, n_fp), cls,
                     score=_fp_scores(noise, rng, n_fp),
                     velocity_mps=np.zeros((n_fp, 2)) if n and np.isfinite(labels.velocity_mps).any() else None)
        b = Boxes3D.concat([b, fp])
    return b


class LabelsDetector(Detector):
    name = "labels"

    @property
    def exact(self) -> bool:  # noise-free labels are the log's annotations unchanged
        return is_noise_free(self.cfg.labels)

    def __call__(self, frames: list[Frame]) -> list[Boxes3D]:
        out = []
        for fr in frames:
            if fr.labels is None:  # outside the log's annotations: its objects are unknown, not absent
                raise UnlabelledFrameError(
                    f"frame {fr.frame_index} (t={fr.timestamp_us} us) lies outside the log's annotations: detection "
                    f"backend 'labels' knows no objects there (only the ego's questions are asked; "
                    f"detection.backend lidar or mmdet3d detects them)", scene=fr.scene_id, stage="detect")
            noise = self.cfg.labels
            rng = frame_rng(noise.seed, fr.scene_id, fr.frame_index)
            labels = fr.labels
            if not is_noise_free(noise) and noise.coincident_frac:
                labels = labels.subset(np.flatnonzero(~coincident(labels, noise.coincident_frac)))
            if noise.miss_runs_per_min and len(labels):
                tokens = labels.instance_token.astype(str)
                labels = labels.subset(np.flatnonzero(~in_miss_run(noise, fr.scene_id, tokens, fr.timestamp_us / 1e6)))
            boxes = noisy_labels(labels, noise, rng, self.cfg.classes)
            ghosts = ghosts_in_frame(fr, noise, frame_rng(noise.seed + 1, fr.scene_id, fr.frame_index),
                                     self.cfg.classes, ground_z(fr.labels), np.isfinite(boxes.velocity_mps).any())
            if ghosts is not None:
                boxes = Boxes3D.concat([boxes, ghosts])
            boxes.track_id = np.full(len(boxes), -1, dtype=np.int64)
            out.append(self._postfilter(boxes))
        return out
