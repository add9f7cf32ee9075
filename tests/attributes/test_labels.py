"""Behaviour labels on scripted ego trajectories and VRU tracks with known answers."""
from __future__ import annotations

import math

import numpy as np

from support.attributes import make_frames, make_objects, pose
from generator.attributes import compute_labels
from schemas.tables import LABELS

HZ = 10


def _integrate(speed_fn, yaw_rate_fn, duration_s, y_fn=None):
    """Ego poses at 10 Hz from speed(t) and yaw-rate(t) profiles (or a lateral offset y(t) along x)."""
    t = np.arange(int(duration_s * HZ) + 1) / HZ
    x = y = yaw = 0.0
    poses = []
    for k, ti in enumerate(t):
        if y_fn is not None:
            xs = 10.0 * ti
            dy = (y_fn(ti + 1e-3) - y_fn(ti - 1e-3)) / 2e-3
            poses.append(pose(xs, y_fn(ti), math.atan2(dy, 10.0)))
            continue
        poses.append(pose(x, y, yaw))
        v, w = speed_fn(ti), yaw_rate_fn(ti)
        x += v * math.cos(yaw) / HZ
        y += v * math.sin(yaw) / HZ
        yaw += w / HZ
    return t, poses


def _ego_labels(scene, t, poses):
    frames = make_frames(scene, t, poses)
    lab = compute_labels(make_objects(frames, []), frames).to_pydict()
    at = {round(ti, 3): i for i, ti in enumerate(t)}
    return lab, at


def test_turn_straight_and_curved_road():
    t, poses = _integrate(lambda s: 10.0 if s < 6 else 8.0, lambda s: math.radians(15) if 6 <= s < 12 else 0.0, 20)
    lab, at = _ego_labels("turn", t, poses)
    assert lab["maneuver"][at[3.0]] == "Straight"
    assert lab["maneuver"][at[9.0]] == "Turn Left"
    assert lab["maneuver"][at[16.0]] == "Straight"
    assert lab["speed_status"][at[3.0]] == "Maintain Speed"
    # a right-hand curve of 3 deg/s (a curved road, not a lane change or a turn)
    t, poses = _integrate(lambda s: 15.0, lambda s: math.radians(-3), 10)
    lab, at = _ego_labels("curve", t, poses)
    assert lab["maneuver"][at[5.0]] == "Straight"
    t, poses = _integrate(lambda s: 6.0, lambda s: math.radians(-20), 6)
    lab, at = _ego_labels("right", t, poses)
    assert lab["maneuver"][at[3.0]] == "Turn Right"


def test_lane_change_right():
    def y(s):  # 3.5 m to the right between 4 s and 9 s (smooth step)
        u = np.clip((s - 4.0) / 5.0, 0, 1)
        return -3.5 * (3 * u ** 2 - 2 * u ** 3)
    t, poses = _integrate(None, None, 14, y_fn=y)
    lab, at = _ego_labels("lc", t, poses)
    assert lab["maneuver"][at[6.5]] == "Change Lane Right"
    assert lab["maneuver"][at[1.0]] == "Straight"
    assert lab["maneuver"][at[12.5]] == "Straight"


def test_speed_status_and_stop():
    def v(s):
        return max(10.0 - 2.0 * s, 0.0) if s < 10 else 1.0 * (s - 10)
    t, poses = _integrate(v, lambda s: 0.0, 15)
    lab, at = _ego_labels("stop", t, poses)
    assert lab["speed_status"][at[2.5]] == "Decelerate"
    assert lab["maneuver"][at[2.5]] == "Straight"
    assert lab["maneuver"][at[7.5]] == "Stop" and lab["speed_status"][at[7.5]] == "Maintain Speed"
    assert lab["speed_status"][at[13.0]] == "Accelerate"


