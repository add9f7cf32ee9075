"""The template language and template files: refusals name file, line and field; no code runs; overrides."""
from __future__ import annotations

import textwrap

import numpy as np
import pyarrow as pa
import pytest

from generator.qa import TemplateError, load_template_file, load_templates, question_types
from generator.qa.render import FieldColumns, format_fixed, render
from schemas.config import PipelineConfig


def _write(tmp_path, text, name="t.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return p


GOOD = """
family: ego_spatial
templates:
  - id: my.distance
    type: distance
    question: "How far away is {region}?"
    answer: "About {distance_m:.1f}."
"""


def test_builtin_templates_cover_every_question_type_with_several_phrasings():
    ts = load_templates(PipelineConfig())
    for key in question_types():
        assert len(ts.variants(*key)) >= 2, key


def test_unknown_field_names_file_line_and_field(tmp_path):
    p = _write(tmp_path, """
        family: ego_spatial
        templates:
          - id: ok
            type: distance
            question: "How far is {region}?"
            answer: "{distance_m}"
          - id: bad
            type: width
            question: "How wide is {region}?"
            answer: "{region} is {widht_m} wide."
        """)
    with pytest.raises(TemplateError) as e:
        load_template_file(p)
    msg = str(e.value)
    assert str(p) in msg and f"{p}:10:" in msg and "'widht_m'" in msg, msg
    assert e.value.line == 10 and e.value.field == "widht_m"
    assert "width_m" in msg  # the declared fields are listed


def test_block_scalar_line_numbers(tmp_path):
    p = _write(tmp_path, """
        family: ego_spatial
        templates:
          - id: block
            type: distance
            question: |
              Look at the image.
              How far is {regoin}?
            answer: "{distance_m}"
        """)
    with pytest.raises(TemplateError) as e:
        load_template_file(p)
    assert e.value.line == 7 and e.value.field == "regoin", str(e.value)


def test_malformed_yaml_names_file_and_line(tmp_path):
    p = _write(tmp_path, """
        family: ego_spatial
        templates:
          - id: x
            type: distance
            question: "unterminated
            answer: "{distance_m}"
        """)
    with pytest.raises(TemplateError) as e:
        load_template_file(p)
    assert str(p) in str(e.value) and e.value.line is not None and 5 <= e.value.line <= 7, str(e.value)


@pytest.mark.parametrize("placeholder", ["{__import__}", "{__import__('os').system('touch pwned')}",
                                         "{region.__class__}", "{region[0]}", "{region!r}", "{0}",
                                         "{region:>{width}}", "{os.system}", "{Region}"])
def test_code_like_placeholders_are_refused(tmp_path, placeholder):
    p = _write(tmp_path, GOOD.replace("How far away is {region}?", f"How far away is {placeholder}?"))
    with pytest.raises(TemplateError) as e:
        load_template_file(p)
    assert f"{p}:5:" in str(e.value), str(e.value)  # the question line
    assert not (tmp_path / "pwned").exists()


def test_escaped_braces_render_literally_and_nothing_is_evaluated(tmp_path):
    p = _write(tmp_path, GOOD.replace("How far away is {region}?",
                                      "{{__import__('os').getcwd()}} How far away is {region}?"))
    _fam, _rep, (tpl,) = load_template_file(p)
    qt = question_types()[("ego_spatial", "distance")]
    cols = FieldColumns(qt, {"region": pa.array(["Region [0]", "Region [1]"]), "class_name": pa.array(["car"] * 2)},
                        {"distance_m": np.array([12.345, 3.96])}, 2)
    q, a = render(tpl, cols, 2)
    assert q.to_pylist() == ["{__import__('os').getcwd()} How far away is Region [0]?",
                             "{__import__('os').getcwd()} How far away is Region [1]?"]
    assert a.to_pylist() == ["About 12.3 m.", "About 4.0 m."]


@pytest.mark.parametrize("change, field, needle", [
    (("{distance_m:.1f}", "{distance_m:>8}"), "distance_m", "unsupported format"),
    (("{distance_m:.1f}", "{distance_m:.9f}"), "distance_m", "unsupported format"),
    (("How far away is {region}?", "How far away is {region:title}?"), "region", "unsupported format"),
    (("How far away is {region}?", "Is {region} {distance_m} away?"), "distance_m", "give the answer away"),
    (("About {distance_m:.1f}.", "About {region}."), "distance_m", "must print its value"),
])
def test_invalid_specs_leaks_and_missing_values(tmp_path, change, field, needle):
    p = _write(tmp_path, GOOD.replace(*change))
    with pytest.raises(TemplateError) as e:
        load_template_file(p)
    assert needle in str(e.value) and e.value.field == field and str(p) in str(e.value), str(e.value)


@pytest.mark.parametrize("change, field, line", [
    (("family: ego_spatial", "family: ego_spacial"), "family", 1),
    (("type: distance", "type: speed"), "type", 4),
    (("    answer:", "    anwser:"), "anwser", 6),
    (("templates:", "template:"), "template", 2),
    (('answer: "About {distance_m:.1f}."', 'answer: "About {distance_m:.1f}}."'), None, 6),
])
def test_structural_errors_name_line(tmp_path, change, field, line):
    p = _write(tmp_path, GOOD.replace(*change))
    with pytest.raises(TemplateError) as e:
        load_template_file(p)
    assert e.value.line == line and (field is None or e.value.field == field), str(e.value)


def test_user_templates_replace_by_id_and_replace_family(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    _write(user, """
        family: ego_spatial
        templates:
          - id: ego_spatial.distance.plain
            type: distance
            question: "Range to {region}?"
            answer: "Range: {distance_m}."
        """, "a.yaml")
    cfg = PipelineConfig()
    cfg.qa.template_dirs = [str(user)]
    ts = load_templates(cfg)
    by_id = {t.id: t for t in ts.variants("ego_spatial", "distance")}
    assert by_id["ego_spatial.distance.plain"].question_text == "Range to {region}?"
    assert len(by_id) == len(load_templates(PipelineConfig()).variants("ego_spatial", "distance"))
    _write(user, GOOD.replace("family: ego_spatial", "family: ego_spatial\nreplace: true"), "b.yaml")
    ts = load_templates(cfg)
    assert [t.id for t in ts.variants("ego_spatial", "distance")] == ["my.distance"]
    assert ts.variants("ego_spatial", "width") == []  # the family's built-ins are gone
    assert ts.variants("object_spatial", "distance")  # other families untouched


def test_missing_template_folder_is_refused(tmp_path):
    cfg = PipelineConfig()
    cfg.qa.template_dirs = [str(tmp_path / "nope")]
    with pytest.raises(TemplateError, match="nope"):
        load_templates(cfg)


def test_a_template_file_that_is_a_fifo_is_refused_not_skipped(tmp_path):
    """Issue 57 #10: ``regenerate --templates DIR`` skipped a FIFO named ``*.yaml`` (exit 0, the user's templates
    silently absent); it is refused by name, without being opened (a FIFO would block the read)."""
    import os

    d = tmp_path / "mine"
    d.mkdir()
    os.mkfifo(d / "extra.yaml")
    for where in (d, d / "extra.yaml"):  # a folder holding it, or the file given itself
        cfg = PipelineConfig()
        cfg.qa.template_dirs = [str(where)]
        with pytest.raises(TemplateError, match=r"extra.yaml: cannot read template file: it is a FIFO"):
            load_templates(cfg)


def test_format_fixed_matches_python_formatting():
    rng = np.random.default_rng(0)
    v = np.concatenate([rng.normal(0, 50, 2000), [0.0, -0.0, -0.004, 0.005, 1e-12, -179.999, 179.995, 1234567.891]])
    for d in (0, 1, 2, 3, 5):
        got = format_fixed(v, d, " m").to_pylist()
        for x, s in zip(v, got):
            num = float(s[:-2])
            assert abs(num - x) <= 0.5 * 10 ** -d + 1e-9 * max(1, abs(x)), (x, s)
            assert s.endswith(" m") and (d == 0 or len(s[:-2].split(".")[1]) == d)
            assert num != 0 or not s.startswith("-"), (x, s)  # no "-0.00"
    assert format_fixed(np.array([np.nan, 1.0]), 2).to_pylist() == [None, "1.00"]
