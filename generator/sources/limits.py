"""Sanity bounds on source geometry (``schemas.config.SourceLimitsConfig``, the config's ``sources`` section).

Pure, vectorised checks applied where boxes and poses enter (``generator.sources.nuscenes``, ``.av2``). A
value beyond a bound is corrupt input: the check raises ``SourceError`` naming the scene, the file, the row,
the field, the value and the bound, so a run records the scene as failed instead of rendering answers such
as "an object 1e104 m away" (issue #11 item 7). NaN comparisons count as violations except for
velocities, where NaN means "unknown".
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from generator.types import SourceError
from schemas.config import SourceLimitsConfig


_ROW_IS_CORRUPT = "the row is corrupt: fix or remove it"


def refuse_beyond(values: np.ndarray, limit: float, *, limit_name: str, field: str, unit: str,
                  row_name: Callable[[int], str], scene: str, file: str, allow_nan: bool = False,
                  fix: str = _ROW_IS_CORRUPT) -> None:
    """Raise ``SourceError`` for the first row whose value is not <= ``limit`` (NaN counts unless
    ``allow_nan``). ``row_name(i)`` names row i for the message (called for the first bad row only); ``fix``
    says what is wrong and what to do."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    bad = ~(v <= limit)
    if allow_nan:
        bad &= ~np.isnan(v)
    if not bad.any():
        return
    idx = np.flatnonzero(bad)
    i = int(idx[0])
    more = ""
    if len(idx) > 1:
        worst = v[idx][~np.isnan(v[idx])]
        more = (f" ({len(idx) - 1} more row{'s' if len(idx) > 2 else ''} beyond it"
                + (f", up to {worst.max():.6g} {unit})" if len(worst) else ")"))
    raise SourceError(f"{row_name(i)}: {field} is {v[i]:.6g} {unit}, beyond sources.{limit_name} = {limit:g} {unit}"
                      f"{more}; {fix}, or raise sources.{limit_name} in the config if such values are real",
                      scene=scene, file=file, stage="read")


def check_boxes(limits: SourceLimitsConfig, *, center_m: np.ndarray, size_m: np.ndarray,
                size_fields: Sequence[str], velocity_mps: np.ndarray | None, center_field: str,
                velocity_field: str, row_name: Callable[[int], str], scene: str, file: str) -> None:
    """Boxes as they enter: centre (N, 3) in the ego frame, size (N, 3) in the source's axis order named by
    ``size_fields``, velocity (N, 2 or 3) m/s (NaN = unknown) or None."""
    kw = {"row_name": row_name, "scene": scene, "file": file}
    refuse_beyond(np.linalg.norm(np.asarray(center_m, dtype=np.float64).reshape(-1, 3), axis=1),
                  limits.max_box_distance_m, limit_name="max_box_distance_m",
                  field=f"centre {center_field} distance from the ego", unit="m", **kw)
    size = np.asarray(size_m, dtype=np.float64).reshape(-1, 3)
    for axis, name in enumerate(size_fields):
        refuse_beyond(size[:, axis], limits.max_box_size_m, limit_name="max_box_size_m", field=f"box {name}",
                      unit="m", **kw)
    if velocity_mps is not None and len(velocity_mps):
        v = np.asarray(velocity_mps, dtype=np.float64)
        refuse_beyond(np.linalg.norm(v[:, :2], axis=1), limits.max_object_speed_mps,
                      limit_name="max_object_speed_mps", field=f"speed from {velocity_field}", unit="m/s",
                      allow_nan=True, fix="this row or a neighbouring one of the same object is corrupt: fix or "
                                          "remove it", **kw)


def check_ego_positions(limits: SourceLimitsConfig, translation_m: np.ndarray, *, row_name: Callable[[int], str],
                        scene: str, file: str) -> None:
    """Ego translations (N, 3) in the log's map frame."""
    refuse_beyond(np.linalg.norm(np.asarray(translation_m, dtype=np.float64).reshape(-1, 3), axis=1),
                  limits.max_ego_position_m, limit_name="max_ego_position_m", field="ego position |t|", unit="m",
                  row_name=row_name, scene=scene, file=file)


def check_ego_speeds(limits: SourceLimitsConfig, timestamps_us: np.ndarray, translation_m: np.ndarray, *,
                     row_name: Callable[[int], str], scene: str, file: str) -> None:
    """Ego speed between consecutive frames (timestamps strictly increasing, translations (F, 3));
    ``row_name(i)`` names the step from frame i to frame i + 1."""
    t = np.asarray(timestamps_us, dtype=np.int64)
    if len(t) < 2:
        return
    p = np.asarray(translation_m, dtype=np.float64).reshape(-1, 3)
    dt = np.diff(t).astype(np.float64) * 1e-6
    with np.errstate(divide="ignore", invalid="ignore"):
        speed = np.linalg.norm(np.diff(p, axis=0), axis=1) / dt
    refuse_beyond(speed, limits.max_ego_speed_mps, limit_name="max_ego_speed_mps", field="ego speed", unit="m/s",
                  row_name=row_name, scene=scene, file=file,
                  fix="one of the two poses is corrupt (or the log jumps): fix or remove it")
