"""STRIDE-QA-Bench export (STRIDE-QA §5.2, App. C): scene groups around one target agent, 13 QA each,
in the exact files the public STRIDE-QA-Bench toolkit reads.

Format (read from ``turingmotors/STRIDE-QA-Dataset``, folder ``benchmarks/STRIDE-QA-Bench``):

* ``src/strideqa_bench/inference/inference.py`` globs ``<annotation-dir>/strideqa_bench*.json``, takes the
  horizon from the last character of the file stem (``..._t2.json`` -> 2), loads each file as a JSON list
  of questions and, per question, requires ``rle`` with a ``current`` entry, opens ``images[i]`` under
  ``--image-folder`` and decodes ``rle[bucket]`` with ``pycocotools.mask.decode`` for buckets
  ``prev_3, prev_2, prev_1, current`` (images in that order, current last), marking ``region_id`` on it
  (Set-of-Mark); the model adapters read ``question``. Each output row is the question plus ``pred``.
* ``src/strideqa_bench/benchmark.py`` maps ``qa_category`` to a time (``TIME_BUCKET``: 13 categories,
  4 at t0 and 3 at each of t1..t3) and to ego/target, takes the group id from ``question_id``
  (``q<digits>_g<digits>`` -> ``g<digits>``), and for every ``qa_type, gt_value`` in the ``gt_value`` dict
  reads ``unit[qa_type]`` and the tolerance ``config["tolerance"][qa_type]``; ``qa_type`` is one of
  ``distance``, ``direction``, ``velocity`` (``config/tolerance.yaml``; ``utils/parser.py`` parses the
  prediction per type). LSR pairs ``distance`` and ``direction`` per group, time and subject, so the
  t1..t3 distance questions carry both quantities (t0 direction is its own bearing question).
  ``<annotation-dir>/annotation_sheet.csv`` gives ``group_id, object_type, relation`` (relation = the
  scenario) per group.
* ``config/prompt.yaml``: the four images are t = -1.5, -1.0, -0.5, 0 s; answers are one sentence with
  numbers and units ("... 20.12 meters", "... -24 degrees", "... 11.77 m/s").

Layout written: ``OUT/bench/annotation_files/strideqa_bench_t{0..3}.json``,
``OUT/bench/annotation_files/annotation_sheet.csv``, ``OUT/bench/images/<front camera>/*.jpg`` (the
toolkit's ``--image-folder`` is ``OUT/bench``) and ``OUT/bench/export_summary.json`` (counts, drops,
scenario x OOV table like App. C Table 8).

Values: distance = 3D distance ego origin -> box centre, direction = bearing (0 ahead, CCW positive,
[-180, 180]), both in the ego frame at the target time; velocities are ground speeds (ATTRIBUTES
``ego_speed_mps`` / ``speed_mps``). A group is dropped when a frame of its window is missing, the
target is not tracked over the whole window, it has no mask in the front camera in one of the four
context frames or is not visible there at t0, the images are missing, a value is not finite (e.g. the
speed of a single-observation track), or it is not dynamic.
"""
from __future__ import annotations

import csv
import io
import json
import logging
import os
import shutil
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pycocotools import mask as mask_utils

from generator.geometry import SE3
from generator.projection import project_boxes
from generator.runfolder import RunFolder, safe_name
from generator.types import Boxes3D, CameraCalib
from generator.writers.wds import read_jpeg
from schemas.config import PipelineConfig, load_config
from schemas.tables import ATTRIBUTES, FRAMES, OBJECTS, PROJECTIONS, read_parquet

log = logging.getLogger(__name__)

BENCH_DIR = "bench"
ANNOTATION_DIR = "annotation_files"
CONTEXT_BUCKETS = ("prev_3", "prev_2", "prev_1", "current")
SCENARIOS = ("Oncoming Pass", "Maintain State", "Overtake", "Path Divergence", "Pulling Away From Ego",
             "Minor Relations")
