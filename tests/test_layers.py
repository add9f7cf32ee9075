"""The layering of the code base (pyproject.toml [tool.importlinter]) holds, and the check can fail."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_import_contract_holds():
    r = _lint(REPO)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "3 kept, 0 broken" in r.stdout


def test_a_backwards_import_breaks_it(tmp_path):
    """A copy of the tree where the QA renderer imports the pipeline (a lower layer reaching up) is refused,
    with the offending import named."""
    for name in ("generator", "actors", "schemas"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    render = tmp_path / "generator" / "qa" / "render.py"
    render.write_text(render.read_text() + "\n\ndef _backwards():\n    from generator.pipeline import run  # noqa\n")
    r = _lint(tmp_path)
    assert r.returncode != 0
    assert "2 kept, 1 broken" in r.stdout and "generator.qa.render -> generator.pipeline" in r.stdout, r.stdout[-3000:]


def _copy_with(tmp_path: Path, rel: str, line: str) -> subprocess.CompletedProcess:
    for name in ("generator", "actors", "schemas"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    f = tmp_path / rel
    f.write_text(f.read_text() + f"\n\ndef _added():\n    {line}  # noqa\n")
    return _lint(tmp_path)


def test_a_family_importing_another_family_breaks_it(tmp_path):
    r = _copy_with(tmp_path, "generator/families/drama_x/attributes.py",
                   "from generator.families.pie.attributes import build_samples")
    assert r.returncode != 0
    assert "paper families are independent of each other BROKEN" in r.stdout, r.stdout[-3000:]
    assert "generator.families.drama_x.attributes -> generator.families.pie.attributes" in r.stdout


def test_the_core_importing_a_family_breaks_it(tmp_path):
    """The pipeline (below the families' layer) and a command (above it, by the forbidden contract) alike."""
    r = _copy_with(tmp_path, "generator/pipeline/stages.py", "from generator.families.drama_x.attributes import risk_table")
    assert r.returncode != 0 and "generator.pipeline.stages -> generator.families.drama_x.attributes" in r.stdout
    r = _copy_with(tmp_path / "b", "generator/commands/run.py", "from generator.families.pie import FAMILY")
    assert r.returncode != 0
    assert "the core never imports a paper family BROKEN" in r.stdout, r.stdout[-3000:]

