"""``drivegen score intention --pred PRED TARGET``: Intention-Drive's metrics (§3.4) on planning samples.

TARGET is an Intention-Drive export (``drivegen export intention_drive``; ``RUN/intention`` after a run) or a run
folder (its export is built in memory). PRED holds one trajectory per sample:

- Parquet, JSON (a list of objects, or ``{sample_id: waypoints}``) or JSON Lines, with ``sample_id`` and either
  ``waypoints`` (K [x, y] pairs, metres, the sample's BEV ego frame: x forward, y left) or ``trajectory`` /
  ``answer``: the paper's text output "Here is the planning trajectory [PT, (x1, y1), ..., (xK, yK)]";
- or ``baseline:NAME``: ``ground_truth``, ``constant_velocity`` (the current speed straight ahead),
  ``stop`` (stay where it is), ``mirror`` (the logged trajectory mirrored left <-> right).

Metrics: ADE and FDE (m, over the samples with a valid prediction); CR, the share of those whose swept ego
body hits a logged object (``generator.families.intention_drive.attributes.collisions``); ISR, the share of ALL samples
whose prediction is collision-free and satisfies the instruction's success predicate (a missing or
malformed prediction counts as a failure); ISR per instruction kind and level. Malformed predictions (unknown
or duplicate sample id, wrong K, NaN, waypoints farther apart than 100 m/s allows, unparseable text) are
listed per item in ``problems``.
"""
from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.families.intention_drive.attributes import check
from generator.families.intention_drive.export import (
    EXPORT_FORMAT, EXPORT_SUMMARY, OBJECTS_FILE, SAMPLES_FILE, read_run_scene, read_samples, road_maps
)
from generator.families.intention_drive.tables import INTENTION_OBJECTS, INTENTION_SAMPLES
from generator.runfolder import RunReader, RunStore
from generator.validate.score import read_predictions
from schemas.config import parse_config
from schemas.errors import InputError
from schemas.tables import read_parquet

NAME = "intention"
HELP = "Intention-Drive: ADE, FDE, collision rate, intent success rate"
BASELINES = ("ground_truth", "constant_velocity", "stop", "mirror")
MAX_PLAN_SPEED_MPS = 100.0  # waypoints farther apart than this speed allows (360 km/h) are no trajectory: malformed
_PAIR = re.compile(r"\(\s*([-+0-9.eE]+)\s*,\s*([-+0-9.eE]+)\s*\)")


def load_target(target: str, splits: list[str] | None = None):
    """(PlanningSamples, Instructions, sample ids, kinds, levels, config) of an export folder or a run folder;
    the config's ``labels``, ``intention`` and ``ego`` sections are the ones the samples were made with."""
    store = RunStore(target)
    summary = None
    if store.exists(EXPORT_SUMMARY):
        try:
            summary = store.read_json(EXPORT_SUMMARY)
        except ValueError:
            summary = None
    if isinstance(summary, dict) and summary.get("format") == EXPORT_FORMAT:
        samples = read_parquet(store.full(SAMPLES_FILE), filesystem=store.fs)
        objects = read_parquet(store.full(OBJECTS_FILE), filesystem=store.fs)
        cfg = parse_config(summary.get("config", {}), where=store.full(EXPORT_SUMMARY))
    else:
        reader = RunReader(target, require=False)
        if not reader.is_run_folder():
            raise InputError(f"{target} is neither an Intention-Drive export ({EXPORT_SUMMARY} with format "
                             f"{EXPORT_FORMAT!r}) nor a drivegen run folder", file=target)
        cfg = reader.config()
        maps, _ = road_maps(reader.source(), reader.scene_ids()) if cfg.intention.road_edges else ({}, None)
        parts = [p for p in (read_run_scene(reader, sid, cfg, maps=maps) for sid in reader.scene_ids())
                 if p is not None]
        samples = pa.concat_tables([p[0] for p in parts]) if parts else INTENTION_SAMPLES.empty_table()
        objects = pa.concat_tables([p[1] for p in parts]) if parts else INTENTION_OBJECTS.empty_table()
    if splits:
        samples = samples.filter(pc.is_in(samples.column("split"), value_set=pa.array(splits)))
    if samples.num_rows == 0:
        raise InputError(f"{target}: no Intention-Drive samples" + (f" in splits {splits}" if splits else ""),
                         file=target)
    s, ins, ids = read_samples(samples, objects, cfg.ego, cfg.intention.road_dilation_m)
    return s, ins, ids, samples.column("kind").to_pylist(), samples.column("level").to_pylist(), cfg


