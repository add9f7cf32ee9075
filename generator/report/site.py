"""``build_report(run, out)``: the run folder as a static HTML site (``index.html``, ``scenes.html``,
``samples-<family>-<k>.html``, ``style.css``, ``img/``): relative links only, no script or style from
anywhere else, so it opens from ``file://`` or any static host.

Every page has a bounded size (``ReportConfig``): the sample browser shows ``samples_per_family`` QA rows per
family, drawn with ``seed``, ``rows_per_page`` per page; tables stop at ``max_table_rows``. Each page carries
a small inline script that records, once the page has loaded, which of its images failed to load
(``<body data-broken-images>``), which the browser test reads.
"""
from __future__ import annotations

import json
import logging
import shutil
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from jinja2 import Environment, DictLoader, select_autoescape

from generator.report import figures
from generator.report.collect import RunStats, collect, scene_tracks
from generator.report.images import ReportImages
from generator.runfolder import RunReader, RunStore
from generator.writers.anonymize import ScenePublisher
from generator.writers.owned import owned_files
from schemas import layout
from schemas.families import families, family_counts
from schemas.config import ReportConfig

log = logging.getLogger("drivegen.report")

MARKER = "report.json"
FORMAT = "drivegen-report"
ROLES = ("context", "current", "future")


@dataclass
class ReportResult:
    index: str  # URI or path of index.html
    pages: int
    images: int
    samples: int
    seconds: float
    missing_images: list[str]

    def line(self) -> str:
        """The line ``drivegen report`` and ``drivegen run`` print."""
        missing = f", {len(self.missing_images)} source image(s) unreadable" if self.missing_images else ""
        return (f"report: {self.pages} pages, {self.images} images, {self.samples} sampled QA rows, "
                f"built in {self.seconds:.1f} s{missing}: {self.index}")


def default_out(reader: RunReader) -> str:
    """``RUN/report`` for a local run folder; ``./<run name>-report`` (local) for a remote one, so the report
    opens from ``file://``."""
    if reader.store.is_local:
        return reader.store.full(layout.REPORT_DIR)
    name = reader.uri.rstrip("/").rsplit("/", 1)[-1] or "run"
    return str(Path.cwd() / f"{name}-report")


def build_report(run: str | RunReader, out: str | None = None, cfg: ReportConfig | None = None,
                 parts: bool = False) -> ReportResult:
    """Write the report of ``run`` (any filesystem ``RunReader`` opens) to ``out`` (default ``default_out``).
    ``cfg`` defaults to the run's ``report`` config. An existing ``out`` that is not a drivegen report is
    refused (RunFolderError); an earlier report there is replaced (its listed files only). ``parts``: its figures
    merge the per-scene parts the end of the run built (``generator.report.collect``)."""
    t0 = time.perf_counter()
    reader = run if isinstance(run, RunReader) else RunReader(run)
    run_cfg = reader.config()
    cfg = cfg or run_cfg.report
    out = out or default_out(reader)
    target = RunStore(out)
    old = owned_files(target, "", MARKER, FORMAT, what="a drivegen report")
    built = _staging(target)
    try:
        source = reader.source() or {}
        imgs = ReportImages(built, cfg.jpeg_quality, source.get("dataroot") or source.get("root"),
                            publisher=_publishers(reader, run_cfg.anonymize))
        site = _Site(reader, cfg, imgs, built, parts)
        site.write()
        files = sorted(p.relative_to(built).as_posix() for p in built.rglob("*") if p.is_file())
        (built / MARKER).write_text(json.dumps({"format": FORMAT, "run": reader.uri, "files": files,
                                                 "config": cfg.model_dump(mode="json")}, indent=1))
        for rel in files:
            target.commit_file(built / rel, rel, synced=True)
        target.commit_file(built / MARKER, MARKER, synced=True)
        for rel in sorted(set(old) - set(files) - {MARKER}):
            target.delete(rel)
    finally:
        shutil.rmtree(built, ignore_errors=True)
    return ReportResult(target.uri_of("index.html"), site.pages, len(imgs.written) + site.figures,
                        site.samples, time.perf_counter() - t0, imgs.missing)


