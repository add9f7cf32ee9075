"""The run summary (``OUT/summary.json``) as a typed object: ``RunSummary``.

``generator.pipeline.driver.summarize`` makes it from the run's summary rows and manifests; the end of a
run (``generator.pipeline.exports.finalize_run``) adds the dataset card's entry, the camera-only figures and
one typed entry per paper family (``schemas.families.PaperFamily.summary``: an object with ``to_json()`` and
``lines()``); ``lines()`` is what ``drivegen run`` prints. ``to_json()`` writes the file, ``from_json()`` reads
it back (``generator.runfolder.RunReader.summary``): a family entry through its family's
``summary_entry``, or kept as it is (``FamilyEntry``) when that family is not installed here. Keys of the file
this version does not know are kept in ``extra`` and written back unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from schemas.family_contract import FamilyEntry, SummaryEntry  # a family's entry: the family contract's types


@dataclass
class SceneCounts:
    total: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0


@dataclass
class QACounts:
    total: int = 0
    by_family: dict[str, int] = field(default_factory=dict)


@dataclass
class Throughput:
    qa_per_s: float = 0.0
    frames_per_s: float = 0.0
    scenes_per_s: float = 0.0


@dataclass
class CardEntry:
    path: str
    splits: dict[str, int]  # QA rows per split


@dataclass
class CameraOnly:
    clips: int  # videos with a clip
    images: int  # frames extracted


# the phases of ``drivegen run`` timed in ``RunSummary.timings``, in their order, with their printed names
TIMING_PHASES = {"logs": "logs", "ray_start": "Ray start", "pipeline": "pipeline", "exports": "exports",
                 "report": "report"}


@dataclass
class RunSummary:
    """What a run did (``this_run``: the scenes streamed by this call) and what its run folder holds (the
    rest: every finished scene of the run's scene list, skipped ones included)."""

    out: str
    executor: str
    scenes: SceneCounts
    frames: int = 0
    objects: int = 0
    qa: QACounts = field(default_factory=QACounts)
    objects_dropped: dict[str, int] = field(default_factory=dict)  # projections dropped per reason
    failed_frames: dict[str, int] = field(default_factory=dict)  # frames skipped per stage
    # frames outside their logs' annotations under the 'labels' detection backend: objects unknown there, only the
    # questions about the ego asked (no failure; issues/ lists them, reason 'unlabelled')
    unlabelled_frames: int = 0
    this_run: dict[str, Any] = field(default_factory=dict)  # the manifests' counts of this call's scenes, summed
    totals: dict[str, Any] = field(default_factory=dict)  # ... of every finished scene of the run's list, summed
    errors: list[dict] = field(default_factory=list)  # rows of OUT/errors/ (schemas.tables.ERRORS)
    wall_s: float = 0.0  # the whole command, from its start to its end (the report included when it writes one)
    throughput: Throughput = field(default_factory=Throughput)  # of the pipeline phase (the scenes streaming)
    # seconds per phase of the command (TIMING_PHASES, in that order; 'other' is the rest of wall_s: imports,
    # config and input checks, the lock, the summary's own reads)
    timings: dict[str, float] = field(default_factory=dict)
    card: CardEntry | None = None
    camera_only: CameraOnly | None = None
    families: dict[str, SummaryEntry] = field(default_factory=dict)  # by paper family name, in family order
    finalize_error: str | None = None  # the card or an export failed (the rows are committed)
    extra: dict[str, Any] = field(default_factory=dict)  # keys of summary.json this version does not know

    @property
    def exit_code(self) -> int:
        return 1 if self.scenes.failed or self.finalize_error else 0

    # ---- summary.json
    def to_json(self) -> dict:
        out: dict = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "extra" or v is None:
                continue
            if f.name == "families":
                if v:
                    out["families"] = {name: e.to_json() for name, e in v.items()}
            elif f.name in ("scenes", "qa", "throughput", "card", "camera_only"):
                out[f.name] = dict(vars(v))
            else:
                out[f.name] = v
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, data: dict) -> "RunSummary":
        from schemas.families import families  # cycle: schemas.families imports schemas.summary

        known = {f.name for f in fields(cls)} - {"extra"}
        registered = families()
        entries: dict[str, SummaryEntry] = {}
        given = data.get("families") or {}
        order = [n for n in registered if n in given] + [n for n in given if n not in registered]
        for name, entry in ((n, given[n]) for n in order):  # in family order (summary.json's keys are sorted)
            fam = registered.get(name)
            entries[name] = fam.summary_entry(entry) if fam is not None else FamilyEntry(name, dict(entry))
        card, cam = data.get("card"), data.get("camera_only")
        return cls(out=data.get("out", ""), executor=data.get("executor", ""),
                   scenes=SceneCounts(**data.get("scenes", {})), frames=data.get("frames", 0),
                   objects=data.get("objects", 0), qa=QACounts(**data.get("qa", {})),
                   objects_dropped=data.get("objects_dropped", {}), failed_frames=data.get("failed_frames", {}),
                   unlabelled_frames=data.get("unlabelled_frames", 0),
                   this_run=data.get("this_run", {}), totals=data.get("totals", {}), errors=data.get("errors", []),
                   wall_s=data.get("wall_s", 0.0), throughput=Throughput(**data.get("throughput", {})),
                   timings=data.get("timings", {}),
                   card=CardEntry(**card) if card else None, camera_only=CameraOnly(**cam) if cam else None,
                   families=entries, finalize_error=data.get("finalize_error"),
                   extra={k: v for k, v in data.items() if k not in known})

    def timing_text(self) -> str:
        """' (logs 3.1 s, Ray start 4.0 s, ..., other 0.9 s)' from ``timings``; '' when there are none."""
        if not self.timings:
            return ""
        order = [k for k in TIMING_PHASES if k in self.timings] + [k for k in self.timings if k not in TIMING_PHASES]
        parts = [(TIMING_PHASES.get(k, k), self.timings[k]) for k in order]  # summary.json's keys are sorted
        other = self.wall_s - sum(self.timings.values())
        if other >= 0.05:
            parts.append(("other", other))
        return " (" + ", ".join(f"{name} {v:.1f} s" for name, v in parts) + ")"

    # ---- what drivegen run prints
    def lines(self, max_errors: int = 20) -> list[str]:
        sc = self.scenes
        qa = f"QA: {self.qa.total} " + " ".join(f"{k}={v}" for k, v in sorted(self.qa.by_family.items()))
        lines = [f"scenes: {sc.ok} ok, {sc.failed} failed, {sc.skipped} skipped (of {sc.total})"]
        if self.camera_only is not None:  # videos: no objects or projections
            lines.append(f"video frames: {self.frames}  {qa}")
        else:
            dropped = ", ".join(f"{k}={v}" for k, v in sorted(self.objects_dropped.items()))
            lines += [f"frames: {self.frames}  objects: {self.objects}  {qa}",
                      "projections dropped (object x camera): " + (dropped or "none")]
        if self.unlabelled_frames:
            lines.append(f"frames outside their logs' annotations: {self.unlabelled_frames} (detection.backend labels "
                         "knows no objects there: only the questions about the ego are asked; issues/, reason "
                         "'unlabelled')")
        if self.failed_frames:
            lines.append("frames skipped by stage (finished scenes): "
                         + ", ".join(f"{k}={v}" for k, v in sorted(self.failed_frames.items())))
        lines.append(f"wall time: {self.wall_s:.1f} s{self.timing_text()}  throughput: "
                     f"{self.throughput.qa_per_s:.1f} QA/s, {self.throughput.frames_per_s:.1f} frames/s")
        if self.camera_only is not None:
            lines.append(f"videos with a clip: {self.camera_only.clips} of {sc.ok + sc.skipped}  "
                         f"frames extracted: {self.camera_only.images}")
        if self.card is not None:
            lines.append(f"dataset card: {self.card.path} (QA per split: "
                         + ", ".join(f"{k}={v}" for k, v in self.card.splits.items()) + ")")
        for entry in self.families.values():
            lines += entry.lines()
        if self.finalize_error:
            lines.append(f"error: finalize (card, exports) failed: {self.finalize_error}")
        for e in self.errors[:max_errors]:
            lines.append(f"error: scene={e['scene_id']} stage={e['stage']} file={e['file']}: {e['message']}")
        if len(self.errors) > max_errors:
            lines.append(f"... and {len(self.errors) - max_errors} more errors (OUT/errors/, summary.json)")
        return lines


__all__ = ["TIMING_PHASES", "RunSummary", "SummaryEntry", "FamilyEntry", "SceneCounts", "QACounts", "Throughput",
           "CardEntry", "CameraOnly"]