def baseline(name: str, s, ins) -> np.ndarray:
    """(R, K, 2) trajectories of a named baseline for the instructions (module docstring)."""
    gt = s.future_xy[ins.sample]
    k = gt.shape[1]
    if name == "ground_truth":
        return gt.copy()
    if name == "constant_velocity":
        v = np.nan_to_num(s.speed_mps[ins.sample])
        return np.stack([v[:, None] * s.step_s * np.arange(1, k + 1)[None, :], np.zeros((len(v), k))], axis=-1)
    if name == "stop":
        return np.zeros_like(gt)
    if name == "mirror":
        return gt * np.array([1.0, -1.0])
    raise InputError(f"unknown baseline {name!r}; available: {list(BASELINES)}")


def _records(path: str) -> list[dict]:
    """Prediction records: a list of objects, or ``{sample_id: waypoints}``."""
    data = read_predictions(path)
    if isinstance(data, dict):
        return [{"sample_id": k, "waypoints": v} for k, v in data.items()]
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a list of predictions or an object keyed by sample_id", file=path)
    return data


def _waypoints(rec) -> list | None:
    if not isinstance(rec, dict):
        return None
    if rec.get("waypoints") is not None:
        return rec["waypoints"]
    for key in ("trajectory", "answer", "prediction"):
        if isinstance(rec.get(key), str):
            return [[float(a), float(b)] for a, b in _PAIR.findall(rec[key])]
    return None


def load_predictions(pred: str, s, ins, ids: pa.Array) -> tuple[np.ndarray, list[dict]]:
    """(R, K, 2) predicted trajectories in the instructions' order (NaN: none or malformed) and the problems."""
    k = s.future_xy.shape[1]
    out = np.full((ins.n, k, 2), np.nan)
    if pred.startswith("baseline:"):
        return baseline(pred.split(":", 1)[1], s, ins), []
    problems: list[dict] = []
    where = {sid: i for i, sid in enumerate(ids.to_pylist())}
    seen: set = set()
    for n, rec in enumerate(_records(pred)):
        sid = rec.get("sample_id") if isinstance(rec, dict) else None
        if sid is not None and not isinstance(sid, str):
            problems.append({"item": n, "sample_id": repr(sid)[:60], "problem": "sample_id is not a string"})
            continue
        if sid not in where:
            problems.append({"item": n, "sample_id": sid, "problem": "unknown sample_id" if sid else "no sample_id"})
            continue
        if sid in seen:
            problems.append({"item": n, "sample_id": sid, "problem": "duplicate prediction (the first is scored)"})
            continue
        seen.add(sid)
        try:
            wp = np.asarray(_waypoints(rec), dtype=np.float64)
        except (TypeError, ValueError, OverflowError):  # (an integer of 400 digits is no coordinate either)
            wp = np.zeros((0,))
        if wp.ndim != 2 or wp.shape != (k, 2):
            problems.append({"item": n, "sample_id": sid, "problem": f"expected {k} [x, y] waypoints, got shape "
                                                                      f"{list(wp.shape)}"})
            continue
        if not np.isfinite(wp).all():
            problems.append({"item": n, "sample_id": sid, "problem": "non-finite waypoint"})
            continue
        step = np.diff(wp, axis=0, prepend=np.zeros((1, 2)))
        speed = np.hypot(step[:, 0], step[:, 1]) / s.step_s  # (hypot: 1e300 m does not overflow to inf)
        if speed.max(initial=0.0) > MAX_PLAN_SPEED_MPS:  # (every waypoint 14 km away scored as a fine overtake)
            i = int(np.argmax(speed))
            problems.append({"item": n, "sample_id": sid, "problem": f"waypoint {i + 1} is {speed[i] * s.step_s:.3g} m "
                                                                      f"from the one before ({speed[i]:.3g} m/s over "
                                                                      f"{s.step_s:g} s, beyond {MAX_PLAN_SPEED_MPS:g} "
                                                                      "m/s): no trajectory"})
            continue
        out[where[sid]] = wp
    missing = [sid for sid in where if sid not in seen]
    if missing:
        problems.append({"item": None, "sample_id": missing[0], "problem": f"{len(missing)} sample(s) without a "
                                                                          f"prediction, e.g. {missing[:3]}"})
    return out, problems


