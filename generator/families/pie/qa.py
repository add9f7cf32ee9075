"""PIE/JAAD (seed 001, §III): will a pedestrian cross in front of the ego vehicle, and where will it be.

* ``crossing`` (per pedestrian candidate of a keyframe): whether it steps into the ego's path within the action
  horizon (``pie.tte_max_frames`` / ``pie.fps`` = 3 s) after the keyframe, by the rule ``drivegen export pie
  --run`` uses (``generator.families.pie.attributes.path_entry``); value 1/0 (unit ``bool``). A pedestrian already in the
  path at the keyframe, or entering it only later than the horizon, gets no question (neither answer is right).
* ``risk_region`` (per pedestrian candidate): where its box centre will be in the front camera
  ``pie.risk_horizon_frames`` / ``pie.fps`` (3 s) later, or at its last visible front-camera box before then
  (the benchmark's rule, §III-A 3): the event-risk class (``generator.families.pie.attributes.risk_class``: 0 = the centre
  of the view ... 5 = its edges) and the side; value = the class (unit ``risk_class``).

Reads no table beyond the shared ones: the tracked pedestrians' positions are the attributes' (one row per
object and frame, ``generator.families.pie.attributes.pedestrian_rows``), the ego's path the frames' poses.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import KeyIndex, codes, column, fixed_list_to_numpy, to_numpy
from generator.families.pie.attributes import path_entry, pedestrian_rows, risk_class, risk_region
from generator.qa.answers import Choice, Relation
from generator.qa.fields import Family, Field, QuestionType
from generator.qa.video import VideoBatch
from generator.qa.generate import Batch, Plan, single, vocabulary

NAME = "pie"
_SIDE_PHRASES = ("just {} of the centre", "a little to the {}", "to the {}", "far to the {}", "at the {} edge of the view")
WHERE = ("in the centre of the view",) + tuple(p.format(s) for p in _SIDE_PHRASES for s in ("left", "right"))
_SHORT_WHERE = (("centre", "middle"), ("just {} of centre",), ("slightly to the {}", "slightly {}"), ("on the {}",),
                ("far {}",), ("{} edge",))
WHERE_READING = Choice(tuple((w,) + tuple(p.format(s) for p in _SHORT_WHERE[0 if i == 0 else 1 + (i - 1) // 2])
                             for i, (w, s) in enumerate(zip(WHERE, [""] + ["left", "right"] * 5))))
"""``drivegen score qa``'s reading of a where-phrase: ``WHERE``'s own or a short form ("On the left.",
"Far right.", "In the middle.")"""
_ONE = (Field("region", "text", doc="'Region [X]' of the pedestrian"), Field("class_name", "text"))
TYPES = {qt.name: qt for qt in (
    QuestionType(NAME, "crossing", "qualitative", _ONE + (
        Field("horizon", "text", doc="the action horizon, e.g. '3 seconds'"),
        Field("yes_no", "text", answer=True, doc="'Yes' | 'No'"),
        Field("crossing_phrase", "text", answer=True,
              doc="'it will step into the ego vehicle's path' | 'it will stay out of the ego vehicle's path'")),
        None, "bool", doc="the pedestrian enters the ego's path within the horizon",
        reading=Relation(("step into", "steps into", "walk into", "walks into", "cross", "crosses", "enters"),
                         ("stay out", "stays out", "stays clear", "stay clear"))),
    QuestionType(NAME, "risk_region", "qualitative", _ONE + (
        Field("horizon", "text", doc="the risk horizon, e.g. '3 seconds'"),
        Field("where_phrase", "text", answer=True,
              doc="'in the centre of the view' | 'just left of the centre' | ... | 'at the right edge of the view'")),
        None, "risk_class", doc="value = event-risk class (0 = centre of the front view ... 5 = its edges)",
        reading=WHERE_READING),
)}

YES_NO = ("Yes", "No")
CROSSING_PHRASES = ("it will step into the ego vehicle's path", "it will stay out of the ego vehicle's path")


def where_code(risk_class_: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Index into ``WHERE`` of an event-risk class (0 = centre ... 5 = edge) and its side (True = right)."""
    rc = np.asarray(risk_class_, np.int64)
    return np.where(rc == 0, 0, 1 + (rc - 1) * 2 + np.asarray(right, bool).astype(np.int64))