# (qa_category, horizon index t, quantities in gt_value), in the order each group's 13 questions get ids
QA_CATEGORIES = (
    ("ego_distance_data", 0, ("distance",)),
    ("target_bearing_angle_data", 0, ("direction",)),
    ("ego_speed_data", 0, ("velocity",)),
    ("target_speed_data", 0, ("velocity",)),
    *((f"ego_distance_data_4d_t{t}", t, ("distance", "direction")) for t in (1, 2, 3)),
    *((f"ego_speed_data_4d_t{t}", t, ("velocity",)) for t in (1, 2, 3)),
    *((f"target_speed_data_4d_t{t}", t, ("velocity",)) for t in (1, 2, 3)),
)
UNITS = {"distance": "meters", "direction": "degrees", "velocity": "m/s"}
# nuScenes detection class -> STRIDE-QA-Bench object type (App. C Table 9)
OBJECT_TYPES = {"car": "vehicle", "truck": "large vehicle", "trailer": "large vehicle",
                "construction_vehicle": "large vehicle", "bus": "bus", "pedestrian": "pedestrian",
                "bicycle": "bicycle", "motorcycle": "motorcycle"}


# ------------------------------------------------------------------------------------------ scenarios
def wrap_deg(a):
    return (np.asarray(a, dtype=np.float64) + 180.0) % 360.0 - 180.0


@dataclass(frozen=True)
class ScenarioThresholds:
    """Thresholds of ``classify_scenario`` (metres, degrees, m/s)."""

    same_dir_deg: float = 45.0  # |relative heading| below: travelling the same way as the ego
    opposite_dir_deg: float = 135.0  # |relative heading| above: travelling against the ego
    pass_x_m: float = 0.0  # the target counts as passed once its centre is behind this x (ego frame)
    diverge_deg: float = 30.0  # relative heading change over the window that makes the paths diverge
    ahead_bearing_deg: float = 30.0  # "ahead of the ego": |bearing| below this at t0
    pull_away_m: float = 3.0  # distance gained over the future horizon for Pulling Away From Ego
    maintain_m: float = 2.5  # |distance change| over the window allowed for Maintain State
    maintain_rel: float = 0.15  # ... or this fraction of the t0 distance, whichever is larger


def classify_scenario(rel_xy_m, times_s, rel_heading_deg, *, t_now_s: float = 0.0,
                      thresholds: ScenarioThresholds = ScenarioThresholds()) -> str:
    """Scenario of one scene group (App. C.2) from the target's trajectory relative to the ego.

    rel_xy_m (T, 2): target box centre in the ego frame *of each time* (x forward, y left, metres);
    times_s (T,): seconds, increasing, covering context and future (e.g. -1.5 .. +3); rel_heading_deg
    (T,): target yaw in the ego frame of each time (0 = same heading as the ego). ``t_now_s`` marks t0.
    Rules, first match wins (thresholds in ``ScenarioThresholds``):

    1. Path Divergence: the relative heading changes by more than diverge_deg between the first and the
       last time of the window: one of the two turned away from the other's path (checked first: a
       vehicle that turns off ahead also ends up behind the ego's origin, which is not an overtake).
    2. Oncoming Pass: heading against the ego all along (|h| > opposite_dir_deg), in front at t0
       (x > pass_x_m) and behind (x < pass_x_m) at some future time: it came towards and passed the ego.
    3. Overtake: same heading all along (|h| < same_dir_deg), in front at t0, behind later: the ego
       passed it.
    4. Pulling Away From Ego: same heading, ahead (|bearing| < ahead_bearing_deg, x > 0) at t0, and the
       distance grows by more than pull_away_m from t0 to the last time.
    5. Maintain State: same heading and the distance changes by at most max(maintain_m,
       maintain_rel * distance at t0) over the whole window.
    6. Minor Relations: everything else (targets overtaking the ego, crossing pedestrians, distant
       crossings, partial manoeuvres).
    """
    th = thresholds
    p = np.asarray(rel_xy_m, dtype=np.float64).reshape(-1, 2)
    t = np.asarray(times_s, dtype=np.float64).reshape(-1)
    h = np.asarray(rel_heading_deg, dtype=np.float64).reshape(-1)
    if not (len(p) == len(t) == len(h)) or len(t) < 2:
        raise ValueError(f"classify_scenario: rel_xy_m {p.shape}, times_s {t.shape} and rel_heading_deg "
                         f"{h.shape} must have the same length >= 2")
    if np.any(np.diff(t) <= 0):
        raise ValueError("classify_scenario: times_s must increase")
    i0 = int(np.argmin(np.abs(t - t_now_s)))
    fut = t > t[i0]
    dist = np.hypot(p[:, 0], p[:, 1])
    habs = np.abs(wrap_deg(h))
    if abs(wrap_deg(h[-1] - h[0])) > th.diverge_deg:
        return "Path Divergence"
    passed = bool(p[i0, 0] > th.pass_x_m and fut.any() and (p[fut, 0] < th.pass_x_m).any())
    if passed and (habs > th.opposite_dir_deg).all():
        return "Oncoming Pass"
    if passed and (habs < th.same_dir_deg).all():
        return "Overtake"
    h0 = habs[i0]
    same = h0 < th.same_dir_deg
    bearing0 = np.degrees(np.arctan2(p[i0, 1], p[i0, 0]))
    if same and p[i0, 0] > 0 and abs(bearing0) < th.ahead_bearing_deg and dist[-1] - dist[i0] > th.pull_away_m:
        return "Pulling Away From Ego"
    if same and np.ptp(dist) <= max(th.maintain_m, th.maintain_rel * dist[i0]):
        return "Maintain State"
    return "Minor Relations"


