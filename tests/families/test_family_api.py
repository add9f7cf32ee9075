"""The family API (``generator.families.api``) is the one module of drivegen a family's author imports: the
example family (``tests/plugins/lane_keeping``) imports nothing else of drivegen, every name the API lists is
there, and every hook group of the contract is offered by it."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from generator.families import api
from schemas.families import HOOK_GROUPS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "plugins" / "lane_keeping" / "drivegen_lane_keeping"
DRIVEGEN = ("generator", "schemas", "actors")
API = "generator.families.api"


def drivegen_imports(source: str) -> set[str]:
    """Every module of drivegen that ``source`` imports, at its top or inside a function (``from generator.families
    import api`` is the API)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{a.name}" if node.module == "generator.families" else node.module
                      for a in node.names}
    return {m for m in found if m.split(".")[0] in DRIVEGEN}


def test_the_example_family_imports_only_the_api():
    files = sorted(EXAMPLE.glob("*.py"))
    assert len(files) >= 5
    used = {f.name: drivegen_imports(f.read_text()) for f in files}
    assert {name: mods - {API} for name, mods in used.items() if mods - {API}} == {}
    assert set().union(*used.values()) == {API}
    # the check can fail: the imports the example had before the API
    assert drivegen_imports("from schemas.families import PaperFamily\n"
                            "def f():\n    from generator.runfolder import RunReader\n") == {
        "schemas.families", "generator.runfolder"}
    assert drivegen_imports("from generator.families import api\nimport numpy\n") == {API}


def test_the_api_offers_what_it_lists():
    missing = [name for name in api.__all__ if not hasattr(api, name)]
    assert missing == []
    assert len(set(api.__all__)) == len(api.__all__)
    assert {g.__name__ for g in HOOK_GROUPS} <= set(api.__all__)
    for name in ("PaperFamily", "Export", "TableLayout", "RunReader", "RunStore", "staging", "read_predictions"):
        assert name in api.__all__, name


def test_importing_the_api_loads_no_family():
    """A family's package imports the API at its top, and the registry imports that package: so importing the API
    must not load the registry (else a plugin meets itself half-imported, a circular import)."""
    code = ("import generator.families.api\nfrom schemas.families import families\n"
            "print(families.cache_info().currsize)")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "0"