def score(pred_path: str, target: str, splits: list[str] | None = None, **_) -> dict:
    s, ins, ids, kinds, levels, cfg = load_target(target, splits)
    traj, problems = load_predictions(pred_path, s, ins, ids)
    res = check(s, ins, traj, cfg.labels, cfg.intention)
    valid = np.isfinite(traj).all(axis=(1, 2))
    err = np.linalg.norm(traj - s.future_xy[ins.sample], axis=2)
    kinds_a, levels_a = np.asarray(kinds), np.asarray(levels)

    def rate(mask):
        return float(res["success"][mask].mean()) if mask.any() else None

    return {
        "prediction": pred_path, "target": target, "samples": int(ins.n), "scored": int(valid.sum()),
        "ADE_m": float(err[valid].mean()) if valid.any() else None,
        "FDE_m": float(err[valid, -1].mean()) if valid.any() else None,
        "collision_rate": float(res["collision"][valid].mean()) if valid.any() else None,
        "object_collision_rate": float(res["object_collision"][valid].mean()) if valid.any() else None,
        "off_road_rate": float(res["off_road"][valid].mean()) if valid.any() else None,
        "road_edges": {"samples_with_map": int(s.road_checked[ins.sample].sum()) if s.road_checked is not None else 0,
                       "problems": list(s.road_problems)},
        "ISR": rate(np.ones(ins.n, bool)),
        "semantic_rate": float(res["semantic"].mean()),
        "ISR_by_kind": {k: rate(kinds_a == k) for k in dict.fromkeys(kinds)},
        "ISR_by_level": {lv: rate(levels_a == lv) for lv in dict.fromkeys(levels)},
        "problems": problems,
    }


def to_text(r: dict) -> str:
    f = lambda v, p=3: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    lines = [f"Intention-Drive score of {r['prediction']} on {r['target']}",
             f"samples: {r['samples']}  scored: {r['scored']}",
             f"ADE {f(r['ADE_m'], 2)} m  FDE {f(r['FDE_m'], 2)} m  collision rate {f(r['collision_rate'])} "
             f"(objects {f(r['object_collision_rate'])}, road edges {f(r['off_road_rate'])})  ISR {f(r['ISR'])}",
             f"road edges checked on {r['road_edges']['samples_with_map']} of {r['samples']} samples (the logs' "
             "paved-surface map)" + "".join(f"; {p}" for p in r["road_edges"]["problems"]),
             "ISR by kind: " + ", ".join(f"{k} {f(v)}" for k, v in r["ISR_by_kind"].items()),
             "ISR by level: " + ", ".join(f"{k} {f(v)}" for k, v in r["ISR_by_level"].items())]
    if r["problems"]:
        lines.append(f"problems ({len(r['problems'])}):")
        lines += [f"  item {p['item']}: {p['sample_id']}: {p['problem']}" for p in r["problems"][:20]]
    return "\n".join(lines)