def is_dynamic(target_speed_mps, threshold_mps: float) -> bool:
    """A group is dynamic when the target itself moves: its mean ground speed over the window exceeds
    ``threshold_mps``. (Relative motion alone would drop Maintain State, the bench's second largest
    scenario, and keep parked cars the ego drives past.)"""
    v = np.asarray(target_speed_mps, dtype=np.float64)
    v = v[np.isfinite(v)]
    return bool(len(v) and v.mean() > threshold_mps)


# ------------------------------------------------------------------------------------------ groups
@dataclass
class SceneInputs:
    """One scene's tables: FRAMES, ATTRIBUTES, PROJECTIONS (schemas.tables), the scene's
    ego_spatiotemporal QA rows (or None: every anchor x tracked object is a candidate) and, optionally,
    OBJECTS (for instance tokens)."""

    scene_id: str
    frames: pa.Table
    attributes: pa.Table
    projections: pa.Table
    qa: pa.Table | None = None
    objects: pa.Table | None = None


@dataclass
class Group:
    scene_id: str
    keyframe_index: int
    track_id: int
    class_name: str
    instance_token: str
    split: str | None
    context_frames: list[int]  # 4 frame indices, prev_3 .. current
    horizon_frames: list[int]  # frame index at t0 .. t3
    context_tokens: list[str]
    image_paths: list[str]  # source image of each context frame (front camera)
    rles: list[dict]  # COCO RLE per context frame
    distance_m: np.ndarray  # (4,) per horizon
    bearing_deg: np.ndarray
    ego_speed_mps: np.ndarray
    target_speed_mps: np.ndarray
    oov: bool
    scenario: str
    front_camera: str
    extra: dict = field(default_factory=dict)


def front_camera_name(frames: pa.Table, preferred: str) -> str:
    """``preferred`` when the frames have it, else the camera whose optical axis points most along +x."""
    cams = frames.column("cameras")[0].as_py() if frames.num_rows else []
    names = [c["name"] for c in cams]
    if preferred in names:
        return preferred
    if not cams:
        raise ValueError("frames carry no cameras")
    fwd = [np.asarray(c["ego_SE3_cam"], dtype=np.float64).reshape(4, 4)[0, 2] for c in cams]
    return names[int(np.argmax(fwd))]


def _calib(cam: dict) -> CameraCalib:
    return CameraCalib(cam["name"], np.asarray(cam["K"], dtype=np.float64).reshape(3, 3),
                       SE3.from_matrix(np.asarray(cam["ego_SE3_cam"], dtype=np.float64).reshape(4, 4)),
                       int(cam["width_px"]), int(cam["height_px"]))


