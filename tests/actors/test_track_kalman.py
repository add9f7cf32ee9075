"""The Kalman tracker (actors.track.kalman, the default mode) against issue #18's goals: the filter against the
textbook equations, confirmation, coasting and the two stages on scenes built here; high relative speeds without
ego poses; the real AV2 log and generated logs scored by the devkit (40 recall thresholds). Each goal is also
run with the greedy mode, which fails it: the checks can fail."""
from __future__ import annotations

import numpy as np
import pytest

from actors.track import kalman as K
from actors.track.metrics import clear_mot
from actors.track.pubtracker import track_scene
from support.data import SYNTH_VERSION
from support.track import REALISTIC_NOISE, highway_scene, tracked_run_folder, tracking_metrics
from generator.geometry import SE3
from generator.types import Boxes3D
from schemas.config import TrackingConfig, parse_config

IDENTITY = SE3(np.eye(3), np.zeros(3))


def _still(n_frames):
    return [IDENTITY] * n_frames


def _line_scene(hz, frames, score=1.0, x0=10.0, vx=5.0, skip=()):
    """One car along x at vx m/s (ego static), detected every frame except ``skip``."""
    ts = (np.arange(frames) / hz * 1e6).astype(np.int64)
    dets = []
    for k in range(frames):
        n = 0 if k in skip else 1
        dets.append(Boxes3D(np.tile([x0 + vx * k / hz, 0.0, 0.8], (n, 1)), np.tile([4.5, 1.9, 1.6], (n, 1)),
                            np.zeros(n), np.full(n, "car", dtype=object), score=np.full(n, score)))
    return ts, dets


def test_filter_equals_the_textbook_kalman_filter():
    """Prediction (one matrix product) and update (closed form of the isotropic 2x2 covariance) against
    x' = F x, P' = F P F^T + Q and K = P H^T (H P H^T + R)^-1 on the 4-dimensional (x, y, vx, vy) state."""
    rng = np.random.default_rng(0)
    cfg = TrackingConfig(mode="kalman")
    for with_velocity in (False, True):
        vel = rng.normal(0, 3, (5, 2)) if with_velocity else np.full((5, 2), np.nan)
        size = rng.uniform(0.5, 5, (5, 3))
        meas = K._measurements(rng.normal(0, 20, (5, 2)), vel, size, np.zeros(5), cfg)
        state = K._birth_rows(meas, np.zeros(5), np.ones(5), np.zeros(5), np.zeros(5, dtype=np.int64), cfg)
        state[:, K.VX:K.VY + 1] = rng.normal(0, 5, (5, 2))
        state[:, K.PPV] = rng.uniform(-0.2, 0.2, 5)
        dt, q = 0.3, state[0, K.Q]
        F = np.kron(np.array([[1, dt], [0, 1]]), np.eye(2))  # state (x, y, vx, vy)
        Qm = q * np.kron(np.array([[dt ** 3 / 3, dt ** 2 / 2], [dt ** 2 / 2, dt]]), np.eye(2))
        P = [np.kron(np.array([[r[K.PPP], r[K.PPV]], [r[K.PPV], r[K.PVV]]]), np.eye(2)) for r in state]
        x = [np.r_[r[K.X:K.Y + 1], r[K.VX:K.VY + 1]] for r in state]
        state[:, :K.PY + 1] = state[:, :K.ONE + 1] @ K._transition(dt, 0.0, 0.0)
        z = np.array(x)[:, :2] + rng.normal(0, 2, (5, 2))
        m2 = K._measurements(z, vel, size, np.zeros(5), cfg)
        g = state.copy()
        K._update(g, m2, np.zeros(5), np.ones(5), 1.0, 0.01, 0.01)
        for i in range(5):
            xp, Pp = F @ x[i], F @ P[i] @ F.T + Qm
            assert np.allclose(state[i, K.X:K.VY + 1], xp)
            assert np.allclose(np.kron([[state[i, K.PPP], state[i, K.PPV]], [state[i, K.PPV], state[i, K.PVV]]],
                                       np.eye(2)), Pp)
            H = np.eye(4) if with_velocity else np.eye(4)[:2]
            R = np.diag([m2[i, 2]] * 2 + ([m2[i, 5]] * 2 if with_velocity else []))
            zi = np.r_[z[i], vel[i]] if with_velocity else z[i]
            Kg = Pp @ H.T @ np.linalg.inv(H @ Pp @ H.T + R)
            xu, Pu = xp + Kg @ (zi - H @ xp), (np.eye(4) - Kg @ H) @ Pp
            assert np.allclose(g[i, K.X:K.VY + 1], xu)
            assert np.allclose([g[i, K.PPP], g[i, K.PPV], g[i, K.PVV]], [Pu[0, 0], Pu[0, 2], Pu[2, 2]])


