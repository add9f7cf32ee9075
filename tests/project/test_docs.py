"""The README and the documentation site (``docs/``, ``mkdocs.yml``): the README stays a short front door whose
figures are a run's, the site builds offline with no broken link, the configuration reference is the config's
own, the benchmarks page holds only what the benchmarks wrote, and no page speaks of a machine of the day."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MKDOCS = Path(sys.executable).with_name("mkdocs")
needs_mkdocs = pytest.mark.skipif(not MKDOCS.is_file(), reason="mkdocs is not installed (the 'docs' extra; "
                                                                "scripts/setup.sh installs it)")
# what `mkdocs build` says on every build; any other line (a warning, a link to a page the build excludes) is a fault
ROUTINE_BUILD_LOG = re.compile(r"INFO\s+-\s+(Cleaning site directory|Building documentation to directory: |"
                               r"Documentation built in )")
# a line of a built paragraph or list item that begins like a Markdown list item: a list Python-Markdown did not read
# as one (it needs a blank line before a list, and four spaces to nest one; GitHub's renderer needs neither)
LITERAL_LIST_ITEM = re.compile(r"\n[ \t]*(?:[-*+]|\d+\.)[ \t]+\S")
# a list item indented by one to three spaces: Python-Markdown flattens it into its parent list
SHALLOW_NESTED_ITEM = re.compile(r"^ {1,3}(?:[-*+]|\d+\.)[ \t]")
# wording that dates a page to one machine or one day instead of a command, a date and a CPU model
MACHINE_OF_THE_DAY = re.compile(r"\b(this machine|on this (?:\d+-core|shared)|today|measured here|this session)\b",
                                re.I)
# what ties a page to the project's past rather than to what drivegen does now: a date, a commit, a worktree, the
# sequence of a day, a goal met or missed, a GPU lease (history belongs in docs/changelog.md; dated figures on the
# benchmarks' own pages, which their scripts write)
HISTORY = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b|\bworktrees?\b|"
                     r"\b(?:later|earlier|on) that day\b|\bthe same day\b|\bat (?:that|this|an earlier) commit\b|"
                     r"\(goal\b|\bgoals?\s*(?:[<>]=?|≥|≤)|\b(?:meets?|met|missed|misses|short of)\b[^.]{0,40}\bgoals?\b|"
                     r"\bleases?\b", re.I)
# a pointer into drivegen's README: README "Section" (or README, "Section"), which must be one of its headings;
# README followed by a comma and an unquoted name is a section pointer too, and one that cannot be resolved
README_SECTION = re.compile(r"""\bREADME\b(?!\.md|'s)(?:,?\s*["'“]([^"'”]+)["'”]|,\s*(?!["'“])([^)"\n]*))""")
OTHER_READMES = re.compile(r"(?:'s|annotations|data) README\b")  # SAM 2's README, JAAD annotations README
DOCS_POINTER = re.compile(r"\bdocs/([\w/.-]+\.md)(?:#([\w-]+))?")


def _written_pages() -> list[Path]:
    """The hand-written pages: the README and docs/ without the generated ones (the config reference and the
    benchmarks' own pages, which name their command, date and CPU)."""
    pages = [ROOT / "README.md"] + sorted(DOCS.rglob("*.md"))
    return [p for p in pages if "benchmarks" not in p.relative_to(ROOT).parts[1:-1]
            and p.name not in ("config.md", "family-hooks.md")]


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([str(MKDOCS), "build", "--strict", "-f", str(config), "-d", str(site)], capture_output=True,
                          text=True, timeout=300, env=env)


def _build_complaints(log: str) -> list[str]:
    """What a build said beyond its routine lines (``ROUTINE_BUILD_LOG``)."""
    return [line for line in log.splitlines() if line.strip() and not ROUTINE_BUILD_LOG.match(line)]


def _literal_list_items(html: str) -> list[str]:
    """The paragraphs and list items of a built page that hold a list item as text (``LITERAL_LIST_ITEM``)."""
    found = []
    for m in re.finditer(r"<(p|li)\b[^>]*>(.*?)</\1>", html, re.S):
        text = re.sub(r"<(ul|ol|pre)\b.*?</\1>", "", m.group(2), flags=re.S)  # a real nested list is no fault
        if LITERAL_LIST_ITEM.search("\n" + text):
            found.append(f"<{m.group(1)}>{text[:80]!r}")
    return found


