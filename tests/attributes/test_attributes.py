"""Attributes on hand-computable points: bearing, clock, sides, distances, speeds, pair relations."""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from support.attributes import make_frames, make_objects, pose
from generator.attributes import clock_from_bearing, compute_attributes, pair_relations
from generator.attributes.compute import BEHIND, BESIDE, IN_FRONT, along_ego
from generator.sources.vehicles import EGO_BODIES
from schemas.tables import ATTRIBUTES


def _static_scene(n=3, dt=0.5):
    return make_frames("s0", np.arange(n) * dt, [pose(0, 0, 0)] * n)


POINTS = [  # (x, y, z) of a 4 x 2 m box along the ego's axis -> bearing, clock, side, front_back (the default ego:
    # front bumper 3.85 m ahead of the origin, rear bumper 1.05 m behind it)
    ((10.0, 0.0, 0.0), 0.0, 12, "left", "front"),
    ((0.0, 10.0, 0.0), 90.0, 9, "left", "beside"),
    ((0.0, -10.0, 0.0), -90.0, 3, "right", "beside"),
    ((-10.0, 10.0, 0.0), 135.0, 8, "left", "behind"),  # behind-left: +135, tie 7|8 -> 8 (towards the front)
    ((-10.0, -10.0, 0.0), -135.0, 4, "right", "behind"),  # mirror image: tie 4|5 -> 4
    ((-10.0, 0.0, 0.0), 180.0, 6, "left", "behind"),
    ((-10.0, 2.0, 0.0), 180.0 - math.degrees(math.atan2(2, 10)), 6, "left", "behind"),
    ((-10.0, 8.0, 0.0), 180.0 - math.degrees(math.atan2(8, 10)), 7, "left", "behind"),  # 141.3 deg
    ((10.0, -10.0 * math.tan(math.radians(20)), 0.0), -20.0, 1, "right", "front"),
    ((10.0, 10.0 * math.tan(math.radians(50)), 0.0), 50.0, 10, "left", "front"),
    ((math.cos(math.radians(15)), math.sin(math.radians(15)), 0.0), 15.0, 12, "left", "beside"),  # tie 12|11
    ((3.0, -4.0, 12.0), math.degrees(math.atan2(-4, 3)), 2, "right", "beside"),  # -53.13 deg
]


def test_bearing_clock_side_on_known_points():
    frames = _static_scene()
    rows = [{"frame_index": 0, "track_id": i, "center_ego": p} for i, (p, *_r) in enumerate(POINTS)]
    attrs = compute_attributes(make_objects(frames, rows), frames)
    assert attrs.schema.equals(ATTRIBUTES, check_metadata=False)
    got = attrs.to_pydict()
    for i, (p, bearing, clock, side, fb) in enumerate(POINTS):
        assert got["bearing_deg"][i] == pytest.approx(bearing, abs=1e-9), p
        assert got["clock"][i] == clock, (p, got["bearing_deg"][i])
        assert got["side"][i] == side, p
        assert got["front_back"][i] == fb, p
        assert got["distance_m"][i] == pytest.approx(math.sqrt(sum(c * c for c in p)), abs=1e-12)
    assert got["distance_m"][-1] == pytest.approx(13.0)
    assert all(-180.0 <= b <= 180.0 for b in got["bearing_deg"])