def test_confirmation_writes_back_and_drops_short_tracks():
    hits = TrackingConfig(mode="kalman").kalman.confirm_hits
    ts, dets = _line_scene(10.0, 20)
    fp = [Boxes3D.empty() for _ in range(20)]
    for k in range(5, 5 + hits - 1):  # a false positive seen one frame too few to be confirmed
        fp[k] = Boxes3D(np.array([[-20.0 - 0.1 * k, 5.0, 0.8]]), np.array([[4.5, 1.9, 1.6]]), np.zeros(1),
                        np.array(["car"], dtype=object))
    out = track_scene(ts, [Boxes3D.concat([d, f]) for d, f in zip(dets, fp)], TrackingConfig(mode="kalman"), _still(20))
    assert [len(o) for o in out] == [1] * 20  # the car from its first frame on; the short track is gone
    assert {int(o.track_id[0]) for o in out} == {0}
    # Tentative tracks alive when the scene ends are kept: a one-frame scene keeps its boxes.
    one = track_scene(ts[:1], dets[:1], TrackingConfig(mode="kalman"), _still(1))
    assert len(one[0]) == 1
    # ... and with confirm_hits = 1 the short track is output
    out1 = track_scene(ts, [Boxes3D.concat([d, f]) for d, f in zip(dets, fp)],
                       TrackingConfig(mode="kalman", kalman={"confirm_hits": 1}), _still(20))
    assert sum(map(len, out1)) == 20 + hits - 1


@pytest.mark.parametrize("hz", [2.0, 10.0])
def test_coasting_is_per_second(hz):
    """A car unseen for 1 s: predicted boxes (on its line, score decayed) cover the first coast_output_s of the gap
    at any frame rate; a gap after its last detection stays empty (coast_trailing_s 0)."""
    cfg = TrackingConfig(mode="kalman")
    k_cfg = cfg.kalman
    frames = int(6 * hz)
    gap = set(range(int(2 * hz) + 1, int(3 * hz) + 1))  # 2.x s .. 3.0 s: 1 s without detections
    ts, dets = _line_scene(hz, frames, skip=gap | set(range(int(5 * hz), frames)))
    out = track_scene(ts, dets, cfg, _still(frames))
    coasted = [k for k in sorted(gap) if len(out[k])]
    assert coasted == [k for k in sorted(gap) if (k - min(gap) + 1) / hz <= k_cfg.coast_output_s + 1e-9]
    for k in coasted:
        miss = (k - min(gap) + 1) / hz
        assert out[k].center_m[0, 0] == pytest.approx(10.0 + 5.0 * k / hz, abs=0.05)
        assert out[k].score[0] == pytest.approx(0.5 ** (miss / k_cfg.coast_score_half_life_s))
        assert out[k].num_lidar_pts[0] == -1 and out[k].instance_token[0] == ""
    assert all(len(out[k]) == 0 for k in range(int(5 * hz), frames))
    assert len({int(o.track_id[0]) for o in out if len(o)}) == 1