def test_ego_waypoints_in_current_ego_frame():
    t = np.arange(0, 5.01, 0.5)  # 2 Hz like nuScenes keyframes, ego heading north-east at 10 m/s
    yaw = math.radians(45)
    poses = [pose(10 * ti * math.cos(yaw), 10 * ti * math.sin(yaw), yaw) for ti in t]
    frames = make_frames("wp", t, poses)
    lab = compute_labels(make_objects(frames, []), frames)
    assert lab.schema.equals(LABELS, check_metadata=False)
    wp = lab.column("future_xy_ego_m").to_pylist()
    assert np.allclose(np.array(wp[0]), [[5.0 * k, 0.0] for k in range(1, 7)], atol=1e-9)
    last = np.array(wp[len(t) - 2], dtype=float)  # 0.5 s before the end: one future point, then NaN
    assert np.allclose(last[0], [5.0, 0.0]) and np.isnan(last[1:]).all()


def test_vru_intent_lateral_vertical():
    t = np.arange(0, 3.01, 0.1)
    n = len(t)
    frames = make_frames("vru", t, [pose(0, 0, 0)] * n)
    rows = []
    for k, ti in enumerate(t):
        rows += [
            {"frame_index": k, "track_id": 1, "class_name": "pedestrian", "center_ego": [10.0, 1.4 * ti, 0]},
            {"frame_index": k, "track_id": 2, "class_name": "pedestrian", "center_ego": [10.0 - 1.2 * ti, 0, 0]},
            {"frame_index": k, "track_id": 3, "class_name": "bicycle", "center_ego": [15.0 + 4 * ti, 0, 0]},
            {"frame_index": k, "track_id": 4, "class_name": "pedestrian", "center_ego": [-8.0, -1.5 * ti, 0]},
            {"frame_index": k, "track_id": 5, "class_name": "car", "center_ego": [20.0, 1.5 * ti, 0]},
        ]
    lab = compute_labels(make_objects(frames, rows), frames).to_pandas()
    agents = lab[(lab.subject == "agent") & (lab.frame_index == 5)].set_index("track_id")
    assert tuple(agents.loc[1, ["intent_lateral", "intent_vertical"]]) == ("goes to the left", "stationary")
    assert tuple(agents.loc[2, ["intent_lateral", "intent_vertical"]]) == ("stationary", "moves towards ego vehicle")
    assert tuple(agents.loc[3, ["intent_lateral", "intent_vertical"]]) == ("stationary", "moves away from ego vehicle")
    # behind the ego, walking to the ego's right: as seen from the ego (looking back) that is to its left
    assert tuple(agents.loc[4, ["intent_lateral", "intent_vertical"]]) == ("goes to the left", "stationary")
    assert agents.loc[5, "intent_lateral"] is None  # not a VRU
    wp = np.array(list(agents.loc[1, "future_xy_ego_m"]), dtype=float)
    assert np.allclose(wp[:5], [[10.0, 1.4 * (0.5 + 0.5 * k)] for k in range(1, 6)], atol=1e-9)
    assert np.isnan(wp[5]).all()  # t = 3.5 s is past the end of the track
    # the last 0.4 s of a track have less than half the intent horizon: no label
    tail = lab[(lab.subject == "agent") & (lab.track_id == 1) & (lab.frame_index >= n - 4)]
    assert tail.intent_lateral.isna().all()


def test_intent_is_road_relative_when_the_ego_moves():
    t = np.arange(0, 3.01, 0.1)
    frames = make_frames("vru2", t, [pose(10 * ti, 0, 0) for ti in t])  # ego at 10 m/s
    rows = [{"frame_index": k, "track_id": 1, "class_name": "pedestrian", "center_ego": [40.0 - 10 * ti, 3.0, 0]}
            for k, ti in enumerate(t)]  # a pedestrian standing still on the pavement
    lab = compute_labels(make_objects(frames, rows), frames).to_pandas()
    a = lab[(lab.subject == "agent") & (lab.frame_index == 10)].iloc[0]
    assert (a.intent_lateral, a.intent_vertical) == ("stationary", "stationary")
