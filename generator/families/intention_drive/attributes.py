"""Intention-Drive planning samples, instructions and their success predicates (Intention-Drive §3-4).

A *sample* is a keyframe (``is_anchor``) whose K future ego waypoints (``labels.num_waypoints`` x
``labels.waypoint_step_s``, the labels table's rule: ``labels.ego_labels``) lie inside the log. It carries,
all in the keyframe's BEV ego frame (x forward, y left):

- ``future_xy`` (K, 2): the logged future (the ground truth a planner is scored against);
- ``past`` (H, 4): the ego's previous states ``intention.history_steps`` x step apart (x, y, yaw, speed;
  NaN before the log starts), the history the paper's models get;
- the tracked objects at the keyframe with their logged future (centre waypoints from the labels table,
  heading from their motion), sizes and DRAMA-X VRU intent.

*Trajectory classification.* The maneuver and speed status of any trajectory (logged or predicted) are
the behaviour labeller's own (``generator.attributes.labels.ego_labels``) run on the trajectory
past + (0, 0) + future at ``intention.classify_at_s`` after the sample: one rule for the labels, the
instructions and the scorer.

*Instructions* (``schemas.vocab.INSTRUCTION_KINDS``), derived from what the log shows the ego does next;
each carries a predicate that can be checked on any trajectory (``check``), in this order:

1. ``atomic`` (the low level, every sample): maneuver and speed status equal the logged ones;
2. ``turn`` / ``change_lane`` / ``stop``: the logged maneuver is a turn, a lane change, a stop: same maneuver.
   An ego already stopped at the sample (the labeller's Stop there: ``PlanningSamples.stopped``) is not asked to
   come to a stop: its Stop is ``wait`` (stay stopped; the same predicate);
3. ``stop_behind`` target: maneuver Stop, and the ego ends behind the target (a vehicle ahead in the lane now)
   with a bumper gap in ``stop_gap_m`` and |lateral offset| <= ``lane_half_width_m`` (along the target's heading);
   for an ego already stopped, ``wait_behind`` (the same predicate);
4. ``follow`` target: a vehicle ahead in the lane now, the ego not stopping, ending behind it with a bumper
   gap in ``follow_gap_m`` and in its lane;
5. ``overtake`` target: a moving vehicle (>= ``moving_speed_mps``) going the ego's way (``same_direction_deg``)
   wholly ahead of the ego's front bumper now, within ``overtake_max_ahead_m`` / ``overtake_max_lateral_m``;
   the ego ends with the target's centre at least ``overtake_clear_m`` behind its own;
6. ``yield`` target: a VRU crossing (DRAMA-X lateral intent) ahead within ``yield_max_ahead_m`` /
   ``yield_max_lateral_m``; the ego slows (speed status Decelerate, or maneuver Stop) and keeps at least
   ``yield_clearance_m`` between its body and the VRU's centre at every checked time;
7. ``pull_over`` on a side (goal ``left`` / ``right``): the ego, not turning, slows (as for yield) and ends
   at least ``pull_over_min_lateral_m`` to that side of where it is now (``gap_min_m``, across the final
   heading: ``pull_over_side``), moving at most ``pull_over_end_speed_ratio`` of its current speed
   (``end_speed_max_ratio``; end speed: the last waypoint step). Derived only towards ``kerb_side``: from
   the trajectory alone, moving over towards the centre line while braking (for a stop line, say) looks the
   same as pulling over.

*Collision* (``collisions``): the ego body (the config's ``ego`` section, carried by the samples: length x
width, centre ``center_offset_m`` ahead of the origin, heading along the path) swept along the trajectory at
``collision_substeps`` points per waypoint interval, against every tracked object's box at the same times
(positions interpolated linearly, heading from its motion); an object already overlapping the ego at the
sample time is not counted (a plan cannot avoid it). *Road edges* (``road_exits``): where a sample has a map of
the paved surface (``PlanningSamples.road``, from the logs' map; ``map_pose`` places the sample in it), a
trajectory that puts a corner of the swept body off it collides too, unless the body is already off it now.

The ground truth satisfies every instruction derived from it, by construction except for collisions, which
``tests/families/test_intention.py`` checks are absent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import (KeyIndex, codes, column, fixed_list_to_numpy, ranges_to_indices,
                                         to_numpy, unique_strings)
from generator.attributes.compute import IN_FRONT, along_ego
from generator.attributes.ego import EgoStates, ego_states
from generator.attributes.labels import ego_labels
from generator.families.intention_drive.config import IntentionConfig
from schemas.config import EgoBodyConfig, LabelsConfig
from generator.families.intention_drive.vocab import INSTRUCTION_KINDS
from schemas.vocab import INTENT_LATERAL, MANEUVERS, SPEED_STATUS, VEHICLE_CLASSES, VRU_CLASSES

KIND = {k: i for i, k in enumerate(INSTRUCTION_KINDS)}
MAN = {m: i for i, m in enumerate(MANEUVERS)}
SPD = {s: i for i, s in enumerate(SPEED_STATUS)}
GOALS = ("none", "behind", "ahead", "clear", "left", "right")


def _wrap(a: np.ndarray) -> np.ndarray:
    return (a + np.pi) % (2 * np.pi) - np.pi


@dataclass
class PlanningSamples:
    """Keyframe samples (N) and the tracked objects at them (M), see the module docstring."""

    scene_id: pa.Array  # (N,) strings
    frame_index: np.ndarray  # (N,)
    timestamp_us: np.ndarray  # (N,)
    frame_row: np.ndarray  # (N,) FRAMES row
    future_xy: np.ndarray  # (N, K, 2)
    past: np.ndarray  # (N, H, 4) x, y, yaw, speed
    speed_mps: np.ndarray  # (N,)
    maneuver: np.ndarray  # (N,) code in MANEUVERS of the logged trajectory (-1 none)
    stopped: np.ndarray  # (N,) bool: the ego is stopped at the sample (the labeller's Stop there: speed below
    # labels.stop_speed_mps)
    speed_status: np.ndarray  # (N,) code in SPEED_STATUS (-1 none)
    obj_sample: np.ndarray  # (M,) sample of each object (ascending)
    obj_track: np.ndarray  # (M,)
    obj_class: pa.Array  # (M,) class names
    obj_xy: np.ndarray  # (M, 2) now
    obj_heading: np.ndarray  # (M,) rad, now
    obj_size_lw: np.ndarray  # (M, 2)
    obj_future_xy: np.ndarray  # (M, K, 2), NaN where the track has ended
    obj_future_heading: np.ndarray  # (M, K)
    obj_intent_lateral: np.ndarray  # (M,) code in INTENT_LATERAL (-1 none)
    step_s: float
    ego: EgoBodyConfig  # the ego's body (collisions, gaps, clearances)
    # the ego's pose in the map frame (N, 3): x_m, y_m, yaw_rad (the log's global frame); NaN where unknown
    map_pose: np.ndarray | None = None
    # road(sample (P,), xy (P, 2) map frame) -> (P,) bool: on the paved surface of that sample's map (True where
    # the sample has no map); None: no road edges anywhere (``road_lookup`` in generator.families.intention_drive.export)
    road: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    road_checked: np.ndarray | None = None  # (N,) bool: the sample's map was read (its road edges are checked)
    road_problems: tuple[str, ...] = ()  # maps that could not be read (their samples get no road edges)

    @property
    def n(self) -> int:
        return len(self.frame_index)

    def objects_of(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each entry of ``samples``, its objects: (entry index per pair, object index per pair)."""
        starts = np.searchsorted(self.obj_sample, samples, "left")
        ends = np.searchsorted(self.obj_sample, samples, "right")
        obj = ranges_to_indices(starts, ends - starts)
        return np.repeat(np.arange(len(samples)), ends - starts), obj


