"""Live metrics of a run through Ray's metrics API (``ray.util.metrics``). Ray exports them on the Prometheus
endpoint of each node's metrics agent, so a cluster's Prometheus (the one its dashboard reads) scrapes them with
Ray's own; ``ray.metrics_export_port`` (or ``drivegen run --metrics-port``) puts the embedded Ray's endpoint on a
fixed local port: ``http://127.0.0.1:PORT/metrics``. Ray prefixes every name with ``ray_``, and Ray Data adds its
own per-operator metrics (``ray_data_*``: tasks running, queued blocks, bytes) beside them.
``docs/assets/grafana-drivegen.json`` is a Grafana dashboard of these.

The driver (``RunMetrics``), per finished scene, from its summary row:
    drivegen_scenes_total{status}           scenes finished, ok or failed
    drivegen_scenes_pending                 scenes of this run not finished yet (gauge)
    drivegen_stage_scenes_total{stage}      scenes each stage has processed
    drivegen_stage_seconds_total{stage}     seconds each stage spent; its rate over the scenes' rate is the
                                            stage's seconds per scene, over the worker count its busy share
    drivegen_frames_total                   frames read
    drivegen_rows_total{table}              rows committed (qa, objects, projections)
Each model actor (``generator.pipeline.ray_exec``):
    drivegen_actor_busy_seconds_total{stage}  seconds its calls took: rate = the actors' busy share
    drivegen_actor_gpu_memory_bytes{stage}    GPU memory its model holds (gauge; CUDA only)
"""
from __future__ import annotations

import sys

ROW_COUNTS = ("qa", "objects", "projections")  # the manifest counts that are a table's committed rows


class RunMetrics:
    """The driver's metrics of one run (``record`` per finished scene). Ray must be initialised."""

    def __init__(self, total: int):
        # ray: only where Ray runs (in-process runs and most commands never start it)
        from ray.util.metrics import Counter, Gauge

        self.scenes = Counter("drivegen_scenes_total", "scenes finished by status", tag_keys=("status",))
        self.pending = Gauge("drivegen_scenes_pending", "scenes of the run not finished yet")
        self.stage_scenes = Counter("drivegen_stage_scenes_total", "scenes each stage processed", tag_keys=("stage",))
        self.stage_seconds = Counter("drivegen_stage_seconds_total", "seconds each stage spent", tag_keys=("stage",))
        self.frames = Counter("drivegen_frames_total", "frames read")
        self.rows = Counter("drivegen_rows_total", "rows committed per table", tag_keys=("table",))
        self.left = total
        self.pending.set(total)

    def record(self, status: str, info: dict) -> None:
        """One finished scene: its status and its summary row's parsed ``info``."""
        self.scenes.inc(1, tags={"status": "ok" if status == "ok" else "failed"})
        self.left = max(0, self.left - 1)
        self.pending.set(self.left)
        if status != "ok":
            return
        for stage, s in (info.get("timings_s") or {}).items():
            self.stage_scenes.inc(1, tags={"stage": stage})
            if s > 0:
                self.stage_seconds.inc(float(s), tags={"stage": stage})
        counts = info.get("counts") or {}
        if counts.get("frames"):
            self.frames.inc(counts["frames"])
        for table in ROW_COUNTS:
            if counts.get(table):
                self.rows.inc(counts[table], tags={"table": table})


class ActorMetrics:
    """A model actor's busy time and GPU memory (``record(seconds)`` after each call)."""

    def __init__(self, stage: str):
        # ray: only where Ray runs (in-process runs and most commands never start it)
        from ray.util.metrics import Counter, Gauge

        self.tags = {"stage": stage}
        self.busy = Counter("drivegen_actor_busy_seconds_total", "seconds model actors spent in calls",
                            tag_keys=("stage",))
        self.gpu = Gauge("drivegen_actor_gpu_memory_bytes", "GPU memory a model actor holds", tag_keys=("stage",))

    def record(self, seconds: float) -> None:
        self.busy.inc(max(seconds, 1e-9), tags=self.tags)
        # torch holds GPU memory only where a model loaded it: importing it here would cost a CPU actor seconds
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            self.gpu.set(float(torch.cuda.memory_allocated()), tags=self.tags)