def _shallow_nested_items(page: Path) -> list[str]:
    """The lines of a Markdown page, outside code blocks, that ``SHALLOW_NESTED_ITEM`` matches."""
    found, fence = [], False
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and SHALLOW_NESTED_ITEM.match(line):
            found.append(f"{page.relative_to(ROOT)}:{n}: {line.strip()[:60]}")
    return found


def test_readme_is_a_short_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for must in ("make run", "make test", "docs/guide/install.md", "docs/reference/config.md", "docs/benchmarks.md"):
        assert must in readme, must
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):  # every page the README links to exists
        assert (ROOT / link).is_file(), link


def test_no_page_speaks_of_a_machine_of_the_day():
    found = [f"{p.relative_to(ROOT)}:{n}: {m.group(0)}" for p in _written_pages()
             for n, line in enumerate(p.read_text().splitlines(), 1) for m in [MACHINE_OF_THE_DAY.search(line)] if m]
    assert found == []
    assert MACHINE_OF_THE_DAY.search("took 24 s on this 2-core machine")  # the check can fail


def test_user_pages_tell_no_history():
    """The README and the hand-written pages say how drivegen works now: no dates, commits, worktrees, goals or
    leases; that is the changelog's (``docs/changelog.md``, in the site's navigation)."""
    found = [f"{p.relative_to(ROOT)}:{n}: {m.group(0)}" for p in _written_pages() if p.name != "changelog.md"
             for n, line in enumerate(p.read_text().splitlines(), 1) for m in HISTORY.finditer(line)]
    assert found == []
    assert "changelog.md" in (ROOT / "mkdocs.yml").read_text()
    for said in ("498 s at 44a586a", "(2026-11-26, H100)", "from a worktree", "later that day",
                 "7.2 M QA/min/core (goal >= 20)", "meets the first goals", "short of a 20x goal"):
        assert HISTORY.search(said), said  # the check can fail
    assert not HISTORY.search("a goal about the target's logged end position; 1,026,085 QA; #263238")



def _stale_pointers(text: str, where: str) -> list[str]:
    """The README sections (``README_SECTION``) and docs pages or anchors (``DOCS_POINTER``) ``text`` points to
    that do not exist."""
    sections = {h.strip() for h in re.findall(r"^#+ (.+)$", (ROOT / "README.md").read_text(), re.M)}
    stale = []
    for m in README_SECTION.finditer(text):
        if OTHER_READMES.search(text[max(0, m.start() - 20):m.end()]):
            continue
        if (m.group(1) or m.group(2) or "").strip() not in sections:
            stale.append(f"{where}: {m.group(0)!r}")
    for page, anchor in DOCS_POINTER.findall(text):
        target = DOCS / page
        if page.startswith("benchmarks/") and (ROOT / "bench" / f"{Path(page).stem.split('-')[0]}.py").is_file():
            continue  # a page its bench writes (``--docs``), which may not have been run yet
        if not target.is_file():
            stale.append(f"{where}: docs/{page}")
        elif anchor and anchor not in {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", h).strip().lower())
                                       for h in re.findall(r"^#+ (.+)$", target.read_text(), re.M)}:
            stale.append(f"{where}: docs/{page}#{anchor}")
    return stale


def test_pointers_to_the_readme_and_the_docs_resolve():
    """Every pointer to a README section or a docs page resolves: in the pages, the code and its comments, every
    command's help, ``cluster.yaml``, the scripts and the configuration reference."""
    import contextlib
    import io

    from generator.cli import build_parser
    from generator.commands.reference import config_reference

    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    stale = [x for f in files if not f.startswith("tests/") and (f.endswith((".py", ".sh", ".md", ".yaml", ".toml"))
                                                                or f == "Makefile")
             for x in _stale_pointers((ROOT / f).read_text(), f)]
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name, p in sub.choices.items():
        with contextlib.redirect_stdout(io.StringIO()):
            stale += _stale_pointers(p.format_help(), f"drivegen {name} -h")
    stale += _stale_pointers(config_reference(), "the configuration reference")
    assert stale == []
    for said in ('(format: README, the family\'s section)', 'README "Anonymisation"', "(README, \"Models\")",
                 "docs/nowhere.md", "docs/benchmarks.md#no-such-section"):
        assert _stale_pointers(said, "x"), said  # the check can fail
    assert _stale_pointers('README "Commands"', "x") == [] and _stale_pointers("SAM 2's README, as", "x") == []


