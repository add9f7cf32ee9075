"""Keyframe (anchor) sampling, STRIDE-QA §4.2.

"We sample these at 1 Hz from the 2 to 17-second interval of each clip, which provides each keyframe
with a temporal context window spanning from 2 seconds prior to 3 seconds after."

Times are relative to the clip's first frame. A wanted anchor time ``t_k = window_start_s + k / rate_hz``
(``t_k <= window_end_s``) is snapped to the nearest frame; it is kept only when that frame lies within
``max(match_tolerance_s, half a frame interval)`` of ``t_k`` (so 2 Hz nuScenes samples, whose spacing
jitters by tens of ms, still yield one anchor per second) and when its context window
``[t - context_before_s, t + context_after_s]`` lies inside the clip (within ``match_tolerance_s``).
Works for any frame rate (2 Hz nuScenes samples, 10 Hz AV2 sweeps).
"""
from __future__ import annotations

import numpy as np

from schemas.config import KeyframeConfig


def _relative_s(timestamps_us) -> np.ndarray:
    ts = np.asarray(timestamps_us, dtype=np.int64).reshape(-1)
    if len(ts) and np.any(np.diff(ts) <= 0):
        raise ValueError("timestamps_us must be strictly increasing")
    return (ts - ts[0]) / 1e6 if len(ts) else np.zeros(0)


def nearest_indices(times_s: np.ndarray, wanted_s: np.ndarray) -> np.ndarray:
    """Index of the frame nearest each wanted time. times_s (N,) increasing, wanted_s (M,) -> (M,) int."""
    times_s = np.asarray(times_s, dtype=np.float64)
    wanted_s = np.asarray(wanted_s, dtype=np.float64)
    if len(times_s) <= 1:
        return np.zeros(len(wanted_s), dtype=np.int64)
    right = np.clip(np.searchsorted(times_s, wanted_s), 1, len(times_s) - 1)
    left = right - 1
    pick_left = np.abs(wanted_s - times_s[left]) <= np.abs(times_s[right] - wanted_s)
    return np.where(pick_left, left, right).astype(np.int64)


def select_anchors(timestamps_us, cfg: KeyframeConfig | None = None) -> np.ndarray:
    """Frame indices of the anchors of one clip.

    timestamps_us (N,) int, strictly increasing. Returns (K,) int64 sorted unique frame indices.
    """
    cfg = cfg or KeyframeConfig()
    t = _relative_s(timestamps_us)
    if len(t) == 0:
        return np.zeros(0, dtype=np.int64)
    n_wanted = int(np.floor((cfg.window_end_s - cfg.window_start_s) * cfg.rate_hz + 1e-9)) + 1
    wanted = cfg.window_start_s + np.arange(n_wanted) / cfg.rate_hz
    idx = nearest_indices(t, wanted)
    interval = float(np.median(np.diff(t))) if len(t) > 1 else 0.0
    snap_tol = max(cfg.match_tolerance_s, 0.5 * interval)
    t_anchor = t[idx]
    tol = cfg.match_tolerance_s
    ok = (np.abs(t_anchor - wanted) <= snap_tol + 1e-9) \
        & (t_anchor - cfg.context_before_s >= t[0] - tol) \
        & (t_anchor + cfg.context_after_s <= t[-1] + tol)
    return np.unique(idx[ok])


def context_indices(timestamps_us, anchor_index: int, offsets_s, tol_s: float) -> np.ndarray:
    """Frame index nearest ``t_anchor + offset`` for each offset, -1 when none is within ``tol_s``.

    timestamps_us (N,) strictly increasing, offsets_s (M,) seconds relative to the anchor frame
    (e.g. [-1.5, -1.0, -0.5, 0.0] for the four 2 Hz context frames, [1, 2, 3] for future horizons).
    Returns (M,) int64.
    """
    t = _relative_s(timestamps_us)
    offsets = np.asarray(offsets_s, dtype=np.float64).reshape(-1)
    if not 0 <= anchor_index < len(t):
        raise IndexError(f"anchor_index {anchor_index} outside the clip's {len(t)} frames")
    wanted = t[anchor_index] + offsets
    idx = nearest_indices(t, wanted)
    return np.where(np.abs(t[idx] - wanted) <= tol_s + 1e-9, idx, -1).astype(np.int64)

