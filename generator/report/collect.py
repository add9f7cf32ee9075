"""What the report shows, gathered from a run folder scene by scene (``RunReader``; any filesystem): counts,
fixed-bin histograms, visibility drops, and the seeded per-family sample of QA rows. Each scene's figures are a
part (``report_part``: built on the cluster at the end of a run, ``generator.runfolder.parts``) that ``collect``
merges: memory is bounded by one scene's part plus the sample, whatever the run's size."""
from __future__ import annotations

import heapq
import zlib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.runfolder import RunReader
from generator.runfolder.parts import REPORT_PART, read_parts, report_spec, stream_parts
from schemas.config import ReportConfig

# fixed bins, so histograms accumulate scene by scene: (column, label, bin edges)
HISTOGRAMS = {
    "distance": ("distance_m", "object distance to the ego (m)", np.linspace(0, 100, 41)),
    "bearing": ("bearing_deg", "object bearing (deg, 0 = ahead, CCW positive)", np.linspace(-180, 180, 37)),
    "speed": ("speed_mps", "object speed (m/s)", np.linspace(0, 30, 31)),
    "horizon": ("horizon_s", "QA horizon (s, ego-spatiotemporal questions)", np.linspace(0, 5, 21)),
}


@dataclass
class Histogram:
    label: str
    edges: np.ndarray
    counts: np.ndarray
    below: int = 0  # values outside the bins (shown as a note, not dropped silently)
    above: int = 0

    def add(self, values: np.ndarray) -> None:
        v = values[np.isfinite(values)]
        self.counts += np.histogram(v, self.edges)[0]
        self.below += int((v < self.edges[0]).sum())
        self.above += int((v > self.edges[-1]).sum())

    @property
    def total(self) -> int:
        return int(self.counts.sum()) + self.below + self.above


@dataclass
class RunStats:
    scenes: list[str]
    qa_total: int = 0
    by_family: Counter = field(default_factory=Counter)
    by_type: Counter = field(default_factory=Counter)  # (family, question_type) -> rows
    by_split: Counter = field(default_factory=Counter)
    drops: Counter = field(default_factory=Counter)  # visibility drop reason -> projections
    visible: int = 0
    frames: int = 0
    objects: int = 0
    histograms: dict[str, Histogram] = field(default_factory=dict)
    sample: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # family -> [(scene, row in scene QA)]


def _numpy(col) -> np.ndarray:
    return pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False)


def sample_rng(seed: int, scene_id: str) -> np.random.Generator:
    """The sampling keys' generator of one scene: seeded by the report's seed and the scene's id, so a scene's keys
    do not depend on which scenes came before it (its part is built on any worker, in any order)."""
    return np.random.default_rng([int(seed), zlib.crc32(scene_id.encode("utf-8"))])


def report_part(part, cfg, seed: int = 0, samples_per_family: int = 0) -> dict:
    """One scene's part of the report's figures (``generator.runfolder.parts``; JSON-able): its counts, histogram
    bins, drops, and per family the rows with the ``samples_per_family`` smallest sampling keys."""
    reader, sid = part.reader, part.scene_id
    out: dict = {"qa": 0, "by_type": [], "by_split": [], "hist": {}, "drops": [], "visible": 0, "frames": 0,
                 "objects": 0, "sample": {}}

    def hist(name: str, values: np.ndarray) -> None:
        h = Histogram("", HISTOGRAMS[name][2], np.zeros(len(HISTOGRAMS[name][2]) - 1, np.int64))
        h.add(values)
        out["hist"][name] = [h.counts.tolist(), h.below, h.above]

    qa = reader.read_scene("qa", sid, columns=["family", "question_type", "split", "horizon_s"])
    if qa is not None and qa.num_rows:
        out["qa"] = qa.num_rows
        fam = qa.column("family").to_numpy(zero_copy_only=False).astype(str)
        out["by_type"] = [[r["family"], r["question_type"], r["count_all"]]
                          for r in qa.group_by(["family", "question_type"]).aggregate([([], "count_all")]).to_pylist()]
        out["by_split"] = [[r["values"], r["counts"]] for r in pc.value_counts(qa.column("split").fill_null("(none)"))
                           .to_pylist()]
        hist("horizon", _numpy(qa.column("horizon_s")))
        keys = sample_rng(seed, sid).random(qa.num_rows)
        for f in np.unique(fam):
            rows = np.flatnonzero(fam == f)
            best = rows[np.argsort(keys[rows], kind="stable")[:samples_per_family]]
            out["sample"][str(f)] = [[float(keys[r]), int(r)] for r in best]
    att = reader.read_scene("attributes", sid, columns=["distance_m", "bearing_deg", "speed_mps"])
    if att is not None:
        for name in ("distance", "bearing", "speed"):
            hist(name, _numpy(att.column(HISTOGRAMS[name][0])))
    proj = reader.read_scene("projections", sid, columns=["visible", "drop_reason"])
    if proj is not None and proj.num_rows:
        out["visible"] = int(pc.sum(proj.column("visible")).as_py() or 0)
        out["drops"] = [[r["values"], int(r["counts"])] for r in pc.value_counts(pc.drop_null(proj.column("drop_reason")))
                        .to_pylist()]
    frames = reader.read_scene("frames", sid, columns=["frame_index"])
    out["frames"] = 0 if frames is None else frames.num_rows
    objects = reader.read_scene("objects", sid, columns=["track_id"])
    out["objects"] = 0 if objects is None else objects.num_rows
    return out


