"""The question types of the three STRIDE-QA families and the fields each one declares for its templates.

A template may reference ONLY the fields declared for its question type. Field kinds:

- ``text``: a string per question (region labels, class names, words such as ``left``/``in front of``);
- ``quantity``: a number that is always printed with its unit: ``{distance_m}`` -> ``12.35 m``,
  ``{bearing_deg:.1f}`` -> ``-35.2 degrees``, ``{speed_mps}`` -> ``4.10 m/s``.

Fields marked ``answer=True`` carry the answer; a question text may not use them. A quantitative
question type's answer must print its ``value_field`` so the answer states the number and its unit.
The value stored in the QA row's ``value`` column is that field's exact value (``unit`` column beside it);
qualitative types store the truth of their predicate (1.0 / 0.0, unit ``bool``) or the clock hour
(unit ``o'clock``).
"""
from __future__ import annotations

from dataclasses import dataclass

FAMILIES = ("object_spatial", "ego_spatial", "ego_spatiotemporal")

UNIT_TEXT = {"m": "m", "deg": "degrees", "mps": "m/s", "s": "s"}


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # 'text' | 'quantity'
    unit: str | None = None  # key of UNIT_TEXT for quantities
    answer: bool = False
    doc: str = ""


@dataclass(frozen=True)
class QuestionType:
    family: str
    name: str
    kind: str  # 'qualitative' | 'quantitative'
    fields: tuple[Field, ...]
    value_field: str | None  # quantitative: the quantity the answer must print
    unit: str  # stored in the QA row's unit column
    doc: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.family, self.name)

    def field(self, name: str) -> Field | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]


_PAIR = (Field("region_a", "text", doc="'Region [X]' of object A"), Field("region_b", "text", doc="of object B"),
         Field("class_a", "text", doc="class of A, e.g. 'traffic cone'"), Field("class_b", "text"))
_ONE = (Field("region", "text", doc="'Region [X]' of the object"), Field("class_name", "text"))
_ST = _ONE + (Field("when", "text", doc="'now', 'in 1 second', 'in 2 seconds', ..."),
              Field("horizon_s", "quantity", "s", doc="seconds after the keyframe"))
YES_NO = Field("yes_no", "text", answer=True, doc="'Yes' | 'No' for the type's predicate")


def _q(family, name, kind, fields, value_field=None, unit="bool", doc=""):
    return QuestionType(family, name, kind, tuple(fields), value_field, unit, doc)


QUESTION_TYPES: dict[tuple[str, str], QuestionType] = {qt.key: qt for qt in [
    # object-centric spatial: two agents in one keyframe (relations in the ego frame, attributes.pair_relations)
    _q("object_spatial", "left_of", "qualitative", _PAIR + (YES_NO, Field("side", "text", answer=True,
       doc="'left' | 'right': where A is relative to B")), doc="A left of B (y_A > y_B)"),
    _q("object_spatial", "in_front_of", "qualitative", _PAIR + (YES_NO, Field("front_back", "text", answer=True,
       doc="'in front of' | 'behind'")), doc="A in front of B (x_A > x_B)"),
    _q("object_spatial", "bigger", "qualitative", _PAIR + (YES_NO, Field("bigger_smaller", "text", answer=True,
       doc="'bigger' | 'smaller'")), doc="box volume of A > B"),
    _q("object_spatial", "taller", "qualitative", _PAIR + (YES_NO, Field("taller_shorter", "text", answer=True,
       doc="'taller' | 'shorter'")), doc="height of A > B"),
    _q("object_spatial", "wider", "qualitative", _PAIR + (YES_NO, Field("wider_thinner", "text", answer=True,
       doc="'wider' | 'thinner'")), doc="width of A > B"),
    _q("object_spatial", "distance", "quantitative", _PAIR + (Field("distance_m", "quantity", "m", answer=True),),
       "distance_m", "m", doc="distance between the box centres"),
    _q("object_spatial", "direction", "quantitative", _PAIR + (
        Field("direction_deg", "quantity", "deg", answer=True, doc="bearing of B seen from A, ego axes"),
        Field("clock", "text", answer=True, doc="e.g. '2 o'clock'")), "direction_deg", "deg"),
    # ego-centric spatial: the ego and one agent
    _q("ego_spatial", "left_right", "qualitative", _ONE + (Field("side", "text", answer=True, doc="'left' | 'right'"),),
       doc="value 1 = left"),
    _q("ego_spatial", "front_behind", "qualitative", _ONE + (Field("front_back", "text", answer=True,
       doc="'in front of' | 'behind'"),), doc="value 1 = in front"),
    _q("ego_spatial", "clock", "qualitative", _ONE + (Field("clock", "text", answer=True, doc="e.g. '3 o'clock'"),),
       unit="o'clock", doc="value = clock hour"),
    _q("ego_spatial", "distance", "quantitative", _ONE + (Field("distance_m", "quantity", "m", answer=True),),
       "distance_m", "m"),
    _q("ego_spatial", "bearing", "quantitative", _ONE + (Field("bearing_deg", "quantity", "deg", answer=True),
       Field("clock", "text", answer=True)), "bearing_deg", "deg"),
    _q("ego_spatial", "width", "quantitative", _ONE + (Field("width_m", "quantity", "m", answer=True),),
       "width_m", "m"),
    _q("ego_spatial", "height", "quantitative", _ONE + (Field("height_m", "quantity", "m", answer=True),),
       "height_m", "m"),
    _q("ego_spatial", "length", "quantitative", _ONE + (Field("length_m", "quantity", "m", answer=True),),
       "length_m", "m"),
    # ego-centric spatiotemporal: one target in the front camera, values at a horizon after the keyframe
    _q("ego_spatiotemporal", "distance", "quantitative", _ST + (Field("distance_m", "quantity", "m", answer=True),),
       "distance_m", "m"),
    _q("ego_spatiotemporal", "bearing", "quantitative", _ST + (Field("bearing_deg", "quantity", "deg", answer=True),),
       "bearing_deg", "deg", doc="heading angle from the ego to the target: 0 = forward, CCW positive"),
    _q("ego_spatiotemporal", "ego_speed", "quantitative",
       _ST + (Field("ego_speed_mps", "quantity", "mps", answer=True),), "ego_speed_mps", "mps"),
    _q("ego_spatiotemporal", "target_speed", "quantitative",
       _ST + (Field("speed_mps", "quantity", "mps", answer=True),), "speed_mps", "mps"),
]}


def types_of(family: str) -> list[QuestionType]:
    return [qt for qt in QUESTION_TYPES.values() if qt.family == family]
