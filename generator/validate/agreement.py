"""Label-noise rate of a run: how many of its quantitative QA answers survive swapping perception for labels.

1. Perception answers: the run's own QA rows (``qa/*.parquet``); a run without QA shards gets them
   regenerated from its perception tables (attributes, or ``compute_attributes``; projections) with
   ``generate_qa``.
2. Perception tracks -> label instances: per frame, Hungarian assignment (``scipy.optimize.
   linear_sum_assignment``) on ego-frame centre distance between the run's objects and the log's labels,
   pairs farther apart than ``gate_m`` (default 2 m, the devkit's TP distance) left unmatched.
3. Label answers: the log's labels become the objects (``track_id`` = the source's stable instance id),
   ``compute_attributes`` and ``generate_qa`` run again with the run's config and templates. Visibility is
   taken from the run (its projections with each matched track renamed to its label instance), so both
   runs ask about the same visible objects; the per-keyframe caps (``max_objects_per_keyframe``,
   ``max_pairs_per_keyframe``) are lifted for the label run so every matched target has its questions.
4. A perception answer is compared with the label answer of the same (scene, keyframe, family, question
   type, horizon, target(s)); for an object pair asked in the other order the label value is the same, or
   turned by 180 degrees for a type that says so (``QuestionType.pair_reversed``: the direction). Tolerances (``schemas.config.ToleranceConfig``, STRIDE-QA
   App. C.3) by unit: metres (distance, and the box sizes) within ``distance_rel`` of the label value,
   degrees within ``bearing_deg`` (wrapped), m/s within ``speed_rel`` or ``speed_abs_mps`` when the label
   speed is below ``speed_abs_below_mps``.

``agreement`` is the share of compared answers within tolerance, over object-dependent types (types that
declare ``QuestionType.pose_only``, the ego-speed answers, depend on poses only and are identical by
construction: they are reported per type but left out of the share). Answers whose target matches no label, or whose label answer does not exist, are
counted separately (``unmatched_target``, ``no_label_answer``).
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from scipy.optimize import linear_sum_assignment

from generator.attributes.arrays import fixed_list_to_numpy
from generator.attributes.compute import compute_attributes
from generator.qa import generate_qa, question_types
from generator.qa.templates import load_templates
from generator.sources import frames_table
from generator.types import Boxes3D, Scene
from generator.validate.groundtruth import ValidateInputError
from schemas.config import QAConfig
from schemas.errors import RunFolderError
from schemas.tables import OBJECTS, PROJECTIONS, check_schema

log = logging.getLogger(__name__)



def _most(field: str) -> int:
    """The largest value ``qa.<field>`` accepts (its ``le`` bound): the label QA is as uncapped as a config can be."""
    return next(m.le for m in QAConfig.model_fields[field].metadata if getattr(m, "le", None) is not None)


# ------------------------------------------------------------------------------------------ label objects
def labels_to_objects(scene: Scene, frame_indices: np.ndarray | None = None) -> pa.Table:
    """The scene's labels as OBJECTS rows (global boxes from each frame's pose), ``source`` = 'gt'.

    ``frame_indices``: only these frames (default: every frame with labels).
    """
    want = None if frame_indices is None else set(int(i) for i in frame_indices)
    frames = [f for f in scene.frames if f.labels is not None and (want is None or f.frame_index in want)]
    parts = [f.labels for f in frames]
    if not parts or not sum(len(p) for p in parts):
        return OBJECTS.empty_table()
    counts = np.array([len(p) for p in parts])
    b = Boxes3D.concat(parts)
    R = np.stack([f.city_SE3_ego.rotation for f in frames])[np.repeat(np.arange(len(frames)), counts)]
    t = np.stack([f.city_SE3_ego.translation for f in frames])[np.repeat(np.arange(len(frames)), counts)]
    center_g = np.einsum("nij,nj->ni", R, b.center_m) + t
    yaw_g = b.yaw_rad + np.arctan2(R[:, 1, 0], R[:, 0, 0])
    vel_g = np.einsum("nij,nj->ni", R[:, :2, :2], b.velocity_mps)
    fi = np.repeat([f.frame_index for f in frames], counts)
    ts = np.repeat([f.timestamp_us for f in frames], counts)

    def vec(a, w):
        return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(a, np.float64).reshape(-1)), w)

    t = pa.table({
        "scene_id": pa.array([scene.scene_id] * len(b)), "frame_index": pa.array(fi, pa.int32()),
        "timestamp_us": pa.array(ts, pa.int64()), "track_id": pa.array(b.track_id, pa.int64()),
        "class_name": pa.array(b.class_name.astype(str)), "score": pa.array(np.ones(len(b))),
        "center_ego_m": vec(b.center_m, 3), "size_lwh_m": vec(b.size_lwh_m, 3), "yaw_ego_rad": pa.array(b.yaw_rad),
        "center_global_m": vec(center_g, 3), "yaw_global_rad": pa.array(yaw_g),
        "velocity_ego_mps": vec(b.velocity_mps, 2), "velocity_global_mps": vec(vel_g, 2),
        "num_lidar_pts": pa.array(b.num_lidar_pts, pa.int32()),
        "instance_token": pa.array(b.instance_token.astype(str)),
        "source": pa.array(["gt"] * len(b)),
        "tracker": pa.nulls(len(b), pa.string()),
    })
    return check_schema(t, OBJECTS, f"labels of scene {scene.scene_id}")


# ----------------------------------------------------------------------------------------------- matching
def _xy(table: pa.Table) -> np.ndarray:
    return fixed_list_to_numpy(table.column("center_ego_m"), 3)[:, :2]


def match_tracks(perception: pa.Table, labels: pa.Table, gate_m: float = 2.0) -> pd.DataFrame:
    """Per (scene, frame): Hungarian assignment of perception objects to labels on ego-frame centre distance.

    Returns one row per matched pair: scene_id, frame_index, track_id (perception), gt_track_id, dist_m.
    The loop runs over frames; each frame is one ``linear_sum_assignment`` on an (N_p, N_gt) matrix.
    """
    cols = ["scene_id", "frame_index", "track_id", "gt_track_id", "dist_m"]
    if perception.num_rows == 0 or labels.num_rows == 0:
        return pd.DataFrame({c: [] for c in cols})
    p_tid = perception.column("track_id").to_numpy()
    g_tid = labels.column("track_id").to_numpy()
    vpos = np.flatnonzero(p_tid >= 0)
    p = pd.DataFrame({"scene_id": perception.column("scene_id").to_numpy(zero_copy_only=False)[vpos],
                      "frame_index": perception.column("frame_index").to_numpy()[vpos]})
    g = pd.DataFrame({"scene_id": labels.column("scene_id").to_numpy(zero_copy_only=False),
                      "frame_index": labels.column("frame_index").to_numpy()})
    pxy, gxy = _xy(perception), _xy(labels)
    g_groups = g.groupby(["scene_id", "frame_index"], sort=False).indices
    out = []
    for key, idx in p.groupby(["scene_id", "frame_index"], sort=False).indices.items():
        gi = g_groups.get(key)
        if gi is None:
            continue
        pi = vpos[idx]
        d = np.linalg.norm(pxy[pi][:, None, :] - gxy[gi][None, :, :], axis=-1)
        r, c = linear_sum_assignment(np.where(d <= gate_m, d, gate_m * 1e3))
        ok = d[r, c] <= gate_m
        out.append(pd.DataFrame({"scene_id": key[0], "frame_index": key[1], "track_id": p_tid[pi[r[ok]]],
                                 "gt_track_id": g_tid[gi[c[ok]]], "dist_m": d[r[ok], c[ok]]}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame({c: [] for c in cols})


# ---------------------------------------------------------------------------------------------- comparison
def _quantitative(qa: pa.Table) -> pd.DataFrame:
    q = qa.filter(pc.equal(qa.column("kind"), "quantitative"))
    tr = q.column("track_ids").combine_chunks() if q.num_rows else pa.array([], pa.list_(pa.int64()))
    n = q.num_rows
    lens = pc.list_value_length(tr).to_numpy(zero_copy_only=False) if n else np.zeros(0)
    flat = pc.list_flatten(tr).to_numpy(zero_copy_only=False) if n else np.zeros(0, np.int64)
    starts = np.r_[0, np.cumsum(lens)[:-1]].astype(np.int64) if n else np.zeros(0, np.int64)
    a = np.where(lens >= 1, flat[np.minimum(starts, max(len(flat) - 1, 0))] if len(flat) else -1, -1)
    b = np.where(lens >= 2, flat[np.minimum(starts + 1, max(len(flat) - 1, 0))] if len(flat) else -1, -1)
    hz = q.column("horizon_s").to_numpy(zero_copy_only=False).astype(float) if n else np.zeros(0)
    return pd.DataFrame({
        "qa_id": q.column("qa_id").to_numpy(zero_copy_only=False),
        "scene_id": q.column("scene_id").to_numpy(zero_copy_only=False),
        "keyframe_index": q.column("keyframe_index").to_numpy(zero_copy_only=False).astype(np.int64),
        "family": q.column("family").to_numpy(zero_copy_only=False),
        "question_type": q.column("question_type").to_numpy(zero_copy_only=False),
        "horizon_ms": np.where(np.isfinite(hz), np.round(hz * 1000), -1).astype(np.int64),
        "unit": q.column("unit").to_numpy(zero_copy_only=False),
        "value": q.column("value").to_numpy(zero_copy_only=False).astype(float),
        "a": a.astype(np.int64), "b": b.astype(np.int64)})


def within_tolerance(unit: np.ndarray, pred: np.ndarray, label: np.ndarray, tol) -> np.ndarray:
    """STRIDE-QA tolerances by answer unit ('m', 'degrees', 'm/s'); relative to the label value."""
    unit = np.asarray(unit, dtype=object)
    pred = np.asarray(pred, float)
    label = np.asarray(label, float)
    err = np.abs(pred - label)
    ang = np.abs((pred - label + 180.0) % 360.0 - 180.0)
    speed_ok = np.where(np.abs(label) < tol.speed_abs_below_mps, err <= tol.speed_abs_mps,
                        err <= tol.speed_rel * np.abs(label))
    ok = np.select([unit == "m", unit == "degrees", unit == "m/s"],
                   [err <= tol.distance_rel * np.abs(label), ang <= tol.bearing_deg, speed_ok], default=False)
    return ok & np.isfinite(pred) & np.isfinite(label)


def compare_answers(perception_qa: pa.Table, label_qa: pa.Table, matches: pd.DataFrame, tol) -> dict:
    """Match perception answers to label answers and score them against the tolerances (see module doc)."""
    P = _quantitative(perception_qa)
    G = _quantitative(label_qa)
    m = matches.rename(columns={"frame_index": "keyframe_index"})
    m = m[["scene_id", "keyframe_index", "track_id", "gt_track_id"]]
    m = m.astype({"keyframe_index": np.int64, "track_id": np.int64, "gt_track_id": np.int64})
    for side in ("a", "b"):
        P = P.merge(m.rename(columns={"track_id": side, "gt_track_id": f"g{side}"}),
                    on=["scene_id", "keyframe_index", side], how="left")
    # no target (-1: a question about the ego, or no second target) needs no match
    P["ga"] = np.where(P["a"] < 0, -1, P["ga"].fillna(-2))
    P["gb"] = np.where(P["b"] < 0, -1, P["gb"].fillna(-2))
    P = P.astype({"ga": np.int64, "gb": np.int64})
    matched = ((P.a < 0) | (P.ga >= 0)) & ((P.b < 0) | (P.gb >= 0))
    key = ["scene_id", "keyframe_index", "family", "question_type", "horizon_ms"]
    Gk = G.rename(columns={"a": "ga", "b": "gb", "value": "label_value"})[key + ["ga", "gb", "label_value"]]
    Gk = Gk.drop_duplicates(key + ["ga", "gb"])
    Pm = P[matched].merge(Gk, on=key + ["ga", "gb"], how="left")
    # pairs asked in the other order by the label run
    swap = Gk.rename(columns={"ga": "gb", "gb": "ga", "label_value": "label_value_swapped"})
    Pm = Pm.merge(swap[swap.gb >= 0], on=key + ["ga", "gb"], how="left")
    types = question_types()  # what each question type declares (generator.qa.fields.QuestionType)
    opposite = {k for k, qt in types.items() if qt.pair_reversed == "opposite"}
    pose_only_types = {k for k, qt in types.items() if qt.pose_only}
    turn = pd.Series([(f, q) in opposite for f, q in zip(Pm.family, Pm.question_type)], index=Pm.index, dtype=bool)
    sw = Pm.label_value.isna() & Pm.label_value_swapped.notna()
    Pm.loc[sw, "label_value"] = np.where(turn[sw], (Pm.loc[sw, "label_value_swapped"] + 360.0) % 360.0 - 180.0,
                                         Pm.loc[sw, "label_value_swapped"])
    has = Pm.label_value.notna()
    C = Pm[has].copy()
    C["within"] = within_tolerance(C.unit.to_numpy(), C.value.to_numpy(), C.label_value.to_numpy(), tol)
    C["abs_err"] = np.abs(C.value - C.label_value)
    pose_only = np.array([(f, q) in pose_only_types for f, q in zip(C.family, C.question_type)], dtype=bool)
    scored = C[~pose_only]
    by_type = {}
    for (fam, qt), grp in C.groupby(["family", "question_type"]):
        total = int((P.family.eq(fam) & P.question_type.eq(qt)).sum())
        by_type[f"{fam}/{qt}"] = {"compared": int(len(grp)), "within": int(grp.within.sum()),
                                  "agreement": float(grp.within.mean()), "perception_answers": total,
                                  "median_abs_err": float(grp.abs_err.median()),
                                  "unit": str(grp.unit.iloc[0]),
                                  "pose_only": (fam, qt) in pose_only_types}
    return {
        "agreement": float(scored.within.mean()) if len(scored) else None,
        "compared": int(len(scored)), "within": int(scored.within.sum()),
        "perception_answers": int(len(P)),
        "unmatched_target": int((~matched).sum()),
        "no_label_answer": int((~has).sum()),
        "by_question_type": by_type,
    }


# ------------------------------------------------------------------------------------------------ driver
def label_agreement(rd, es, source, cfg, gate_m: float = 2.0) -> dict:
    """The label-noise section of the report (see module doc). ``rd``: RunData, ``es``: EvalSet,
    ``source``: the LogSource the run read, ``cfg``: the run's PipelineConfig."""
    scenes = es.scenes
    objects = rd.objects.filter(pc.is_in(rd.objects.column("scene_id"), pa.array(scenes)))
    try:
        projections = rd.reader.read_table("projections", scenes)
        qa = rd.reader.read_table("qa", scenes)
    except RunFolderError as err:
        raise ValidateInputError(f"cannot read the run's tables: {err.message}", file=err.file) from None
    templates = load_templates(cfg)
    loaded = {s: source.load_scene(s) for s in scenes}
    frames = (rd.frames.filter(pc.is_in(rd.frames.column("scene_id"), pa.array(scenes))) if rd.frames is not None
              else pa.concat_tables([frames_table(sc) for sc in loaded.values()]))
    note = ""
    if qa is None:
        if projections is None:
            return {"agreement": None, "note": "the run has neither QA shards (qa/) nor projections "
                                               "(perception/projections/): no questions to compare"}
        attrs = rd.reader.read_table("attributes", scenes)
        if attrs is None:
            attrs = compute_attributes(objects, frames, cfg.ego)
        qa = generate_qa(frames, attrs, projections, cfg, templates)
        note = "perception QA regenerated from the run's perception tables (the run has no qa/ shards). "
    if projections is None:
        return {"agreement": None, "note": "the run has QA but no projections (perception/projections/): "
                                           "the label run cannot reuse its visibility decisions"}
    fi_of = {s: pc.filter(frames.column("frame_index"), pc.equal(frames.column("scene_id"), s)).to_numpy()
             for s in scenes}
    labels = pa.concat_tables([labels_to_objects(loaded[s], fi_of[s]) for s in scenes])
    matches = match_tracks(objects, labels, gate_m)
    # the run's visibility decisions, renamed to label instances
    pj = pd.DataFrame({"scene_id": projections.column("scene_id").to_numpy(zero_copy_only=False),
                       "frame_index": projections.column("frame_index").to_numpy().astype(np.int64),
                       "track_id": projections.column("track_id").to_numpy()})
    mm = matches.astype({"frame_index": np.int64, "track_id": np.int64})
    pj = pj.reset_index().merge(mm, on=["scene_id", "frame_index", "track_id"], how="inner")
    gt_proj = projections.take(pa.array(pj["index"].to_numpy(), pa.int64()))
    gt_proj = gt_proj.set_column(gt_proj.schema.get_field_index("track_id"), "track_id",
                                 pa.array(pj["gt_track_id"].to_numpy(np.int64), pa.int64()))
    label_cfg = cfg.model_copy(deep=True)
    label_cfg.qa.max_objects_per_keyframe = _most("max_objects_per_keyframe")
    label_cfg.qa.max_pairs_per_keyframe = _most("max_pairs_per_keyframe")
    label_attrs = compute_attributes(labels, frames, cfg.ego)
    label_qa = generate_qa(frames, label_attrs, check_schema(gt_proj, PROJECTIONS), label_cfg, templates)
    out = compare_answers(qa, label_qa, matches, cfg.tolerances)
    out["matched_pairs"] = int(len(matches))
    out["median_match_dist_m"] = float(matches.dist_m.median()) if len(matches) else None
    out["gate_m"] = gate_m
    out["tolerances"] = cfg.tolerances.model_dump()
    out["note"] = note + (
        "Share of quantitative answers (object-dependent types) within STRIDE-QA's tolerances of the answer the "
        "labels give for the same scene, keyframe, question type, horizon and target (perception tracks matched "
        f"to label instances per frame by Hungarian assignment on centre distance, gate {gate_m:g} m).")
    return out
