"""Batch work on Ray: the one executor of the fan-outs that are no stream of scenes.

Three commands fan out a list of independent items over the cluster: the end of ``drivegen run`` builds each
committed scene's parts (``generator.runfolder.parts.build_parts``, handed ``run_tasks`` by the pipeline: the
run-folder layer never imports Ray), ``drivegen regenerate --executor ray`` writes batches of scenes, and
``drivegen publish --workers`` writes shards. They share one policy:

* each item is one Ray task of one CPU, ``fn(*shared, item)``, with the objects every item needs (``shared``)
  put into the object store once;
* Ray retries a task whose worker died ``cfg.ray.max_retries`` times, the stream's retry setting
  (``generator.pipeline.ray_exec``);
* at most twice the cluster's CPUs are in flight (each CPU has its next task queued, and the driver never
  holds more results than that);
* results come back in item order; ``done(result)`` is called as each finishes;
* a task that fails raises its own error (a ``RunFolderError`` stays one, not Ray's wrapper), and the tasks
  still in flight are cancelled.

The stream of scenes through the stages is Ray Data (``generator.pipeline.ray_exec``); connecting to a cluster
or starting the embedded Ray is ``generator.pipeline.ray_connect``. These three modules are where drivegen
talks to Ray. This one is imported only where Ray runs (in-process runs and most commands never import Ray).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, TypeVar

import ray

from schemas.config import RayConfig

T = TypeVar("T")


def in_flight_limit() -> int:
    """How many batch tasks may be in flight: twice the cluster's CPUs."""
    return max(1, int(2 * ray.cluster_resources().get("CPU", 1)))


def run_tasks(fn: Callable[..., T], items: Iterable[Any], rc: RayConfig, shared: tuple = (),
              done: Callable[[T], None] | None = None) -> list[T]:
    """``fn(*shared, item)`` for every item as Ray tasks under the policy above; the results in item order."""
    items = list(items)
    task = ray.remote(num_cpus=1, max_retries=rc.max_retries)(fn)
    refs = [ray.put(x) for x in shared]
    limit = in_flight_limit()
    results: list[Any] = [None] * len(items)
    pending: dict = {}
    todo = iter(enumerate(items))
    while True:
        for k, item in todo:
            pending[task.remote(*refs, item)] = k
            if len(pending) >= limit:
                break
        if not pending:
            break
        ready, _ = ray.wait(list(pending), num_returns=1)
        k = pending.pop(ready[0])
        try:
            results[k] = ray.get(ready[0])
        except ray.exceptions.RayTaskError as err:  # the task's own error, not Ray's wrapper around it
            for ref in pending:
                ray.cancel(ref)
            cause = getattr(err, "cause", None)
            raise (cause if isinstance(cause, Exception) else err) from None
        if done is not None:
            done(results[k])
    return results


class TaskRunner:
    """``run_tasks`` bound to the run's Ray settings, for a layer that must not import Ray (the run folder's
    parts): called as ``runner(fn, items, shared=(), done=None)``; ``cpus``: the cluster's CPUs."""

    def __init__(self, rc: RayConfig):
        self.rc = rc
        self.cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def __call__(self, fn: Callable[..., T], items: Iterable[Any], shared: tuple = (),
                 done: Callable[[T], None] | None = None) -> list[T]:
        return run_tasks(fn, items, self.rc, shared=shared, done=done)


def one_task(fn: Callable[..., T], rc: RayConfig) -> Callable[..., T]:
    """``fn`` called as one Ray task of one CPU under the policy above (retries, its own error): for the work
    of the driver's own commands that reads the run's files (the end of ``drivegen run``: card, exports, report),
    so that the driver stays out of the data path and its memory flat. ``fn`` and its arguments are pickled.
    What ``fn`` logs on drivegen's loggers (INFO and above) is logged again by the driver once it returns: a
    worker's own log reaches the driver's terminal only under ``--verbose``, and a warning of the end of a run
    must not go unseen."""
    def call(*args):
        result, records = run_tasks(_call, [args], rc, shared=(fn,))[0]
        for name, level, message in records:
            logging.getLogger(name).log(level, "%s", message)
        return result

    return call


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.name, record.levelno, record.getMessage()))


def _call(fn: Callable[..., T], args: tuple) -> tuple[T, list[tuple[str, int, str]]]:
    """``fn(*args)`` in a worker, and the records drivegen's loggers emitted meanwhile."""
    log, kept = logging.getLogger("drivegen"), _Kept()
    level = log.level
    log.addHandler(kept)
    log.setLevel(logging.INFO)
    try:
        return fn(*args), kept.records
    finally:
        log.removeHandler(kept)
        log.setLevel(level)


def tasks_if_running(rc: RayConfig) -> TaskRunner | None:
    """A ``TaskRunner`` when this process is connected to Ray (a run on the cluster or the embedded Ray), else
    None: the caller works in this process."""
    return TaskRunner(rc) if ray.is_initialized() else None


__all__ = ["TaskRunner", "in_flight_limit", "one_task", "run_tasks", "tasks_if_running"]
