"""``run_pipeline``: the driver side of a run (embedded Ray, a Ray cluster, or in-process). The caller
(``generator.pipeline.run``) holds the run folder's lock and has written its description.

1. Leftovers of killed writers of this run (half-committed scenes, temporary files, staging) are removed;
   scenes that already have a manifest are skipped (``--resume``).
2. The pending scenes stream through the stages (``generator.pipeline.ray_exec``), each carrying the run
   epoch; the driver only sees one small summary row per scene, adds its counts to the run's sums and drops
   it (``Tally``): what stays in its memory per scene is the scene's id (the plan's list, the set of finished
   ones), so it does not grow with the scenes' content. Progress over finished scenes.
3. Reconciliation: a scene with neither a manifest nor an error row after the stream ended (its block was
   skipped after Ray's retries, or lost with a node) is either recorded as failed, when one of its stages
   was attempted more than ``ray.max_retries`` times (markers in ``_attempts/``), or streamed again in a
   further round (at most ``ray.max_retries`` more). Every scene ends finished or in ``errors/``.
4. ``summary.json``: scenes ok/failed/skipped, frames, objects, QA per family, drops by reason, frames each
   stage skipped, errors, wall time and throughput; the run folder's figures summed from its manifests read one
   at a time.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from tqdm import tqdm

from generator.numerics import numpy_pinned
from generator.pipeline.core import (SceneFinish, SceneWork, Stage, StageEnv, StageError, apply_stage, cached_model,
                                     settle_heap)
from generator.pipeline.metrics import RunMetrics
from generator.runfolder import LockLostError, RunReader, RunStore, remove_leftovers, write_error
from generator.runfolder.commit import count_attempts
from schemas import layout
from schemas.config import PipelineConfig
from schemas.errors import DrivegenError, RunFolderError, StorageError
from schemas.summary import QACounts, RunSummary, SceneCounts, Throughput
from schemas.tables import ERRORS

log = logging.getLogger("drivegen.pipeline")


class Tally:
    """What the driver keeps of the scenes it streamed: ok/failed counts, the sums of the ok scenes' counts
    (``this_run``), the first 'stale' row (another driver took the run over) and the ids of the scenes that
    reported (a scene reported twice, by a retried block, counts once)."""

    def __init__(self) -> None:
        self.ok = self.failed = 0
        self.this_run: dict = {}
        self.stale: dict | None = None
        self.seen: set[str] = set()

    def __contains__(self, scene_id: str) -> bool:
        return scene_id in self.seen

    def add(self, row: dict, info: dict | None = None) -> bool:
        """Count a scene's summary row (``info``: its ``info`` already parsed); False when the scene had already
        reported."""
        if row["scene_id"] in self.seen:
            return False
        self.seen.add(row["scene_id"])
        info = json.loads(row["info"]) if info is None else info
        if row["status"] == "ok":
            self.ok += 1
            _add(self.this_run, info["counts"])
        else:
            self.failed += 1
            if row["status"] == "stale" and self.stale is None:
                self.stale = row
        return True


@dataclass
class RunResult:
    summary: RunSummary
    tally: Tally = field(default_factory=Tally)  # what the driver kept of this run's scenes
    report_line: str | None = None  # the HTML report written at the end: its one-line description
    report_error: str | None = None  # ... or why it could not be written

    @property
    def exit_code(self) -> int:
        return max(self.summary.exit_code, int(self.report_error is not None))


# ------------------------------------------------------------------------------------------ the run
class _Progress:
    """The progress bar over finished scenes: ok/failed and each stage's mean seconds per scene so far."""

    def __init__(self, total: int, enabled: bool, metrics=None):
        self.bar = None
        if enabled and total:
            self.bar = tqdm(total=total, unit="scene", desc="scenes", file=sys.stderr, dynamic_ncols=True)
        self.ok = self.failed = 0
        self.metrics = metrics  # generator.pipeline.metrics.RunMetrics, when Ray's metrics are on
        self.stage_s: dict[str, float] = {}

    def update(self, status: str, info: dict) -> None:
        """One finished scene: its status and its summary row's parsed ``info`` (counts, stage timings)."""
        self.ok += status == "ok"
        self.failed += status != "ok"
        if self.metrics is not None:
            self.metrics.record(status, info)
        if status == "ok":
            for st, sec in (info.get("timings_s") or {}).items():
                self.stage_s[st] = self.stage_s.get(st, 0.0) + float(sec)
        if self.bar is not None:
            rates = {st: f"{sec / self.ok:.2f}s" for st, sec in self.stage_s.items()} if self.ok else {}
            self.bar.set_postfix(ok=self.ok, failed=self.failed, **rates, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _count(tally: Tally, bar: _Progress, row: dict) -> None:
    """A scene's summary row into the run's sums and the progress (once per scene)."""
    info = json.loads(row["info"])
    if tally.add(row, info):
        bar.update(row["status"], info)


def _failed_row(error: StageError) -> dict:
    return {"scene_id": error.scene_id, "status": "failed", "info": json.dumps({"error": error.row()})}


def longest_first(scene_ids: list[str], work: dict[str, float] | None) -> list[str]:
    """``scene_ids`` with the heaviest first by ``work`` (a source's ``work_estimates``; a scene it lacks
    counts 0), ties in their given order; unchanged when ``work`` is empty. Workers take scenes in this
    order as they come free (longest processing time first), so the run's last scenes are its short ones
    and no worker is left idle behind one long scene at the end."""
    if not work:
        return list(scene_ids)
    return sorted(scene_ids, key=lambda s: -work.get(s, 0.0))  # sorted() is stable: ties keep their order


def run_pipeline(store: RunStore, source: dict, cfg: PipelineConfig, scene_ids: list[str], stages: list[Stage],
                 write: Callable, *, epoch: int | None = None, executor: str = "ray", progress: bool = True,
                 finalize: Callable[[RunStore, RunSummary], None] | None = None,
                 work: dict[str, float] | None = None, report: Callable[[RunStore], str] | None = None,
                 timings: dict[str, float] | None = None, started_at: float | None = None,
                 part_specs: tuple = ()) -> RunResult:
    """Run ``stages`` then ``write`` on every scene of ``scene_ids`` not yet finished in ``store``, the
    heaviest first by ``work`` (``longest_first``; None keeps the order).

    ``source`` is the log source's JSON description (``source.json``), ``epoch`` the run epoch of the lock
    the caller holds, ``executor`` 'ray' (Ray must be initialised, see ``ensure_ray``) or 'local'
    (in-process, same stages, no Ray). ``part_specs``: the end-of-run parts (``generator.runfolder.parts``) that
    ``finalize`` merges, built by each scene's worker once the scene is committed (``core.build_committed_parts``).
    ``finalize(store, summary)`` runs at the end (card, bench export), then
    ``report(store)`` (the HTML report; returns its one-line description, raises ``DrivegenError`` when it
    cannot be written: the run's data stay as they are).
    ``timings`` (phases the caller timed before: logs, Ray start) and ``started_at`` (``time.perf_counter()`` at
    the command's start) make the summary's wall time and its breakdown cover the whole command.
    Returns the summary (also in ``OUT/summary.json``).
    """
    t0 = time.perf_counter()
    removed = remove_leftovers(store)
    if removed:
        log.info("removed %d leftover(s) of an interrupted writer of this run", len(removed))
    done = finished_ids(store)
    skipped = [s for s in scene_ids if s in done]
    pending = longest_first([s for s in scene_ids if s not in done], work)
    del done
    log.info("%d scene(s): %d to run, %d already finished", len(scene_ids), len(pending), len(skipped))
    if executor == "local" and pending and not numpy_pinned():
        log.warning("numpy was imported before drivegen and runs its AVX-512 kernels in this process: this run's "
                    "floats may differ in the last digit from other runs of the same logs (generator.numerics; "
                    "import generator before numpy, or set NPY_DISABLE_CPU_FEATURES=AVX512F)")
    tally = Tally()
    metrics = None
    if executor == "ray" and pending:
        metrics = RunMetrics(len(pending))
    bar = _Progress(len(pending), progress, metrics)
    finish = SceneFinish(write, tuple(part_specs))
    cleanup: OSError | None = None
    try:
        if executor == "local":
            _run_local(pending, source, stages, finish, cfg, store, tally, bar, epoch)
        elif executor == "ray":
            _run_ray(pending, source, stages, finish, cfg, store, tally, bar, epoch)
        else:
            raise ValueError(f"executor must be 'ray' or 'local', got {executor!r}")
    finally:
        bar.close()
        try:
            remove_leftovers(store)
        except OSError as err:  # the storage is out of reach: what a scene left is removed by --resume
            log.error("could not remove what interrupted writers left in %s: %s", store.uri, err)
            cleanup = err  # raised below unless an error of the run itself is on its way
    if cleanup is not None:
        raise StorageError(f"{store.uri} could not be cleaned up after the scenes ({cleanup}): the storage failed "
                           "or is out of reach; every committed scene stays, drivegen run --resume finishes the run "
                           "once it can be reached", file=store.uri)
    if tally.stale is not None:
        raise RunFolderError(f"{store.uri} was taken over by another driver while this run was going "
                             f"({json.loads(tally.stale['info'])['error']}); this run stops without finalizing")
    streamed = time.perf_counter() - t0
    summary = summarize(store, scene_ids, tally, len(skipped), streamed, executor)
    summary.timings = {**(timings or {}), "pipeline": round(streamed, 3)}
    start = t0 if started_at is None else started_at

    def phase(name: str, since: float) -> None:
        summary.timings[name] = round(time.perf_counter() - since, 3)
        summary.wall_s = round(time.perf_counter() - start, 3)

    if finalize is not None:
        t = time.perf_counter()
        try:
            finalize(store, summary)
        except LockLostError:
            raise  # another writer holds the folder now: not even summary.json is written over its files
        except Exception as err:  # noqa: BLE001 - the rows are committed; the by-product's failure is reported
            log.error("finalize (dataset card, exports) failed: %s: %s", type(err).__name__, err)
            summary.finalize_error = f"{type(err).__name__}: {err}"
        phase("exports", t)
    else:
        summary.wall_s = round(time.perf_counter() - start, 3)
    store.write_json(layout.SUMMARY, summary.to_json())
    result = RunResult(summary, tally)
    if report is not None:  # after summary.json, which the report shows; the file then gains the report's time
        t = time.perf_counter()
        try:
            result.report_line = report(store)
        except DrivegenError as err:
            result.report_error = str(err)
        phase("report", t)
        store.write_json(layout.SUMMARY, summary.to_json())
    return result


def finished_ids(store: RunStore) -> set[str]:
    """The ids of the run folder's finished scenes, its manifests read one at a time (none kept)."""
    return {m["scene_id"] for m in RunReader(store, require=False).iter_manifests()}


def _run_local(pending, source, stages, finish: SceneFinish, cfg, store, tally, bar, epoch) -> None:
    for sid in pending:
        settle_heap()
        work = SceneWork(sid, source, epoch)
        for st in stages:
            apply_stage(st, work, StageEnv(cfg, store, cached_model(st, cfg)))
        _count(tally, bar, finish(work, cfg, store))
        del work  # garbage before the next scene begins (settle_heap keeps what is alive then)


def _run_ray(pending, source, stages, finish: SceneFinish, cfg, store, tally, bar, epoch) -> None:
    # lazy: generator.pipeline.ray_exec loads ray, which this module needs only here
    from generator.pipeline.ray_exec import build_dataset, configure_data_context, iter_summaries

    configure_data_context(progress_bars=False)
    stage_order = [st.name for st in stages] + ["write"]
    last_exc: BaseException | None = None
    remaining = list(pending)
    for round_no in range(cfg.ray.max_retries + 1):
        if not remaining:
            break
        store.delete_dir(layout.ATTEMPTS_DIR)
        if round_no:
            log.warning("round %d: streaming %d unfinished scene(s) again", round_no + 1, len(remaining))
        ds = build_dataset(remaining, source, stages, finish, cfg, store, epoch)
        try:
            for row in iter_summaries(ds):
                _count(tally, bar, row)
        except Exception as err:  # noqa: BLE001 - the execution failed as a whole; reconcile and go again
            last_exc = err
            log.warning("Ray Data execution stopped: %s: %s", type(err).__name__, str(err).splitlines()[0][:300])
        done = finished_ids(store)
        missing = [s for s in remaining if s not in tally and s not in done]
        del done
        for sid in missing:
            attempts = count_attempts(store, sid)
            exhausted = [st for st in stage_order if attempts.get(st, 0) > cfg.ray.max_retries]
            if exhausted:
                st = exhausted[-1]
                err = StageError(sid, st, None, "WorkerDied",
                                 f"the worker running stage '{st}' of scene '{sid}' died {attempts[st]} times "
                                 f"(ray.max_retries={cfg.ray.max_retries}); see the Ray worker logs", attempts[st])
                write_error(store, err.row())
                _count(tally, bar, _failed_row(err))
        remaining = [s for s in missing if s not in tally]
    for sid in remaining:  # rounds exhausted: never dropped silently
        why = f"{type(last_exc).__name__}: {str(last_exc).splitlines()[0][:500]}" if last_exc else "never finished"
        err = StageError(sid, "pipeline", None, "Unfinished",
                         f"scene '{sid}' did not finish after {cfg.ray.max_retries + 1} round(s): {why}")
        write_error(store, err.row())
        _count(tally, bar, _failed_row(err))


# ------------------------------------------------------------------------------------------ summary
def _add(total: dict, part: dict) -> None:
    for k, v in part.items():
        if isinstance(v, dict):
            _add(total.setdefault(k, {}), v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            total[k] = total.get(k, 0) + v


def summarize(store: RunStore, scene_ids: list[str], tally: Tally, skipped: int, wall_s: float,
              executor: str) -> RunSummary:
    """Figures of this run (``this_run``: scenes streamed now, ``tally``) and of the run folder (``dataset``:
    every finished scene, skipped ones included, summed from its manifests read one at a time)."""
    this_run = tally.this_run
    reader = RunReader(store, require=False)
    dataset: dict = {}
    wanted = set(scene_ids)
    for m in reader.iter_manifests():
        if m["scene_id"] in wanted:
            _add(dataset, m.get("counts", {}))
    ok, failed = tally.ok, tally.failed
    qa_now = sum(this_run.get("qa_by_family", {}).values())
    frames_now = this_run.get("frames", 0)
    errors = [e for e in reader.errors() if e.get("scene_id") in wanted or e.get("scene_id") is None]
    return RunSummary(
        out=store.uri, executor=executor,
        scenes=SceneCounts(total=len(scene_ids), ok=ok, failed=failed, skipped=skipped),
        frames=dataset.get("frames", 0), objects=dataset.get("objects", 0),
        qa=QACounts(total=sum(dataset.get("qa_by_family", {}).values()), by_family=dataset.get("qa_by_family", {})),
        objects_dropped=dataset.get("dropped_by_reason", {}),
        failed_frames=dataset.get("failed_frames", {}), unlabelled_frames=dataset.get("unlabelled_frames", 0),
        this_run=this_run, totals=dataset,
        errors=[{k: e.get(k) for k in ERRORS.names} for e in errors],
        wall_s=round(wall_s, 3),
        throughput=Throughput(qa_per_s=round(qa_now / wall_s, 3) if wall_s else 0.0,
                              frames_per_s=round(frames_now / wall_s, 3) if wall_s else 0.0,
                              scenes_per_s=round(ok / wall_s, 4) if wall_s else 0.0),
    )


def format_summary(summary: RunSummary | dict, max_errors: int = 20) -> str:
    """What ``drivegen run`` prints at the end (``RunSummary.lines``); a dict is read as ``summary.json``."""
    if isinstance(summary, dict):
        summary = RunSummary.from_json(summary)
    return "\n".join(summary.lines(max_errors))
