"""``validate_run``: a finished run folder against the labelled logs it came from.

Which frames count: a run's perceived frames (``perception/frames/<split>-<scene>.parquet``; without it, the
frames its objects are on) that coincide with an annotated sample of a labelled scene (timestamps equal
within ``match_tolerance_us``). nuScenes samples are 2 Hz keyframes; AV2 annotations are 10 Hz. Objects on
other frames (nuScenes sweeps between keyframes) are not scored and are counted in the report.
Scenes of the run without any annotation are listed as unlabelled and excluded.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.runfolder import RunReader, RunStore
from generator.sources import source_from_description
from generator.types import SourceError
from generator.validate.boxes import BoxArrays, cap_per_sample, objects_to_arrays, to_detection_boxes, \
    to_tracking_boxes
from generator.validate.groundtruth import LogGroundTruth, ValidateInputError, open_ground_truth
from generator.validate.identity import track_identity
from generator.validate.metrics import build_tracks, detection_config, evaluate_detection, tracking_config
from generator.validate.report import check_gates
from generator.validate.tracking import evaluate_tracking
from schemas.config import ConfigError, config_from_yaml
from schemas.errors import RunFolderError
from schemas.tables import no_detection_rows

log = logging.getLogger(__name__)


@dataclass
class ValidateOptions:
    """Knobs of ``drivegen validate`` (CLI flags of the same names)."""

    logs: str | None = None  # labelled logs; default: the dataroot in the run's source.json
    scenes: list[str] | None = None  # restrict to these scene ids
    tracking_thresholds: int = 40  # recall thresholds AMOTA averages over (devkit: 40)
    workers: int | None = None  # processes for per-class tracking evaluation (default: min(classes, CPUs))
    tracking: bool = True
    label_agreement: bool = True
    match_tolerance_us: int = 20_000  # a perceived frame matches an annotated sample within this
    # Predictions carry the LiDAR point count the run measured in each box, so the devkit's zero-point
    # filter removes empty predicted boxes as it removes empty GT boxes (drivegen's visibility filter
    # drops them before QA anyway). True = the devkit's own submissions' convention (num_pts -1: never
    # removed), so empty predicted boxes count as false positives.
    keep_empty_predictions: bool = False
    gates: dict = field(default_factory=dict)  # {'min_map': 0.5, ...} see generator.validate.report.GATES


@dataclass
class RunData:
    reader: RunReader
    source: dict
    objects: pa.Table
    frames: pa.Table | None
    config_yaml: str | None

    @property
    def store(self) -> RunStore:
        return self.reader.store


def read_run(run: str) -> RunData:
    """The run folder's source.json, config and committed perception tables (objects required, frames
    optional), through the run-folder reader (finished scenes only)."""
    try:
        reader = RunReader(run)
    except RunFolderError as err:
        raise ValidateInputError(str(err.message), file=err.file) from None
    source = reader.source()
    if source is None:
        raise ValidateInputError(f"run folder {run} has no source.json: it is not a drivegen run folder (or the run "
                                 f"never started); run `drivegen run` first")
    objects = read_folder(reader, "objects")
    if objects is None:
        raise ValidateInputError(f"run folder {run} has no committed perception tables (perception/objects/*.parquet "
                                 "of a finished scene); validate needs a run that finished perception: run "
                                 "`drivegen run` (or resume it) and try again")
    frames = read_folder(reader, "frames")
    cfg = reader.config_text()
    return RunData(reader, source, objects, frames, cfg.decode() if cfg is not None else None)


def read_folder(reader: RunReader, table: str, scenes: list[str] | None = None) -> pa.Table | None:
    """A run-folder table ('objects', 'qa', ...) of the finished scenes, or None (``RunReader.read_table``);
    read errors become ValidateInputError."""
    try:
        return reader.read_table(table, scenes)
    except RunFolderError as err:
        raise ValidateInputError(f"cannot read {table} of the run: {err.message}", file=err.file) from None


def _match(sample_ts: np.ndarray, ts: np.ndarray, tol_us: int) -> np.ndarray:
    """Index of the sample each timestamp coincides with (within tol), -1 where none. sample_ts sorted."""
    if len(sample_ts) == 0:
        return np.full(len(ts), -1)
    pos = np.searchsorted(sample_ts, ts).clip(1, len(sample_ts)) - 1
    nxt = (pos + 1).clip(0, len(sample_ts) - 1)
    best = np.where(np.abs(sample_ts[nxt] - ts) < np.abs(sample_ts[pos] - ts), nxt, pos)
    return np.where(np.abs(sample_ts[best] - ts) <= tol_us, best, -1)


@dataclass
class EvalSet:
    """What gets scored: sample tokens with their scene and time, and the predictions on them."""

    tokens: list[str]
    scene_of: dict[str, str]
    time_of: dict[str, int]
    pred: BoxArrays
    pred_rows: np.ndarray  # row of run.objects for each pred box
    scenes: list[str]
    unlabelled: list[str]
    objects_off_samples: int
    frames_without_sample: int


def select(run: RunData, gt: LogGroundTruth, opts: ValidateOptions) -> EvalSet:
    obj = run.objects
    run_scenes = list(dict.fromkeys(obj.column("scene_id").to_pylist()
                                    + (run.frames.column("scene_id").to_pylist() if run.frames is not None else [])))
    if opts.scenes:
        unknown = [s for s in opts.scenes if s not in run_scenes]
        if unknown:
            raise ValidateInputError(f"--scenes {unknown} are not scenes of this run (it has {run_scenes[:10]}"
                                     f"{' ...' if len(run_scenes) > 10 else ''})")
        run_scenes = [s for s in run_scenes if s in opts.scenes]
    absent = [s for s in run_scenes if gt.resolve(s) is None]
    if absent:
        raise ValidateInputError(
            f"{len(absent)} scene(s) of the run are not in the logs ({gt.kind} at {_root(run, opts)}): "
            f"{absent[:10]}{' ...' if len(absent) > 10 else ''}; pass --logs with the logs the run was made from")
    labelled = [s for s in run_scenes if gt.is_labelled(s)]
    unlabelled = [s for s in run_scenes if s not in labelled]
    tokens, scene_of, time_of = [], {}, {}
    rows_all, toks_all = [], []
    off, frames_without = 0, 0
    obj_scene = np.asarray(obj.column("scene_id").to_pylist(), dtype=object)
    obj_ts = obj.column("timestamp_us").to_numpy()
    for s in labelled:
        smp = gt.samples(s)
        order = np.argsort(smp.timestamp_us)
        sts, stok = smp.timestamp_us[order], smp.tokens[order]
        if run.frames is not None:
            fts = pc.filter(run.frames.column("timestamp_us"), pc.equal(run.frames.column("scene_id"), s)).to_numpy()
        else:
            fts = np.unique(obj_ts[obj_scene == s])
        hit = _match(sts, fts, opts.match_tolerance_us)
        frames_without += int((hit < 0).sum())
        used = np.unique(hit[hit >= 0])
        for i in used:
            tok = str(stok[i])
            tokens.append(tok)
            scene_of[tok] = s
            time_of[tok] = int(sts[i])
        rows = np.flatnonzero(obj_scene == s)
        m = _match(sts, obj_ts[rows], opts.match_tolerance_us)
        ok = (m >= 0) & np.isin(m, used)
        off += int((~ok).sum())
        rows_all.append(rows[ok])
        toks_all.append(stok[m[ok]])
    rows = np.concatenate(rows_all) if rows_all else np.zeros(0, dtype=np.int64)
    toks = np.concatenate(toks_all) if toks_all else np.zeros(0, dtype=object)
    pred = objects_to_arrays(obj.take(pa.array(rows, type=pa.int64())), toks)
    return EvalSet(tokens, scene_of, time_of, pred, rows, labelled, unlabelled, off, frames_without)


def run_config(rd: RunData):
    """The run's PipelineConfig (config.yaml; defaults when the run folder has none)."""
    if rd.config_yaml is None:
        return config_from_yaml("", "<defaults>")
    try:
        return config_from_yaml(rd.config_yaml, where=rd.store.full("config.yaml"))
    except ConfigError as err:
        raise ValidateInputError(f"the run's config.yaml is invalid: {err}",
                                 file=rd.store.uri_of("config.yaml")) from None