@pytest.mark.parametrize("apart_m, same_track", [(3.3, False), (0.2, True)])
def test_a_static_object_vanishing_as_another_appears_nearby_is_not_one_track(apart_m, same_track):
    """Two static traffic cones 3.3 m apart (the AV2 case): the first seen until frame 129, the second from frame
    144 at 10 Hz. The coasting track's Mahalanobis gate had grown to metres: one track carried both cones'
    identities and 14 invented boxes bridged them. Now two tracks, one identity each, no box without one; the
    same cone seen again 0.2 m from where it was (centre noise) still continues its track. (In a frame that
    moves with the ego, identity poses, no class speed bounds the gap: ``kalman_tracking(ground_frame=...)``.)"""
    frames, hz = 160, 10
    ts = (np.arange(frames) / hz * 1e6).astype(np.int64)
    ego_x = 0.2 * np.arange(frames) / hz  # the ego creeps forward: its poses move, the tracking frame is the ground
    dets = []
    for k in range(frames):
        c, tok = [], []
        if k <= 129:
            c, tok = c + [[30.0 - ego_x[k], 0.0, 0.5]], tok + ["cone-a"]
        if k >= 144:
            c, tok = c + [[30.0 - ego_x[k], -apart_m, 0.5]], tok + ["cone-b"]
        n = len(c)
        dets.append(Boxes3D(np.array(c, float).reshape(n, 3), np.tile([0.4, 0.4, 1.0], (n, 1)), np.zeros(n),
                            np.full(n, "traffic_cone", dtype=object), score=np.ones(n),
                            instance_token=np.array(tok, dtype=object)))
    out = track_scene(ts, dets, TrackingConfig(mode="kalman"), [SE3(np.eye(3), np.array([x, 0.0, 0.0])) for x in ego_x])
    tokens: dict[int, set] = {}
    for o in out:
        for t, tok in zip(o.track_id, o.instance_token):
            tokens.setdefault(int(t), set()).add(tok)
    if same_track:
        assert list(tokens.values()) == [{"cone-a", "cone-b", ""}]  # bridged across the gap: one object
    else:
        assert sorted(map(sorted, tokens.values())) == [["cone-a"], ["cone-b"]]
        assert sum(len(o) for o in out) == 130 + 16  # the detections, nothing invented


def test_a_tentative_tracks_fate_does_not_depend_on_other_classes():
    """Issue #33: a tentative pedestrian track died when it missed a frame in which a car was detected, and lived
    when nothing was, so one class's tracks depended on another's detections. Now its misses are judged per
    class: a frame with detections of its class (here another pedestrian, far away) is evidence against it;
    a frame with none of its class only once it has missed for ``tentative_max_miss_s`` (0.3 s), in any frame
    the detector saw. A frame the detector did not see (``looked`` False: an unreadable sweep) never is."""
    ts = (np.arange(6) / 10.0 * 1e6).astype(np.int64)

    def box(x, y, cls, size):
        return Boxes3D(np.array([[x, y, 0.9]]), np.array([size]), np.zeros(1), np.array([cls], dtype=object),
                       score=np.ones(1))

    car, other_ped = box(30.0, 8.0, "car", [4.5, 1.9, 1.6]), box(-20.0, -9.0, "pedestrian", [0.7, 0.7, 1.7])

    def peds(frame1, cfg=TrackingConfig(mode="kalman"), looked=None):
        dets = [box(10.0 + 0.12 * k, 2.0, "pedestrian", [0.7, 0.7, 1.7]) for k in range(6)]
        dets[1] = frame1.copy()
        out = track_scene(ts, dets, cfg, _still(6), looked=looked)
        return [(k, int(t)) for k, o in enumerate(out) for t, c, x in zip(o.track_id, o.class_name, o.center_m[:, 0])
                if c == "pedestrian" and x > 0]

    kept = peds(car)
    assert kept == peds(Boxes3D.empty()) and [k for k, _ in kept] == [0, 2, 3, 4, 5] and len(set(kept)) == 5
    assert len({t for _, t in kept}) == 1
    assert [k for k, _ in peds(other_ped)] == [2, 3, 4, 5]  # its own class seen elsewhere: the one-box track dies
    strict = TrackingConfig(mode="kalman", kalman={"tentative_max_miss_s": 0.0})
    assert [k for k, _ in peds(car, strict)] == [k for k, _ in peds(Boxes3D.empty(), strict)] == [2, 3, 4, 5]
    assert [k for k, _ in peds(other_ped, looked=[True, False, True, True, True, True])] == [0, 2, 3, 4, 5]


@pytest.mark.parametrize("jump_m, one_track", [(0.2, True), (3.0, False)])
def test_a_second_detection_is_gated_by_the_class_speed(jump_m, one_track):
    """Issue #33: a newborn track took its second detection up to ~6 m away whatever its class (velocity std 15
    m/s). In the ground frame the gate now holds the class's plausible speed: a pedestrian box 3 m from a
    one-frame pedestrian box 0.1 s earlier (30 m/s) starts its own track, one 0.2 m away (2 m/s) continues it.
    The ego drives at 10 m/s (the log's poses move: the tracker's frame is the ground)."""
    ts = (np.arange(5) / 10.0 * 1e6).astype(np.int64)
    poses = [SE3(np.eye(3), np.array([1.0 * k, 0.0, 0.0])) for k in range(5)]  # boxes below: city x - ego x
    dets = [Boxes3D(np.array([[10.0 + (jump_m + 0.2 * (k - 1)) * (k > 0) - k, 2.0, 0.9]]),
                    np.array([[0.7, 0.7, 1.7]]), np.zeros(1), np.array(["pedestrian"], dtype=object),
                    score=np.ones(1)) for k in range(5)]
    out = track_scene(ts, dets, TrackingConfig(mode="kalman"), poses)
    first = [int(t) for t in out[0].track_id]
    assert (first == [int(out[1].track_id[0])]) is one_track, (first, [o.track_id for o in out])