def _nearest_frames(ts_us: np.ndarray, fidx: np.ndarray, wanted_us: np.ndarray, tol_us: float) -> np.ndarray:
    """Frame index nearest to each wanted time (any shape); -1 where none lies within ``tol_us``."""
    order = np.argsort(ts_us)
    ts, fi = ts_us[order], fidx[order]
    w = wanted_us.ravel()
    j = np.clip(np.searchsorted(ts, w), 1, len(ts) - 1) if len(ts) > 1 else np.zeros(len(w), dtype=np.int64)
    left = np.maximum(j - 1, 0)
    pick = np.where(np.abs(ts[left] - w) <= np.abs(ts[j] - w), left, j)
    out = np.where(np.abs(ts[pick] - w) <= tol_us, fi[pick], -1)
    return out.reshape(wanted_us.shape)


def _index(df: pd.DataFrame, keys: list[str]) -> pd.MultiIndex:
    return pd.MultiIndex.from_frame(df[keys])


def scene_groups(inp: SceneInputs, cfg: PipelineConfig, drops: Counter | None = None) -> list[Group]:
    """Scene groups of one scene (pure: tables in, groups out). ``drops`` counts dropped candidates by
    reason. Groups come sorted by (keyframe, track); repetitive groups (same target and scenario within
    one horizon of an earlier kept group) are dropped."""
    drops = drops if drops is not None else Counter()
    kcfg, qcfg = cfg.keyframes, cfg.qa
    frames = inp.frames
    if frames.num_rows == 0 or inp.attributes.num_rows == 0:
        return []
    front = front_camera_name(frames, qcfg.front_camera)
    fidx = frames.column("frame_index").to_numpy().astype(np.int64)
    ts = frames.column("timestamp_us").to_numpy().astype(np.int64)
    ts_of = dict(zip(fidx.tolist(), ts.tolist()))

    # candidates: (keyframe, track, split)
    if inp.qa is not None and inp.qa.num_rows:
        st = inp.qa.filter(pc.equal(inp.qa.column("family"), "ego_spatiotemporal"))
        cand = pd.DataFrame({"keyframe_index": st.column("keyframe_index").to_numpy(),
                             "track_id": pc.list_element(st.column("track_ids"), 0).to_numpy(zero_copy_only=False),
                             "split": st.column("split").to_numpy(zero_copy_only=False)})
    else:
        anchors = set(fidx[frames.column("is_anchor").to_numpy(zero_copy_only=False).astype(bool)].tolist())
        att = inp.attributes.select(["frame_index", "track_id"]).to_pandas()
        cand = att[att["frame_index"].isin(anchors)].rename(columns={"frame_index": "keyframe_index"})
        cand["split"] = None
    cand = cand.dropna(subset=["track_id"]).drop_duplicates(["keyframe_index", "track_id"])
    cand = cand.sort_values(["keyframe_index", "track_id"]).reset_index(drop=True)
    if cand.empty:
        return []
    n = len(cand)

    # window times: 4 context frames at context_rate_hz ending at t0, then the horizons
    ctx_off = -np.arange(3, -1, -1) / kcfg.context_rate_hz
    hor_off = np.asarray(qcfg.horizons_s, dtype=np.float64)
    if len(hor_off) != 4:
        raise ValueError(f"STRIDE-QA-Bench needs 4 horizons (t0..t3); qa.horizons_s is {qcfg.horizons_s}")
    win_off = np.unique(np.concatenate([ctx_off, hor_off]))
    kf_ts = np.array([ts_of.get(int(k), -1) for k in cand["keyframe_index"]], dtype=np.int64)
    win_frames = _nearest_frames(ts, fidx, kf_ts[:, None] + np.round(win_off * 1e6)[None, :].astype(np.int64),
                                 kcfg.match_tolerance_s * 1e6)
    win_frames[kf_ts < 0] = -1
    ok = (win_frames >= 0).all(axis=1)
    drops["missing_frame"] += int((~ok).sum())
    ctx_cols = np.searchsorted(win_off, ctx_off)
    hor_cols = np.searchsorted(win_off, hor_off)

    # attributes at every window frame
    att = inp.attributes.select(["frame_index", "track_id", "class_name", "x_ego_m", "y_ego_m", "z_ego_m",
                                 "distance_m", "bearing_deg", "length_m", "width_m", "height_m", "speed_mps",
                                 "heading_ego_deg", "ego_speed_mps"]).to_pandas()
    att_idx = _index(att, ["frame_index", "track_id"])
    tid = cand["track_id"].to_numpy().astype(np.int64)
    rows = att_idx.get_indexer(pd.MultiIndex.from_arrays([win_frames.ravel(), np.repeat(tid, len(win_off))]))
    rows = rows.reshape(n, len(win_off))
    tracked = (rows >= 0).all(axis=1)
    drops["track_lost"] += int((ok & ~tracked).sum())
    ok &= tracked
    safe_rows = np.where(rows >= 0, rows, 0)
    A = {c: att[c].to_numpy()[safe_rows] for c in att.columns if c not in ("frame_index", "track_id")}

    # front-camera masks in the context frames
    pr = inp.projections.filter(pc.equal(inp.projections.column("camera"), front))
    prd = pd.DataFrame({"frame_index": pr.column("frame_index").to_numpy(), "track_id": pr.column("track_id").to_numpy(),
                        "visible": pr.column("visible").to_numpy(zero_copy_only=False).astype(bool)})
    masks = pr.column("mask_rle").to_pylist()
    has_mask = np.array([m is not None and bool(m["counts"]) for m in masks], dtype=bool)
    if has_mask.any():
        area = np.zeros(len(masks))
        area[has_mask] = mask_utils.area([{"size": list(m["size"]), "counts": m["counts"].encode()}
                                          for m, h in zip(masks, has_mask) if h])
        has_mask &= area > 0
    ctx_frames = win_frames[:, ctx_cols]
    prow = _index(prd, ["frame_index", "track_id"]).get_indexer(
        pd.MultiIndex.from_arrays([ctx_frames.ravel(), np.repeat(tid, 4)])).reshape(n, 4)
    mask_ok = (prow >= 0) & has_mask[np.where(prow >= 0, prow, 0)]
    vis_now = (prow[:, 3] >= 0) & prd["visible"].to_numpy()[np.where(prow[:, 3] >= 0, prow[:, 3], 0)]
    good_mask = mask_ok.all(axis=1) & vis_now
    drops["no_front_mask"] += int((ok & ~good_mask).sum())
    ok &= good_mask

    # images of the context frames
    cams_by_frame = {int(f): {c["name"]: c for c in cl} for f, cl in
                     zip(fidx.tolist(), frames.column("cameras").to_pylist())}
    img = np.array([[cams_by_frame.get(int(f), {}).get(front, {}).get("image_path") or "" for f in r]
                    for r in ctx_frames], dtype=object).reshape(n, 4)
    has_img = (img != "").all(axis=1)
    drops["no_image"] += int((ok & ~has_img).sum())
    ok &= has_img

    # out of view: the target's box misses the front camera in some future frame (t1..t3)
    fut_cols = hor_cols[hor_off > 0]
    fut_frames = win_frames[:, fut_cols]
    in_view = np.ones((n, len(fut_cols)), dtype=bool)
    for f in np.unique(fut_frames[ok]):
        cam = cams_by_frame.get(int(f), {}).get(front)
        sel = ok[:, None] & (fut_frames == f)
        if cam is None or not sel.any():
            continue
        gi, ci = np.nonzero(sel)
        cols = fut_cols[ci]
        boxes = Boxes3D(np.stack([A["x_ego_m"][gi, cols], A["y_ego_m"][gi, cols], A["z_ego_m"][gi, cols]], 1),
                        np.stack([A["length_m"][gi, cols], A["width_m"][gi, cols], A["height_m"][gi, cols]], 1),
                        np.radians(A["heading_ego_deg"][gi, cols]), np.full(len(gi), "x", dtype=object))
        in_view[gi, ci] = project_boxes(boxes, _calib(cam))[2]
    oov = ~in_view.all(axis=1)

    # dynamic filter and scenario
    win_t = win_off
    groups: list[Group] = []
    inst = _instance_tokens(inp.objects, ctx_frames[:, 3], tid)
    token_of = dict(zip(fidx.tolist(), frames.column("token").to_pylist()))
    finite = np.ones(n, dtype=bool)
    for c in ("distance_m", "bearing_deg", "speed_mps", "ego_speed_mps", "x_ego_m", "y_ego_m", "heading_ego_deg"):
        finite &= np.isfinite(A[c].astype(np.float64)).all(axis=1)
    drops["non_finite_value"] += int((ok & ~finite).sum())
    ok &= finite
    for g in np.flatnonzero(ok):
        if not is_dynamic(A["speed_mps"][g], qcfg.dynamic_speed_mps):
            drops["static"] += 1
            continue
        rel = np.stack([A["x_ego_m"][g], A["y_ego_m"][g]], axis=1)
        scen = classify_scenario(rel, win_t, A["heading_ego_deg"][g])
        hc = hor_cols
        groups.append(Group(
            scene_id=inp.scene_id, keyframe_index=int(cand["keyframe_index"][g]), track_id=int(tid[g]),
            class_name=str(A["class_name"][g, hc[0]]), instance_token=inst[g], split=cand["split"][g],
            context_frames=[int(f) for f in ctx_frames[g]], horizon_frames=[int(f) for f in win_frames[g, hc]],
            context_tokens=[token_of.get(int(f)) or "" for f in ctx_frames[g]],
            image_paths=[str(p) for p in img[g]],
            rles=[{"size": [int(s) for s in masks[r]["size"]], "counts": masks[r]["counts"]} for r in prow[g]],
            distance_m=A["distance_m"][g, hc].astype(np.float64), bearing_deg=A["bearing_deg"][g, hc].astype(np.float64),
            ego_speed_mps=A["ego_speed_mps"][g, hc].astype(np.float64),
            target_speed_mps=A["speed_mps"][g, hc].astype(np.float64),
            oov=bool(oov[g]), scenario=scen, front_camera=front))
    return _drop_repeats(groups, float(hor_off.max()), ts_of, drops)