def planning_samples(frames: pa.Table, attributes: pa.Table, labels: pa.Table | None, labels_cfg: LabelsConfig,
                     cfg: IntentionConfig, body: EgoBodyConfig, ego: EgoStates | None = None) -> PlanningSamples:
    """The planning samples of every keyframe in ``frames`` with a complete logged future (module docstring).
    ``attributes``: ATTRIBUTES rows (objects now); ``labels``: LABELS rows (the objects' future waypoints and
    VRU intent; None: objects without a future, which then never collide and give no object instruction);
    ``body``: the ego's body (``cfg.ego``)."""
    scenes = unique_strings(frames.column("scene_id"))
    ego = ego or ego_states(frames, scenes)
    el = ego_labels(ego, labels_cfg)
    step, K, H = labels_cfg.waypoint_step_s, labels_cfg.num_waypoints, cfg.history_steps
    anchor = to_numpy(column(frames, "is_anchor"), bool, fill=False)
    full = np.isfinite(el["waypoints"]).all(axis=(1, 2))
    rows = np.flatnonzero(anchor & full)
    rows = rows[np.lexsort((ego.frame_index[rows], ego.scene_code[rows]))]
    n = len(rows)
    # the past, in the current ego frame
    qt = (ego.t_s[rows][:, None] - step * np.arange(H, 0, -1)[None, :]).reshape(-1)
    qs = np.repeat(ego.scene_code[rows], H)
    pos = ego.interp(ego.position_m, qs, qt).reshape(n, H, 3)
    yaw = ego.interp(ego.yaw_rad, qs, qt).reshape(n, H)
    spd = ego.interp(ego.speed_mps, qs, qt).reshape(n, H)
    R = ego.rotation[rows]
    rel = np.einsum("nji,nkj->nki", R, pos - ego.position_m[rows][:, None, :])[..., :2]
    past = np.concatenate([rel, _wrap(yaw - ego.yaw_rad[rows][:, None])[..., None], spd[..., None]], axis=2)
    future = el["waypoints"][rows]
    man, sst = classify(past, future, step, labels_cfg, cfg.classify_at_s)

    # objects now (tracked attribute rows at the sample frames) and their logged future
    a_sc = codes(column(attributes, "scene_id"), scenes)
    a_fi = to_numpy(column(attributes, "frame_index"), np.int64)
    a_tr = to_numpy(column(attributes, "track_id"), np.int64)
    sample_of_frame = KeyIndex((ego.scene_code[rows] << 32) | ego.frame_index[rows])
    a_sample = sample_of_frame.find((a_sc << 32) | a_fi)
    keep = np.flatnonzero((a_sample >= 0) & (a_tr >= 0))
    keep = keep[np.lexsort((a_tr[keep], a_sample[keep]))]
    if len(keep) > 1:  # a (frame, track) listed twice keeps its first row
        dup = np.zeros(len(keep), bool)
        dup[1:] = (a_sample[keep][1:] == a_sample[keep][:-1]) & (a_tr[keep][1:] == a_tr[keep][:-1])
        keep = keep[~dup]
    m = len(keep)
    o_sample, o_track = a_sample[keep], a_tr[keep]
    f = lambda name: to_numpy(column(attributes, name), np.float64, fill=np.nan)[keep]  # noqa: E731
    o_xy = np.stack([f("x_ego_m"), f("y_ego_m")], axis=1)
    o_heading = np.radians(f("heading_ego_deg"))
    o_size = np.stack([f("length_m"), f("width_m")], axis=1)
    o_class = pc.take(column(attributes, "class_name"), pa.array(keep, pa.int64()))
    o_future = np.full((m, K, 2), np.nan)
    o_intent = np.full(m, -1, np.int64)
    if labels is not None and labels.num_rows and m:
        agent = labels.filter(pc.equal(labels.column("subject"), "agent"))
        l_sc = codes(column(agent, "scene_id"), scenes)
        l_key = (((l_sc << 20) | to_numpy(column(agent, "frame_index"), np.int64)) << 32) \
            | (to_numpy(column(agent, "track_id"), np.int64) & 0xFFFFFFFF)
        o_key = (((ego.scene_code[rows][o_sample] << 20) | ego.frame_index[rows][o_sample]) << 32) \
            | (o_track & 0xFFFFFFFF)
        hit = KeyIndex(l_key).find(o_key)
        ok = hit >= 0
        if ok.any():
            fut = agent.column("future_xy_ego_m").take(pa.array(hit[ok]))
            flat = fixed_list_to_numpy(pc.list_flatten(fut), 2)
            lengths = to_numpy(pc.list_value_length(fut), np.int64, fill=0)
            if (lengths == K).all():
                o_future[ok] = flat.reshape(-1, K, 2)
            o_intent[ok] = codes(pc.take(column(agent, "intent_lateral"), pa.array(hit[ok])),
                                 pa.array(INTENT_LATERAL))
    o_fh = _headings(o_xy, o_future, o_heading, cfg.move_step_m)
    return PlanningSamples(
        scene_id=pc.take(scenes, pa.array(ego.scene_code[rows])), frame_index=ego.frame_index[rows],
        timestamp_us=ego.timestamp_us[rows], frame_row=rows, future_xy=future, past=past,
        speed_mps=ego.speed_mps[rows], maneuver=man, stopped=el["maneuver"][rows] == MAN["Stop"], speed_status=sst,
        obj_sample=o_sample, obj_track=o_track,
        obj_class=o_class, obj_xy=o_xy, obj_heading=o_heading, obj_size_lw=o_size, obj_future_xy=o_future,
        obj_future_heading=o_fh, obj_intent_lateral=o_intent, step_s=step, ego=body,
        map_pose=np.column_stack([ego.position_m[rows, :2], ego.yaw_rad[rows]]))