def test_a_detectors_scores_are_mapped_to_what_the_tracker_expects():
    """A detector whose scores top out at 0.25 (another calibration) never reaches ``high_score`` (0.3): no
    track starts and nothing is output. ``tracking.score_map`` [[0, 0], [0.25, 1]] maps them onto the tracker's
    scale: the car is tracked, its boxes keep the detector's scores, its coasted box scores from the mapped one.
    A map that is not increasing is refused."""
    ts, dets = _line_scene(10.0, 12, score=0.2, skip=(6,))
    plain = track_scene(ts, dets, TrackingConfig(mode="kalman"), _still(12))
    assert sum(len(o) for o in plain) == 0
    cfg = TrackingConfig(mode="kalman", score_map=[[0.0, 0.0], [0.25, 1.0]])
    out = track_scene(ts, dets, cfg, _still(12))
    assert [len(o) for o in out] == [1] * 12 and len({int(o.track_id[0]) for o in out}) == 1
    assert all(o.score[0] == 0.2 for k, o in enumerate(out) if k != 6)
    assert 0.4 < out[6].score[0] < 0.8  # coasted 0.1 s after a mapped 0.8, halved every 0.5 s
    with pytest.raises(ValueError, match="score_map"):
        TrackingConfig(score_map=[[0.5, 0.0], [0.25, 1.0]])


def test_coasting_by_track_quality():
    """``kalman.coast_min_hit_ratio``: a confirmed track coasts only while its hits are that share of the frames it
    has lived through. A car detected in frames 0-2 and then every other frame coasts through each miss by
    default; at 0.7 only through frame 3 (3 hits in 4 frames), not 5 (4 in 6), 7 or 9."""
    ts, dets = _line_scene(10.0, 11, skip=(3, 5, 7, 9))

    def boxes_in(cfg):
        return [k for k, o in enumerate(track_scene(ts, dets, cfg, _still(11))) if len(o)]

    assert boxes_in(TrackingConfig(mode="kalman")) == list(range(11))
    assert boxes_in(TrackingConfig(mode="kalman", kalman={"coast_min_hit_ratio": 0.7})) == [0, 1, 2, 3, 4, 6, 8, 10]


def test_low_score_detections_extend_tracks_but_never_start_them():
    cfg = TrackingConfig(mode="kalman")
    low = cfg.kalman.high_score / 2
    ts, dets = _line_scene(10.0, 10)
    for d in dets[5:]:
        d.score[:] = low
    out = track_scene(ts, dets, cfg, _still(10))
    assert [len(o) for o in out] == [1] * 10 and len({int(o.track_id[0]) for o in out}) == 1
    ts, dets = _line_scene(10.0, 10, score=low)
    assert sum(map(len, track_scene(ts, dets, cfg, _still(10)))) == 0


def test_invalid_boxes_pass_through_as_their_own_tracks():
    ts, dets = _line_scene(10.0, 5)
    dets[2] = Boxes3D.concat([dets[2], Boxes3D(np.array([[np.nan, 0.0, 0.8]]), np.array([[4.5, 1.9, 1.6]]),
                                               np.zeros(1), np.array(["car"], dtype=object))])
    out = track_scene(ts, dets, TrackingConfig(mode="kalman"), _still(5))
    assert [len(o) for o in out] == [1, 1, 2, 1, 1] and len({int(t) for o in out for t in o.track_id}) == 2


def _mot(out, gts):
    return clear_mot([g.instance_token for g in gts], [g.center_m[:, :2] for g in gts], [o.track_id for o in out],
                     [o.center_m[:, :2] for o in out], 2.0)


