"""Ego behaviour: what the ego vehicle is doing at a keyframe, from the behaviour-labels table
(``generator.attributes.labels``: Intention-Drive's atomic maneuvers and speed status).

One question per keyframe and type, about the ego (no region), grounded in the keyframe's front-camera
image. A keyframe whose label is missing (too little of the log around it) gets no question; a run folder
without labels gets none at all.
"""
from __future__ import annotations

import numpy as np
import pyarrow.compute as pc

from generator.attributes.arrays import KeyIndex, codes, column, to_numpy
from generator.qa.answers import Choice
from generator.qa.fields import Family, Field, QuestionType
from generator.qa.generate import Batch, Plan, keyframe_batch, vocabulary
from schemas.vocab import MANEUVERS, SPEED_STATUS

NAME = "ego_behaviour"
MANEUVER_PHRASES = {"Straight": "going straight", "Turn Left": "turning left", "Turn Right": "turning right",
                    "Change Lane Left": "changing lanes to the left",
                    "Change Lane Right": "changing lanes to the right", "Stop": "stopped"}
SPEED_PHRASES = {"Accelerate": "accelerating", "Decelerate": "decelerating", "Maintain Speed": "keeping its speed"}
# what ``drivegen score qa`` also reads as each choice (``generator.qa.answers.Choice``)
_MANEUVER_MORE = {"Straight": ("straight", "goes straight"), "Turn Left": ("turns left",),
                  "Turn Right": ("turns right",), "Change Lane Left": ("lane change to the left", "change lanes left"),
                  "Change Lane Right": ("lane change to the right", "change lanes right"),
                  "Stop": ("stop", "stopping", "standing still")}
_SPEED_MORE = {"Accelerate": ("speeding up",), "Decelerate": ("slowing down", "braking"),
               "Maintain Speed": ("maintaining its speed", "constant speed", "keeping speed", "same speed")}

TYPES = {qt.name: qt for qt in (
    QuestionType(NAME, "maneuver", "qualitative", (
        Field("maneuver", "text", answer=True, doc="the atomic maneuver, e.g. 'Turn Left' (schemas.vocab.MANEUVERS)"),
        Field("maneuver_phrase", "text", answer=True, doc="the same as a phrase, e.g. 'turning left'")),
        None, "maneuver", doc="value = index in schemas.vocab.MANEUVERS", pose_only=True,
        reading=Choice(tuple((m, MANEUVER_PHRASES[m]) + _MANEUVER_MORE.get(m, ()) for m in MANEUVERS))),
    QuestionType(NAME, "speed_status", "qualitative", (
        Field("speed_status", "text", answer=True, doc="'Accelerate' | 'Decelerate' | 'Maintain Speed'"),
        Field("speed_phrase", "text", answer=True, doc="'accelerating' | 'decelerating' | 'keeping its speed'")),
        None, "speed status", doc="value = index in schemas.vocab.SPEED_STATUS", pose_only=True,
        reading=Choice(tuple((s, SPEED_PHRASES[s]) + _SPEED_MORE.get(s, ()) for s in SPEED_STATUS))),
)}


def _keyframe_codes(plan: Plan, labels, col: str, vocab: tuple[str, ...]) -> np.ndarray:
    """Per keyframe group, the index of the ego's label in ``vocab`` (-1: none)."""
    out = np.full(len(plan.anchors), -1, np.int64)
    ego = labels.filter(pc.equal(labels.column("subject"), "ego"))
    if ego.num_rows == 0:
        return out
    sc = codes(column(ego, "scene_id"), plan.scenes)
    fi = to_numpy(column(ego, "frame_index"), np.int64)
    code = to_numpy(pc.index_in(column(ego, col), value_set=vocabulary(vocab, [])[0]), np.int64, fill=-1)
    keys = (plan.frames_sc[plan.anchors] << 32) | plan.frames_fi[plan.anchors]
    row = KeyIndex((sc << 32) | fi).find(keys)
    ok = (row >= 0) & (sc[np.maximum(row, 0)] >= 0)
    out[ok] = code[row[ok]]
    return out


def build(plan: Plan) -> list[Batch]:
    labels = plan.tables.get("labels")
    if labels is None or labels.num_rows == 0:
        return []
    out = []
    for qt, col, vocab, phrases, fields in (
            (TYPES["maneuver"], "maneuver", MANEUVERS, MANEUVER_PHRASES, ("maneuver", "maneuver_phrase")),
            (TYPES["speed_status"], "speed_status", SPEED_STATUS, SPEED_PHRASES, ("speed_status", "speed_phrase"))):
        code = _keyframe_codes(plan, labels, col, vocab)
        groups = np.flatnonzero(code >= 0)
        c = code[groups]
        out.append(keyframe_batch(plan, qt, groups, c.astype(float),
                                  text={fields[0]: vocabulary(vocab, c),
                                        fields[1]: vocabulary(tuple(phrases[v] for v in vocab), c)}))
    return out


EGO_BEHAVIOUR = Family(NAME, "Ego Behaviour QA (Intention-Drive atomic maneuvers)", tuple(TYPES.values()), build,
                       reads={"labels": ["scene_id", "frame_index", "subject", "maneuver", "speed_status"]})