def _instance_tokens(objects: pa.Table | None, frame_index: np.ndarray, track_id: np.ndarray) -> list[str]:
    if objects is None or objects.num_rows == 0:
        return [""] * len(track_id)
    o = objects.select(["frame_index", "track_id", "instance_token"]).to_pandas()
    r = _index(o, ["frame_index", "track_id"]).get_indexer(pd.MultiIndex.from_arrays([frame_index, track_id]))
    tok = o["instance_token"].to_numpy()
    return [(tok[i] or "") if i >= 0 else "" for i in r]


def _drop_repeats(groups: list[Group], gap_s: float, ts_of: dict, drops: Counter) -> list[Group]:
    """Keep, per (track, scenario), groups at least ``gap_s`` apart (earliest first): consecutive
    keyframes of one manoeuvre would otherwise repeat the same question set."""
    last: dict[tuple[int, str], int] = {}
    kept = []
    for g in sorted(groups, key=lambda g: (g.keyframe_index, g.track_id)):
        t = ts_of[g.keyframe_index]
        k = (g.track_id, g.scenario)
        if k in last and (t - last[k]) < gap_s * 1e6 - 1:
            drops["repetitive"] += 1
            continue
        last[k] = t
        kept.append(g)
    return kept


# ------------------------------------------------------------------------------------------ records
def _num(x: float, decimals: int) -> float:
    return float(round(float(x), decimals))


