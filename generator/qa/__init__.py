"""QA: registered families (``generator.qa.families``) over one columnar plan (``generator.qa.generate``),
rendered with YAML templates (``generator.qa.templates``; fields per question type in ``generator.qa.fields``).

Public API: ``load_templates(cfg) -> TemplateSet``, ``check_families(cfg)`` and
``generate_qa(frames, attributes, projections, cfg, templates, **tables) -> pa.Table`` (schemas.tables.QA),
where ``tables`` are the other run tables the selected families read (``labels=...``).
"""
from __future__ import annotations

import pyarrow as pa

from generator.qa.families import question_types, reads, registered, selected
from generator.qa.fields import Family, QuestionType
from generator.qa.generate import generate, make_plan, scene_split
from generator.qa.templates import Template, TemplateError, TemplateSet, load_template_file, load_templates


def check_families(cfg) -> None:
    """Every family ``cfg.qa.families`` names is registered; ConfigError naming the field otherwise."""
    selected(cfg.qa.families)


def generate_qa(frames: pa.Table, attributes: pa.Table, projections: pa.Table, cfg, templates: TemplateSet,
                **tables: pa.Table | None) -> pa.Table:
    """QA rows of the families ``cfg.qa.families`` for every anchor frame in ``frames`` (any number of
    scenes). ``tables``: other run tables by layout name (``labels``); a family whose table is missing asks
    nothing from it."""
    plan = make_plan(frames, attributes, projections, cfg, {k: v for k, v in tables.items() if v is not None})
    return generate(plan, selected(cfg.qa.families), templates)


__all__ = ["registered", "question_types", "Family", "QuestionType", "check_families", "generate_qa", "reads",
           "scene_split", "Template", "TemplateError", "TemplateSet", "load_template_file", "load_templates"]