def _publishers(reader: RunReader, anon):
    """scene id -> its ScenePublisher (the scene's frames and objects read once, on first use)."""
    cache: dict[str, object] = {}

    def get(scene_id: str):
        if scene_id not in cache:
            frames = reader.read_table("frames", [scene_id])
            cache[scene_id] = None if frames is None else ScenePublisher.from_tables(
                scene_id, frames, reader.read_table("objects", [scene_id]), anon)
        return cache[scene_id]

    return get


def _staging(target: RunStore) -> Path:
    """A local folder to build the report in: beside ``out`` when it is local (the commit is a rename)."""
    if not target.is_local:
        return Path(tempfile.mkdtemp(prefix="drivegen-report-"))
    root = Path(target.base)
    d = root.parent / f".{root.name}.{uuid.uuid4().hex}.tmp"
    d.mkdir(parents=True)
    return d


class _Site:
    def __init__(self, reader: RunReader, cfg: ReportConfig, imgs: ReportImages, root: Path, parts: bool = False):
        self.reader, self.cfg, self.imgs, self.root, self.parts = reader, cfg, imgs, root, parts
        self.run_cfg = reader.config()
        self.env = Environment(loader=DictLoader(TEMPLATES), autoescape=select_autoescape(default=True),
                               trim_blocks=True, lstrip_blocks=True)
        self.pages = self.figures = self.samples = 0

    def _page(self, name: str, template: str, **ctx) -> None:
        html = self.env.get_template(template).render(nav=self.nav, **ctx)
        (self.root / name).write_text(html, encoding="utf-8")
        self.pages += 1

    def _figure(self, rgb: np.ndarray, name: str) -> str:
        self.figures += 1
        return self.imgs.report_image(rgb, name, kind="figure")

    def write(self) -> None:
        r = self.reader
        stats = collect(r, self.cfg, self.parts)
        page_names = {f: [f"samples-{f}-{k + 1}.html" for k in range(-(-len(rows) // self.cfg.rows_per_page))]
                      for f, rows in stats.sample.items()}
        self.nav = [("index.html", "Summary"), ("scenes.html", "Videos" if r.camera_only else "Scenes")] + \
                   [(names[0], f) for f, names in page_names.items() if names]
        (self.root / "style.css").write_text(STYLE, encoding="utf-8")
        self._index(stats, page_names)
        if r.camera_only:
            self._videos(stats)
        else:
            self._scenes(stats)
        cards = self._cards([row for rows in stats.sample.values() for row in rows])
        for fam, rows in stats.sample.items():
            self._samples(fam, [cards[k] for k in rows], page_names[fam], stats.by_family[fam])

    # ---- index.html
    def _index(self, stats: RunStats, page_names: dict[str, list[str]]) -> None:
        r = self.reader
        hist = []
        for key, h in stats.histograms.items():
            if h.total:
                hist.append({"name": key, "total": h.total,
                             "src": self._figure(figures.histogram(h.edges, h.counts, h.label, h.below, h.above),
                                                 f"hist-{key}")})
        drops = sorted(stats.drops.items(), key=lambda kv: -kv[1])
        drops_src = self._figure(figures.bars([k for k, _ in drops], [v for _, v in drops], "projections dropped"),
                                 "visibility-drops") if drops else None
        types = sorted(stats.by_type.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1]))
        errors = r.errors()
        validation = r.store.read_json(layout.VALIDATE_REPORT) if r.store.exists(layout.VALIDATE_REPORT) else None
        summary = r.summary()
        self._page("index.html", "index.html", title="drivegen report", run=r.uri, stats=stats,
                   planned=len(r.planned_scenes()) or len(stats.scenes), summary=summary,
                   failed=sorted({e["scene_id"] or "(run)" for e in errors}),
                   families=sorted(stats.by_family.items(), key=lambda kv: -kv[1]),
                   types=types[: self.cfg.max_table_rows], types_more=max(0, len(types) - self.cfg.max_table_rows),
                   splits=sorted(stats.by_split.items()), hist=hist, drops=drops, drops_src=drops_src,
                   errors=errors[: self.cfg.max_table_rows], errors_more=max(0, len(errors) - self.cfg.max_table_rows),
                   validation=_validation(validation) if validation else None, wall_time=_wall_time(summary),
                   config=(r.config_text() or b"(no config.yaml: defaults)").decode("utf-8", "replace"),
                   page_names=page_names, cfg=self.cfg, source=json.dumps(r.source() or {}, indent=1),
                   camera_only=r.camera_only)

    # ---- scenes.html
    def _scenes(self, stats: RunStats) -> None:
        scenes = []
        for sid in stats.scenes[: self.cfg.max_scenes]:
            ego, tracks = scene_tracks(self.reader, sid)
            n_cls = defaultdict(int)
            for cls, _ in tracks.values():
                n_cls[cls] += 1
            scenes.append({"id": sid, "tracks": len(tracks), "frames": len(ego),
                           "classes": ", ".join(f"{c} {n}" for c, n in sorted(n_cls.items())),
                           "src": self._figure(figures.birds_eye(ego, tracks, sid), f"bev-{layout.safe_name(sid)}")})
        self._page("scenes.html", "scenes.html", title="Scenes", scenes=scenes,
                   more=max(0, len(stats.scenes) - self.cfg.max_scenes))

    # ---- scenes.html of a camera-only run: no poses for a bird's-eye view; a table per video instead
    def _videos(self, stats: RunStats) -> None:
        """Per video: the core's figures, then each registered family's cells (``PaperFamily.report_video_cells``)."""
        rows, columns = [], []
        for sid in stats.scenes[: self.cfg.max_scenes]:
            c = (self.reader.manifest(sid) or {}).get("counts", {})
            cells: dict[str, str] = {}
            for fam in families().values():
                cells.update(fam.report_video_cells(self.reader, sid, family_counts(c, fam.name)))
            columns += [k for k in cells if k not in columns]
            rows.append({"id": sid, "frames": c.get("frames", 0), "pedestrians": c.get("pedestrians", 0),
                         "clip": bool(c.get("clips")), "cells": cells,
                         "images": c.get("images", 0), "qa": c.get("qa", 0)})
        self._page("scenes.html", "videos.html", title="Videos", videos=rows, columns=columns,
                   more=max(0, len(stats.scenes) - self.cfg.max_scenes))

    # ---- samples-<family>-<k>.html
    def _cards(self, rows: list[tuple[str, int]]) -> dict[tuple[str, int], dict]:
        """The card of each sampled (scene, QA row) of every family: each scene's QA rows and labels read once
        (they were read once per family and scene)."""
        by_scene: dict[str, list[int]] = defaultdict(list)
        for sid, i in rows:
            by_scene[sid].append(i)
        cards: dict[tuple[str, int], dict] = {}
        for sid, idx in by_scene.items():
            qa = self.reader.read_scene("qa", sid)
            labels = self.reader.read_scene("labels", sid)
            kf_all = qa.column("keyframe_index").to_numpy()
            fam_all = qa.column("family").to_numpy(zero_copy_only=False).astype(str)
            for i in idx:
                row = qa.slice(i, 1).to_pylist()[0]
                others = np.flatnonzero(kf_all == row["keyframe_index"])
                others = _across_families(others[others != i], fam_all)
                cards[(sid, i)] = self._card(row, qa.take(pa.array(others[:8])).to_pylist() if len(others) else [],
                                             len(others), labels)
        return cards

    def _samples(self, family: str, ordered: list[dict], names: list[str], family_total: int) -> None:
        per = self.cfg.rows_per_page
        self.samples += len(ordered)
        for k, name in enumerate(names):
            self._page(name, "samples.html", title=f"{family}: samples {k * per + 1}-{min(len(ordered), (k + 1) * per)}",
                       family=family, cards=ordered[k * per:(k + 1) * per], page=k + 1, pages=names,
                       shown=len(ordered), total=family_total, seed=self.cfg.seed)

    def _card(self, row: dict, others: list[dict], n_others: int, labels: pa.Table | None) -> dict:
        gr = row["grounding"] or []
        imgs = {role: [] for role in ROLES}
        seen = set()
        for g in sorted(gr, key=lambda g: (ROLES.index(g["role"]) if g["role"] in ROLES else 9, g["frame_index"],
                                           g["camera"])):
            key = (g["role"], g["frame_index"], g["camera"])
            if key in seen or not g["image_path"]:
                continue
            seen.add(key)
            width = self.cfg.image_width_px if g["role"] == "current" else self.cfg.thumb_width_px
            src = self.imgs.marked(g["image_path"], gr, g["frame_index"], g["camera"], width, row["scene_id"])
            imgs.setdefault(g["role"], []).append({"src": src, "frame": g["frame_index"], "camera": g["camera"],
                                                   "path": g["image_path"],
                                                   "tags": json.dumps(self.imgs.tags.get(src, []))})
        ego, agents = [], []
        if labels is not None and labels.num_rows:
            at = labels.filter(pc.equal(labels.column("frame_index"), row["keyframe_index"]))
            tracks = set(row["track_ids"] or [])
            for lr in at.to_pylist():
                if lr["subject"] == "ego":
                    ego.append(lr)
                elif lr["track_id"] in tracks:
                    agents.append(lr)
        no_image = None
        if not any(imgs.values()):
            no_image = ("This row names no image: its grounding has no image path. In a camera-only run that "
                        "is a video whose clip was not there when the run was made (its issues row 'no_clip'), "
                        "or a run with pie.extract_frames: false." if gr else
                        "This row has no grounding: it asks about the ego alone, and no image is tied to it.")
        notes = [n for fam in families().values() if row["family"] in fam.qa_names
                 for n in [fam.report_sample_note(row, self.run_cfg)] if n]
        return {"qa": row, "images": imgs, "others": others, "n_others": n_others, "ego": ego, "agents": agents,
                "no_image": no_image, "notes": notes}


def _across_families(rows: np.ndarray, family: np.ndarray) -> np.ndarray:
    """``rows`` (in QA order) reordered so that each family's first row comes first, then each family's second,
    ...: the first few show every family asked at a keyframe, not the first family's many rows."""
    if not len(rows):
        return rows
    _, first, inv = np.unique(family[rows], return_index=True, return_inverse=True)
    counts = np.bincount(inv)
    rank = np.empty(len(rows), np.int64)  # a row's place among its family's rows
    rank[np.argsort(inv, kind="stable")] = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    return rows[np.lexsort((first[inv], rank))]


def _wall_time(summary) -> tuple[str, str] | None:
    """(label, text) of the run's wall time, as ``drivegen run`` prints it with its phases. The report that ``run``
    writes is built before its own phase is timed: it then gives the time up to the report, and says so (the
    command's figure adds the report's build time, which ``summary.json`` records after)."""
    if summary is None or not summary.wall_s:
        return None
    text = f"{summary.wall_s:.1f} s{summary.timing_text()}"
    if "report" in summary.timings:
        return "run wall time", text
    return "run wall time up to this report", text + "; drivegen run's wall time adds the report's build"


def _validation(v: dict) -> dict:
    """The scalar metrics of ``validate/report.json`` per section (detection, tracking, label agreement), and its gates."""
    out = {}
    for sec in ("detection", "tracking", "label_agreement"):
        d = v.get(sec) or {}
        out[sec] = [(k, round(x, 4) if isinstance(x, float) else x) for k, x in d.items()
                    if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return {"sections": out, "gates": v.get("gates") or {}, "passed": v.get("passed"),
            "scenes": len((v.get("scenes") or {}).get("evaluated") or [])}


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:10px 20px}header a{color:#cfd8dc;margin-right:14px;text-decoration:none}
header a:hover{color:#fff}header b{margin-right:20px}
main{padding:12px 20px;max-width:1400px}h2{border-bottom:1px solid #ddd;padding-bottom:3px;margin-top:28px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eceff1}td.count,td.num{text-align:right;font-variant-numeric:tabular-nums}
.grid{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}.grid figure{margin:0;background:#fff;border:1px solid #ddd;padding:6px;max-width:460px}
figcaption{font-size:12px;color:#555}pre{background:#fff;border:1px solid #ddd;padding:8px;max-height:420px;overflow:auto;font-size:12px}
.card{background:#fff;border:1px solid #ccc;margin:14px 0;padding:10px;display:flex;gap:14px;flex-wrap:wrap}
.card .imgs{flex:0 0 auto;max-width:660px}.card .text{flex:1 1 380px;min-width:320px}
.card figure{margin:0 0 6px 0}.card img{max-width:100%;height:auto}
.thumbs{display:flex;flex-wrap:wrap;gap:4px}.thumbs figure{margin:0}.q{font-weight:600}.a{color:#1b5e20}
.tag{display:inline-block;background:#eceff1;border-radius:3px;padding:0 5px;margin-right:4px;font-size:12px}
.pager a,.pager span{margin-right:8px}.warn{color:#b71c1c}.note,.no-image{color:#455a64;font-size:13px}
"""

_BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="style.css"></head>
<body data-page="{% block page %}{% endblock %}">
<header><b>drivegen report</b>{% for href, label in nav %}<a href="{{ href }}">{{ label }}</a>{% endfor %}</header>
<main>{% block main %}{% endblock %}</main>
<script>
// which images failed to load (naturalWidth 0 once the page has loaded): read by tests/report/test_report.py
window.addEventListener("load", function () {
  var bad = [];
  for (var i = 0; i < document.images.length; i++) {
    var im = document.images[i];
    if (!im.complete || im.naturalWidth === 0) bad.push(im.getAttribute("src"));
  }
  document.body.setAttribute("data-images", String(document.images.length));
  document.body.setAttribute("data-broken-images", JSON.stringify(bad));
});
</script>
</body></html>
"""

_INDEX = """{% extends "base.html" %}{% block page %}index{% endblock %}{% block main %}
<h1>Run {{ run }}</h1>
<table id="summary">
<tr><th>scenes finished</th><td class="num" id="scenes-finished">{{ stats.scenes|length }}</td></tr>
<tr><th>scenes failed</th><td class="num" id="scenes-failed">{{ failed|length }}</td></tr>
<tr><th>scenes planned</th><td class="num">{{ planned }}</td></tr>
{% if camera_only %}<tr><th>video frames</th><td class="num" id="frames">{{ summary.frames if summary else 0 }}</td></tr>
<tr><th>source</th><td>camera-only (no 3D: see Videos)</td></tr>
<tr><th>QA rows</th><td class="num" id="qa-total">{{ stats.qa_total }}</td></tr>
{% else %}<tr><th>frames</th><td class="num" id="frames">{{ stats.frames }}</td></tr>
<tr><th>objects (tracked detections)</th><td class="num" id="objects">{{ stats.objects }}</td></tr>
<tr><th>QA rows</th><td class="num" id="qa-total">{{ stats.qa_total }}</td></tr>
<tr><th>projections visible / dropped</th><td class="num">{{ stats.visible }} / {{ stats.drops.values()|sum }}</td></tr>{% endif %}
{% if wall_time %}<tr><th>{{ wall_time[0] }}</th><td id="wall-time">{{ wall_time[1] }}</td></tr>{% endif %}
</table>
<h2>QA per family</h2>
<table id="qa-by-family"><tr><th>family</th><th>rows</th><th>samples</th></tr>
{% for fam, n in families %}<tr data-family="{{ fam }}"><td>{{ fam }}</td><td class="count">{{ n }}</td>
<td>{% if page_names.get(fam) %}<a href="{{ page_names[fam][0] }}">browse {{ [cfg.samples_per_family, n]|min }}</a>{% endif %}</td></tr>
{% endfor %}</table>
<h3>per split</h3>
<table id="qa-by-split"><tr><th>split</th><th>rows</th></tr>
{% for s, n in splits %}<tr data-split="{{ s }}"><td>{{ s }}</td><td class="count">{{ n }}</td></tr>{% endfor %}</table>
<h2>QA per question type</h2>
<table id="qa-by-type"><tr><th>family</th><th>question type</th><th>rows</th></tr>
{% for (fam, qt), n in types %}<tr data-family="{{ fam }}" data-type="{{ qt }}"><td>{{ fam }}</td><td>{{ qt }}</td><td class="count">{{ n }}</td></tr>
{% endfor %}</table>
{% if types_more %}<p>... and {{ types_more }} more question types (max_table_rows).</p>{% endif %}
<h2>Distributions</h2>
{% if hist %}<div class="grid">{% for h in hist %}<figure><img src="{{ h.src }}" alt="histogram of {{ h.name }}" width="420">
<figcaption>{{ h.name }}: {{ h.total }} values</figcaption></figure>{% endfor %}</div>
{% else %}<p id="no-distributions">{% if camera_only %}None for this camera-only run: the histograms are of 3D attributes (object distance, bearing and speed) and QA horizons, and videos without LiDAR or poses give none of them; the Videos page gives each video's counts.{% else %}No values to plot: no finished scene has attributes or QA rows with a horizon.{% endif %}</p>{% endif %}
{% if not camera_only %}<h2>Visibility drops by reason</h2>
{% if drops %}<div class="grid"><figure><img src="{{ drops_src }}" alt="visibility drops by reason"></figure>
<table id="drops"><tr><th>reason</th><th>projections</th></tr>
{% for k, v in drops %}<tr data-reason="{{ k }}"><td>{{ k }}</td><td class="count">{{ v }}</td></tr>{% endfor %}</table></div>
{% else %}<p>No projection was dropped.</p>{% endif %}
<h2>Validation</h2>
{% if validation %}<p>Scenes evaluated: {{ validation.scenes }}; gates {{ "passed" if validation.passed else "NOT passed" }}.</p>
<div class="grid">{% for sec, kv in validation.sections.items() %}{% if kv %}<table class="validation" data-section="{{ sec }}">
<tr><th colspan="2">{{ sec }}</th></tr>{% for k, v in kv %}<tr><td>{{ k }}</td><td class="num">{{ v }}</td></tr>{% endfor %}</table>
{% endif %}{% endfor %}</div>
{% if validation.gates %}<table><tr><th>gate</th><th>metric</th><th>value</th><th>threshold</th><th>ok</th></tr>
{% for k, g in validation.gates.items() %}<tr><td>{{ k }}</td><td>{{ g.metric }}</td><td>{{ g.value }}</td><td>{{ g.threshold }}</td><td>{{ g.ok }}</td></tr>{% endfor %}</table>{% endif %}
{% else %}<p id="no-validation">Not validated: <code>drivegen validate RUN</code> writes validate/report.json and rebuilds this report with it.</p>{% endif %}{% endif %}
<h2>Errors</h2>
{% if errors %}<table id="errors"><tr><th>scene</th><th>stage</th><th>type</th><th>file</th><th>message</th><th>attempt</th></tr>
{% for e in errors %}<tr><td>{{ e.scene_id }}</td><td>{{ e.stage }}</td><td>{{ e.error_type }}</td><td>{{ e.file or "" }}</td>
<td>{{ e.message }}</td><td class="num">{{ e.attempt }}</td></tr>{% endfor %}</table>
{% if errors_more %}<p>... and {{ errors_more }} more (see errors/).</p>{% endif %}
{% else %}<p id="no-errors">No scene or stage failed.</p>{% endif %}
<h2>Config</h2><pre id="config">{{ config }}</pre>
<h2>Source</h2><pre>{{ source }}</pre>
{% endblock %}"""

_SCENES = """{% extends "base.html" %}{% block page %}scenes{% endblock %}{% block main %}
<h1>Scenes: bird's-eye view</h1><p>Tracks of the run's objects (coloured by class, a dot where a track ends) and the
ego path (black, arrow at the end), city frame.</p>
<div class="grid">{% for s in scenes %}<figure data-scene="{{ s.id }}"><img src="{{ s.src }}" alt="bird's-eye view of {{ s.id }}">
<figcaption>{{ s.id }}: {{ s.frames }} frames, {{ s.tracks }} tracks ({{ s.classes }})</figcaption></figure>{% endfor %}</div>
{% if more %}<p>... and {{ more }} more scenes (max_scenes).</p>{% endif %}
{% endblock %}"""

_SAMPLES = """{% extends "base.html" %}{% block page %}samples{% endblock %}{% block main %}
<h1>{{ family }}</h1>
<p>{{ shown }} of {{ total }} QA rows of this family, drawn at random (seed {{ seed }}), {{ cards|length }} on this page.</p>
{% macro pager() %}<p class="pager">{% for p in pages %}{% if loop.index == page %}<span>[{{ loop.index }}]</span>{% else %}<a href="{{ p }}">{{ loop.index }}</a>{% endif %}{% endfor %}</p>{% endmacro %}
{{ pager() }}
{% for c in cards %}<section class="card" data-qa-id="{{ c.qa.qa_id }}">
<div class="imgs">
{% if c.no_image %}<p class="no-image">{{ c.no_image }}</p>{% endif %}
{% for im in c.images.current %}<figure>{% if im.src %}<img src="{{ im.src }}" alt="{{ im.camera }} frame {{ im.frame }}" data-tags="{{ im.tags }}">{% else %}<p class="warn">image not readable: {{ im.path }}</p>{% endif %}
<figcaption>keyframe {{ im.frame }}, {{ im.camera }}</figcaption></figure>{% endfor %}
{% for role in ("context", "future") %}{% if c.images[role] %}<div>{{ role }} frames</div><div class="thumbs">
{% for im in c.images[role] %}<figure>{% if im.src %}<img src="{{ im.src }}" alt="{{ role }} {{ im.camera }} frame {{ im.frame }}" data-tags="{{ im.tags }}">{% else %}<span class="warn">not readable: {{ im.path }}</span>{% endif %}
<figcaption>{{ im.frame }} {{ im.camera }}</figcaption></figure>{% endfor %}</div>{% endif %}{% endfor %}
</div>
<div class="text">
<div><span class="tag">{{ c.qa.scene_id }}</span><span class="tag">keyframe {{ c.qa.keyframe_index }}</span>
<span class="tag">{{ c.qa.question_type }}</span><span class="tag">{{ c.qa.kind }}</span><span class="tag">{{ c.qa.split }}</span>
{% if c.qa.horizon_s is not none %}<span class="tag">horizon {{ c.qa.horizon_s }} s</span>{% endif %}</div>
<p class="q">{{ c.qa.question }}</p><p class="a">{{ c.qa.answer }}</p>
<p class="value">{% if c.qa.value is not none %}value: {{ "%.4g"|format(c.qa.value) }} {{ c.qa.unit or "" }}{% elif c.qa.unit == "trajectory" %}value: the trajectory in the answer{% else %}value: none (a {{ c.qa.kind or "qualitative" }} answer){% endif %};
{% if c.qa.region_ids %}regions {{ c.qa.region_ids|join(", ") }}; tracks {{ c.qa.track_ids|join(", ") }} ({{ (c.qa.class_names or [])|join(", ") }}){% else %}about the ego (no region){% endif %}; <code>{{ c.qa.qa_id }}</code></p>
{% for n in c.notes %}<p class="note">{{ n }}</p>{% endfor %}
<h4>Behaviour labels at this keyframe</h4>
{% if c.ego or c.agents %}<table class="labels"><tr><th>subject</th><th>maneuver</th><th>speed status</th><th>intent, lateral</th><th>intent, vertical</th></tr>
{% for l in c.ego %}<tr><td>ego</td><td>{{ l.maneuver or "" }}</td><td>{{ l.speed_status or "" }}</td><td></td><td></td></tr>{% endfor %}
{% for l in c.agents %}<tr data-track="{{ l.track_id }}"><td>{{ l.class_name }} track {{ l.track_id }}</td><td>{{ l.maneuver or "" }}</td><td>{{ l.speed_status or "" }}</td>
<td class="intent-lateral">{{ l.intent_lateral or "" }}</td><td class="intent-vertical">{{ l.intent_vertical or "" }}</td></tr>{% endfor %}</table>{% else %}<p>none</p>{% endif %}
{% if c.others %}<h4>Other questions at this keyframe ({{ c.n_others }})</h4><ul>
{% for o in c.others %}<li><span class="tag">{{ o.family }}</span>{{ o.question }} <span class="a">{{ o.answer }}</span></li>{% endfor %}
{% if c.n_others > c.others|length %}<li>... {{ c.n_others - c.others|length }} more</li>{% endif %}</ul>{% endif %}
</div></section>
{% endfor %}
{{ pager() }}
{% endblock %}"""

_VIDEOS = """{% extends "base.html" %}{% block page %}scenes{% endblock %}{% block main %}
<h1>Videos</h1><p>A camera-only run: per video, its frames, pedestrians and clip, what each paper family derived
from it, the frames extracted and its QA rows. A video without its clip has samples and QA from its annotations
only.</p>
<table><tr><th>video</th><th>frames</th><th>pedestrians</th><th>clip</th>{% for c in columns %}<th>{{ c }}</th>{% endfor %}
<th>frames extracted</th><th>QA</th></tr>
{% for v in videos %}<tr data-scene="{{ v.id }}"><td>{{ v.id }}</td><td>{{ v.frames }}</td><td>{{ v.pedestrians }}</td>
<td>{{ "yes" if v.clip else "no" }}</td>{% for c in columns %}<td>{{ v.cells.get(c, "") }}</td>{% endfor %}
<td>{{ v.images }}</td><td>{{ v.qa }}</td></tr>{% endfor %}</table>
{% if more %}<p>... and {{ more }} more videos (max_scenes).</p>{% endif %}
{% endblock %}"""

TEMPLATES = {"base.html": _BASE, "index.html": _INDEX, "scenes.html": _SCENES, "samples.html": _SAMPLES,
             "videos.html": _VIDEOS}