def open_source_of(rd: RunData, opts: ValidateOptions):
    """The run's LogSource (source.json), reading from ``opts.logs`` when given."""
    desc = dict(rd.source)
    if opts.logs:
        desc["dataroot" if desc.get("kind") == "nuscenes" else "root"] = str(opts.logs)
    desc.pop("scenes", None)
    try:
        return source_from_description(desc)
    except (SourceError, ValueError, TypeError) as err:
        raise ValidateInputError(f"cannot open the run's logs from source.json: {err}; pass --logs with the logs "
                                 f"the run was made from", file=rd.store.uri_of("source.json")) from None


def _root(run: RunData, opts: ValidateOptions) -> str:
    return str(opts.logs or run.source.get("dataroot") or run.source.get("root"))


def _filtered(gt: LogGroundTruth, boxes, class_range):
    # nuscenes-devkit: seconds to import (it pulls matplotlib); only to read or score nuScenes
    from nuscenes.eval.common.loaders import add_center_dist, filter_eval_boxes

    boxes = add_center_dist(gt.tables, boxes)
    if not boxes.all:  # the devkit's filter needs one box to know the box type; nothing to filter anyway
        return boxes
    return filter_eval_boxes(gt.tables, boxes, class_range, verbose=False)


@dataclass
class Prepared:
    """Everything the metrics read, after loading and the devkit's filtering (see ``prepare``)."""

    rd: RunData
    gt: LogGroundTruth
    es: EvalSet
    gt_det: object  # EvalBoxes of DetectionBox
    pr_det: object
    tracks_gt: dict | None  # {scene: {timestamp_us: [TrackingBox]}} (build_tracks), None without tracking
    tracks_pr: dict | None
    boxes_over_cap: int
    load_s: float