@pytest.mark.parametrize("hz, max_idsw, min_mota", [(10.0, 2, 0.9), (2.0, 5, 0.6)])
def test_high_relative_speed_without_ego_poses(hz, max_idsw, min_mota):
    """Oncoming cars at 40-47 m/s relative, overtaken vehicles, cyclists, pedestrians; 0.2 m centre noise, 10 %
    drop-outs, a false positive per frame, no velocities, identity poses. Measured: 10 Hz MOTA 0.962, 0 IDSW
    (greedy: 0.100, 594: no oncoming car keeps its identity); 2 Hz (22 m per frame) MOTA 0.757, 0 IDSW
    (greedy 0.158, 109)."""
    ts, dets, gts, _ = highway_scene(hz)
    r = _mot(track_scene(ts, dets, TrackingConfig(mode="kalman"), _still(len(ts))), gts)
    assert r.num_switches <= max_idsw and r.mota >= min_mota, r
    g = _mot(track_scene(ts, dets, TrackingConfig(mode="greedy"), _still(len(ts))), gts)
    assert g.num_switches > 10 * max(r.num_switches, 5) and g.mota < min_mota, g


# ------------------------------------------------------------------- devkit figures (40 recall thresholds)
AV2_TEST_NOISE = {"center_m": 0.3, "size_frac": 0.1, "yaw_rad": 0.1, "velocity_mps": 0.3, "score_min": 0.5, "seed": 0}


@pytest.mark.slow
def test_av2_noisy_labels_meet_the_goal(av2_log, tmp_path):
    """Issue #18's goal on the real AV2 log with the validation test's label noise (tests/validate/test_validate.py):
    AMOTA >= 0.90, IDSW <= 5 (measured 0.979, 0: the score with ground-truth identities is 0.979 too, the rest
    being boxes the devkit's 50 m range filter keeps on one side only). Greedy: 0.870, 21."""
    from generator.sources import open_source

    res = {}
    for mode in ("kalman", "greedy"):
        cfg = parse_config({"detection": {"backend": "labels", "labels": AV2_TEST_NOISE}, "tracking": {"mode": mode}})
        run = tracked_run_folder(tmp_path / mode, open_source("av2", av2_log.parent, cfg), cfg)
        res[mode] = tracking_metrics(run, 40)
    k, g = res["kalman"], res["greedy"]
    assert k["num_thresholds"] == 40 and k["AMOTA"] >= 0.90 and k["IDSW"] <= 5, (k["AMOTA"], k["IDSW"])
    assert g["AMOTA"] < 0.90 and g["IDSW"] > 5, (g["AMOTA"], g["IDSW"])


@pytest.mark.slow
def test_av2_with_a_real_detectors_errors_meets_the_goal(av2_log, tmp_path):
    """The real AV2 log through the labels backend with a real detector's errors on top of the validation noise
    (REALISTIC_NOISE: recurring ghosts at fixed places, runs of misses, lower but overlapping false-positive
    scores): AMOTA >= 0.90, IDSW <= 5 (measured 0.950, 1; greedy 0.848, 22). bench/tracking.py sets it beside the
    offline tracker and the AB3DMOT re-implementation."""
    from generator.sources import open_source

    from actors.detect import build_detector

    cfg = parse_config({"detection": {"backend": "labels", "labels": REALISTIC_NOISE}, "tracking": {"mode": "kalman"}})
    src = open_source("av2", av2_log.parent, cfg)
    k = tracking_metrics(tracked_run_folder(tmp_path / "run", src, cfg, detector=build_detector(cfg.detection)), 40)
    assert k["AMOTA"] >= 0.90 and k["IDSW"] <= 5, (k["AMOTA"], k["IDSW"])
    # merged tracks (validate, every class): 7 before the twice-annotated car was detected once, now 5, pedestrians
    # and bicycles 0.6-0.9 m apart that an oracle knowing their true places confuses too at 0.3 m of noise
    assert k["identity"]["all"]["merged_tracks"] <= 5, k["identity"]
    # ... single swapped boxes for the most part: 22 boxes of another identity in the 5 tracks (of 9,000 and more)
    assert k["identity"]["all"]["foreign_boxes"] <= 22, k["identity"]


