"""Heading disambiguation after tracking: box yaws that a shape fit leaves ambiguous by pi, fixed per track.

A LiDAR L-shape fit (``actors.detect.lidar``) finds a box's axis but not which end is the front: its yaw is
right modulo pi only. Tracking knows more: a track that moves has a direction of travel. Pure core
``heading_flips(track_id, t_s, yaw_rad, velocity_mps, eligible, min_speed_mps) -> (N,) bool`` (global frame,
one scene), applied by ``actors.track.pubtracker.track_scene`` when ``TrackingConfig.heading_from_motion``:

* a box *moves* when its track velocity (the least-squares slope over +-``velocity_window_s``, as for the
  box velocities) is at least ``min_speed_mps`` and stays so, without reversing, over consecutive boxes
  spanning at least ``min_duration_s`` (a single jump of a fitted box centre, e.g. when the visible face
  of a parked car changes, fakes a speed only over the boxes whose velocity window holds the jump: less
  than two windows); its yaw is flipped (``yaw += pi``) when it points more than 90 degrees away from that
  velocity (vehicles drive forwards);
* every other box of a track that moves somewhere is aligned (modulo pi) to the nearest-in-time moving box
  of its track after that box's correction: the frames before the track got going (and after it stopped)
  take the heading the motion revealed;
* a track that never moves keeps one orientation: the boxes' yaws are compared with the first box's modulo
  pi and the orientation most of them already have (the first box's or the opposite) is given to all of
  them, so a static object does not turn round from frame to frame (which end is its front stays a guess).

Only ``eligible`` boxes are looked at or changed (``track_scene``: boxes whose detector gave no velocity and
that carry no ground-truth ``instance_token``, so annotations and velocity-regressing detectors keep their
yaws). Boxes with ``track_id < 0`` are left alone.
"""
from __future__ import annotations

import numpy as np


def _wrap(a: np.ndarray) -> np.ndarray:
    return np.arctan2(np.sin(a), np.cos(a))


def heading_flips(track_id: np.ndarray, t_s: np.ndarray, yaw_rad: np.ndarray, velocity_mps: np.ndarray,
                  eligible: np.ndarray, min_speed_mps: float, min_duration_s: float = 1.0) -> np.ndarray:
    """Which boxes to turn round by pi.

    track_id (N,) int (-1 = untracked), t_s (N,) box times, yaw_rad (N,) and velocity_mps (N, 2) in one
    common (global) frame, velocity NaN where unknown, eligible (N,) bool; a box moves when its track keeps
    at least ``min_speed_mps`` without reversing for ``min_duration_s`` around it. Returns (N,) bool, True where
    ``yaw + pi`` is the box's heading (never True for ineligible or untracked boxes). See the module docstring.
    """
    tid = np.asarray(track_id, dtype=np.int64).reshape(-1)
    t_s = np.asarray(t_s, dtype=np.float64).reshape(-1)
    n = len(tid)
    flip = np.zeros(n, dtype=bool)
    idx = np.nonzero((tid >= 0) & np.asarray(eligible, dtype=bool).reshape(-1))[0]
    if len(idx) == 0:
        return flip
    order = idx[np.lexsort((t_s[idx], tid[idx]))]
    tr, tt, yaw, v = tid[order], t_s[order], np.asarray(yaw_rad)[order], np.asarray(velocity_mps)[order]
    m = len(order)
    pos = np.arange(m)
    new = np.r_[True, tr[1:] != tr[:-1]]
    start = np.maximum.accumulate(np.where(new, pos, 0))  # first position of each box's track
    end = np.r_[np.nonzero(new)[0][1:], m] - 1  # last position of each track (per track)
    end = end[np.cumsum(new) - 1]  # ... per box

    speed = np.hypot(v[:, 0], v[:, 1])
    fast = np.isfinite(speed) & (speed >= min_speed_mps)
    motion = np.arctan2(v[:, 1], v[:, 0])
    # Runs of consecutive fast boxes of one track whose direction does not reverse; a run counts as motion
    # only when it lasts min_duration_s (one jump of a fitted centre raises the windowed slope of the boxes
    # whose window holds it: a run shorter than two velocity windows).
    brk = new | ~fast | np.r_[True, ~fast[:-1] | (np.cos(motion[1:] - motion[:-1]) < 0)]
    run = np.cumsum(brk) - 1
    run_start = np.nonzero(brk)[0]
    span = tt[np.r_[run_start[1:], m] - 1] - tt[run_start]
    moving = fast & (span[run] >= min_duration_s - 1e-6)
    f = np.zeros(m, dtype=bool)
    f[moving] = np.cos(yaw[moving] - motion[moving]) < 0
    ref_yaw = np.where(f, yaw + np.pi, yaw)  # corrected yaw of the moving boxes

    # Nearest moving box of the same track, before (prev) and after (next) each box.
    prev = np.maximum.accumulate(np.where(moving, pos, -1))
    prev = np.where(prev >= start, prev, -1)
    nxt = np.minimum.accumulate(np.where(moving, pos, m)[::-1])[::-1]
    nxt = np.where(nxt <= end, nxt, -1)
    dt_prev = np.where(prev >= 0, tt - tt[np.maximum(prev, 0)], np.inf)
    dt_next = np.where(nxt >= 0, tt[np.maximum(nxt, 0)] - tt, np.inf)
    ref = np.where(dt_prev <= dt_next, prev, nxt)
    follow = ~moving & (ref >= 0)
    f[follow] = np.cos(yaw[follow] - ref_yaw[ref[follow]]) < 0

    # Tracks that never move: one orientation, the one most boxes share with the first box (modulo pi).
    static = ref < 0  # no moving box anywhere in the track
    if static.any():
        agree = np.cos(yaw - yaw[start]) >= 0
        _, track_pos = np.unique(tr, return_inverse=True)
        n_agree = np.bincount(track_pos, weights=agree.astype(np.float64))
        n_all = np.bincount(track_pos).astype(np.float64)
        keep_first = (2 * n_agree >= n_all)[track_pos]  # ties keep the first box's orientation
        f[static] = (agree != keep_first)[static]
    flip[order] = f
    return flip


def apply_flips(yaw_rad: np.ndarray, flip: np.ndarray) -> np.ndarray:
    """(N,) yaws with ``pi`` added where ``flip``, wrapped to (-pi, pi]; others returned bit for bit."""
    yaw = np.asarray(yaw_rad, dtype=np.float64).copy()
    yaw[flip] = _wrap(yaw[flip] + np.pi)
    return yaw