def seconds_text(s: float) -> str:
    return f"{s:g} second" + ("" if s == 1 else "s")


def build(plan: Plan) -> list[Batch]:
    cfg = plan.cfg.pie
    c = plan.cand
    cls = pc.take(column(plan.attrs, "class_name"), pa.array(c["attr"]))
    ped = np.flatnonzero(to_numpy(pc.equal(cls, "pedestrian"), bool, fill=False))
    if len(ped) == 0:
        return []
    ego = plan.ego
    t_key = ego.t_s[c["frame_row"][ped]]
    out = []

    # crossing: the path-entry event within the action horizon
    entries = path_entry(plan.frames, pedestrian_rows(plan.attrs), cfg, plan.cfg.ego, ego)
    e_key = (codes(column(entries, "scene_id"), plan.scenes) << 32) | to_numpy(column(entries, "track_id"), np.int64)
    hit = KeyIndex(e_key).find((c["scene"][ped] << 32) | c["track"][ped])
    ev_frame = np.where(hit >= 0, to_numpy(column(entries, "event_frame"), np.int64)[np.maximum(hit, 0)], -2)
    ev_t = np.where(hit >= 0, to_numpy(column(entries, "event_t_s"), np.float64, fill=np.nan)[np.maximum(hit, 0)],
                    np.nan)
    horizon = cfg.tte_max_frames / cfg.fps
    tte = ev_t - t_key
    yes = (ev_frame >= 0) & (tte > 1e-9) & (tte <= horizon + 1e-9)
    no = ev_frame == -1
    sel = np.flatnonzero(yes | no)
    if len(sel):
        code = np.where(yes[sel], 0, 1)
        out.append(single(plan, TYPES["crossing"], ped[sel], yes[sel].astype(float), text={
            "horizon": vocabulary((seconds_text(horizon),), np.zeros(len(sel), np.int64)),
            "yes_no": vocabulary(YES_NO, code),
            "crossing_phrase": vocabulary(CROSSING_PHRASES, code)}))

    # risk region: the last visible front-camera box up to the risk horizon after the keyframe
    r_h = cfg.risk_horizon_frames / cfg.fps
    frame_of = KeyIndex((plan.frames_sc.astype(np.int64) << 32) | plan.frames_fi.astype(np.int64))
    rows_ahead = []
    k = 0
    while True:  # frames after the keyframe, one step at a time, until every candidate is past the horizon
        rows = frame_of.find((c["scene"][ped] << 32) | (plan.frames_fi[c["frame_row"][ped]] + k))
        inside = (rows >= 0) & (np.where(rows >= 0, ego.t_s[np.maximum(rows, 0)], np.inf) <= t_key + r_h + 1e-6)
        if not inside.any():
            break
        rows_ahead.append(np.where(inside, rows, -1))
        k += 1
    rows_ahead = np.stack(rows_ahead, axis=1)  # (n, K): k = 0 is the keyframe itself
    tc = plan.a_tc[c["attr"][ped]]
    proj = np.where(rows_ahead >= 0, plan.front_index.find(np.maximum(rows_ahead, 0) * plan.n_tr + tc[:, None]), -1)
    last = proj.shape[1] - 1 - np.argmax(proj[:, ::-1] >= 0, axis=1)
    has = (proj >= 0).any(axis=1)
    prow = proj[np.arange(len(ped)), last]
    sel = np.flatnonzero(has)
    if len(sel):
        box = fixed_list_to_numpy(plan.grounding_source.box.take(pa.array(prow[sel])), 4)
        xc = (box[:, 0] + box[:, 2]) / 2
        fr = rows_ahead[sel, 0]  # the keyframe: its front camera's width
        img = plan.img_index.find(fr * plan.n_cam + plan.front_of_scene[plan.frames_sc[fr]])
        widths = to_numpy(pc.struct_field(pc.list_flatten(column(plan.frames, "cameras")), "width_px"), np.float64,
                          fill=np.nan)
        width = np.where(img >= 0, widths[np.maximum(img, 0)], np.nan)
        ok = np.isfinite(xc) & np.isfinite(width) & (width > 0)
        sel, xc, width = sel[ok], xc[ok], width[ok]
        if len(sel):
            rc = risk_class(xc, width, cfg)
            right = risk_region(xc, width, cfg) >= cfg.risk_regions // 2
            code = where_code(rc, right)
            out.append(single(plan, TYPES["risk_region"], ped[sel], rc.astype(float), text={
                "horizon": vocabulary((seconds_text(r_h),), np.zeros(len(sel), np.int64)),
                "where_phrase": vocabulary(WHERE, code)}))
    return out