def test_generated_logs_with_noise_and_without_poses(synth_root, tmp_path):
    """Generated logs (2 Hz; oncoming passes, overtakes, turns at an intersection) through the labels backend
    with noise level 1 of the validation tests (0.5 m centre noise, 15 % drop-outs, 2 false positives per frame),
    tracked without ego poses. Measured AMOTA 0.885, 9 IDSW; greedy 0.294, 103."""
    from generator.sources import open_source

    noise = {"center_m": 0.5, "size_frac": 0.1, "yaw_rad": 0.2, "velocity_mps": 0.5, "drop_prob": 0.15,
             "false_positives_per_frame": 2.0, "score_min": 0.5, "seed": 3}
    res = {}
    for mode in ("kalman", "greedy"):
        cfg = parse_config({"detection": {"backend": "labels", "labels": noise}, "tracking": {"mode": mode}})
        src = open_source("nuscenes", synth_root, cfg, version=SYNTH_VERSION)
        res[mode] = tracking_metrics(tracked_run_folder(tmp_path / mode, src, cfg, poses="identity"), 40)
    k, g = res["kalman"], res["greedy"]
    assert k["AMOTA"] >= 0.85 and k["IDSW"] <= 20, (k["AMOTA"], k["IDSW"])
    assert g["AMOTA"] < 0.5 and g["IDSW"] > 50, (g["AMOTA"], g["IDSW"])


def test_lidar_backend_on_generated_logs(synth_root, synth_lidar_detector, tmp_path):
    """The weight-free lidar detector on the generated logs, issue #18's goal AMOTA >= 0.60. Measured with the
    detector that takes motion from an earlier sweep: Kalman 0.745, 1 IDSW (greedy 0.762, 2); with the earlier
    detector (no motion, no motorcycles) it was 0.495 / 0 (greedy 0.396 / 29)."""
    from generator.sources import open_source

    cfg = parse_config({"detection": {"backend": "lidar"}})
    src = open_source("nuscenes", synth_root, cfg, version=SYNTH_VERSION)
    res = {}
    for mode in ("kalman", "greedy"):  # one detection pass for the whole test run (support.data.synth_lidar_detector)
        cfg.tracking = TrackingConfig(mode=mode)
        res[mode] = tracking_metrics(tracked_run_folder(tmp_path / mode, src, cfg, detector=synth_lidar_detector), 40)
    k, g = res["kalman"], res["greedy"]
    print(f"lidar backend, generated logs: kalman AMOTA {k['AMOTA']:.3f} IDSW {k['IDSW']}, greedy AMOTA "
          f"{g['AMOTA']:.3f} IDSW {g['IDSW']}")
    assert k["AMOTA"] >= 0.60 and k["IDSW"] <= 5, (k["AMOTA"], k["IDSW"])


# ------------------------------------------------------------------------------------------ association at scale
def _reference_assign(dets, tracks, meas, cls, state, gate, reach_m=None):
    """The association as one dense Hungarian over every (detection, track) pair: what ``_assign`` computed
    before it went sparse (forbidden pairs at a cost no allowed total reaches)."""
    from scipy.optimize import linear_sum_assignment

    st = state[tracks][:, [K.X, K.Y, K.PPP, K.CLS]].T
    dx = meas[dets, 0][:, None] - st[0]
    dy = meas[dets, 1][:, None] - st[1]
    s = st[2] + meas[dets, 2][:, None]
    m = (dx * dx + dy * dy) / s
    ok = (m <= gate) & (cls[dets][:, None] == st[3])
    if reach_m is not None:
        ok &= dx * dx + dy * dy <= (reach_m[None, :] + np.sqrt(gate * meas[dets, 2][:, None])) ** 2
    cost = np.where(ok, m + 2 * np.log(s), K._BIG)
    a, b = linear_sum_assignment(cost)
    good = ok[a, b]
    return dets[a[good]], tracks[b[good]], cost[a[good], b[good]].sum()


def _crowd(n, rng, spacing=1.2):
    """``n`` detections and ``n`` tracks on a jittered grid: crowded, many conflicting pairs."""
    side = int(np.ceil(np.sqrt(n)))
    grid = np.stack(np.meshgrid(np.arange(side), np.arange(side)), -1).reshape(-1, 2)[:n] * spacing
    state = np.zeros((n, K.NCOL))
    state[:, [K.X, K.Y]] = grid + rng.normal(0, 0.3, (n, 2))
    state[:, K.PPP] = rng.uniform(0.05, 0.6, n)
    state[:, K.CLS] = rng.integers(0, 2, n)
    meas = np.zeros((n, 10))
    meas[:, :2] = grid + rng.normal(0, 0.3, (n, 2))
    meas[:, 2] = rng.uniform(0.05, 0.3, n)
    cls = rng.integers(0, 2, n)
    return meas, cls, state


