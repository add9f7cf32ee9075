"""The HTML report (``drivegen report``, generator.report) opened in a real browser: headless Chromium (Debian's
``chromium``; scripts/setup.sh installs it) renders each page; the dumped DOM must show the run's counts
(computed here straight from the QA Parquet files, not through the report's code), every image must have
loaded, and a screenshot must not be blank. The checks are shown to fail on a broken image, a wrong count
and a blank page."""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.dataset as pads
import pytest

from generator.report import build_report
from schemas.config import ReportConfig
from support.pipeline import count_parquet_reads

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian package 'chromium'; "
                                                            "scripts/setup.sh installs it): the browser test cannot run")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--window-size=1280,1400", "--virtual-time-budget=5000"]
CFG = ReportConfig(samples_per_family=4, rows_per_page=3, seed=3)


def chromium(url: str, tmp: Path, screenshot: Path | None = None) -> str:
    """The DOM of ``url`` after load (``--dump-dom``), or write a screenshot; a fresh profile in ``tmp``."""
    args = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'profile'}"]
    args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    res = subprocess.run([*args, url], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"chromium failed on {url}: {res.stderr[-2000:]}"
    return res.stdout


def qa_counts(run: Path):
    """Counts straight from the run's QA files (pyarrow, not the report's reader)."""
    t = pads.dataset(sorted(str(p) for p in (run / "qa").glob("*.parquet")), format="parquet").to_table(
        columns=["qa_id", "family", "question_type"])
    fam = Counter(t.column("family").to_pylist())
    types = Counter(zip(t.column("family").to_pylist(), t.column("question_type").to_pylist()))
    return t.num_rows, fam, types, dict(zip(t.column("qa_id").to_pylist(), t.column("family").to_pylist()))


def _table(dom: str, table_id: str) -> str:
    m = re.search(rf'<table id="{table_id}">(.*?)</table>', dom, re.S)
    assert m, f"table #{table_id} is not in the rendered page"
    return m.group(1)


def count_problems(dom: str, run: Path) -> list[str]:
    """Where the rendered index page's counts differ from the run's QA table."""
    total, fam, types, _ = qa_counts(run)
    problems = []
    shown_total = re.search(r'id="qa-total">(\d+)<', dom)
    if not shown_total or int(shown_total.group(1)) != total:
        problems.append(f"QA total shown {shown_total and shown_total.group(1)}, run has {total}")
    shown = {f: int(n) for f, n in re.findall(r'<tr data-family="([^"]+)"><td>[^<]*</td><td class="count">(\d+)</td>',
                                               _table(dom, "qa-by-family"))}
    if shown != dict(fam):
        problems.append(f"per family shown {shown}, run has {dict(fam)}")
    shown_t = {(f, q): int(n) for f, q, n in re.findall(
        r'<tr data-family="([^"]+)" data-type="([^"]+)">(?:<td>[^<]*</td>){2}<td class="count">(\d+)</td>',
        _table(dom, "qa-by-type"))}
    if shown_t != dict(types):
        problems.append(f"per question type shown {shown_t}, run has {dict(types)}")
    return problems


def image_problems(dom: str) -> list[str]:
    """Images that did not load (recorded by the page's own script after the load event)."""
    m = re.search(r'<body[^>]*data-broken-images="([^"]*)"', dom)
    if not m:
        return ["the page's load script did not run (no data-broken-images on <body>)"]
    broken = json.loads(m.group(1).replace("&quot;", '"'))
    n = int(re.search(r'data-images="(\d+)"', dom).group(1))
    return [f"image did not load: {b}" for b in broken] + (["the page has no image"] if n == 0 else [])


def _unescape(text: str) -> str:
    return html.unescape(text)


def reading_problems(dom: str) -> list[str]:
    """What keeps a reader from reading a rendered page right: Region tags that overlap on an image (measured
    from each image's tag rectangles, ``data-tags``), an intent cell that is not one label, a value line with
    empty lists or a bare '-', a sample card without an image that does not say why, an empty Distributions
    section without a word why."""
    from schemas.vocab import INTENT_LATERAL, INTENT_VERTICAL

    problems = []
    for src, tags in re.findall(r'<img src="([^"]+)"[^>]*data-tags="([^"]*)"', dom):
        rects = json.loads(_unescape(tags))
        for i, a in enumerate(rects):
            for b in rects[i + 1:]:
                if not (a[3] <= b[1] or b[3] <= a[1] or a[4] <= b[2] or b[4] <= a[2]):
                    problems.append(f"{src}: tags of Region [{a[0]}] and Region [{b[0]}] overlap")
    for kind, allowed in (("lateral", INTENT_LATERAL), ("vertical", INTENT_VERTICAL)):
        for cell in re.findall(rf'<td class="intent-{kind}">([^<]*)</td>', dom):
            if cell.strip() and cell.strip() not in allowed:
                problems.append(f"intent cell ({kind}) {cell.strip()!r} is not one label")
    for line in re.findall(r'<p class="value">(.*?)</p>', dom, re.S):
        text = re.sub(r"<[^>]+>", "", _unescape(line))
        if "[]" in text or re.search(r"value: -(?![\d.])", text):
            problems.append(f"value line {' '.join(text.split())!r} shows an empty list or a bare '-'")
    for card in re.findall(r'<section class="card".*?</section>', dom, re.S):
        if "<img " not in card and 'class="no-image"' not in card:
            qa_id = re.search(r'data-qa-id="([^"]+)"', card).group(1)
            problems.append(f"card {qa_id} has no image and does not say why")
    if "<h2>Distributions</h2>" in dom:
        section = dom.split("<h2>Distributions</h2>", 1)[1].split("<h2>", 1)[0]
        if "<img " not in section and 'id="no-distributions"' not in section:
            problems.append("the Distributions section is empty and does not say why")
    return problems


def blank(png: Path) -> bool:
    """A screenshot with (almost) one colour: nothing rendered."""
    import cv2

    img = cv2.imread(str(png), cv2.IMREAD_GRAYSCALE)
    assert img is not None, f"no screenshot at {png}"
    return float(img.std()) < 10 or np.bincount(img.ravel(), minlength=256).max() / img.size > 0.97


@pytest.fixture(scope="session")
def report(labelled_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "site"
    res = build_report(str(labelled_run), str(out), CFG)
    assert res.missing_images == [] and Path(res.index).is_file()
    return out


def test_report_is_self_contained_and_paged(report, labelled_run, monkeypatch):
    """Only relative links to files inside the report; pages hold at most rows_per_page samples; each family's
    sample is drawn from that family, as many as samples_per_family allows. A scene's QA rows and labels are read
    for the sample pages once, not once per family (8 and 7 reads of each scene's files before)."""
    _, fam, _, family_of = qa_counts(labelled_run)
    pages = sorted(report.glob("*.html"))
    shown = Counter()
    for page in pages:
        html = page.read_text()
        links = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert links
        for link in links:
            assert not re.match(r"^[a-z]+:|^/", link), f"{page.name}: non-relative link {link}"
            assert (report / link).is_file(), f"{page.name}: {link} is not in the report"
        ids = re.findall(r'data-qa-id="([^"]+)"', html)
        assert len(ids) <= CFG.rows_per_page
        if page.name.startswith("samples-"):
            family = re.match(r"samples-(.+)-\d+\.html", page.name).group(1)
            assert ids and {family_of[i] for i in ids} == {family}
            shown[family] += len(ids)
    assert shown == {f: min(n, CFG.samples_per_family) for f, n in fam.items()}
    reads = count_parquet_reads(monkeypatch)
    again = build_report(str(labelled_run), str(report.parent / "again"), CFG)
    assert len(shown) > 2 and reads  # several families' pages
    assert {f: n for f, n in reads.items() if f.startswith("labels/") and n > 1} == {}
    assert {f: n for f, n in reads.items() if f.startswith("qa/") and n > 2} == {}  # the statistics, the samples
    assert sorted(p.name for p in (report.parent / "again").glob("*.html")) == [p.name for p in pages]
    assert again.samples == sum(shown.values())


def test_other_questions_at_a_keyframe_span_its_families(report, labelled_run):
    """A sample card's "Other questions at this keyframe" shows each family asked there (the list holds 8), not
    the first rows of the keyframe, which are all object_spatial ones."""
    t = pads.dataset(sorted(str(p) for p in (labelled_run / "qa").glob("*.parquet")), format="parquet").to_table(
        columns=["qa_id", "scene_id", "keyframe_index", "family"]).to_pylist()
    at = {(r["scene_id"], r["keyframe_index"]) for r in t}
    families = {k: Counter() for k in at}
    for r in t:
        families[(r["scene_id"], r["keyframe_index"])][r["family"]] += 1
    row = {r["qa_id"]: r for r in t}
    checked = 0
    for page in sorted(report.glob("samples-*.html")):
        for qa_id, card in re.findall(r'<section class="card" data-qa-id="([^"]+)">(.*?)</section>', page.read_text(),
                                      re.S):
            r = row[qa_id]
            there = families[(r["scene_id"], r["keyframe_index"])] - Counter({r["family"]: 1})
            m = re.search(r"Other questions at this keyframe \((\d+)\)</h4><ul>(.*?)</ul>", card, re.S)
            if not there:
                assert m is None, qa_id
                continue
            shown = re.findall(r'<li><span class="tag">([^<]+)</span>', m.group(2))
            assert int(m.group(1)) == sum(there.values()) and len(shown) == min(8, sum(there.values()))
            assert set(shown) == set(there) or len(set(shown)) == len(shown) == 8, (qa_id, shown, there)
            checked += len(there) > 1
    assert checked  # cards whose keyframe has several families


@needs_chromium
def test_report_renders_in_chromium(report, labelled_run, tmp_path):
    index = chromium(report.joinpath("index.html").as_uri(), tmp_path)
    assert count_problems(index, labelled_run) == []
    assert image_problems(index) == []
    assert reading_problems(index) == [] and "<h2>Distributions</h2>" in index
    for page in sorted(report.glob("*.html")):
        if page.name == "index.html":
            continue
        dom = chromium(page.as_uri(), tmp_path)
        assert image_problems(dom) == [], page.name
        assert reading_problems(dom) == [], page.name
        if page.name.startswith("samples-"):  # QA text and marked keyframes are in the rendered page
            assert re.search(r'<p class="q">[^<]+</p>', dom) and 'alt="CAM_' in dom, page.name
    shot = tmp_path / "index.png"
    chromium(report.joinpath("index.html").as_uri(), tmp_path, screenshot=shot)
    assert not blank(shot)


@needs_chromium
def test_browser_checks_fail_on_broken_image_wrong_count_and_blank_page(report, labelled_run, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(report, bad)
    index = (bad / "index.html").read_text()
    img = re.search(r'<img src="([^"]+)"', index).group(1)
    (bad / img).unlink()  # a missing image
    total, *_ = qa_counts(labelled_run)
    (bad / "index.html").write_text(index.replace(f'id="qa-total">{total}<', f'id="qa-total">{total + 1}<'))
    dom = chromium((bad / "index.html").as_uri(), tmp_path)
    assert image_problems(dom) == [f"image did not load: {img}"]
    assert count_problems(dom, labelled_run) == [f"QA total shown {total + 1}, run has {total}"]
    # what the reading checks catch, each planted once in a copy of a sample page (as the report once drew them)
    page = next(p for p in sorted(bad.glob("samples-*.html"))
                if re.search(r'<section class="card"(?:(?!</section>).)*data-tags="\[\[(?:(?!</section>).)*'
                             r'<p class="value">(?:(?!</section>).)*</table>', p.read_text(), re.S)
                and p.read_text().count('<section class="card"') > 1)
    text = page.read_text()
    cards = re.findall(r'<section class="card".*?</section>', text, re.S)
    tagged = next(c for c in cards if 'data-tags="[[' in c and '<p class="value">' in c and "</table>" in c)
    other = next(c for c in reversed(cards) if c != tagged)
    tags = re.search(r'data-tags="(\[\[[^"]*)"', tagged).group(1)
    first = json.loads(html.unescape(tags))[0]
    planted = html.escape(json.dumps([first, [first[0] + 1, *first[1:]]]))  # a second tag on the first one
    text = text.replace(tagged, tagged.replace(f'data-tags="{tags}"', f'data-tags="{planted}"', 1)
                        .replace('<p class="value">', '<p class="value">value: - trajectory; regions []; ', 1)
                        .replace("</table>", '<tr data-track="1"><td class="intent-lateral">stationary stationary'
                                             '</td></tr></table>', 1))
    text = text.replace(other, re.sub(r"<img [^>]*>", "", other))
    page.write_text(text)
    got = reading_problems(chromium(page.as_uri(), tmp_path))
    qa_id = re.search(r'data-qa-id="([^"]+)"', other).group(1)
    assert len(got) == 4, got  # in page order: the planted card's three, and the card without images
    assert sum(g.endswith(f"tags of Region [{first[0]}] and Region [{first[0] + 1}] overlap") for g in got) == 1, got
    assert "intent cell (lateral) 'stationary stationary' is not one label" in got, got
    assert sum(g.startswith("value line 'value: - trajectory; regions [];") for g in got) == 1, got
    assert f"card {qa_id} has no image and does not say why" in got, got
    no_dist = re.sub(r"(<h2>Distributions</h2>).*?(<h2>)", r"\1\2", index, count=1, flags=re.S)
    assert reading_problems(no_dist) == ["the Distributions section is empty and does not say why"]
    (bad / "blank.html").write_text("<!doctype html><html><body></body></html>")
    shot = tmp_path / "blank.png"
    chromium((bad / "blank.html").as_uri(), tmp_path, screenshot=shot)
    assert blank(shot)


def test_report_of_a_run_on_s3_equals_local(report, labelled_run, s3_server, tmp_path, monkeypatch):
    """Built from the run folder on object storage (moto S3 server) through RunReader: the same pages with the
    same content; by default into ./<run name>-report, a local folder a browser opens."""
    from generator.report import default_out
    from generator.runfolder import RunReader

    uri = f"s3://{s3_server.new_bucket()}/runs/r1"
    s3_server.upload(labelled_run, uri)
    monkeypatch.chdir(tmp_path)
    reader = RunReader(uri)
    assert default_out(reader) == str(tmp_path / "r1-report")
    res = build_report(reader, None, CFG)
    out = tmp_path / "r1-report"
    assert res.index == str(out / "index.html") and res.missing_images == []
    pages = sorted(p.name for p in report.glob("*.html"))
    assert sorted(p.name for p in out.glob("*.html")) == pages
    for name in pages:
        local = (report / name).read_text().replace(str(labelled_run), "RUN")
        assert (out / name).read_text().replace(uri, "RUN") == local, name


def test_drivegen_run_ends_with_the_report(labelled_run, tmp_path, capsys):
    """``drivegen run``'s last step (generator.commands.run.write_report) writes OUT/report and prints its path;
    a second build replaces it (an earlier report is drivegen's own), a user's folder is refused."""
    from generator.commands.run import write_report
    from generator.runfolder import RunReader
    from schemas.errors import RunFolderError

    run = tmp_path / "run"
    shutil.copytree(labelled_run, run)
    line = write_report(RunReader(str(run)).store)
    assert line.startswith("report: ") and line.endswith(str(run / "report" / "index.html"))
    assert (run / "report" / "index.html").is_file() and RunReader(str(run)).check() == []
    assert write_report(RunReader(str(run)).store).startswith("report: ")
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match="not a drivegen report"):
        build_report(str(run), str(user), CFG)
    assert (user / "notes.txt").read_text() == "mine"


def test_validation_metrics_appear_once_validate_has_run(labelled_run, tmp_path):
    """``drivegen validate RUN`` refreshes the run's report (``RUN/report``, with the settings it was built
    with): its Validation section then shows what validate wrote (validate/report.json), from a real validation
    of the run against its generated logs; before that it says how to get it."""
    from generator.cli import main as cli

    run = tmp_path / "run"
    shutil.copytree(labelled_run, run)
    build_report(str(run), None, CFG)
    assert 'id="no-validation"' in (run / "report" / "index.html").read_text()
    assert cli(["validate", str(run), "--no-tracking", "--no-label-agreement", "--quiet"]) == 0
    r = json.loads((run / "validate" / "report.json").read_text())
    html = (run / "report" / "index.html").read_text()
    assert json.loads((run / "report" / "report.json").read_text())["config"] == CFG.model_dump(mode="json")
    assert 'id="no-validation"' not in html
    det = re.search(r'data-section="detection">(.*?)</table>', html, re.S).group(1)
    shown = dict(re.findall(r'<tr><td>([^<]+)</td><td class="num">([^<]+)</td></tr>', det))
    for k in ("mAP", "NDS"):
        assert float(shown[k]) == pytest.approx(r["detection"][k], abs=1e-4)


def test_markup_in_what_the_report_shows_is_escaped(labelled_run, tmp_path):
    """The run's path is the user's (any name a filesystem takes): the report's pages show it as text. A run folder
    named with an HTML element and a script-running attribute, copied from a real run, gives pages where that
    element is escaped text, never markup."""
    hostile = "run<img src=x onerror=alert(1)>"
    run = tmp_path / hostile
    shutil.copytree(labelled_run, run, symlinks=True)
    out = tmp_path / "site"
    res = build_report(str(run), str(out), ReportConfig(samples_per_family=1, rows_per_page=1, seed=3,
                                                        max_scenes=1))
    index = Path(res.index).read_text()
    assert html.escape(hostile, quote=False) in index or html.escape(hostile) in index, index[:2000]
    for page in out.glob("*.html"):
        assert "<img src=x" not in page.read_text(), page.name
