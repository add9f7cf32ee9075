"""The type checker in the suite: mypy (``[tool.mypy]`` in pyproject.toml) finds no error in the config and the
family contract (``schemas/``), the family API and the example family; and it does find the errors a family's
author makes (a misspelt setting read through ``settings(cfg)``, a hook returning the wrong type), so a
passing check means something."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("mypy", reason="mypy is in the test extra (make setup installs it)")


def _mypy(*args: str) -> subprocess.CompletedProcess:
    # the repository's cache (.mypy_cache, ignored by git): the second call reads the first one's types
    return subprocess.run([sys.executable, "-m", "mypy", "--no-color-output", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_schemas_the_family_api_and_the_example_family_type_check():
    res = _mypy()
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Success: no issues found" in res.stdout


BAD_FAMILY = '''
from __future__ import annotations

from pydantic import BaseModel

from generator.families import api


class WidthConfig(BaseModel):
    width_m: float = 1.0


class Width(api.PaperFamily[WidthConfig]):
    name = "width"
    config_section = "width"

    def config_model(self) -> type[WidthConfig]:
        return WidthConfig

    def derive(self, scene: api.Tables, cfg: BaseModel) -> api.Tables:
        half = self.settings(cfg).widht_m / 2
        return [half]
'''


def test_the_checker_finds_a_family_authors_mistakes(tmp_path):
    bad = tmp_path / "width_family.py"
    bad.write_text(textwrap.dedent(BAD_FAMILY))
    res = _mypy(str(bad))
    out = res.stdout
    assert res.returncode == 1, out + res.stderr
    assert '"WidthConfig" has no attribute "widht_m"' in out, out
    assert 'Incompatible return value type (got "list[' in out and 'expected "dict[str, ' in out, out