def collect(reader: RunReader, cfg: ReportConfig, parts: bool = False) -> RunStats:
    """Counts, histograms, drops and the per-family sample (``cfg.seed``; every row of a family equally likely;
    the same run and seed give the same sample) of the finished scenes, merged from each scene's part
    (``report_part``): the parts the end of the run built (``parts``), or built here one scene at a time."""
    stats = RunStats(scenes=reader.scene_ids())
    stats.histograms = {k: Histogram(label, edges, np.zeros(len(edges) - 1, np.int64))
                        for k, (_, label, edges) in HISTOGRAMS.items()}
    heaps: dict[str, list[tuple[float, str, int]]] = {}  # family -> max-heap (by -key) of the k smallest keys
    k = cfg.samples_per_family
    spec = report_spec(cfg)
    found = read_parts(reader.store, REPORT_PART, stats.scenes) if parts else \
        stream_parts(reader, spec, reader.config(), stats.scenes)
    for sid, p in found:
        stats.qa_total += p["qa"]
        for f, t, n in p["by_type"]:
            stats.by_type[(f, t)] += n
            stats.by_family[f] += n
        for sp, n in p["by_split"]:
            stats.by_split[sp] += n
        for name, (counts, below, above) in p["hist"].items():
            h = stats.histograms[name]
            h.counts += np.asarray(counts, np.int64)
            h.below += below
            h.above += above
        for reason, n in p["drops"]:
            stats.drops[reason] += n
        stats.visible += p["visible"]
        stats.frames += p["frames"]
        stats.objects += p["objects"]
        for f, best in p["sample"].items():
            h = heaps.setdefault(f, [])
            for key, r in best:
                item = (-float(key), sid, int(r))
                if len(h) < k:
                    heapq.heappush(h, item)
                elif item > h[0]:
                    heapq.heapreplace(h, item)
    stats.sample = {f: sorted((sid, r) for _, sid, r in h) for f, h in sorted(heaps.items())}
    return stats


def scene_tracks(reader: RunReader, scene_id: str):
    """(ego xy (F, 2) in the city frame, {track_id: (class, xy (n, 2))}) of a scene, for its bird's-eye plot."""
    frames = reader.read_scene("frames", scene_id, columns=["frame_index", "city_SE3_ego"])
    ego = np.zeros((0, 2))
    if frames is not None and frames.num_rows:
        order = np.argsort(frames.column("frame_index").to_numpy())
        m = np.stack(frames.column("city_SE3_ego").to_numpy(zero_copy_only=False))[order]
        ego = np.asarray(m, np.float64).reshape(-1, 16)[:, [3, 7]]  # translation of the row-major 4x4
    tracks: dict[int, tuple[str, np.ndarray]] = {}
    obj = reader.read_scene("objects", scene_id, columns=["frame_index", "track_id", "class_name", "center_global_m"])
    if obj is not None and obj.num_rows:
        obj = obj.sort_by([("track_id", "ascending"), ("frame_index", "ascending")])
        tid = obj.column("track_id").to_numpy()
        cls = obj.column("class_name").to_numpy(zero_copy_only=False)
        xyz = np.asarray(np.stack(obj.column("center_global_m").to_numpy(zero_copy_only=False)), np.float64)
        for t in np.unique(tid[tid >= 0]):
            sel = tid == t
            tracks[int(t)] = (str(cls[sel][0]), xyz[sel, :2])
    return ego, tracks
