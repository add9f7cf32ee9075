"""The layering of the code base (pyproject.toml [tool.importlinter]) holds, and the check can fail; every import
inside a function says why it is there."""
from __future__ import annotations

import ast
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from schemas.families import families, resolve

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_import_contract_holds():
    r = _lint(REPO)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "4 kept, 0 broken" in r.stdout


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
    assert "3 kept, 1 broken" in r.stdout and "generator.qa.render -> generator.pipeline" in r.stdout, r.stdout[-3000:]


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



# ------------------------------------------------------------------------------------------ function-local imports
# An import inside a function hides an edge of the graph above from a reader (import-linter sees it; a reader of
# the module's head does not). One is kept only for a reason its comment gives: a heavy or optional stack loaded
# where it is used ("torch: ...", "lazy: ... loads cv2 ..."), an import cycle ("cycle: A imports B"), or a family's
# package that the registry imports for its declarations alone. The ceiling only goes down.
LOCAL_IMPORTS_MAX = 154


def local_imports(root: Path) -> list[tuple[str, int, str, bool]]:
    """(file, line, statement, says why) of every import inside a function under ``root``'s product packages;
    a comment on its line or the line above says why, or the one of the import block it continues (an import on
    the line right after one that says why)."""
    found = []
    for pkg in ("generator", "actors", "schemas"):
        for path in sorted((root / pkg).rglob("*.py")):
            lines = path.read_text().splitlines()
            seen: set[int] = set()
            explained: dict[int, bool] = {}  # last line of an import -> whether it (or its block) says why
            for fn in ast.walk(ast.parse("\n".join(lines))):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno not in seen:
                        seen.add(node.lineno)
                        line, above = lines[node.lineno - 1], lines[node.lineno - 2].strip()
                        why = "#" in line or above.startswith("#") or explained.get(node.lineno - 1, False)
                        explained[node.end_lineno] = why
                        found.append((path.relative_to(root).as_posix(), node.lineno, line.strip(), why))
    return found


def test_function_local_imports_say_why():
    found = local_imports(REPO)
    silent = [f"{f}:{n}: {s}" for f, n, s, why in found if not why]
    assert not silent, "function-local imports without a comment saying why:\n" + "\n".join(silent)
    assert len(found) <= LOCAL_IMPORTS_MAX, (
        f"{len(found)} function-local imports, more than {LOCAL_IMPORTS_MAX}: import at the top, or say why")


def test_a_silent_local_import_is_found(tmp_path):
    (tmp_path / "generator").mkdir()
    (tmp_path / "generator" / "m.py").write_text(
        "import json\n\n\ndef f():\n    import os  # os: only here\n    import re\n\n    from json import dumps\n\n"
        "    return os, re, dumps\n")
    found = local_imports(tmp_path)
    assert [(n, why) for _, n, _, why in found] == [(5, True), (6, True), (8, False)]


def test_the_pipeline_importing_a_dataset_breaks_it(tmp_path):
    """The camera-only stages read videos through ``VideoSource``; a stage importing JAAD's module is refused."""
    r = _copy_with(tmp_path, "generator/pipeline/video.py", "from generator.sources.jaad import read_video")
    assert r.returncode != 0
    assert "the pipeline names no dataset BROKEN" in r.stdout, r.stdout[-3000:]
    assert "generator.pipeline.video -> generator.sources.jaad" in r.stdout


# ------------------------------------------------------------------------------------------ "module:function" strings
# A few parts are named by string (an export's writer, an end-of-run part's builder: they are resolved in a Ray
# worker from a plugin's declaration), which import-linter cannot see: each one must resolve.
REFERENCE = re.compile(r"^(generator|schemas|actors)(\.\w+)+:\w+(\.\w+)*$")


def unresolved_references(root: Path) -> tuple[int, list[str]]:
    """(how many "module:function" strings the product packages under ``root`` hold, those that do not resolve to
    a callable: "file:line: reference: why")."""
    refs, bad = 0, []
    for pkg in ("generator", "actors", "schemas"):
        for path in sorted((root / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and REFERENCE.match(node.value):
                    refs += 1
                    try:
                        ok = callable(resolve(node.value))
                        why = "not callable"
                    except (ImportError, AttributeError) as err:
                        ok, why = False, f"{type(err).__name__}: {err}"
                    if not ok:
                        bad.append(f"{path.relative_to(root)}:{node.lineno}: {node.value}: {why}")
    return refs, bad


def test_every_module_function_string_resolves():
    refs, bad = unresolved_references(REPO)
    assert refs >= 8 and not bad, bad
    for fam in families().values():  # the module paths a family declares (its commands, its scorer)
        for mod in [*fam.commands(), *([fam.scorer()] if fam.scorer() else [])]:
            assert callable(getattr(importlib.import_module(mod), "main" if mod in fam.commands() else "score")), mod


def test_a_dangling_reference_is_found(tmp_path):
    (tmp_path / "generator").mkdir()
    (tmp_path / "generator" / "m.py").write_text('A = "generator.cli:main"\nB = "generator.cli:no_such_function"\n')
    refs, bad = unresolved_references(tmp_path)
    assert refs == 2 and len(bad) == 1 and "no_such_function" in bad[0] and "AttributeError" in bad[0], bad


# The modules that talk to Ray: connecting (ray_connect), the stream of scenes (ray_exec), the batch tasks
# (ray_tasks) and the model actors' metrics (metrics). Every other module, the run-folder layer first, runs
# without Ray and reaches it through these.
RAY_MODULES = {"generator/pipeline/ray_connect.py", "generator/pipeline/ray_exec.py",
               "generator/pipeline/ray_tasks.py", "generator/pipeline/metrics.py"}


def ray_importers(root: Path) -> set[str]:
    """The product modules under ``root`` with an import of ``ray`` (at their top or inside a function)."""
    out = set()
    for pkg in ("generator", "actors", "schemas"):
        for path in sorted((root / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(n == "ray" or n.startswith("ray.") for n in names):
                    out.add(path.relative_to(root).as_posix())
    return out


def test_only_the_executor_modules_import_ray(tmp_path):
    assert ray_importers(REPO) == RAY_MODULES
    (tmp_path / "generator" / "runfolder").mkdir(parents=True)
    (tmp_path / "generator" / "runfolder" / "parts.py").write_text("def f():\n    import ray\n    return ray\n")
    assert ray_importers(tmp_path) == {"generator/runfolder/parts.py"}  # the check can fail