def _seconds(t: int) -> str:
    return "1 second" if t == 1 else f"{t} seconds"


def group_questions(g: Group, decimals: int = 2) -> list[dict]:
    """The 13 questions of a group, in ``QA_CATEGORIES`` order, without ids or images: qa_category,
    horizon t, question, gt (one sentence stating the values with units), gt_value, unit."""
    out = []
    for cat, t, qtypes in QA_CATEGORIES:
        d, b = _num(g.distance_m[t], decimals), _num(g.bearing_deg[t], decimals)
        ve, vt = _num(g.ego_speed_mps[t], decimals), _num(g.target_speed_mps[t], decimals)
        if cat == "ego_distance_data":
            q, a = "How far is Region [0] from the ego vehicle?", f"Region [0] is {d} meters away."
        elif cat == "target_bearing_angle_data":
            q = ("At what angle is Region [0] from the ego vehicle's heading (degrees, counter-clockwise "
                 "positive)?")
            a = f"Region [0] is at {b} degrees."
        elif cat == "ego_speed_data":
            q, a = "What is the ego vehicle's current speed?", f"Ego speed is {ve} m/s."
        elif cat == "target_speed_data":
            q, a = "What is the current speed of Region [0]?", f"Region [0] is moving at {vt} m/s."
        elif cat.startswith("ego_distance_data_4d"):
            q = (f"In {_seconds(t)}, how far from the ego vehicle will Region [0] be, and at what angle "
                 "(degrees, counter-clockwise positive)?")
            a = f"In {_seconds(t)} they are {d} meters at {b} degrees."
        elif cat.startswith("ego_speed_data_4d"):
            q, a = f"What will the ego vehicle's speed be after {_seconds(t)}?", f"Ego speed after {_seconds(t)} is {ve} m/s."
        else:
            q = f"What will the speed of Region [0] be after {_seconds(t)}?"
            a = f"Region [0] speed after {_seconds(t)} is {vt} m/s."
        vals = {"distance": d, "direction": b,
                "velocity": ve if cat.startswith("ego_speed") else vt}
        out.append({"qa_category": cat, "t": t, "question": q, "gt": a,
                    "gt_value": {k: vals[k] for k in qtypes}, "unit": {k: UNITS[k] for k in qtypes}})
    return out


