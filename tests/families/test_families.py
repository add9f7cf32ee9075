"""The paper-family contract (``schemas.families``): nothing outside a family's package names the family.

"Names" means code: an identifier, or a string literal that is not a docstring, equal to (or, for strings,
holding as a whole word) one of the family's keys: its registry name, its config section, its run tables'
names and its QA families' names. Prose that cites a paper (a docstring, a comment, "STRIDE-QA tolerances")
is not a key. The only allowed places are the registry's list of built-in families and the family's own
package."""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from schemas.families import BUILTIN, families

REPO = Path(__file__).resolve().parents[2]
CORE = ("generator", "actors", "schemas")


def family_keys(fam) -> set[str]:
    """The keys code may name a family by: as an identifier, its name, QA families, tables and config section;
    as a string, the same but the config section (a plain word such as 'bench' or 'intention' that other
    families use as a column name or in prose)."""
    return {fam.name, *fam.qa_names, *(t.name for t in fam.tables())}


# Places the check may still find, each with the work it waits for: none is left (a new one fails the test).
KNOWN: dict[str, list[str]] = {}


def _code_tokens(src: str):
    """(line, text) of the NAME tokens and non-docstring STRING tokens of a Python source."""
    toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    skip = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT)
    for i, t in enumerate(toks):
        if t.type == tokenize.NAME:
            yield t.start[0], t.string
        elif t.type == tokenize.STRING:
            j = i - 1
            while j >= 0 and toks[j].type in (tokenize.NL, tokenize.COMMENT):
                j -= 1
            k = i + 1
            while k < len(toks) and toks[k].type == tokenize.COMMENT:
                k += 1
            alone = (j < 0 or toks[j].type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)) and \
                toks[k].type in (tokenize.NEWLINE, tokenize.ENDMARKER)
            if not alone:  # a docstring (a string statement alone on its line) is prose
                yield t.start[0], t.string


def namings(root: Path, fam) -> list[str]:
    """'path:line: token' for every place outside the family's package (and the registry's BUILTIN list)
    whose code names one of the family's keys."""
    keys = family_keys(fam)
    names = keys | ({fam.config_section} if fam.config_section else set())
    own = f"generator/families/{fam.name}/"
    out = []
    for top in CORE:
        for p in sorted((root / top).rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            if rel.startswith(own):
                continue
            for line, text in _code_tokens(p.read_text()):
                if rel == "schemas/families.py" and any(ref in text for ref in BUILTIN):
                    continue  # the registry line
                is_string = text[:1] in "'\"" or text[:2].lower() in ("f'", 'f"', "r'", 'r"')
                hit = text.strip("'\"").strip() in keys if is_string else text in names
                if hit:
                    out.append(f"{rel}:{line}: {text[:80]}")
    return out


@pytest.mark.parametrize("name", sorted(families()))
def test_nothing_outside_a_family_names_it(name):
    assert namings(REPO, families()[name]) == KNOWN.get(name, [])


def test_the_check_finds_a_family_named_in_the_core(tmp_path):
    for top in CORE:
        (tmp_path / top).symlink_to(REPO / top) if top != "generator" else None
    gen = tmp_path / "generator"
    gen.mkdir()
    (gen / "stages.py").write_text('def f(cfg, r):\n    """drama_x in a docstring is prose."""\n'
                                   '    return cfg.drama_x, r.read_table("drama_risk"), "DRAMA-X risk"\n')
    found = namings(tmp_path, families()["drama_x"])
    assert found == ["generator/stages.py:3: drama_x", 'generator/stages.py:3: "drama_risk"']