PIE = Family(NAME, "PIE/JAAD QA (pedestrian crossing in front of the ego, event-risk region)", tuple(TYPES.values()),
             build)


def video_batches(samples: pa.Table, cfg) -> list:
    """The ``pie`` questions of one camera-only video (``generator.qa.video.VideoBatch``), at each sample's last
    observed frame: ``crossing`` per action sample (JAAD's ``crossing``: the pedestrian crosses in front 1-3 s
    later; value 1/0) and ``risk_region`` per risk sample (the event-risk class and side
    ``pie.risk_horizon_frames`` later; value = the class)."""
    p = cfg.pie
    task = samples.column("task").to_numpy(zero_copy_only=False)
    end = samples.column("end_frame").to_numpy().astype(np.int64)
    ped = samples.column("ped_id").to_numpy(zero_copy_only=False).astype(str)
    out = []
    sel = np.flatnonzero(task == "action")
    if len(sel):
        yes = samples.column("crossing").to_numpy(zero_copy_only=False)[sel] == 1
        code = np.where(yes, 0, 1)
        out.append(VideoBatch(TYPES["crossing"], end[sel], ped[sel], yes.astype(float), {
            "horizon": vocabulary((seconds_text(p.tte_max_frames / p.fps),), np.zeros(len(sel), np.int64)),
            "yes_no": vocabulary(YES_NO, code), "crossing_phrase": vocabulary(CROSSING_PHRASES, code)}))
    sel = np.flatnonzero(task == "risk")
    if len(sel):
        rc = samples.column("risk_class").to_numpy(zero_copy_only=False)[sel].astype(np.int64)
        right = samples.column("risk_region").to_numpy(zero_copy_only=False)[sel] >= p.risk_regions // 2
        out.append(VideoBatch(TYPES["risk_region"], end[sel], ped[sel], rc.astype(float), {
            "horizon": vocabulary((seconds_text(p.risk_horizon_frames / p.fps),), np.zeros(len(sel), np.int64)),
            "where_phrase": vocabulary(WHERE, where_code(rc, right))}))
    return out


@dataclass(frozen=True)
class PieSummary:
    """The run summary's PIE/JAAD entry of a camera-only run: samples over every finished video."""

    action_samples: int
    crossing_samples: int
    risk_samples: int

    @classmethod
    def of(cls, counts: dict) -> "PieSummary":
        return cls(int(counts.get("pie_action_samples", 0)), int(counts.get("pie_crossing_samples", 0)),
                   int(counts.get("pie_risk_samples", 0)))

    def to_json(self) -> dict:
        return {"action_samples": self.action_samples, "crossing_samples": self.crossing_samples,
                "risk_samples": self.risk_samples}

    def lines(self) -> list[str]:
        return [f"PIE samples: {self.action_samples} action ({self.crossing_samples} crossing), "
                f"{self.risk_samples} risk"]