def perception_gaps(rd: RunData, es: EvalSet, tol_us: int) -> dict:
    """The scored samples that got no prediction, and among them those whose frame perception failed on (the
    run's ``issues`` rows of ``schemas.vocab.NO_DETECTION_ISSUES``): {"scored_without_predictions", "scored_failed_frames",
    "examples" (first 10 failed: scene, frame_index, stage, reason, file)}."""
    with_pred = set(es.pred.sample_token.tolist())
    empty = [t for t in es.tokens if t not in with_pred]
    out = {"scored_without_predictions": len(empty), "scored_failed_frames": 0, "examples": []}
    issues = read_folder(rd.reader, "issues", es.scenes)
    if issues is None or issues.num_rows == 0 or rd.frames is None:
        return out
    rows = issues.filter(no_detection_rows(issues)).to_pylist()  # a few per scene at most (past the share the scene fails)
    frame_ts = {(s, int(f)): int(t) for s, f, t in zip(rd.frames.column("scene_id").to_pylist(),
                                                        rd.frames.column("frame_index").to_pylist(),
                                                        rd.frames.column("timestamp_us").to_pylist())}
    e_scene = np.array([es.scene_of[t] for t in empty], dtype=object)
    e_time = np.array([es.time_of[t] for t in empty], dtype=np.int64)
    free = np.ones(len(empty), bool)  # each scored sample counts once (a frame may have several issues)
    failed = []
    for r in rows:
        ts = frame_ts.get((r["scene_id"], int(r["frame_index"])))
        hit = np.flatnonzero(free & (e_scene == r["scene_id"]) & (np.abs(e_time - (ts or 0)) <= tol_us))
        if ts is None or not len(hit):
            continue
        free[hit] = False
        failed += [{k: r[k] for k in ("scene_id", "frame_index", "stage", "reason", "file")}] * len(hit)
    out["scored_failed_frames"] = len(failed)
    out["examples"] = failed[:10]
    return out


