"""Typical object sizes per nuScenes detection class (length, width, height in metres).

Rounded means of the nuScenes training boxes; used to complete partly seen LiDAR clusters, to
classify clusters by shape and to size synthetic false positives.
"""
from __future__ import annotations

import numpy as np

from schemas.config import DETECTION_CLASSES

SIZE_PRIORS_LWH_M: dict[str, tuple[float, float, float]] = {
    "car": (4.6, 1.95, 1.75),
    "truck": (6.9, 2.5, 2.9),
    "bus": (11.0, 2.95, 3.5),
    "trailer": (12.0, 2.9, 3.9),
    "construction_vehicle": (6.5, 2.8, 3.2),
    "pedestrian": (0.73, 0.67, 1.77),
    "motorcycle": (2.1, 0.77, 1.47),
    "bicycle": (1.7, 0.6, 1.3),
    "traffic_cone": (0.41, 0.41, 1.07),
    "barrier": (0.5, 2.53, 0.98),  # nuScenes barriers: length is the thin side, the long side is the width
}


def size_prior(class_name: np.ndarray) -> np.ndarray:
    """(N,) class names -> (N, 3) prior sizes (car's for unknown names)."""
    table = np.array([SIZE_PRIORS_LWH_M[c] for c in DETECTION_CLASSES])
    idx = {c: i for i, c in enumerate(DETECTION_CLASSES)}
    return table[[idx.get(c, 0) for c in class_name]].reshape(-1, 3)
