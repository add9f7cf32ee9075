"""Helpers for tests/actors/test_track*.py: tracker-only run folders that ``drivegen validate`` scores with the devkit.

``tracked_run_folder`` detects and tracks each scene (no segmentation, visibility or QA: only what validate
reads) and commits source.json, config.yaml and perception/{objects,frames} per scene like a run does,
as tests/support/validate.py does from the whole perception stage. ``poses='identity'``
hides the ego poses from the tracker (a log without poses, as on tracking benchmarks: tracks are then
ego-relative); the objects are written with the log's poses either way, so validate compares them with the
labels in the global frame.

``highway_scene`` scripts a straight road with traffic at high speed relative to the ego (oncoming cars,
vehicles being overtaken) and a noisy detector, with its ground truth.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from actors.detect import build_detector
from actors.track.pubtracker import track_scene
from generator.geometry import SE3
from generator.perception import objects_table
from generator.runfolder import RunStore, commit_tables
from generator.sources import frames_table
from generator.validate.run import ValidateOptions, validate_run
from generator.types import Boxes3D
from schemas.config import PipelineConfig


# A real detector's errors on top of the validation noise (issue #33): recurring ghosts at fixed places (2 sites per
# hectare, seen in 60 % of the frames), runs of misses (2 per object-minute, ~1 s), 5 % independent drop-outs, one
# random false positive per frame, false-positive scores in [0.3, 0.8] overlapping the true boxes' [0.5, 1], and one
# box for annotations that coincide (the AV2 log annotates one parked car twice; a detector reports it once).
REALISTIC_NOISE = {"center_m": 0.3, "size_frac": 0.1, "yaw_rad": 0.1, "velocity_mps": 0.3, "score_min": 0.5, "seed": 0,
                   "drop_prob": 0.05, "miss_runs_per_min": 2.0, "miss_run_s": 1.0, "ghosts_per_ha": 2.0,
                   "ghost_presence": 0.6, "false_positives_per_frame": 1.0, "fp_score": [0.3, 0.8],
                   "coincident_frac": 0.5}


def tracked_run_folder(out: Path, source, cfg: PipelineConfig, poses: str = "log",
                       scene_ids: list[str] | None = None, detector=None, tracker=None) -> Path:
    """Run folder of ``cfg.detection`` (or ``detector``: frames -> boxes, e.g. one that replays cached output)
    + ``cfg.tracking`` (or ``tracker(timestamps_us, detections, poses)``, e.g. the AB3DMOT reference) over
    ``source``'s scenes; see the module docstring."""
    store = RunStore(out)
    store.write_json("source.json", source.describe())
    store.write_bytes("config.yaml", cfg.to_yaml().encode())
    detector = detector or build_detector(cfg.detection)
    for sid in scene_ids or source.scene_ids():
        scene = source.load_scene(sid)
        seen = [f.city_SE3_ego for f in scene.frames]
        if poses == "identity":
            seen = [SE3(np.eye(3), np.zeros(3))] * len(seen)
        dets = detector(scene.frames)
        tracked = (tracker(scene.timestamps_us, dets, seen) if tracker is not None
                   else track_scene(scene.timestamps_us, dets, cfg.tracking, seen))
        commit_tables(store, sid, {"objects": objects_table(scene, tracked, cfg.detection.backend,
                                                                  None if tracker is not None else cfg.tracking.mode),
                                   "frames": frames_table(scene)}, split="train")
    return out


def tracking_metrics(run: Path, thresholds: int = 40) -> dict:
    """The devkit's tracking metrics of a run folder (``validate_run``'s 'tracking' section), AMOTA over
    ``thresholds`` recall thresholds (the devkit's 40 by default), with validate's identity figures (merged
    tracks, bridge boxes, split identities; every class, any range) under 'identity'."""
    r = validate_run(str(run), ValidateOptions(tracking_thresholds=thresholds, label_agreement=False))
    return {**r["tracking"], "identity": r["track_identity"]}


def oracle_confusions(scene, detections: list) -> set[str]:
    """The identities (``instance_token``) that even an oracle confuses: each frame's detections assigned to the
    frame's true boxes of their class by least total centre distance, knowing every object's true place; a
    detection given another object's box names both objects. What no tracker working from box positions can
    avoid at that noise."""
    return _oracle(scene, detections)[0]


def oracle_foreign(scene, detections: list) -> int:
    """How many detections the oracle of ``oracle_confusions`` gives another object's box: the foreign boxes a
    tracker working from positions cannot avoid."""
    return _oracle(scene, detections)[1]


