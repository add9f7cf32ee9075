"""What a QA family declares: its question types, the fields each type offers its templates, and the run
tables it reads (``Family``). The families themselves live in ``generator.qa.families``.

A template may reference ONLY the fields declared for its question type. Field kinds:

- ``text``: a string per question (region labels, class names, words such as ``left``/``in front of``);
- ``quantity``: a number that is always printed with its unit: ``{distance_m}`` -> ``12.35 m``,
  ``{bearing_deg:.1f}`` -> ``-35.2 degrees``, ``{speed_mps}`` -> ``4.10 m/s``.

Fields marked ``answer=True`` carry the answer; a question text may not use them. A quantitative
question type's answer must print its ``value_field`` so the answer states the number and its unit.
The value stored in the QA row's ``value`` column is that field's exact value (``unit`` column beside it);
qualitative types store the truth of their predicate (1.0 / 0.0, unit ``bool``), the clock hour
(unit ``o'clock``) or, for a choice from a vocabulary, the index of the answer in it (unit = the
vocabulary's name, e.g. ``maneuver``: ``schemas.vocab.MANEUVERS``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

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
    pose_only: bool = False  # the answer depends on the ego's poses only (no detected object): validation
    # compares it with the label run's but leaves it out of the agreement share (identical by construction)
    pair_reversed: str = "same"  # the value of the pair (B, A) from (A, B)'s: 'same' or 'opposite' (a bearing
    # turned by 180 degrees)
    reading: object = None  # how ``drivegen score qa`` reads a model's answer to it (``generator.qa.answers``:
    # Relation, Choice, Clock, Pair, Numbers); None: yes/no for unit bool, the text itself otherwise

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


@dataclass(frozen=True)
class Family:
    """A QA family: its name, a title for dataset cards, its question types, ``build(plan) -> [Batch]`` over
    a ``generator.qa.generate.Plan``, and the run tables (with the columns) it reads beyond the frames,
    attributes and projections every family gets (e.g. ``{"labels": [...]}``); those tables reach it as
    ``plan.tables[name]`` (absent when a run folder has none). ``"attributes"`` in ``reads`` names attribute
    columns beyond the shared ones (``generator.pipeline.regenerate.QA_INPUT_COLUMNS``); they reach it in
    ``plan.attrs``."""

    name: str
    title: str
    question_types: tuple[QuestionType, ...]
    build: Callable
    reads: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self):
        wrong = [qt.key for qt in self.question_types if qt.family != self.name]
        if wrong:
            raise ValueError(f"family {self.name!r} declares question types of other families: {wrong}")
