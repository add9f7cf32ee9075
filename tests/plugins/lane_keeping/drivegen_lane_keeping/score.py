"""``drivegen score lane-keeping --pred PRED TARGET``: mean absolute error of predicted lateral offsets.

TARGET: the lane-keeping export (``RUN/lane_keeping``) or a run folder. PRED: rows with ``scene_id``,
``frame_index`` and ``lateral_offset_m`` (Parquet, JSON or JSON Lines), or ``baseline:straight`` (always 0 m).
"""
from __future__ import annotations

import numpy as np

from drivegen_lane_keeping.export import OFFSETS, SUMMARY
from generator.families.api import InputError, RunReader, RunStore, read_parquet, read_predictions

NAME = "lane-keeping"
HELP = "ego lane keeping: mean absolute error of the lateral offset"


def load_target(target: str) -> dict[tuple[str, int], float]:
    store = RunStore(target)
    if store.exists(SUMMARY):
        t = read_parquet(store.full(OFFSETS), filesystem=store.fs)
        parts = [t]
    else:
        reader = RunReader(target, require=False)
        if not reader.is_run_folder():
            raise InputError(f"{target} is neither a lane-keeping export ({SUMMARY}) nor a drivegen run folder",
                             file=target)
        parts = [p for p in (reader.read_scene("lane_offsets", s) for s in reader.scene_ids()) if p is not None]
    out = {}
    for t in parts:
        for s, f, v in zip(t.column("scene_id").to_pylist(), t.column("frame_index").to_pylist(),
                           t.column("lateral_offset_m").to_pylist()):
            out[(s, int(f))] = float(v)
    return out


def score(pred_path: str, target: str, splits=None, **_) -> dict:

    truth = load_target(target)
    problems = []
    if pred_path == "baseline:straight":
        pred = {k: 0.0 for k in truth}
    else:
        rows = read_predictions(pred_path)
        if not isinstance(rows, list):
            raise InputError(f"{pred_path}: expected a list of rows with scene_id, frame_index, lateral_offset_m",
                             file=pred_path)
        pred = {}
        for i, r in enumerate(rows):
            try:
                key = (str(r["scene_id"]), int(r["frame_index"]))
                v = float(r["lateral_offset_m"])
            except (KeyError, TypeError, ValueError) as err:
                problems.append({"item": i, "problem": f"unusable row: {type(err).__name__}: {err}"})
                continue
            if key not in truth:
                problems.append({"item": i, "problem": f"no such keyframe {key}"})
            elif not np.isfinite(v):
                problems.append({"item": i, "problem": "lateral_offset_m is not finite"})
            else:
                pred[key] = v
    keys = sorted(set(pred) & set(truth))
    abs_err = np.abs(np.array([pred[k] - truth[k] for k in keys])) if keys else np.zeros(0)
    return {"family": "lane_keeping", "samples": len(truth), "scored": len(keys),
            "missing": len(truth) - len(keys), "mae_m": float(abs_err.mean()) if len(abs_err) else None,
            "problems": problems}


def to_text(result: dict) -> str:
    mae = "n/a" if result["mae_m"] is None else f"{result['mae_m']:.3f} m"
    return (f"lane keeping: MAE {mae} over {result['scored']} of {result['samples']} keyframes "
            f"({result['missing']} missing, {len(result['problems'])} problems)")
