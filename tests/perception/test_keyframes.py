"""STRIDE-QA §4.2 keyframe sampling: 1 Hz anchors in [2 s, 17 s] with a [-2 s, +3 s] context inside the clip."""
from __future__ import annotations

import numpy as np
import pytest

from generator.sources.keyframes import context_indices, nearest_indices, select_anchors
from schemas.config import KeyframeConfig

T0 = 1_532_402_927_647_951  # a real nuScenes timestamp (us): anchors are relative to the first frame


def clip(rate_hz: float, duration_s: float, jitter_s: float = 0.0, seed: int = 0) -> np.ndarray:
    n = int(round(duration_s * rate_hz)) + 1
    t = np.arange(n) / rate_hz
    if jitter_s:
        t = t + np.random.default_rng(seed).uniform(-jitter_s, jitter_s, n)
        t[0] = 0.0
    return T0 + np.round(t * 1e6).astype(np.int64)


def rel(ts, idx):
    return (ts[idx] - ts[0]) / 1e6


def test_nuscenes_20s_clip_at_2hz():
    ts = clip(2.0, 19.5)  # a nuScenes scene: 40 samples, 0 .. 19.5 s, i.e. a 20 s clip
    a = select_anchors(ts, KeyframeConfig())
    # 2, 3, ..., 17 s: STRIDE-QA's 16 anchors; 17 s + 3 s is the clip's end (40 samples x 0.5 s)
    assert np.allclose(rel(ts, a), np.arange(2, 18))


def test_full_window_when_clip_is_long_enough():
    ts = clip(2.0, 20.0)
    assert np.allclose(rel(ts, select_anchors(ts)), np.arange(2, 18))  # 16 anchors, 2..17 s inclusive


def test_av2_10hz_log():
    ts = clip(10.0, 15.5)  # the AV2 excerpt: 156 sweeps at 10 Hz
    a = select_anchors(ts)
    assert np.allclose(rel(ts, a), np.arange(2, 13))  # 12.5 s is the last time with 3 s after it
    assert np.array_equal(a, np.arange(20, 121, 10))


def test_jittered_2hz_samples_still_give_one_anchor_per_second():
    """nuScenes sample spacing jitters by tens of ms; anchors snap to the nearest sample."""
    ts = clip(2.0, 19.5, jitter_s=0.04, seed=3)
    a = select_anchors(ts)
    assert len(a) == 16 and len(np.unique(a)) == 16
    assert np.all(np.abs(rel(ts, a) - np.arange(2, 18)) <= 0.25)


def test_gap_in_the_log_drops_the_anchor_there():
    ts = clip(10.0, 19.9)
    t = (ts - ts[0]) / 1e6
    keep = ~((t > 4.7) & (t < 5.3))  # a 0.6 s hole around 5 s
    a = select_anchors(ts[keep])
    got = rel(ts[keep], a)
    assert not np.any(np.isclose(got, 5.0)) and np.any(np.isclose(got, 4.0)) and np.any(np.isclose(got, 6.0))


def test_short_clip_has_no_anchors():
    # needs at least 2 s before and 3 s after: 9 samples at 2 Hz span 4.5 s, 10 span 5 s
    assert len(select_anchors(clip(2.0, 4.0))) == 0
    assert len(select_anchors(clip(2.0, 4.5))) == 1
    assert len(select_anchors(np.zeros(0, dtype=np.int64))) == 0
    assert len(select_anchors(np.array([T0]))) == 0


def test_config_changes_the_sampling():
    ts = clip(10.0, 20.0)
    cfg = KeyframeConfig(rate_hz=2.0, window_start_s=3.0, window_end_s=6.0, context_before_s=1.0,
                         context_after_s=1.0)
    assert np.allclose(rel(ts, select_anchors(ts, cfg)), [3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0])


def test_unsorted_timestamps_are_refused():
    ts = clip(2.0, 19.5)
    with pytest.raises(ValueError, match="strictly increasing"):
        select_anchors(ts[::-1])


@pytest.mark.parametrize("rate", [2.0, 10.0])
def test_context_and_future_frames(rate):
    ts = clip(rate, 19.5)
    anchor = int(select_anchors(ts)[0])
    ctx = context_indices(ts, anchor, [-1.5, -1.0, -0.5, 0.0, 1.0, 2.0, 3.0], tol_s=0.06)
    assert (ctx >= 0).all()
    assert np.allclose(rel(ts, ctx) - rel(ts, anchor), [-1.5, -1.0, -0.5, 0.0, 1.0, 2.0, 3.0])


def test_context_missing_frames_are_minus_one():
    ts = clip(2.0, 19.5)
    # 0.25 s offsets fall between 2 Hz samples; -30 s is before the clip
    ctx = context_indices(ts, 10, [-0.25, -30.0, 0.5], tol_s=0.06)
    assert ctx.tolist() == [-1, -1, 11]
    # with a loose tolerance the nearest sample is taken
    assert context_indices(ts, 10, [-0.2], tol_s=0.3).tolist() == [10]
    with pytest.raises(IndexError):
        context_indices(ts, 99, [0.0], tol_s=0.06)


def test_nearest_indices_ties_and_edges():
    t = np.array([0.0, 1.0, 2.0])
    assert nearest_indices(t, np.array([-5.0, 0.4, 0.6, 1.5, 9.0])).tolist() == [0, 0, 1, 1, 2]
    assert nearest_indices(np.array([3.0]), np.array([0.0, 7.0])).tolist() == [0, 0]
