"""Ego intention (Intention-Drive §3): an instruction at a keyframe and the trajectory that carries it out.

The instructions are ``generator.families.intention_drive.attributes.instructions`` over the keyframe's planning sample:
the low level (``atomic``: "Turn Left, Decelerate") and high-level intentions derived from what the log
shows the ego does next (turn, change lanes, stop, stop behind / follow / overtake a vehicle, yield to a
crossing VRU, pull over on a side; an ego already stopped: wait, wait behind a vehicle). Objects are named
``Region [X]`` like every other family, so only candidates of the
keyframe (visible, numbered) can be targets. The question is the instruction; the answer is the logged
trajectory in the paper's format, "[PT, (x1, y1), ..., (xK, yK)]" (K waypoints in the keyframe's BEV ego
frame, metres, x forward, y left). ``value`` is null (``unit`` 'trajectory'): the waypoints, past states,
images and success predicate of each row are in the intention export (``generator.families.intention_drive.export``,
keyed by ``qa_id``). Without the labels table (the objects' logged future) the family asks nothing, like
ego_behaviour. Rows about the ego are grounded in the keyframe's context images (its history); rows
about a target in the target's box at the keyframe.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import KeyIndex
from generator.families.intention_drive.attributes import GOALS, KIND, instructions, planning_samples, wholly_ahead
from generator.qa.fields import Family, Field, QuestionType
from generator.qa.generate import Batch, Plan, keyframe_batch, single, vocabulary
from generator.qa.answers import Numbers
from generator.qa.render import format_fixed
from schemas.vocab import MANEUVERS, SPEED_STATUS

NAME = "ego_intention"
_TRAJ = Field("trajectory", "text", answer=True, doc="'[PT, (x1, y1), ..., (xK, yK)]': K waypoints (m, BEV ego frame)")
_TARGET = (Field("region", "text", doc="'Region [X]' of the target"), Field("class_name", "text"),
           Field("position", "text", doc="'ahead in our lane' | 'ahead on the left' | 'ahead on the right'"),
           Field("distance_m", "quantity", "m", doc="distance to the target now"))
_DIRECTION = Field("direction", "text", doc="'left' | 'right'")


def _t(name, fields, doc):
    return QuestionType(NAME, name, "qualitative", tuple(fields) + (_TRAJ,), None, "trajectory", doc=doc,
                        reading=Numbers())


TYPES = {qt.name: qt for qt in (
    _t("atomic", (Field("maneuver", "text", doc="schemas.vocab.MANEUVERS, e.g. 'Turn Left'"),
                  Field("speed_status", "text", doc="schemas.vocab.SPEED_STATUS")),
       "low-level atomic instruction: maneuver and speed status"),
    _t("turn", (_DIRECTION,), "turn at the next intersection"),
    _t("change_lane", (_DIRECTION,), "change into the lane on one side"),
    _t("stop", (), "come to a stop"),
    _t("stop_behind", _TARGET, "stop behind the vehicle ahead in the lane"),
    _t("follow", _TARGET, "follow the vehicle ahead in the lane"),
    _t("overtake", _TARGET, "overtake a vehicle going the same way"),
    _t("yield", _TARGET, "yield to a crossing pedestrian or cyclist"),
    _t("pull_over", (_DIRECTION,), "pull over on one side and slow to a stop"),
    _t("wait", (), "stay stopped (the ego is stopped at the keyframe)"),
    _t("wait_behind", _TARGET, "stay stopped behind the vehicle ahead in the lane (the ego is stopped)"),
)}
_OBJECT_KINDS = ("stop_behind", "follow", "overtake", "yield", "wait_behind")
_POSITIONS = ("ahead in our lane", "ahead on the left", "ahead on the right", "beside us on the left",
              "beside us on the right")


def trajectory_text(xy: np.ndarray, decimals: int = 2) -> pa.Array:
    """(N, K, 2) waypoints -> '[PT, (x1, y1), ..., (xK, yK)]' strings (columnar)."""
    n, k = xy.shape[:2]
    parts: list = ["[PT"]
    for j in range(k):
        parts += [", (", format_fixed(xy[:, j, 0], decimals), ", ", format_fixed(xy[:, j, 1], decimals), ")"]
    parts.append("]")
    parts = [p if isinstance(p, pa.Array) else pa.array([p] * n, pa.string()) for p in parts]
    return pc.binary_join_element_wise(*parts, "")


def build(plan: Plan) -> list[Batch]:
    cfg = plan.cfg
    labels = plan.tables.get("labels")
    if labels is None or labels.num_rows == 0:  # like ego_behaviour: a run folder without labels gets none
        return []
    s = planning_samples(plan.frames, plan.attrs, labels, cfg.labels, cfg.intention, cfg.ego, ego=plan.ego)
    if s.n == 0:
        return []
    ins = instructions(s, cfg.intention)
    group_of_row = np.full(plan.frames.num_rows, -1, np.int64)
    group_of_row[plan.anchors] = np.arange(len(plan.anchors))
    group = group_of_row[s.frame_row[ins.sample]]
    c = plan.cand
    cand_of = KeyIndex(c["frame_row"] * (1 << 32) + (c["track"] & 0xFFFFFFFF))
    has_t = ins.target >= 0
    cand = np.full(len(ins.target), -1, np.int64)  # the instruction's target as a candidate (-1: none)
    if has_t.any():  # (a keyframe without objects has no target to look up)
        k = np.flatnonzero(has_t)
        cand[k] = cand_of.find(s.frame_row[ins.sample[k]] * (1 << 32) + (s.obj_track[ins.target[k]] & 0xFFFFFFFF))
    traj = trajectory_text(s.future_xy[ins.sample], cfg.qa.decimals)
    out = []
    context = plan.context_pool()
    for name, qt in TYPES.items():
        sel = np.flatnonzero((ins.kind == KIND[name]) & (group >= 0) & (~has_t | (cand >= 0)))
        if len(sel) == 0:
            continue
        if name in _OBJECT_KINDS:  # rows about candidates go in canonical (region) order, not by track id
            sel = sel[np.argsort(cand[sel], kind="stable")]
        text = {"trajectory": (traj, sel)}
        man, sst = ins.maneuver[sel], ins.speed_status[sel]
        if name == "atomic":
            text.update(maneuver=vocabulary(MANEUVERS, man), speed_status=vocabulary(SPEED_STATUS, sst))
        elif name in ("turn", "change_lane"):
            right = np.isin(man, (MANEUVERS.index("Turn Right"), MANEUVERS.index("Change Lane Right")))
            text["direction"] = vocabulary(("left", "right"), right.astype(np.int64))
        elif name == "pull_over":
            right = ins.goal[sel] == GOALS.index("right")
            text["direction"] = vocabulary(("left", "right"), right.astype(np.int64))
        value = np.full(len(sel), np.nan)
        if name in _OBJECT_KINDS:
            o = ins.target[sel]
            y = s.obj_xy[o, 1]
            pos = np.where(np.abs(y) <= cfg.intention.lane_half_width_m, 0, np.where(y > 0, 1, 2))
            pos = np.where((pos > 0) & ~wholly_ahead(s, o), pos + 2, pos)  # "beside us on the left/right"
            text["position"] = vocabulary(_POSITIONS, pos)
            out.append(single(plan, qt, cand[sel], value, text=text,
                              quantities={"distance_m": np.hypot(s.obj_xy[o, 0], s.obj_xy[o, 1])}))
        else:
            out.append(keyframe_batch(plan, qt, group[sel], value, text=text, pool=context))
    return out


EGO_INTENTION = Family(NAME, "Ego Intention QA (Intention-Drive instructions and trajectories)", tuple(TYPES.values()),
                       build, reads={"labels": ["scene_id", "frame_index", "subject", "track_id", "intent_lateral",
                                                "future_xy_ego_m"],
                                     "attributes": ["heading_ego_deg"]})
