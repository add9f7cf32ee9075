"""The QA families: every registered paper family's (``schemas.families``: ``PaperFamily.qa_families``), in
family order, which is the canonical order of families in the QA rows. A QA family is a module of its paper
family's package (question types and ``build``) with its templates in the package's ``templates/``."""
from __future__ import annotations

import functools

from generator.qa.fields import Family, QuestionType
from schemas.errors import ConfigError
from schemas.families import families


@functools.lru_cache(maxsize=1)
def _registered() -> dict[str, Family]:
    out: dict[str, Family] = {}
    for fam in families().values():
        declared = list(fam.qa_names)
        got = fam.qa_families()
        if [f.name for f in got] != declared:
            raise ValueError(f"paper family {fam.name!r} declares QA families {declared} but builds "
                             f"{[f.name for f in got]}")
        for f in got:
            if f.name in out:
                raise ValueError(f"QA family {f.name!r} of paper family {fam.name!r} is registered twice")
            out[f.name] = f
    return out


def registered() -> dict[str, Family]:
    """Every registered QA family by name, in canonical order."""
    return _registered()


def question_types() -> dict[tuple[str, str], QuestionType]:
    return {qt.key: qt for f in registered().values() for qt in f.question_types}


def selected(names) -> list[Family]:
    """The registered families named in ``names`` (``cfg.qa.families``), in canonical order."""
    fams = registered()
    unknown = [n for n in names if n not in fams]
    if unknown:
        raise ConfigError(f"field 'qa.families': unknown families {unknown}; registered: {list(fams)}")
    wanted = set(names)
    return [f for f in fams.values() if f.name in wanted]


def reads(families_) -> dict[str, list[str]]:
    """The run tables (and columns) the families read beyond frames, attributes and projections, and the
    ``issues`` rows every QA run reads where a scene has them (the keyframes whose objects are unknown,
    ``generator.qa.generate`` step 5)."""
    out: dict[str, list[str]] = {"issues": ["scene_id", "frame_index", "stage", "reason"]}
    for f in families_:
        for table, cols in f.reads.items():
            out[table] = list(dict.fromkeys(out.get(table, []) + list(cols)))
    return out


__all__ = ["Family", "registered", "question_types", "selected", "reads"]