def prepare(run: str, opts: ValidateOptions) -> Prepared:
    """Read the run and the logs, choose the scored samples, build and filter the devkit's boxes."""
    t0 = time.perf_counter()
    rd = read_run(run)
    gt = open_ground_truth(rd.source, opts.logs)
    es = select(rd, gt, opts)
    if not es.scenes:
        raise ValidateInputError(
            f"none of the run's scenes is labelled in the logs at {_root(rd, opts)} "
            f"(unlabelled: {es.unlabelled[:10]}); validate needs annotated scenes")
    if not es.tokens:
        raise ValidateInputError(
            f"no perceived frame of the labelled scenes {es.scenes[:10]} coincides with an annotated sample "
            f"(tolerance {opts.match_tolerance_us} us): the run and the logs do not match; pass --logs with the "
            f"logs the run was made from")
    dcfg = detection_config()
    tcfg = tracking_config(opts.tracking_thresholds)
    pred, dropped = cap_per_sample(es.pred, dcfg.max_boxes_per_sample)
    if opts.keep_empty_predictions:
        pred.num_pts = np.full(len(pred), -1, dtype=np.int64)
    gt_det = _filtered(gt, gt.boxes(es.tokens, "detection"), dcfg.class_range)
    pr_det = _filtered(gt, to_detection_boxes(pred, es.tokens, gt=False), dcfg.class_range)
    tracks_gt = tracks_pr = None
    if opts.tracking:
        gt_trk = _filtered(gt, gt.boxes(es.tokens, "tracking"), tcfg.class_range)
        pr_trk = _filtered(gt, to_tracking_boxes(pred, es.tokens, gt=False), tcfg.class_range)
        tracks_gt = build_tracks(gt_trk, es.scene_of, es.time_of, gt=True)
        tracks_pr = build_tracks(pr_trk, es.scene_of, es.time_of, gt=False)
    return Prepared(rd, gt, es, gt_det, pr_det, tracks_gt, tracks_pr, dropped, time.perf_counter() - t0)


def validate_run(run: str, opts: ValidateOptions | None = None) -> dict:
    """Score a run folder's perception against its labelled logs. Returns the report dict (see report.py).

    Raises ``ValidateInputError`` for unusable inputs (message says which and what to do).
    """
    opts = opts or ValidateOptions()
    if opts.tracking:  # fail before any work when the devkit's tracking evaluation cannot be imported
        import generator.validate.tracking  # noqa: F401
    t0 = time.perf_counter()
    p = prepare(run, opts)
    rd, es = p.rd, p.es
    timings = {"load_s": p.load_s}

    t1 = time.perf_counter()
    detection = evaluate_detection(p.gt_det, p.pr_det, has_attributes=p.gt.has_attributes,
                                   config=detection_config())
    timings["detection_s"] = time.perf_counter() - t1

    tracking = None
    if opts.tracking:
        t1 = time.perf_counter()
        tracking = evaluate_tracking(p.tracks_gt, p.tracks_pr, tracking_config(opts.tracking_thresholds),
                                     workers=opts.workers)
        timings["tracking_s"] = time.perf_counter() - t1

    agreement = None
    if opts.label_agreement:
        t1 = time.perf_counter()
        # lazy: generator.validate.agreement loads pandas, which this module needs only here
        from generator.validate.agreement import label_agreement

        agreement = label_agreement(rd, es, open_source_of(rd, opts), run_config(rd))
        timings["label_agreement_s"] = time.perf_counter() - t1
    identity = track_identity(rd.objects)  # every class, any range: what the devkit's tracking classes leave out
    timings["total_s"] = time.perf_counter() - t0

    report = {
        "run": str(run),
        "source": {k: v for k, v in rd.source.items() if k in ("kind", "dataroot", "root", "version")},
        "logs": _root(rd, opts),
        "perception_gaps": perception_gaps(p.rd, es, opts.match_tolerance_us),
        "scenes": {"evaluated": es.scenes, "unlabelled": es.unlabelled,
                   "unlabelled_note": "scenes without any annotation; excluded from every metric",
                   "num_samples": len(es.tokens), "perceived_frames_without_sample": es.frames_without_sample,
                   "objects_off_samples": es.objects_off_samples, "objects_over_cap": p.boxes_over_cap},
        "detection": detection,
        "tracking": tracking,
        "track_identity": identity,
        "label_agreement": agreement,
        "options": {k: v for k, v in asdict(opts).items() if k != "gates"},
        "timings": timings,
    }
    report["gates"], report["passed"] = check_gates(report, opts.gates)
    n_failed = report["perception_gaps"]["scored_failed_frames"]
    if n_failed:  # never a pass: those frames' objects are scored as missed whatever the gates say
        report["gates"]["perception_complete"] = {"metric": "perception_gaps.scored_failed_frames", "threshold": 0,
                                                  "value": n_failed, "ok": False}
        report["passed"] = False
    return report