@pytest.mark.slow
def test_readme_summary_is_what_the_default_run_prints(default_run):
    """The README's sample summary and report line are what ``make run`` prints, but for the times, and its picture
    of the report shows the sample the default run's report draws."""
    from generator.cli import build_parser
    from generator.pipeline.driver import format_summary

    readme = (ROOT / "README.md").read_text()
    block = re.search(r"It ends with a summary like this.*?```\n(.*?)```", readme, re.S).group(1).splitlines()
    out = str(default_run[0])
    got = format_summary(default_run[1]).replace(out, "out").splitlines()
    want = {line.split(":")[0]: line for line in got}
    printed = default_run[6].replace(out, "out")
    for line in block:
        if line.startswith("report: "):  # what run printed, but for the build time
            built = re.compile(r"built in [\d.]+ s")
            assert built.sub("", line) in {built.sub("", x) for x in printed.splitlines()}, (line, printed)
            break
    else:
        raise AssertionError("the README's summary has no report line")
    shot = json.loads((DOCS / "assets" / "report.png.json").read_text())  # what scripts/report_screenshot.sh drew
    first = re.search(r'data-qa-id="([^"]+)"', (default_run[0] / "report" / shot["page"]).read_text())
    assert first and first.group(1) == shot["first_qa_id"], "a stale picture: run scripts/report_screenshot.sh"
    for line in block:
        key = line.split(":")[0]
        if key in ("wall time", "report"):  # the times differ; the report line is checked above
            continue
        if key == "summary":
            assert line == "summary: out/summary.json"
            continue
        assert key in want, line
        if line.endswith("..."):
            assert want[key].startswith(line[:-3].rstrip(", ")), (line, want[key])
        else:
            assert want[key] == line, (line, want[key])
    parser = build_parser()
    validate = parser._subparsers._group_actions[0].choices["validate"]
    default = validate.get_default("tracking_thresholds")
    text = "\n".join(p.read_text() for p in _written_pages())
    said = [b or a for a, b in re.findall(r"`--tracking-thresholds(?: (\d+))?` \(default(?: (\d+))?", text)]
    assert said and all(int(s) == default for s in said), (said, default)


