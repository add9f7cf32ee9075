"""``labels`` backend: a log's own annotations as detections, with seeded noise (``LabelNoiseConfig``).

Noise, per frame, from a generator seeded by (seed, scene id, frame index) so results do not depend on
batching or on which worker runs the frame:
  * centre += N(0, center_m) per axis; size *= 1 + N(0, size_frac) (kept >= 5 % of the original);
    yaw += N(0, yaw_rad); velocity += N(0, velocity_mps) where the label has one;
  * each box is dropped with probability ``drop_prob``;
  * Poisson(``false_positives_per_frame``) boxes are added with a random class from the config, the
    class's typical size, uniformly placed 3-50 m around the ego vehicle, ``instance_token`` '';
  * noisy boxes get scores uniform in [score_min, 1]. With every noise parameter 0 the labels pass
    through unchanged (scores, instance tokens and all), so ground truth is reproduced exactly.
"""
from __future__ import annotations

import zlib

import numpy as np

from actors.detect.base import Detector
from actors.detect.priors import size_prior
from generator.types import Boxes3D, Frame, SourceError
from schemas.config import LabelNoiseConfig


def frame_rng(seed: int, scene_id: str, frame_index: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(str(scene_id).encode()), int(frame_index)])


def is_noise_free(noise: LabelNoiseConfig) -> bool:
    return (noise.center_m == 0 and noise.size_frac == 0 and noise.yaw_rad == 0 and noise.velocity_mps == 0
            and noise.drop_prob == 0 and noise.false_positives_per_frame == 0)


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
        z0 = float(np.median(labels.center_m[:, 2] - labels.size_lwh_m[:, 2] / 2)) if n else 0.0
        center = np.stack([r * np.cos(ang), r * np.sin(ang), z0 + size[:, 2] / 2], axis=1)
        fp = Boxes3D(center, size, rng.uniform(-np.pi, np.pi, n_fp), cls,
                     score=rng.uniform(noise.score_min, 1.0, n_fp),
                     velocity_mps=np.zeros((n_fp, 2)) if n and np.isfinite(labels.velocity_mps).any() else None)
        b = Boxes3D.concat([b, fp])
    return b


class LabelsDetector(Detector):
    name = "labels"

    def __call__(self, frames: list[Frame]) -> list[Boxes3D]:
        out = []
        for fr in frames:
            if fr.labels is None:
                raise SourceError("detection backend 'labels' needs annotated frames; this frame has no labels "
                                  "(use detection.backend: lidar or mmdet3d)", scene=fr.scene_id, stage="detect")
            rng = frame_rng(self.cfg.labels.seed, fr.scene_id, fr.frame_index)
            boxes = noisy_labels(fr.labels, self.cfg.labels, rng, self.cfg.classes)
            boxes.track_id = np.full(len(boxes), -1, dtype=np.int64)
            out.append(self._postfilter(boxes))
        return out
