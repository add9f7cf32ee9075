"""DRAMA-X (§3.2, App. A): questions about vulnerable road users' intent and risk, and the ego's suggested action.

* ``intent`` (per VRU candidate of a keyframe with a DRAMA-X intent in the labels table): where the VRU is going,
  lateral x vertical as seen from the ego (``schemas.vocab.INTENT_LATERAL`` / ``INTENT_VERTICAL``); ``value`` =
  3 x lateral index + vertical index (unit ``intent``).
* ``risk`` (per VRU candidate): whether its future path enters the ego's future corridor within
  ``drama_x.risk.horizon_s`` (``generator.families.drama_x.attributes.risk_table`` on the run's frames and objects, the rule
  the DRAMA-X export and scorer use); ``value`` 1/0 (unit ``bool``).
* ``action`` (per keyframe, about the ego): the frame's suggested action, the most severe of its objects'
  (``frame_risk``; ``continue`` without tracked objects); ``value`` = index in ``schemas.vocab.DRAMA_ACTIONS``
  (unit ``action``).

Reads the labels table (intent) and the objects table (risk); without either, the family asks nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import KeyIndex, codes, column, to_numpy
from generator.families.drama_x.attributes import frame_risk, risk_table
from generator.qa.answers import Choice, Pair, Relation
from generator.qa.fields import Family, Field, QuestionType
from generator.qa.video import VideoBatch
from generator.qa.generate import Batch, Plan, keyframe_batch, single, vocabulary
from generator.families.drama_x.vocab import DRAMA_ACTION_A2_TEXT, DRAMA_ACTIONS
from schemas.vocab import INTENT_LATERAL, INTENT_VERTICAL, VRU_CLASSES

NAME = "drama_x"
_ONE = (Field("region", "text", doc="'Region [X]' of the VRU"), Field("class_name", "text"))
TYPES = {qt.name: qt for qt in (
    QuestionType(NAME, "intent", "qualitative", _ONE + (
        Field("lateral", "text", answer=True, doc="'goes to the left' | 'goes to the right' | 'stationary'"),
        Field("vertical", "text", answer=True,
              doc="'moves towards ego vehicle' | 'moves away from ego vehicle' | 'stationary'"),
        Field("intent_phrase", "text", answer=True, doc="both as one phrase, e.g. 'is going to the left, towards "
                                                         "the ego vehicle' or 'is standing still'")),
        None, "intent", doc="value = 3 x INTENT_LATERAL index + INTENT_VERTICAL index",
        reading=Pair(Choice((("left",), ("right",))), Choice((("towards", "approaching", "closer"), ("away",))),
                     (INTENT_LATERAL.index("stationary"), INTENT_VERTICAL.index("stationary")),
                     ("standing still", "stationary", "not moving", "still"))),
    QuestionType(NAME, "risk", "qualitative", _ONE + (
        Field("yes_no", "text", answer=True, doc="'Yes' | 'No'"),
        Field("risk_phrase", "text", answer=True,
              doc="'its path crosses the ego vehicle's path' | 'it stays clear of the ego vehicle's path'")),
        None, "bool", doc="the VRU's future path enters the ego's future corridor within the horizon",
        reading=Relation(("crosses", "cross", "enters", "enter", "at risk", "a risk"),
                         ("stays clear", "stay clear"))),
    QuestionType(NAME, "action", "qualitative", (
        Field("action", "text", answer=True, doc="schemas.vocab.DRAMA_ACTIONS, e.g. 'slow down'"),),
        None, "action", doc="value = index in schemas.vocab.DRAMA_ACTIONS",
        reading=Choice(tuple((a, DRAMA_ACTION_A2_TEXT[a]) for a in DRAMA_ACTIONS))),
)}

YES_NO = ("Yes", "No")
RISK_PHRASES = ("its path crosses the ego vehicle's path", "it stays clear of the ego vehicle's path")
_LAT_PHRASE = {"goes to the left": "to the left", "goes to the right": "to the right", "stationary": ""}
_VER_PHRASE = {"moves towards ego vehicle": "towards the ego vehicle", "moves away from ego vehicle":
               "away from the ego vehicle", "stationary": ""}


def intent_phrases() -> tuple[str, ...]:
    """Phrase per (lateral, vertical) pair in value order."""
    out = []
    for lat in INTENT_LATERAL:
        for ver in INTENT_VERTICAL:
            parts = [p for p in (_LAT_PHRASE[lat], _VER_PHRASE[ver]) if p]
            out.append("is going " + ", ".join(parts) if parts else "is standing still")
    return tuple(out)


def _key(scene_code: np.ndarray, frame_index: np.ndarray, track: np.ndarray) -> np.ndarray:
    return (((np.asarray(scene_code, np.int64) << 20) | np.asarray(frame_index, np.int64)) << 32) \
        | (np.asarray(track, np.int64) & 0xFFFFFFFF)


def build(plan: Plan) -> list[Batch]:
    labels, objects = plan.tables.get("labels"), plan.tables.get("objects")
    if labels is None or objects is None or labels.num_rows == 0 or objects.num_rows == 0:
        return []
    cfg = plan.cfg
    c = plan.cand
    cls = pc.take(column(plan.attrs, "class_name"), pa.array(c["attr"]))
    vru = np.flatnonzero(to_numpy(pc.is_in(cls, value_set=pa.array(VRU_CLASSES)), bool, fill=False))
    cand_key = _key(c["scene"][vru], plan.frames_fi[c["frame_row"][vru]], c["track"][vru])
    out = []

    # intent, from the labels table
    agent = labels.filter(pc.equal(labels.column("subject"), "agent"))
    lat = codes(column(agent, "intent_lateral"), pa.array(INTENT_LATERAL))
    ver = codes(column(agent, "intent_vertical"), pa.array(INTENT_VERTICAL))
    a_key = _key(codes(column(agent, "scene_id"), plan.scenes), to_numpy(column(agent, "frame_index"), np.int64),
                 to_numpy(column(agent, "track_id"), np.int64))
    hit = KeyIndex(a_key).find(cand_key)
    ok = hit >= 0
    ok[ok] = (lat[hit[ok]] >= 0) & (ver[hit[ok]] >= 0)
    sel, h = vru[ok], hit[ok]
    if len(sel):
        pair = lat[h] * len(INTENT_VERTICAL) + ver[h]
        out.append(single(plan, TYPES["intent"], sel, pair.astype(float), text={
            "lateral": vocabulary(INTENT_LATERAL, lat[h]), "vertical": vocabulary(INTENT_VERTICAL, ver[h]),
            "intent_phrase": vocabulary(intent_phrases(), pair)}))

    # risk and the suggested action, from the objects' and the ego's logged future: the run's drama_risk table
    # (computed from a run folder written before that table existed)
    risk = plan.tables.get("drama_risk")
    if risk is None:
        risk = risk_table(plan.frames, objects, cfg.drama_x, cfg.ego)
    r_key = _key(codes(column(risk, "scene_id"), plan.scenes), to_numpy(column(risk, "frame_index"), np.int64),
                 to_numpy(column(risk, "track_id"), np.int64))
    hit = KeyIndex(r_key).find(cand_key)
    sel, h = vru[hit >= 0], hit[hit >= 0]
    if len(sel):
        yes = to_numpy(column(risk, "risk"), bool, fill=False)[h]
        code = np.where(yes, 0, 1)
        out.append(single(plan, TYPES["risk"], sel, yes.astype(float), text={
            "yes_no": vocabulary(YES_NO, code), "risk_phrase": vocabulary(RISK_PHRASES, code)}))
    fr = frame_risk(risk)
    f_key = _key(codes(column(fr, "scene_id"), plan.scenes), to_numpy(column(fr, "frame_index"), np.int64), 0)
    kf_key = _key(plan.frames_sc[plan.anchors], plan.frames_fi[plan.anchors], 0)
    hit = KeyIndex(f_key).find(kf_key)
    act = np.zeros(len(plan.anchors), np.int64)  # a keyframe without tracked objects: continue
    act[hit >= 0] = codes(column(fr, "suggested_action"), pa.array(DRAMA_ACTIONS))[hit[hit >= 0]]
    out.append(keyframe_batch(plan, TYPES["action"], np.arange(len(plan.anchors)), act.astype(float),
                              text={"action": vocabulary(DRAMA_ACTIONS, act)}))
    return out


DRAMA_X = Family(NAME, "DRAMA-X QA (VRU intent, risk and suggested action)", tuple(TYPES.values()), build,
                 reads={"labels": ["scene_id", "frame_index", "subject", "track_id", "intent_lateral",
                                   "intent_vertical"],
                        "objects": ["scene_id", "frame_index", "track_id", "class_name", "center_ego_m",
                                    "size_lwh_m"],
                        "drama_risk": ["scene_id", "frame_index", "track_id", "risk", "time_to_conflict_s",
                                       "suggested_action"]})


def video_batches(drama: pa.Table) -> list:
    """The ``drama_x`` questions of one camera-only video (``generator.qa.video.VideoBatch``) from its
    ``drama_video`` rows at their sampled frames: ``intent`` and ``risk`` per labelled pedestrian, and ``action``
    per frame about the ego (the most severe of its pedestrians' actions)."""
    fr = drama.column("frame_index").to_numpy().astype(np.int64)
    ped = drama.column("ped_id").to_numpy(zero_copy_only=False).astype(str)
    lat = pc.index_in(drama.column("lateral_intent"), pa.array(INTENT_LATERAL)).to_numpy(zero_copy_only=False)
    ver = pc.index_in(drama.column("vertical_intent"), pa.array(INTENT_VERTICAL)).to_numpy(zero_copy_only=False)
    pair = lat.astype(np.int64) * len(INTENT_VERTICAL) + ver.astype(np.int64)
    yes = drama.column("risk").to_numpy(zero_copy_only=False).astype(bool)
    code = np.where(yes, 0, 1)
    fa = frame_risk(drama.select(["scene_id", "frame_index", "risk", "suggested_action"]))
    act = pc.index_in(fa.column("suggested_action"), pa.array(DRAMA_ACTIONS)).to_numpy(zero_copy_only=False)
    return [
        VideoBatch(TYPES["intent"], fr, ped, pair.astype(float), {
            "lateral": vocabulary(INTENT_LATERAL, lat), "vertical": vocabulary(INTENT_VERTICAL, ver),
            "intent_phrase": vocabulary(intent_phrases(), pair)}),
        VideoBatch(TYPES["risk"], fr, ped, yes.astype(float), {
            "yes_no": vocabulary(YES_NO, code), "risk_phrase": vocabulary(RISK_PHRASES, code)}),
        VideoBatch(TYPES["action"], fa.column("frame_index").to_numpy().astype(np.int64),
                   np.full(fa.num_rows, ""), act.astype(float), {"action": vocabulary(DRAMA_ACTIONS, act)}),
    ]


@dataclass(frozen=True)
class DramaSummary:
    """The run summary's DRAMA-X entry of a camera-only run: image-intent rows over every finished video."""

    image_intent: int

    def to_json(self) -> dict:
        return {"image_intent": self.image_intent}

    def lines(self) -> list[str]:
        return [f"DRAMA-X image intent rows: {self.image_intent}"]