def test_front_behind_is_measured_against_the_egos_body():
    """Issue #53 finding 3: in front / behind was decided at the rear axle (x >= 0), so a pedestrian level with
    the ego's body (x = 1.72 m, y = 14.6 m in the AV2 log) was "in front". Measured against each source's own
    car: beside while the box overlaps the ego's length, in front / behind only wholly past a bumper."""
    zoe, fusion = EGO_BODIES["nuscenes"], EGO_BODIES["av2"]
    assert (zoe.length_m, zoe.front_m, zoe.rear_m) == pytest.approx((4.084, 3.427, 0.657))
    assert (fusion.length_m, fusion.front_m, fusion.rear_m) == pytest.approx((4.869, 3.7735, 1.0955))
    ped = lambda x, body, heading=0.0: along_ego(np.array([x]), np.array([0.6]), np.array([0.6]),  # noqa: E731
                                                 np.array([heading]), body)
    for body in (zoe, fusion):
        code, margin = ped(1.72, body)
        assert code[0] == BESIDE and margin[0] == pytest.approx(min(body.front_m - 1.42, 2.02 + body.rear_m))
        assert ped(body.front_m + 0.31, body)[0][0] == IN_FRONT  # its near end just past the front bumper
        assert ped(body.front_m + 0.29, body)[0][0] == BESIDE
        assert ped(-body.rear_m - 0.31, body)[0][0] == BEHIND
    # the rear bumpers differ: 0.7 m behind the axle is behind a Zoe, beside a Fusion
    assert ped(-1.0, zoe)[0][0] == BEHIND and ped(-1.0, fusion)[0][0] == BESIDE
    # the box's footprint along the ego's axis: a 4.5 m car crossing (90 deg) reaches 0.95 m, along it 2.25 m
    car = lambda x, heading: along_ego(np.array([x]), np.array([4.5]), np.array([1.9]), np.array([heading]),  # noqa: E731
                                       zoe)
    assert car(4.5, 90.0)[0][0] == IN_FRONT and car(4.5, 0.0)[0][0] == BESIDE
    assert car(4.5, 90.0)[1][0] == pytest.approx(4.5 - 0.95 - zoe.front_m)
    # the attributes table says the same, with the body it is given
    frames = _static_scene()
    objs = make_objects(frames, [{"frame_index": 0, "track_id": 1, "class_name": "pedestrian",
                                  "center_ego": [1.72, 14.6, 0.9], "size": [0.6, 0.6, 1.7]},
                                 {"frame_index": 0, "track_id": 2, "center_ego": [-1.0, -5.0, 0.9],
                                  "size": [0.6, 0.6, 1.7]}])
    assert compute_attributes(objs, frames, fusion).column("front_back").to_pylist() == ["beside", "beside"]
    assert compute_attributes(objs, frames, zoe).column("front_back").to_pylist() == ["beside", "behind"]


def test_clock_covers_each_hour_with_30_degree_sectors():
    # sweep the circle clockwise from ahead: 12, 1, 2, ... 11 at the sector centres
    centres = (-np.arange(12) * 30.0 + 180.0) % 360.0 - 180.0  # 0, -30, ..., -180, 150, ..., 30
    assert clock_from_bearing(centres).tolist() == [12] + list(range(1, 12))
    # just inside the edges of the 3 o'clock sector (-75 .. -105 deg)
    assert clock_from_bearing(np.array([-75.01, -104.99, -74.99, -105.01])).tolist() == [3, 3, 2, 4]


def test_sizes_heading_and_velocities():
    # ego drives north (yaw +90 deg) at 5 m/s; frames 0.5 s apart
    t = np.arange(4) * 0.5
    frames = make_frames("s1", t, [pose(0.0, 5.0 * ti, math.pi / 2) for ti in t])
    rows = [
        # an object moving north at 3 m/s (given by the tracker): in ego axes that is straight ahead
        {"frame_index": 1, "track_id": 1, "center_ego": [10, 0, 0], "size": [4.5, 1.9, 1.6], "yaw": math.pi / 2,
         "velocity_global": [0.0, 3.0]},
        # no tracker velocity: 2 m/s eastwards (city +x) from the track's centres; ego-frame centres shift
        # because the ego moves 2.5 m north per frame, east = ego -y (right)
    ]
    for k in range(4):
        rows.append({"frame_index": k, "track_id": 2, "center_ego": [20.0 - 2.5 * k, -(1.0 * k), 0.0]})
    attrs = compute_attributes(make_objects(frames, rows), frames).to_pydict()
    assert attrs["length_m"][0] == 4.5 and attrs["width_m"][0] == 1.9 and attrs["height_m"][0] == 1.6
    assert attrs["heading_ego_deg"][0] == pytest.approx(90.0)
    assert attrs["speed_mps"][0] == pytest.approx(3.0)
    assert attrs["velocity_ego_mps"][0] == pytest.approx([3.0, 0.0], abs=1e-9)
    for i in range(1, 5):
        assert attrs["ego_speed_mps"][i] == pytest.approx(5.0)
        assert attrs["speed_mps"][i] == pytest.approx(2.0)  # city frame: ego-frame y shift of 1 m/0.5 s east
        assert attrs["velocity_ego_mps"][i] == pytest.approx([0.0, -2.0], abs=1e-9)