@pytest.mark.slow
def test_templates_guide_example_adds_its_question(default_run, tmp_path):
    """The QA templates guide's example, run as written on the default run: its template file, ``drivegen
    regenerate``, then the counts and the before/after row the guide shows."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from generator.cli import main

    guide = (DOCS / "guide" / "templates.md").read_text()
    yaml_text = re.search(r"```yaml\n(\s*# my_templates/ego_spatial.yaml\n.*?)```", guide, re.S).group(1)
    (tmp_path / "my_templates").mkdir()
    (tmp_path / "my_templates" / "ego_spatial.yaml").write_text(textwrap.dedent(yaml_text))
    out2 = tmp_path / "out2"
    assert main(["regenerate", str(default_run[0]), "--templates", str(tmp_path / "my_templates"), "--out", str(out2),
                 "--no-progress"]) == 0
    cols = ["qa_id", "template_id", "question", "answer"]
    before, after = (ds.dataset(str(run / "qa")).to_table(columns=cols) for run in (default_run[0], out2))
    tid = re.search(r"- id: (\S+)", yaml_text).group(1)
    mine = after.filter(pc.equal(after["template_id"], tid))
    n, of = map(int, re.search(r"print\(mine.num_rows\)\s+# (\d+) of the run's (\d+) distance questions", guide).groups())
    distance = pc.sum(pc.match_substring(after["qa_id"], ":ego_spatial:distance:")).as_py()
    assert (mine.num_rows, distance) == (n, of)
    assert after.num_rows == before.num_rows == int(re.search(r"regenerated (\d+) QA", guide).group(1))
    shown = re.findall(r"\{'qa_id': '([^']+)', 'template_id': '([^']+)',\s*'question': '([^']+)', 'answer': '([^']+)'\}",
                       guide)
    row = mine.to_pylist()[0]
    was = before.filter(pc.equal(before["qa_id"], row["qa_id"])).to_pylist()[0]
    assert [tuple(r.values()) for r in (was, row)] == shown


@pytest.mark.slow
def test_summary_wall_time_covers_the_whole_command(default_run):
    """``wall time`` is the command's, from its start to the report written, broken down by phase."""
    summary, outside = default_run[1], default_run[5]
    assert set(summary.timings) == {"logs", "pipeline", "exports", "report"}  # --local: no Ray to start
    assert 0.9 * outside <= summary.wall_s <= outside, (summary.wall_s, outside)
    # the report, built before its own phase is timed, gives the time up to it; with the report's phase, the command's
    index = (default_run[0] / "report" / "index.html").read_text()
    shown = re.search(r'<th>run wall time up to this report</th><td id="wall-time">([\d.]+) s \(logs', index)
    assert shown, "the report's wall time"
    assert float(shown.group(1)) + summary.timings["report"] == pytest.approx(summary.wall_s, abs=0.11)
    assert sum(summary.timings.values()) <= summary.wall_s
    assert summary.throughput.qa_per_s == pytest.approx(summary.qa.total / summary.timings["pipeline"], rel=0.01)
    line = next(x for x in summary.lines() if x.startswith("wall time"))
    assert re.match(r"wall time: [\d.]+ s \(logs [\d.]+ s, pipeline [\d.]+ s, exports [\d.]+ s, report [\d.]+ s"
                    r"(, other [\d.]+ s)?\)  throughput", line), line


def test_config_reference_is_the_configs_own(monkeypatch):
    """docs/reference/config.md is what ``python -m generator.commands.reference`` writes from the config models:
    every field of every section, with its default; a changed description makes the page stale."""
    from generator.commands.reference import PAGE, config_reference
    from schemas.config import PipelineConfig, VisibilityConfig
    from schemas.families import config_sections

    text = config_reference()
    assert PAGE.read_text() == text, "stale: run python -m generator.commands.reference"
    for name, field in PipelineConfig.model_fields.items():
        if name != "version":
            assert f"## `{name}`" in text, name
    for name in config_sections():
        assert f"## `{name}`" in text, name
    assert "| `box_iou_min` | float | >= 0, <= 1 | `0.3` |" in text
    monkeypatch.setattr(VisibilityConfig.model_fields["box_iou_min"], "description", "changed")
    assert config_reference() != text


def test_family_hooks_page_is_the_contracts_own(monkeypatch):
    """docs/reference/family-hooks.md is what ``python -m generator.commands.reference`` writes from the hook
    groups: every hook of ``PaperFamily`` with its signature; a changed signature makes the page stale."""
    from generator.commands.reference import HOOKS_PAGE, hooks_reference
    from schemas.families import HOOK_GROUPS, PaperFamily, Scores

    text = hooks_reference()
    assert HOOKS_PAGE.read_text() == text, "stale: run python -m generator.commands.reference"
    hooks = {n for g in HOOK_GROUPS for n in vars(g) if not n.startswith("_")}
    assert hooks >= {n for n in dir(PaperFamily) if not n.startswith("_")} - {"order"}  # every hook is in a group
    for name in hooks:
        assert f"### `{name}" in text, name
    assert "### `derive(scene: Tables, cfg: BaseModel) -> Tables`" in text
    monkeypatch.setattr(Scores, "scorer", lambda self, strict=True: None)
    assert hooks_reference() != text


