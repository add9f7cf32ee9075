"""QA stage: the three STRIDE-QA families from attribute tables, rendered with YAML templates.

Public API: ``load_templates(cfg) -> TemplateSet`` and
``generate_qa(frames, attributes, projections, cfg, templates) -> pa.Table`` (schemas.tables.QA).
The template language is documented in ``generator.qa.templates``; the question types and their fields in
``generator.qa.fields``.
"""
from generator.qa.fields import FAMILIES, QUESTION_TYPES, QuestionType
from generator.qa.generate import generate_qa, scene_split
from generator.qa.templates import Template, TemplateError, TemplateSet, load_template_file, load_templates

__all__ = ["FAMILIES", "QUESTION_TYPES", "QuestionType", "generate_qa", "scene_split", "Template", "TemplateError",
           "TemplateSet", "load_template_file", "load_templates"]