def test_ego_speed_from_nonuniform_timestamps_and_missing_frame_error():
    t = np.array([0.0, 0.1, 0.3, 0.6])  # 10 m/s along x with irregular spacing
    frames = make_frames("s2", t, [pose(10.0 * ti, 0.0, 0.0) for ti in t])
    objs = make_objects(frames, [{"frame_index": k, "track_id": 0, "center_ego": [5, 1, 0]} for k in range(4)])
    attrs = compute_attributes(objs, frames)
    assert np.allclose(attrs.column("ego_speed_mps").to_numpy(), 10.0)
    bad = objs.set_column(1, "frame_index", pa.array([0, 1, 2, 9], pa.int32()))
    with pytest.raises(ValueError, match=r"scene s2: objects refer to frame 9"):
        compute_attributes(bad, frames)


def test_pair_relations_hand_computed():
    frames = _static_scene(1)
    rows = [{"frame_index": 0, "track_id": 1, "center_ego": [10, 2, 0], "size": [4, 2, 1.5]},
            {"frame_index": 0, "track_id": 2, "center_ego": [20, -3, 0], "size": [10, 2.5, 3.2]},
            {"frame_index": 0, "track_id": 3, "center_ego": [10, 2, 1], "size": [0.5, 0.5, 1.8]}]
    attrs = compute_attributes(make_objects(frames, rows), frames)
    rel = pair_relations(attrs, np.array([0, 1, 0]), np.array([1, 0, 2])).to_pydict()
    assert rel["a_left_of_b"] == [True, False, False]
    assert rel["a_in_front_of_b"] == [False, True, False]
    assert rel["a_bigger_than_b"] == [False, True, True]
    assert rel["a_taller_than_b"] == [False, True, False]
    assert rel["a_wider_than_b"] == [False, True, True]
    assert rel["distance_m"][0] == pytest.approx(math.hypot(10, 5))
    assert rel["distance_m"][2] == pytest.approx(1.0)
    assert rel["direction_deg"][0] == pytest.approx(math.degrees(math.atan2(-5, 10)))  # B ahead-right of A
    assert rel["direction_deg"][1] == pytest.approx(math.degrees(math.atan2(5, -10)))  # A behind-left of B
    assert rel["direction_clock"][:2] == [1, 7]
    # SpatialRGPT's horizontal / vertical distances and the qualitative forms beside them (issue #17 item 8)
    assert rel["horizontal_distance_m"][0] == pytest.approx(math.hypot(10, 5))
    assert rel["horizontal_distance_m"][2] == pytest.approx(0.0) and rel["vertical_distance_m"][2] == pytest.approx(1.0)
    assert rel["a_above_b"] == [False, False, False] and rel["vertical_gap_m"][2] == pytest.approx(-1.0)
    assert rel["a_closer_than_b"] == [True, False, True]
    assert rel["range_gap_m"][0] == pytest.approx(math.hypot(10, 2) - math.hypot(20, 3))


def test_dense_pair_codes_match_a_lexicographic_unique_on_both_paths():
    """Dense (scene, track) codes rank pairs lexicographically, whether the values span a narrow range (the
    presence-table path) or a wide one (np.unique), negative values and repeats included."""
    from generator.attributes.arrays import dense_codes, dense_pair_codes

    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(1, 400))
        a = rng.integers(-3, int(rng.integers(1, 40)), n)
        width = 10 ** int(rng.integers(1, 13))  # track ids from 0..9 to 12-digit hashes
        b = rng.integers(-width, width, n)
        got, m = dense_pair_codes(a, b)
        want, inv = np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True)
        assert m == len(want), trial
        np.testing.assert_array_equal(got, inv.reshape(-1), err_msg=f"trial {trial}")
    codes, m = dense_codes(np.array([5, -2, 5, 9_000_000_000, -2]))
    assert m == 3 and codes.tolist() == [1, 0, 1, 2, 0]
    assert dense_pair_codes(np.zeros(0, np.int64), np.zeros(0, np.int64))[1] == 0
