"""The registered QA families. Adding one is: a module here (its question types and ``build``), its
templates in ``generator/qa/templates/<name>.yaml``, and one line below (see README "Adding a label
family"). The order below is the canonical order of families in the QA rows."""
from __future__ import annotations

from generator.qa.fields import Family, QuestionType
from generator.qa.families.drama_x import DRAMA_X
from generator.qa.families.ego_behaviour import EGO_BEHAVIOUR
from generator.qa.families.ego_intention import EGO_INTENTION
from generator.qa.families.pie import PIE
from generator.qa.families.stride import EGO_SPATIAL, EGO_SPATIOTEMPORAL, OBJECT_SPATIAL

FAMILIES: dict[str, Family] = {f.name: f for f in (
    OBJECT_SPATIAL,
    EGO_SPATIAL,
    EGO_SPATIOTEMPORAL,
    EGO_BEHAVIOUR,
    EGO_INTENTION,
    DRAMA_X,
    PIE,
)}

QUESTION_TYPES: dict[tuple[str, str], QuestionType] = {qt.key: qt for f in FAMILIES.values() for qt in f.question_types}


def selected(names) -> list[Family]:
    """The registered families named in ``names`` (``cfg.qa.families``), in canonical order."""
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        from schemas.config import ConfigError

        raise ConfigError(f"field 'qa.families': unknown families {unknown}; registered: {list(FAMILIES)}")
    wanted = set(names)
    return [f for f in FAMILIES.values() if f.name in wanted]


def reads(families) -> dict[str, list[str]]:
    """The run tables (and columns) the families read beyond frames, attributes and projections."""
    out: dict[str, list[str]] = {}
    for f in families:
        for table, cols in f.reads.items():
            out[table] = list(dict.fromkeys(out.get(table, []) + list(cols)))
    return out


__all__ = ["FAMILIES", "QUESTION_TYPES", "Family", "selected", "reads"]