def _headings(start_xy: np.ndarray, future_xy: np.ndarray, start_heading: np.ndarray, min_step_m: float) -> np.ndarray:
    """(M, K) heading along each path start -> future[0] -> ... (the last heading where a step is shorter
    than ``min_step_m`` or unknown; ``start_heading`` before the first real step)."""
    m, k = future_xy.shape[:2]
    pts = np.concatenate([start_xy[:, None, :], future_xy], axis=1)
    d = np.diff(pts, axis=1)
    moving = np.hypot(d[..., 0], d[..., 1]) >= max(min_step_m, 1e-6)
    ang = np.arctan2(d[..., 1], d[..., 0])
    ang = np.concatenate([np.nan_to_num(start_heading)[:, None], ang], axis=1)
    take = np.concatenate([np.ones((m, 1), bool), moving], axis=1)
    idx = np.where(take, np.arange(k + 1)[None, :], 0)
    idx = np.maximum.accumulate(idx, axis=1)
    return np.take_along_axis(ang, idx, axis=1)[:, 1:]


def classify(past: np.ndarray, future_xy: np.ndarray, step_s: float, labels_cfg: LabelsConfig,
             at_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Maneuver and speed-status codes (-1: none) of trajectories: ``past`` (R, H, >=3: x, y, yaw; NaN rows
    skipped), the origin now, ``future_xy`` (R, K, 2) at ``step_s`` intervals; by the behaviour labeller at
    ``at_s`` after now (a waypoint time). A trajectory with a non-finite waypoint gets -1."""
    r, k = future_xy.shape[:2]
    h = past.shape[1]
    j = int(round(at_s / step_s))
    if not (1 <= j <= k and abs(j * step_s - at_s) < 1e-6):
        raise ValueError(f"intention.classify_at_s = {at_s} is not one of the waypoint times "
                         f"({step_s} s x 1..{k})")
    ok = np.isfinite(future_xy).all(axis=(1, 2))
    fut = np.where(ok[:, None, None], future_xy, 0.0)
    heading = _headings(np.zeros((r, 2)), fut, np.zeros(r), 1e-3)
    xy = np.concatenate([past[..., :2], np.zeros((r, 1, 2)), fut], axis=1)
    yaw = np.concatenate([past[..., 2], np.zeros((r, 1)), heading], axis=1)
    t = step_s * np.arange(-h, k + 1, dtype=np.float64)
    valid = np.isfinite(xy).all(axis=2) & np.isfinite(yaw)
    sid, col = np.nonzero(valid)
    T = np.zeros((len(sid), 4, 4))
    c, s = np.cos(yaw[sid, col]), np.sin(yaw[sid, col])
    T[:, 0, 0], T[:, 0, 1], T[:, 1, 0], T[:, 1, 1] = c, -s, s, c
    T[:, 2, 2] = T[:, 3, 3] = 1.0
    T[:, 0, 3], T[:, 1, 3] = xy[sid, col, 0], xy[sid, col, 1]
    table = pa.table({"scene_id": pa.array(sid.astype(str)), "frame_index": pa.array(col, pa.int32()),
                      "timestamp_us": pa.array(np.round((t[col] - t[0]) * 1e6).astype(np.int64)),
                      "city_SE3_ego": pa.FixedSizeListArray.from_arrays(pa.array(T.reshape(-1)), 16)})
    ego = ego_states(table)
    lab = ego_labels(ego, labels_cfg)
    at = KeyIndex((codes(pa.array(np.arange(r).astype(str)), ego.scenes) << 32) | (h + j))
    row = at.find((ego.scene_code << 32) | ego.frame_index)  # -1 except at the classified point
    man = np.full(r, -1, np.int64)
    sst = np.full(r, -1, np.int64)
    hit = row >= 0
    man[row[hit]] = lab["maneuver"][hit]
    sst[row[hit]] = lab["speed_status"][hit]
    man[~ok] = -1
    sst[~ok] = -1
    return man, sst


# ------------------------------------------------------------------------------------------ instructions
@dataclass
class Instructions:
    """Instructions (R rows, sorted by sample, kind, target track) and their predicates."""

    sample: np.ndarray  # (R,) sample index
    kind: np.ndarray  # (R,) code in INSTRUCTION_KINDS
    target: np.ndarray  # (R,) object index in the samples (-1: none)
    maneuver: np.ndarray  # (R,) required maneuver code (-1: any)
    speed_status: np.ndarray  # (R,) required speed status code (-1: any)
    slow: np.ndarray  # (R,) bool: speed status Decelerate or maneuver Stop required
    goal: np.ndarray  # (R,) code in GOALS
    gap_min_m: np.ndarray  # (R,) behind: bumper gap range; ahead: -overtake_clear_m in gap_max_m
    gap_max_m: np.ndarray
    lateral_max_m: np.ndarray  # (R,) behind: |lateral offset| limit
    clearance_m: np.ndarray  # (R,) clear: minimum distance to the target
    end_speed_max_ratio: np.ndarray  # (R,) left / right: end speed at most this fraction of the current speed

    @property
    def n(self) -> int:
        return len(self.sample)

    def take(self, idx: np.ndarray) -> "Instructions":
        return Instructions(**{k: v[idx] for k, v in self.__dict__.items()})


def _ego_centre(xy: np.ndarray, yaw: np.ndarray, body: EgoBodyConfig) -> np.ndarray:
    return xy + body.center_offset_m * np.stack([np.cos(yaw), np.sin(yaw)], axis=-1)


def _final_ego(xy: np.ndarray, body: EgoBodyConfig) -> tuple[np.ndarray, np.ndarray]:
    """Final ego box centre and heading of (R, K, 2) trajectories."""
    yaw = _headings(np.zeros((len(xy), 2)), np.nan_to_num(xy), np.zeros(len(xy)), 1e-3)[:, -1]
    return _ego_centre(xy[:, -1], yaw, body), yaw


def wholly_ahead(s: PlanningSamples, obj: np.ndarray) -> np.ndarray:
    """Objects ``obj`` (indices) whose box lies wholly ahead of the ego's front bumper now: a vehicle to get
    past, or a target the instructions call "ahead" (one partly beside the ego is "beside us"); the rule of
    ego_spatial's "in front of" (``generator.attributes.compute.along_ego``)."""
    code, _ = along_ego(s.obj_xy[obj, 0], s.obj_size_lw[obj, 0], s.obj_size_lw[obj, 1],
                        np.degrees(s.obj_heading[obj]), s.ego)
    return code == IN_FRONT


def target_gaps(s: PlanningSamples, target: np.ndarray, traj: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For trajectories (R, K, 2) and target objects (R,): at the end, the centre gap along the target's
    heading (+ = target ahead of the ego), the bumper gap (centre gap minus both half lengths) and the
    lateral offset (NaN where the target's end is unknown)."""
    centre, _ = _final_ego(traj, s.ego)
    p = s.obj_future_xy[target, -1]
    h = s.obj_future_heading[target, -1]
    d = p - centre
    along = d[:, 0] * np.cos(h) + d[:, 1] * np.sin(h)
    lateral = -d[:, 0] * np.sin(h) + d[:, 1] * np.cos(h)
    bumper = along - (s.obj_size_lw[target, 0] + s.ego.length_m) / 2
    return along, bumper, lateral


def instructions(s: PlanningSamples, cfg: IntentionConfig) -> Instructions:
    """The instructions the logged future of every sample satisfies (module docstring, in that order)."""
    man, sst = s.maneuver, s.speed_status
    parts = []

    def add(sample, kind, target=None, maneuver=None, speed=None, slow=False, goal="none", gap=(np.nan, np.nan),
            lateral=np.nan, clearance=np.nan, end_speed=np.nan):
        k = len(sample)
        full = lambda v, dt=np.float64: np.broadcast_to(np.asarray(v, dt), (k,)).copy()  # noqa: E731
        parts.append(dict(sample=np.asarray(sample, np.int64), kind=full(KIND[kind], np.int64),
                          target=full(-1 if target is None else target, np.int64),
                          maneuver=full(-1 if maneuver is None else maneuver, np.int64),
                          speed_status=full(-1 if speed is None else speed, np.int64), slow=full(slow, bool),
                          goal=full(GOALS.index(goal) if isinstance(goal, str) else goal, np.int64),
                          gap_min_m=full(gap[0]), gap_max_m=full(gap[1]), lateral_max_m=full(lateral),
                          clearance_m=full(clearance), end_speed_max_ratio=full(end_speed)))

    labelled = np.flatnonzero((man >= 0) & (sst >= 0))
    add(labelled, "atomic", maneuver=man[labelled], speed=sst[labelled])
    for kind, codes_ in (("turn", (MAN["Turn Left"], MAN["Turn Right"])),
                         ("change_lane", (MAN["Change Lane Left"], MAN["Change Lane Right"]))):
        sel = np.flatnonzero(np.isin(man, codes_))
        add(sel, kind, maneuver=man[sel])
    sel = np.flatnonzero(man == MAN["Stop"])
    add(sel[~s.stopped[sel]], "stop", maneuver=MAN["Stop"])  # moving now: come to a stop
    add(sel[s.stopped[sel]], "wait", maneuver=MAN["Stop"])  # stopped now: stay stopped
    side, shift, ratio = pull_over_side(s, s.future_xy, man, sst)
    kerb = 1 if cfg.kerb_side == "left" else -1
    sel = np.flatnonzero((side == kerb) & (shift >= cfg.pull_over_min_lateral_m)
                         & (ratio <= cfg.pull_over_end_speed_ratio))
    add(sel, "pull_over", slow=True, goal=np.where(side[sel] > 0, GOALS.index("left"), GOALS.index("right")),
        gap=(cfg.pull_over_min_lateral_m, np.nan), end_speed=cfg.pull_over_end_speed_ratio)

    # object instructions, over every (sample, object) pair
    o = np.arange(len(s.obj_track))
    smp = s.obj_sample
    x, y = s.obj_xy[:, 0], s.obj_xy[:, 1]
    cls = s.obj_class
    vehicle = to_numpy(pc.is_in(cls, value_set=pa.array(VEHICLE_CLASSES)), bool, fill=False)
    vru = to_numpy(pc.is_in(cls, value_set=pa.array(VRU_CLASSES)), bool, fill=False)
    has_future = np.isfinite(s.obj_future_xy).all(axis=(1, 2))
    along, bumper, lateral = target_gaps(s, o, s.future_xy[smp]) if len(o) else (np.zeros(0),) * 3
    same_dir = np.abs(_wrap(np.nan_to_num(s.obj_heading, nan=np.pi))) <= np.radians(cfg.same_direction_deg)
    horizon = s.step_s * s.future_xy.shape[1]
    moved = np.hypot(*(s.obj_future_xy[:, -1] - s.obj_xy).T) / horizon if len(o) else np.zeros(0)
    in_lane_now = (x > 0) & (np.abs(y) <= cfg.lane_half_width_m)
    in_lane_end = np.abs(lateral) <= cfg.lane_half_width_m
    stop = man[smp] == MAN["Stop"]

    def within(v, rng):
        return (v >= rng[0]) & (v <= rng[1])

    sel = np.flatnonzero(vehicle & has_future & in_lane_now & stop & in_lane_end & within(bumper, cfg.stop_gap_m))
    waits = s.stopped[smp[sel]]
    for kind, pick in (("stop_behind", sel[~waits]), ("wait_behind", sel[waits])):
        add(smp[pick], kind, target=pick, maneuver=MAN["Stop"], goal="behind", gap=cfg.stop_gap_m,
            lateral=cfg.lane_half_width_m)
    sel = np.flatnonzero(vehicle & has_future & in_lane_now & ~stop & (man[smp] >= 0) & in_lane_end
                         & within(bumper, cfg.follow_gap_m))
    add(smp[sel], "follow", target=sel, goal="behind", gap=cfg.follow_gap_m, lateral=cfg.lane_half_width_m)
    # ahead now: wholly ahead of the ego's front bumper (a vehicle beside the ego is not one to get past); past
    # at the end: measured from the ego's body centre, as target_gaps does
    sel = np.flatnonzero(vehicle & has_future & same_dir & wholly_ahead(s, o) & (x <= cfg.overtake_max_ahead_m)
                         & (np.abs(y) <= cfg.overtake_max_lateral_m) & (moved >= cfg.moving_speed_mps)
                         & (along <= -cfg.overtake_clear_m))
    add(smp[sel], "overtake", target=sel, goal="ahead", gap=(-np.inf, -cfg.overtake_clear_m))
    crossing = np.isin(s.obj_intent_lateral, (INTENT_LATERAL.index("goes to the left"),
                                              INTENT_LATERAL.index("goes to the right")))
    slowing = (sst[smp] == SPD["Decelerate"]) | stop
    cand = np.flatnonzero(vru & has_future & crossing & (x > 0) & (x <= cfg.yield_max_ahead_m)
                          & (np.abs(y) <= cfg.yield_max_lateral_m) & slowing)
    if len(cand):
        clear = min_clearance(s, cand, s.future_xy[smp[cand]], cfg) >= cfg.yield_clearance_m
        sel = cand[clear]
        add(smp[sel], "yield", target=sel, slow=True, goal="clear", clearance=cfg.yield_clearance_m)

    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    track = np.where(cols["target"] >= 0, s.obj_track[np.maximum(cols["target"], 0)] if len(o) else -1, -1)
    order = np.lexsort((track, cols["kind"], cols["sample"]))
    return Instructions(**{k: v[order] for k, v in cols.items()})


def pull_over_side(s: PlanningSamples, traj: np.ndarray, man: np.ndarray, sst: np.ndarray,
                   sample: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For trajectories (R, K, 2) of samples ``sample`` (R,; default: every sample) with their maneuver and
    speed-status codes: the side the ego moves to while slowing and not turning (+1 left, -1 right, 0: it
    turns, does not slow or does not move sideways), the lateral shift to that side at the end (m) and the end
    speed as a fraction of the current speed (inf where the ego stands still now). The shift is measured
    across the *final* heading (the lane's direction once the ego is in its new place): a third of the way
    into a pull-over the ego already points several degrees to the side, which over 25 m of travel puts the
    end point metres to the *other* side of the current heading."""
    sample = np.arange(s.n) if sample is None else np.asarray(sample, np.int64)
    _, yaw = _final_ego(traj, s.ego)
    y = -np.sin(yaw) * traj[:, -1, 0] + np.cos(yaw) * traj[:, -1, 1]
    end_speed = np.hypot(*(traj[:, -1] - traj[:, -2]).T) / s.step_s
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(s.speed_mps[sample] > 0, end_speed / s.speed_mps[sample], np.inf)
    slow = (sst == SPD["Decelerate"]) | (man == MAN["Stop"])
    turning = np.isin(man, (MAN["Turn Left"], MAN["Turn Right"]))
    side = np.where(slow & ~turning & np.isfinite(y), np.sign(y), 0).astype(np.int64)
    return side, np.abs(y), np.where(np.isfinite(ratio), ratio, np.inf)


# ------------------------------------------------------------------------------------------ checks
def _ego_path(traj: np.ndarray, substeps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(R, K, 2) waypoints -> points along the path from the origin: (R, S*K, 2) positions, (R, S*K) yaw,
    and (S*K,) fractional waypoint times (1..K)."""
    r, k = traj.shape[:2]
    pts = np.concatenate([np.zeros((r, 1, 2)), traj], axis=1)
    u = np.arange(1, substeps * k + 1) / substeps  # in waypoint steps
    i0 = np.minimum(np.floor(u - 1e-9).astype(int), k - 1)
    w = (u - i0)[None, :, None]
    xy = pts[:, i0] * (1 - w) + pts[:, i0 + 1] * w
    heading = _headings(np.zeros((r, 2)), np.nan_to_num(traj), np.zeros(r), 1e-3)
    return xy, heading[:, np.minimum(np.ceil(u - 1e-9).astype(int), k) - 1], u


def _object_path(s: PlanningSamples, obj: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Objects' centres (P, S*K, 2) and headings at fractional waypoint times ``u`` (linear from now)."""
    pts = np.concatenate([s.obj_xy[obj][:, None, :], s.obj_future_xy[obj]], axis=1)
    k = s.obj_future_xy.shape[1]
    i0 = np.minimum(np.floor(u - 1e-9).astype(int), k - 1)
    w = (u - i0)[None, :, None]
    xy = pts[:, i0] * (1 - w) + pts[:, i0 + 1] * w
    return xy, s.obj_future_heading[obj][:, np.minimum(np.ceil(u - 1e-9).astype(int), k) - 1]


def boxes_overlap(ca, ya, la, wa, cb, yb, lb, wb) -> np.ndarray:
    """Oriented rectangles A and B (centres (..., 2), yaws, lengths, widths; broadcast) overlap
    (separating-axis test over the four edge normals); False where anything is NaN."""
    axes = [np.stack([np.cos(a), np.sin(a)], -1) for a in (ya, ya + np.pi / 2, yb, yb + np.pi / 2)]
    a1, a2, b1, b2 = axes
    d = cb - ca
    sep = np.zeros(np.broadcast(d[..., 0], la, lb).shape, bool)
    for n in axes:
        ra = la / 2 * np.abs((a1 * n).sum(-1)) + wa / 2 * np.abs((a2 * n).sum(-1))
        rb = lb / 2 * np.abs((b1 * n).sum(-1)) + wb / 2 * np.abs((b2 * n).sum(-1))
        with np.errstate(invalid="ignore"):
            sep |= ~(np.abs((d * n).sum(-1)) <= ra + rb)  # NaN compares False: counts as separated
    return ~sep


def collisions(s: PlanningSamples, sample: np.ndarray, traj: np.ndarray, cfg: IntentionConfig
               ) -> tuple[np.ndarray, np.ndarray]:
    """For trajectories (R, K, 2) of samples ``sample`` (R,): whether the swept ego body hits a tracked
    object's box (module docstring), and the track id of the first object hit (-1)."""
    r = len(sample)
    hit = np.zeros(r, bool)
    first = np.full(r, -1, np.int64)
    pair_r, obj = s.objects_of(np.asarray(sample, np.int64))
    if r == 0 or len(obj) == 0:
        return hit, first
    ok_traj = np.isfinite(traj).all(axis=(1, 2))
    exy, eyaw, u = _ego_path(np.where(ok_traj[:, None, None], traj, 0.0), cfg.collision_substeps)
    oxy, oyaw = _object_path(s, obj, u)
    L, W = s.ego.length_m, s.ego.width_m
    ol, ow = s.obj_size_lw[obj, 0][:, None], s.obj_size_lw[obj, 1][:, None]
    already = boxes_overlap(_ego_centre(np.zeros(2), 0.0, s.ego), 0.0, L, W, s.obj_xy[obj],
                            np.nan_to_num(s.obj_heading[obj]), ol[:, 0], ow[:, 0])
    over = boxes_overlap(_ego_centre(exy[pair_r], eyaw[pair_r], s.ego), eyaw[pair_r], L, W, oxy, oyaw, ol, ow)
    over &= ~already[:, None] & ok_traj[pair_r][:, None]
    any_pair = over.any(axis=1)
    hit[pair_r[any_pair]] = True
    when = np.where(over.any(axis=1), over.argmax(axis=1), np.iinfo(np.int64).max)
    o = np.lexsort((when, pair_r))
    firsts = o[np.r_[True, pair_r[o][1:] != pair_r[o][:-1]]]
    firsts = firsts[any_pair[firsts]]
    first[pair_r[firsts]] = s.obj_track[obj[firsts]]
    return hit, first


def _corners(centre: np.ndarray, yaw: np.ndarray, length: float, width: float) -> np.ndarray:
    """(..., 2) centres and (...) yaws of L x W boxes -> (..., 4, 2) corners."""
    c, s = np.cos(yaw)[..., None], np.sin(yaw)[..., None]
    dx = np.array([1, 1, -1, -1]) * length / 2
    dy = np.array([1, -1, -1, 1]) * width / 2
    return np.stack([centre[..., 0:1] + c * dx - s * dy, centre[..., 1:2] + s * dx + c * dy], axis=-1)


def road_exits(s: PlanningSamples, sample: np.ndarray, traj: np.ndarray, cfg: IntentionConfig) -> np.ndarray:
    """For trajectories (R, K, 2) of samples ``sample`` (R,): whether the swept ego body leaves the paved
    surface (a corner off the sample's map at any substep), where the sample has a map (``s.road``) and its
    current body is on it (``cfg.road_edges`` off, no map or no pose: never)."""
    sample = np.asarray(sample, np.int64)
    r = len(sample)
    out = np.zeros(r, bool)
    if not cfg.road_edges or s.road is None or s.map_pose is None or r == 0:
        return out
    pose = s.map_pose[sample]
    ok = np.isfinite(traj).all(axis=(1, 2)) & np.isfinite(pose).all(axis=1)
    if not ok.any():
        return out
    exy, eyaw, _ = _ego_path(np.where(ok[:, None, None], traj, 0.0), cfg.collision_substeps)
    now = _corners(_ego_centre(np.zeros((r, 1, 2)), np.zeros((r, 1)), s.ego), np.zeros((r, 1)), s.ego.length_m,
                   s.ego.width_m)
    path = _corners(_ego_centre(exy, eyaw, s.ego), eyaw, s.ego.length_m, s.ego.width_m)
    pts = np.concatenate([now, path], axis=1)  # (R, 1 + S*K, 4, 2) BEV ego frame of the sample
    c, sn = np.cos(pose[:, 2])[:, None, None], np.sin(pose[:, 2])[:, None, None]
    mx = pose[:, 0][:, None, None] + c * pts[..., 0] - sn * pts[..., 1]
    my = pose[:, 1][:, None, None] + sn * pts[..., 0] + c * pts[..., 1]
    who = np.broadcast_to(sample[:, None, None], mx.shape)
    on = s.road(who.reshape(-1), np.stack([mx.reshape(-1), my.reshape(-1)], axis=1)).reshape(mx.shape)
    start_on = on[:, 0].all(axis=1)
    return ok & start_on & ~on[:, 1:].all(axis=(1, 2))


def min_clearance(s: PlanningSamples, target: np.ndarray, traj: np.ndarray, cfg: IntentionConfig) -> np.ndarray:
    """Smallest distance (m) between the swept ego body and each target's centre over the horizon (R,)."""
    exy, eyaw, u = _ego_path(np.nan_to_num(traj), cfg.collision_substeps)
    oxy, _ = _object_path(s, np.asarray(target, np.int64), u)
    c = _ego_centre(exy, eyaw, s.ego)
    d = oxy - c
    along = np.abs(d[..., 0] * np.cos(eyaw) + d[..., 1] * np.sin(eyaw)) - s.ego.length_m / 2
    across = np.abs(-d[..., 0] * np.sin(eyaw) + d[..., 1] * np.cos(eyaw)) - s.ego.width_m / 2
    dist = np.hypot(np.maximum(along, 0), np.maximum(across, 0))
    return np.nanmin(np.where(np.isfinite(dist), dist, np.inf), axis=1)


def check(s: PlanningSamples, ins: Instructions, traj: np.ndarray, labels_cfg: LabelsConfig,
          cfg: IntentionConfig) -> dict[str, np.ndarray]:
    """Evaluate instructions (R) on trajectories (R, K, 2), one per instruction: ``collision``,
    ``first_hit`` (track id), ``maneuver`` / ``speed_status`` codes of the trajectory, ``semantic`` (the
    predicate without the safety condition) and ``success`` (Intention-Drive's ISR condition: no collision
    and the predicate holds). A trajectory with a non-finite waypoint fails."""
    traj = np.asarray(traj, np.float64)
    finite = np.isfinite(traj).all(axis=(1, 2))
    man, sst = classify(s.past[ins.sample], traj, s.step_s, labels_cfg, cfg.classify_at_s)
    hit, first = collisions(s, ins.sample, traj, cfg)
    off = road_exits(s, ins.sample, np.where(finite[:, None, None], traj, 0.0), cfg)
    ok = finite.copy()
    ok &= (ins.maneuver < 0) | (man == ins.maneuver)
    ok &= (ins.speed_status < 0) | (sst == ins.speed_status)
    ok &= ~ins.slow | (sst == SPD["Decelerate"]) | (man == MAN["Stop"])
    t = np.maximum(ins.target, 0)
    has_t = ins.target >= 0
    goal_ok = np.ones(ins.n, bool)
    if has_t.any():
        along, bumper, lateral = target_gaps(s, t, np.nan_to_num(traj))
        behind = (bumper >= ins.gap_min_m) & (bumper <= ins.gap_max_m) & (np.abs(lateral) <= ins.lateral_max_m)
        ahead = along <= ins.gap_max_m
        goal = np.asarray(GOALS)[ins.goal]
        goal_ok = np.where(goal == "behind", behind, goal_ok)
        goal_ok = np.where(goal == "ahead", ahead, goal_ok)
        sel = np.flatnonzero(goal == "clear")
        if len(sel):
            goal_ok[sel] = min_clearance(s, t[sel], np.nan_to_num(traj[sel]), cfg) >= ins.clearance_m[sel]
    sided = np.flatnonzero(np.isin(ins.goal, (GOALS.index("left"), GOALS.index("right"))))
    if len(sided):
        side, shift, ratio = pull_over_side(s, np.nan_to_num(traj[sided]), man[sided], sst[sided], ins.sample[sided])
        want = np.where(ins.goal[sided] == GOALS.index("left"), 1, -1)
        goal_ok[sided] = ((side == want) & (shift >= ins.gap_min_m[sided])
                          & (ratio <= ins.end_speed_max_ratio[sided]))
    semantic = ok & goal_ok
    return {"collision": (hit | off) & finite, "object_collision": hit & finite, "off_road": off & finite,
            "first_hit": first, "maneuver": man, "speed_status": sst,
            "semantic": semantic, "success": semantic & ~hit & ~off & finite}