def bench_image_name(g: Group, k: int) -> str:
    """Image path of context frame ``k`` relative to the bench folder (the toolkit's --image-folder)."""
    return f"images/{g.front_camera}/{safe_name(g.scene_id)}_{g.context_frames[k]:06d}.jpg"


def bench_records(groups: list[Group], decimals: int = 2) -> tuple[dict[int, list[dict]], list[dict]]:
    """Annotation records per horizon {t: [record, ...]} and annotation-sheet rows for ``groups``.

    question_id = ``q<N:08d>_g<M:05d>`` (N counts questions over the export, M groups), group_id =
    ``g<M:05d>``; every record carries the four context images, the RLE per bucket and region 0."""
    per_t: dict[int, list[dict]] = {0: [], 1: [], 2: [], 3: []}
    sheet = []
    n = 0
    for m, g in enumerate(groups):
        gid = f"g{m:05d}"
        images = [bench_image_name(g, k) for k in range(4)]
        rle = dict(zip(CONTEXT_BUCKETS, g.rles))
        token_info = {"scene_id": g.scene_id, "keyframe_index": g.keyframe_index, "track_id": g.track_id,
                      "instance_token": g.instance_token, "context_frame_indices": g.context_frames,
                      "context_sample_tokens": g.context_tokens, "horizon_frame_indices": g.horizon_frames,
                      "camera": g.front_camera}
        for q in group_questions(g, decimals):
            t = q.pop("t")
            per_t[t].append({"question_id": f"q{n:08d}_{gid}", "group_id": gid, **q, "images": images,
                             "rle": rle, "region_id": 0, "object_class": g.class_name,
                             "object_type": OBJECT_TYPES.get(g.class_name, g.class_name), "relation": g.scenario,
                             "oov": g.oov, "split": g.split, "token_info": token_info})
            n += 1
        sheet.append({"group_id": gid, "object_type": OBJECT_TYPES.get(g.class_name, g.class_name),
                      "relation": g.scenario, "oov": g.oov, "scene_id": g.scene_id,
                      "keyframe_index": g.keyframe_index, "track_id": g.track_id, "class_name": g.class_name,
                      "instance_token": g.instance_token, "split": g.split})
    return per_t, sheet


SHEET_COLUMNS = ("group_id", "object_type", "relation", "oov", "scene_id", "keyframe_index", "track_id",
                 "class_name", "instance_token", "split")


def summarize(groups: list[Group], drops: Counter) -> dict:
    """Counts like App. C Tables 8 (scenario, OOV) and 9 (object types)."""
    scen = {s: {"groups": 0, "oov": 0} for s in SCENARIOS}
    for g in groups:
        scen[g.scenario]["groups"] += 1
        scen[g.scenario]["oov"] += int(g.oov)
    for v in scen.values():
        v["oov_rate"] = round(v["oov"] / v["groups"], 4) if v["groups"] else None
    types = Counter(OBJECT_TYPES.get(g.class_name, g.class_name) for g in groups)
    return {"groups": len(groups), "questions": 13 * len(groups), "scenarios": scen,
            "object_types": dict(types.most_common()), "oov_groups": sum(g.oov for g in groups),
            "dropped": dict(sorted(drops.items()))}