@needs_mkdocs
def test_site_builds_strict_offline(tmp_path):
    """``mkdocs build --strict``: every page in the nav builds, every link and anchor resolves, every included
    benchmark page exists, and the build says nothing beyond its routine lines (no link to a page it excludes);
    every list renders as a list (no paragraph or list item holds a literal "- " item, no list nested by fewer
    than four spaces). The same build fails on a page with a broken link, and names a link to an excluded page."""
    res = _mkdocs(ROOT / "mkdocs.yml", tmp_path / "site")
    assert res.returncode == 0, res.stderr[-3000:]
    assert _build_complaints(res.stderr) == []
    literal = {str(page.relative_to(tmp_path / "site")): found for page in sorted((tmp_path / "site").rglob("*.html"))
               for found in [_literal_list_items(page.read_text())] if found}
    assert literal == {}
    assert [x for page in sorted(DOCS.rglob("*.md")) for x in _shallow_nested_items(page)] == []
    assert _literal_list_items("<p>Conventions:\n- The ego frame is x forward.</p>")  # the checks can fail
    assert _literal_list_items("<ul><li>one\n  1. Clone it.</li></ul>")
    assert not _literal_list_items("<ul><li>one<ul>\n<li>two</li>\n</ul></li></ul><p>a - b\n-3 m</p>")
    reference = (tmp_path / "site" / "reference" / "config" / "index.html").read_text()
    assert "box_iou_min" in reference and "classify_at_s" in reference
    bench = (tmp_path / "site" / "benchmarks" / "index.html").read_text()
    assert "wall_s_per_scene=" in bench  # bench/synth.py's own output, included from docs/benchmarks/synth.md
    broken = tmp_path / "broken"
    shutil.copytree(DOCS, broken / "docs")
    shutil.copy(ROOT / "mkdocs.yml", broken / "mkdocs.yml")
    (broken / "docs" / "design.md").write_text((DOCS / "design.md").read_text() + "\nSee [nowhere](nowhere.md) and "
                                               "[a bench's own page](benchmarks/synth.md).\n")
    res = _mkdocs(broken / "mkdocs.yml", tmp_path / "site2")
    assert res.returncode != 0 and "nowhere.md" in res.stderr
    assert any("benchmarks/synth.md" in line and "excluded" in line for line in _build_complaints(res.stderr))


def test_benchmarks_page_holds_only_what_the_benchmarks_wrote():
    """docs/benchmarks.md states no figure of its own; every page it includes was written by the bench it is
    named after (its first line names the command), and every bench script can write one (``docs_page``)."""
    page = (DOCS / "benchmarks.md").read_text()
    prose = "\n".join(line for line in page.splitlines() if not line.startswith("--8<--"))
    prose = re.sub(r"`[^`]*`", "", prose)  # commands and paths may hold digits
    figure = re.compile(r"(?<![A-Za-z])\d")  # a digit not inside a name (AB3DMOT)
    assert not figure.search(prose), re.search(r".*(?<![A-Za-z])\d.*", prose).group(0)
    included = re.findall(r'^--8<-- "benchmarks/([\w-]+)\.md"', page, re.M)
    assert included
    for name in included:  # <script>.md, or <script>-<mode>.md for a bench that writes a page per mode
        first = (DOCS / "benchmarks" / f"{name}.md").read_text().splitlines()[0]
        script = name.split("-", 1)[0]
        assert (ROOT / "bench" / f"{script}.py").exists(), name
        assert re.match(rf"<!-- written by `python bench/{script}\.py[^`]*--docs`", first), (name, first)
    for script in sorted((ROOT / "bench").glob("*.py")):
        if script.name != "docs_page.py":
            assert re.search(rf'docs_page\("{script.stem}["-]', script.read_text()), script.name
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from docs_page import page_text
    finally:
        sys.path.remove(str(ROOT / "bench"))
    written = page_text("synth", ["--scenes", "1"], "scenes=1\n")
    assert re.match(r"<!-- written by `python bench/synth\.py --scenes 1 --docs`", written)
    assert re.search(r"\d{4}-\d\d-\d\d, .+ x \d+ cores, commit ", written)
    # a page states what was measured, not what the developers aim at (the console keeps the goals)
    goals = page_text("synth", [], "2,317 frames/s (goal >= 2,000)\n1.96x (goal >= 1.85x; load 1.8)\n")
    assert "goal" not in goals and "2,317 frames/s\n1.96x (load 1.8)" in goals
    assert [p.name for p in (DOCS / "benchmarks").glob("*.md") if "goal" in p.read_text()] == []