@pytest.mark.parametrize("path", ["one block", "dense pairs", "KD-tree pairs", "sparse matching"])
def test_sparse_association_equals_the_dense_hungarian(monkeypatch, path):
    """On crowded random frames (hundreds of conflicting pairs, with and without a reach limit) the association
    makes the same pairs as one dense Hungarian over all pairs: solved as one block (frames up to ``_ONE_BLOCK``
    cells) or group by group, with every pair tested (the path of frames up to ``_DENSE_PAIRS``), with the
    KD-tree's nearest tracks (where the gate holds no more than ``_NEAREST`` of them), and with every group
    matched by the sparse solver (as groups above ``_MAX_BLOCK`` cells are)."""
    spacing = 1.2
    monkeypatch.setattr(K, "_ONE_BLOCK", 1 << 30 if path == "one block" else 0)
    if path == "KD-tree pairs":
        monkeypatch.setattr(K, "_DENSE_PAIRS", 0)
        spacing = 2.5  # the gate (under 3 m here) then holds fewer than _NEAREST tracks
    if path == "sparse matching":
        monkeypatch.setattr(K, "_MAX_BLOCK", 0)
    rng = np.random.default_rng(7)
    for trial in range(20):
        n = int(rng.integers(20, 400))
        meas, cls, state = _crowd(n, rng, spacing)
        dets, tracks = np.arange(n), rng.permutation(n)[: int(n * 0.8)]
        reach = rng.uniform(0.5, 3.0, len(tracks)) if trial % 2 else None
        got_d, got_t = K._assign(dets, tracks, meas, cls, state, 9.21, reach)
        ref_d, ref_t, ref_cost = _reference_assign(dets, tracks, meas, cls, state, 9.21, reach)
        assert len(got_d) == len(ref_d) > n // 4
        assert len(set(got_d)) == len(got_d) and len(set(got_t)) == len(got_t)
        st = state[got_t]
        dx, dy = meas[got_d, 0] - st[:, K.X], meas[got_d, 1] - st[:, K.Y]
        s = st[:, K.PPP] + meas[got_d, 2]
        assert np.isclose(((dx * dx + dy * dy) / s + 2 * np.log(s)).sum(), ref_cost, rtol=1e-12)
        assert set(zip(got_d, got_t)) == set(zip(ref_d, ref_t))


def test_index_labels_are_numpys_unique():
    """``_labels`` (a frame's detection or track indices -> sorted distinct values and each one's rank) gives what
    ``np.unique(..., return_inverse=True)`` gives, by a table instead of a sort."""
    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 300):
        idx = rng.integers(0, max(n // 2, 1) + 3, n)
        vals, inv = K._labels(idx)
        want_vals, want_inv = np.unique(idx, return_inverse=True)
        assert np.array_equal(vals, want_vals) and np.array_equal(inv, want_inv) and inv.dtype.kind == "i"


@pytest.mark.slow
def test_a_crowded_frame_is_associated_in_bounded_memory():
    """100,000 pedestrians in a frame: the dense association built a 74.5 GiB cost matrix. Now its memory grows
    with the detections (each tested against its nearest tracks): the peak stays under 1 GiB (measured 431 MiB,
    7 s) and every pedestrian keeps its track."""
    import tracemalloc

    n = 100_000
    rng = np.random.default_rng(3)
    xy = np.stack(np.meshgrid(np.arange(316), np.arange(317)), -1).reshape(-1, 2)[:n] * 1.5
    xy = np.concatenate([xy, xy + rng.normal(0, 0.05, (n, 2))]).astype(np.float64)
    frame_start = np.array([0, n, 2 * n])
    size = np.tile([0.7, 0.7, 1.8], (2 * n, 1))
    ped = K.DETECTION_CLASSES.index("pedestrian")
    tracemalloc.start()
    try:
        out = K.kalman_tracking(np.array([0.0, 0.5]), frame_start, xy, np.full(2 * n, 0.9),
                                np.full((2 * n, 2), np.nan), size, np.zeros(2 * n), np.ones(2 * n),
                                np.full(2 * n, ped), TrackingConfig(mode="kalman"), ground_frame=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 30, f"peak {peak / 2**30:.2f} GiB"
    ids = out.track_of_box
    assert len(np.unique(ids[:n])) == n and (ids[n:] == ids[:n]).all()  # every pedestrian kept its track