# ------------------------------------------------------------------------------------------ run folder
def _read(path: Path, schema: pa.Schema) -> pa.Table | None:
    return read_parquet(path, schema) if path.exists() else None


def load_scene_inputs(run_dir: str | os.PathLike, splits: list[str] | None = None):
    """Yield ``SceneInputs`` for every scene of a run folder that has attributes (layout: runfolder.py)."""
    rf = RunFolder(run_dir)
    qa_dir = rf.path("qa")
    # QA is scanned with a filter for columns that hold no fixed-size list: no storage cast needed
    qa_ds = ds.dataset(qa_dir, format="parquet") if qa_dir.is_dir() and any(qa_dir.glob("*.parquet")) else None
    for att_path in sorted(rf.path("attributes").glob("*.parquet")):
        if att_path.name.startswith("."):
            continue
        attributes = read_parquet(att_path, ATTRIBUTES)
        if attributes.num_rows == 0:
            continue
        scene_id = attributes.column("scene_id")[0].as_py()
        frames = _read(rf.perception("frames", scene_id), FRAMES)
        projections = _read(rf.perception("projections", scene_id), PROJECTIONS)
        if frames is None or projections is None:
            log.warning("bench export: scene %s lacks perception frames/projections; skipped", scene_id)
            continue
        qa = None
        if qa_ds is not None:
            flt = (ds.field("scene_id") == scene_id) & (ds.field("family") == "ego_spatiotemporal")
            if splits:
                flt &= ds.field("split").isin(splits)
            qa = qa_ds.to_table(filter=flt, columns=["scene_id", "keyframe_index", "family", "track_ids", "split"])
            if qa.num_rows == 0:
                continue
        yield SceneInputs(scene_id, frames, attributes, projections, qa, _read(rf.perception("objects", scene_id), OBJECTS))


def write_bench(groups: list[Group], out_dir: str | os.PathLike, decimals: int = 2,
                image_root: str | os.PathLike | None = None, drops: Counter | None = None) -> dict:
    """Write the bench folder ``out_dir`` (annotation_files/, images/, export_summary.json) atomically:
    built beside it under a temporary name, then swapped in. Returns the summary."""
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex}.tmp")
    try:
        per_t, sheet = bench_records(groups, decimals)
        ann = tmp / ANNOTATION_DIR
        ann.mkdir(parents=True)
        for t, recs in per_t.items():
            (ann / f"strideqa_bench_t{t}.json").write_text(json.dumps(recs, indent=1, ensure_ascii=False))
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(SHEET_COLUMNS), lineterminator="\n")
        w.writeheader()
        w.writerows(sheet)
        (ann / "annotation_sheet.csv").write_text(buf.getvalue())
        done = set()
        for g in groups:
            for k in range(4):
                rel = bench_image_name(g, k)
                if rel in done:
                    continue
                src = Path(g.image_paths[k])
                if not src.is_absolute() and image_root is not None:
                    src = Path(image_root) / src
                dst = tmp / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(read_jpeg(src, g.scene_id))
                done.add(rel)
        summary = summarize(groups, drops or Counter())
        summary["images"] = len(done)
        (tmp / "export_summary.json").write_text(json.dumps(summary, indent=2))
        old = None
        if out.exists():
            old = out.with_name(f".{out.name}.{uuid.uuid4().hex}.old")
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return summary
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def export_bench(run_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None,
                 cfg: PipelineConfig | None = None, splits: list[str] | None = None,
                 image_root: str | os.PathLike | None = None) -> dict:
    """Export a run folder's ego-spatiotemporal groups as STRIDE-QA-Bench files under ``out_dir``
    (default ``RUN/bench``). ``cfg`` defaults to ``RUN/config.yaml`` (or the defaults); ``splits``
    restricts the QA rows used as candidates (e.g. ["val"] for a held-out bench). Returns the summary."""
    run = Path(run_dir)
    if cfg is None:
        cfg = load_config(run / "config.yaml") if (run / "config.yaml").exists() else PipelineConfig()
    drops: Counter = Counter()
    groups: list[Group] = []
    for inp in load_scene_inputs(run, splits):
        groups.extend(scene_groups(inp, cfg, drops))
    return write_bench(groups, out_dir or run / BENCH_DIR, cfg.qa.decimals, image_root, drops)