def _oracle(scene, detections: list) -> tuple[set[str], int]:
    from scipy.optimize import linear_sum_assignment

    out: set[str] = set()
    foreign = 0
    for fr, d in zip(scene.frames, detections):
        gt = fr.labels
        tok = d.instance_token.astype(str)
        for c in set(d.class_name[tok != ""]):
            di, gi = np.flatnonzero((d.class_name == c) & (tok != "")), np.flatnonzero(gt.class_name == c)
            if not len(gi):
                continue
            cost = np.linalg.norm(d.center_m[di, None, :2] - gt.center_m[None, gi, :2], axis=2)
            a, b = linear_sum_assignment(cost)
            wrong = tok[di[a]] != gt.instance_token[gi[b]].astype(str)
            out |= set(tok[di[a]][wrong]) | set(gt.instance_token[gi[b]][wrong].astype(str))
            foreign += int(wrong.sum())
    return out, foreign


def highway_scene(hz: float, duration_s: float = 20.0, ego_speed_mps: float = 25.0, center_std_m: float = 0.2,
                  drop_prob: float = 0.1, false_positives_per_frame: float = 1.0, seed: int = 0):
    """A straight two-way road seen from an ego driving along +x at ``ego_speed_mps``, objects kept while
    40 m behind to 60 m ahead of it: 12 oncoming cars at 15-22 m/s in the other lane (40-47 m/s relative at
    the default ego speed), 6 cars and trucks at 8-15 m/s in the ego's lane beside it (being overtaken), 4
    cyclists on the verge, 6 pedestrians on the pavement. Detections: centres + N(0, center_std_m) per axis,
    each box dropped with ``drop_prob``, Poisson(``false_positives_per_frame``) car-sized false positives
    anywhere on the road, scores uniform in [0.3, 1] for all, no velocities (a LiDAR detector's output).

    Returns (timestamps_us (F,), detections [F Boxes3D, ego frame], ground truth [F Boxes3D, ego frame,
    ``instance_token`` = identity], city_SE3_ego [F SE3]: the ego's true poses)."""
    rng = np.random.default_rng(seed)
    # (class, size lwh, x at t = 0 (m, road frame), lane y (m), speed along x (m/s))
    objs = [("car", (4.6, 1.9, 1.6), 60 + 45 * i + rng.uniform(-5, 5), 3.5, -rng.uniform(15, 22)) for i in range(12)]
    objs += [("truck", (9.0, 2.5, 3.2), 20 + 60 * i, -3.5, rng.uniform(8, 15)) if i % 3 == 0 else
             ("car", (4.6, 1.9, 1.6), 20 + 60 * i, -3.5, rng.uniform(8, 15)) for i in range(6)]
    objs += [("bicycle", (1.8, 0.6, 1.7), 30 + 80 * i, -6.0, rng.uniform(4, 7)) for i in range(4)]
    objs += [("pedestrian", (0.7, 0.7, 1.8), 15 + 70 * i, 8 + rng.uniform(0, 2), rng.uniform(-1.5, 1.5))
             for i in range(6)]
    cls = np.array([o[0] for o in objs], dtype=object)
    size = np.array([o[1] for o in objs])
    x0, y, v = (np.array([o[k] for o in objs]) for k in (2, 3, 4))
    ts, dets, gts, poses = [], [], [], []
    for k in range(int(round(duration_s * hz))):
        t = k / hz
        ego_x = ego_speed_mps * t
        x = x0 + v * t - ego_x
        vis = np.nonzero((x > -40) & (x < 60))[0]
        gt = Boxes3D(np.column_stack([x[vis], y[vis], np.full(len(vis), 0.8)]), size[vis],
                     np.where(v[vis] >= 0, 0.0, np.pi), cls[vis],
                     instance_token=np.array([f"obj{i}" for i in vis], dtype=object))
        seen = gt.subset(np.nonzero(rng.random(len(vis)) >= drop_prob)[0])
        noise = np.column_stack([rng.normal(0.0, center_std_m, (len(seen), 2)), np.zeros(len(seen))])
        det = Boxes3D(seen.center_m + noise, seen.size_lwh_m, seen.yaw_rad, seen.class_name)
        n_fp = rng.poisson(false_positives_per_frame)
        fp = Boxes3D(np.column_stack([rng.uniform(-40, 60, n_fp), rng.uniform(-10, 10, n_fp), np.full(n_fp, 0.8)]),
                     np.tile([4.6, 1.9, 1.6], (n_fp, 1)), rng.uniform(-np.pi, np.pi, n_fp),
                     np.full(n_fp, "car", dtype=object))
        det = Boxes3D.concat([det, fp])
        det.score = rng.uniform(0.3, 1.0, len(det))
        ts.append(int(round(t * 1e6)))
        dets.append(det)
        gts.append(gt)
        poses.append(SE3(np.eye(3), np.array([ego_x, 0.0, 0.0])))
    return np.array(ts, dtype=np.int64), dets, gts, poses
