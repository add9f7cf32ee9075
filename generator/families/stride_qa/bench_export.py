"""STRIDE-QA-Bench export (STRIDE-QA §5.2, App. C): scene groups around one target agent, 9 QA each, and 13 in
the first group of a keyframe (the four ego-speed questions once per keyframe: in its first group), in the exact
files the public STRIDE-QA-Bench toolkit reads.

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
  scenario) per group. ``visualize/visualize.py`` plots LSR per relation under hard-coded names
  (``Path_Divergence_at_Intersection``, ``Other_Pulling_Away_From_Ego``, ...; any other is a "minor
  relation"), so ``relation`` is written in that spelling (``schemas.vocab.BENCH_SCENARIOS``: ``toolkit``).
* ``config/prompt.yaml``: the four images are t = -1.5, -1.0, -0.5, 0 s; answers are one sentence with
  numbers and units ("... 20.12 meters", "... -24 degrees", "... 11.77 m/s"). drivegen prints every
  number like its QA (``cfg.qa.decimals`` digits, ``generator.qa.render.format_fixed``) and stores as
  ``gt_value`` the number the sentence states.

Layout written: ``OUT/bench/annotation_files/strideqa_bench_t{0..3}.json``,
``OUT/bench/annotation_files/annotation_sheet.csv``, ``OUT/bench/images/<front camera>/*.jpg`` (the
toolkit's ``--image-folder`` is ``OUT/bench``) and ``OUT/bench/export_summary.json`` (counts, drops,
scenario x OOV table like App. C Table 8).

Values: distance = 3D distance ego origin -> box centre, direction = bearing (0 ahead, CCW positive,
[-180, 180]), both in the ego frame at the target time; velocities are ground speeds (ATTRIBUTES
``ego_speed_mps`` / ``speed_mps``). A group is dropped when a frame of its window is missing, the
target is not tracked over the whole window, the images are missing, it has no mask in the front camera in
one of the four context frames or is not visible there at t0, a value is not finite (e.g. the speed of a
single-observation track), or it is not dynamic (``DROP_REASONS``).
"""
from __future__ import annotations

import csv
import io
import json
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
import itertools
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pycocotools import mask as mask_utils

from generator.geometry import SE3
from generator.projection import project_boxes
from generator.qa.render import format_fixed
from generator.sources.keyframes import nearest_frame_rows
from generator.sources.remote import is_remote
from generator.types import Boxes3D, CameraCalib
from generator.writers.wds import read_jpeg
from generator.families.stride_qa.config import ScenarioConfig
from schemas.config import PipelineConfig
from schemas.layout import safe_name
from generator.families.stride_qa.vocab import BENCH_SCENARIO_NAMES, SCENARIO_NAME, TOOLKIT_RELATION
from generator.qa.generate import make_plan
from generator.sources import front_camera_images

log = logging.getLogger(__name__)

ANNOTATION_DIR = "annotation_files"
EXPORT_SUMMARY = "export_summary.json"
EXPORT_FORMAT = "drivegen-strideqa-bench/1"  # marks a folder as a drivegen export (replaced only if it is one)
CONTEXT_BUCKETS = ("prev_3", "prev_2", "prev_1", "current")
SCENARIOS = BENCH_SCENARIO_NAMES  # what ``classify_scenario`` returns (readable names)
RELATIONS = tuple(TOOLKIT_RELATION[s] for s in SCENARIOS)  # what the export writes: the toolkit's spelling
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


def classify_scenario(rel_xy_m, times_s, rel_heading_deg, *, t_now_s: float = 0.0,
                      thresholds: ScenarioConfig | None = None) -> str:
    """Scenario of one scene group (App. C.2) from the target's trajectory relative to the ego.

    rel_xy_m (T, 2): target box centre in the ego frame *of each time* (x forward, y left, metres);
    times_s (T,): seconds, increasing, covering context and future (e.g. -1.5 .. +3); rel_heading_deg
    (T,): target yaw in the ego frame of each time (0 = same heading as the ego). ``t_now_s`` marks t0.
    Rules, first match wins (thresholds: ``cfg.bench.scenario``, ``schemas.config.ScenarioConfig``):

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
    th = thresholds or ScenarioConfig()
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
        return SCENARIO_NAME["path_divergence"]
    passed = bool(p[i0, 0] > th.pass_x_m and fut.any() and (p[fut, 0] < th.pass_x_m).any())
    if passed and (habs > th.opposite_dir_deg).all():
        return SCENARIO_NAME["oncoming_pass"]
    if passed and (habs < th.same_dir_deg).all():
        return SCENARIO_NAME["overtake"]
    h0 = habs[i0]
    same = h0 < th.same_dir_deg
    bearing0 = np.degrees(np.arctan2(p[i0, 1], p[i0, 0]))
    if same and p[i0, 0] > 0 and abs(bearing0) < th.ahead_bearing_deg and dist[-1] - dist[i0] > th.pull_away_m:
        return SCENARIO_NAME["pulling_away"]
    if same and np.ptp(dist) <= max(th.maintain_m, th.maintain_rel * dist[i0]):
        return SCENARIO_NAME["maintain_state"]
    return SCENARIO_NAME["minor_relations"]


def is_dynamic(target_speed_mps, threshold_mps: float) -> bool:
    """A group is dynamic when the target itself moves: its mean ground speed over the window exceeds
    ``threshold_mps``. (Relative motion alone would drop Maintain State, the bench's second largest
    scenario, and keep parked cars the ego drives past.)"""
    v = np.asarray(target_speed_mps, dtype=np.float64)
    v = v[np.isfinite(v)]
    return bool(len(v) and v.mean() > threshold_mps)


# why candidate groups are dropped (the export summary's ``dropped`` counts), in the order they are checked
DROP_REASONS = {
    "missing_frame": "a frame of the group's window (context frames, t0..t3) is missing from the log",
    "track_lost": "the target is not tracked over the whole window",
    "no_image": "the front camera has no image in a context frame: the bench shows the four images, so logs "
                "without camera images give no groups",
    "no_front_mask": "the target has no mask in the front camera in a context frame, or is not visible there at t0",
    "non_finite_value": "a value is not finite (e.g. the speed of a track seen once)",
    "static": "the target does not move (bench.dynamic_speed_mps)",
    "repetitive": "the same target and relation within one horizon of a group kept before it",
}


# ------------------------------------------------------------------------------------------ groups
@dataclass
class SceneInputs:
    """One scene's tables: FRAMES, ATTRIBUTES, PROJECTIONS (schemas.tables), the scene's
    ego_spatiotemporal QA rows (columns keyframe_index, family, track_ids, region_ids, split; or None: the
    targets the QA plan would ask about are the candidates) and, optionally, OBJECTS (for instance
    tokens)."""

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
    region_id: int  # the target's "Region [X]" number at the keyframe (generator.qa.generate's numbering)
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
    """One scene's front camera: the rule QA and the other exports use (``generator.sources.front_camera_images``:
    ``generator.types.front_camera`` over the scene's first frame with cameras)."""
    names = front_camera_images(frames, preferred).column("name") if frames.num_rows else pa.array([], pa.string())
    if len(names) == 0:
        raise ValueError("frames carry no cameras")
    return names[0].as_py()


def _calib(cam: dict) -> CameraCalib:
    return CameraCalib(cam["name"], np.asarray(cam["K"], dtype=np.float64).reshape(3, 3),
                       SE3.from_matrix(np.asarray(cam["ego_SE3_cam"], dtype=np.float64).reshape(4, 4)),
                       int(cam["width_px"]), int(cam["height_px"]))


def _nearest_frames(ts_us: np.ndarray, fidx: np.ndarray, wanted_us: np.ndarray, tol_us: float) -> np.ndarray:
    """Frame index nearest to each wanted time (any shape); -1 where none lies within ``tol_us``
    (``generator.sources.keyframes.nearest_frame_rows`` on one scene)."""
    w = np.asarray(wanted_us, np.int64).ravel()
    rows = nearest_frame_rows(np.zeros(len(ts_us)), ts_us, np.zeros(len(w)), w, tol_us / 1e6)
    return np.where(rows >= 0, np.asarray(fidx)[np.maximum(rows, 0)], -1).reshape(np.shape(wanted_us))


def _index(df: pd.DataFrame, keys: list[str]) -> pd.MultiIndex:
    return pd.MultiIndex.from_frame(df[keys])


def _candidates(inp: SceneInputs, cfg: PipelineConfig) -> pd.DataFrame:
    """(keyframe_index, track_id, region_id, split) of the targets the groups are built around, sorted: the
    targets of the scene's ego_spatiotemporal QA rows, or, without QA rows, those the QA plan would ask
    about (``generator.qa.generate.make_plan``: candidates visible in the front camera at the keyframe).
    Either way ``region_id`` is the QA's region number of the target at its keyframe."""
    cols = ["keyframe_index", "track_id", "region_id", "split"]
    if inp.qa is not None and inp.qa.num_rows:
        st = inp.qa.filter(pc.equal(inp.qa.column("family"), "ego_spatiotemporal"))
        st = st.filter(pc.greater(pc.list_value_length(st.column("track_ids")), 0))  # not the ego's rows
        cand = pd.DataFrame({"keyframe_index": st.column("keyframe_index").to_numpy(),
                             "track_id": pc.list_element(st.column("track_ids"), 0).to_numpy(zero_copy_only=False),
                             "region_id": pc.list_element(st.column("region_ids"), 0).to_numpy(zero_copy_only=False),
                             "split": st.column("split").to_numpy(zero_copy_only=False)}, columns=cols)
    else:
        plan = make_plan(inp.frames, inp.attributes, inp.projections, cfg)
        if plan is None:
            return pd.DataFrame(columns=cols)
        c = plan.cand
        sel = c["front_proj"] >= 0
        cand = pd.DataFrame({"keyframe_index": plan.frames_fi[c["frame_row"][sel]], "track_id": c["track"][sel],
                             "region_id": c["region"][sel], "split": None}, columns=cols)
    cand = cand.dropna(subset=["track_id"]).drop_duplicates(["keyframe_index", "track_id"])
    return cand.sort_values(["keyframe_index", "track_id"]).reset_index(drop=True)


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

    cand = _candidates(inp, cfg)
    if cand.empty:
        return []
    n = len(cand)

    # window times: the 4 context frames ending at t0 (keyframes.context_offsets_s), then the horizons
    ctx_off = np.asarray(kcfg.context_offsets_s(), dtype=np.float64)
    if len(ctx_off) != len(CONTEXT_BUCKETS):
        raise ValueError(f"STRIDE-QA-Bench shows {len(CONTEXT_BUCKETS)} context images; keyframes.context_frames is "
                         f"{kcfg.context_frames}")
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

    # images of the context frames (first: without images there are no masks either, and the reason a
    # group is dropped is the missing image)
    ctx_frames = win_frames[:, ctx_cols]
    cams_by_frame = {int(f): {c["name"]: c for c in cl} for f, cl in
                     zip(fidx.tolist(), frames.column("cameras").to_pylist())}
    img = np.array([[cams_by_frame.get(int(f), {}).get(front, {}).get("image_path") or "" for f in r]
                    for r in ctx_frames], dtype=object).reshape(n, 4)
    has_img = (img != "").all(axis=1)
    drops["no_image"] += int((ok & ~has_img).sum())
    ok &= has_img

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
    prow = _index(prd, ["frame_index", "track_id"]).get_indexer(
        pd.MultiIndex.from_arrays([ctx_frames.ravel(), np.repeat(tid, 4)])).reshape(n, 4)
    mask_ok = (prow >= 0) & has_mask[np.where(prow >= 0, prow, 0)]
    vis_now = (prow[:, 3] >= 0) & prd["visible"].to_numpy()[np.where(prow[:, 3] >= 0, prow[:, 3], 0)]
    good_mask = mask_ok.all(axis=1) & vis_now
    drops["no_front_mask"] += int((ok & ~good_mask).sum())
    ok &= good_mask

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
        if not is_dynamic(A["speed_mps"][g], cfg.bench.dynamic_speed_mps):
            drops["static"] += 1
            continue
        rel = np.stack([A["x_ego_m"][g], A["y_ego_m"][g]], axis=1)
        scen = classify_scenario(rel, win_t, A["heading_ego_deg"][g], thresholds=cfg.bench.scenario)
        hc = hor_cols
        groups.append(Group(
            scene_id=inp.scene_id, keyframe_index=int(cand["keyframe_index"][g]), track_id=int(tid[g]),
            region_id=int(cand["region_id"][g]),
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
def _seconds(t: int) -> str:
    return "1 second" if t == 1 else f"{t} seconds"


def _printed(values, decimals: int) -> tuple[list[str], list[float]]:
    """Numbers as the QA prints them (``generator.qa.render.format_fixed``: fixed decimals, never "-0.00")
    and the value each string states: the answer parses back to exactly its ``gt_value``."""
    text = format_fixed(np.asarray(values, np.float64), decimals).to_pylist()
    return text, [float(x) for x in text]


def group_questions(g: Group, decimals: int = 2, ego: bool = True) -> list[dict]:
    """The questions of a group, in ``QA_CATEGORIES`` order, without ids or images: qa_category, horizon t,
    question, gt (one sentence stating the values with their units), gt_value, unit. Numbers print with
    ``decimals`` digits (``cfg.qa.decimals``, as in the QA); the target is named by its keyframe region.
    ``ego=False``: without the four ego-speed questions (asked once per keyframe: ``bench_records``)."""
    region = f"Region [{g.region_id}]"
    d, d_v = _printed(g.distance_m, decimals)
    b, b_v = _printed(g.bearing_deg, decimals)
    ve, ve_v = _printed(g.ego_speed_mps, decimals)
    vt, vt_v = _printed(g.target_speed_mps, decimals)
    angle = "(degrees, counter-clockwise positive)"
    out = []
    for cat, t, qtypes in QA_CATEGORIES:
        is_ego = cat.startswith("ego_speed")
        if is_ego and not ego:
            continue
        when = f"In {_seconds(t)}"
        if cat == "ego_distance_data":
            q, a = f"How far is {region} from the ego vehicle?", f"{region} is {d[t]} meters away."
        elif cat == "target_bearing_angle_data":
            q = f"At what angle is {region} from the ego vehicle's heading {angle}?"
            a = f"{region} is at {b[t]} degrees."
        elif cat == "ego_speed_data":
            q, a = "What is the ego vehicle's current speed?", f"The ego vehicle's speed is {ve[t]} m/s."
        elif cat == "target_speed_data":
            q, a = f"What is the current speed of {region}?", f"{region} is moving at {vt[t]} m/s."
        elif cat.startswith("ego_distance_data_4d"):
            q = f"{when}, how far from the ego vehicle will {region} be, and at what angle {angle}?"
            a = f"{when}, {region} will be {d[t]} meters away at {b[t]} degrees."
        elif is_ego:
            q = f"What will the ego vehicle's speed be in {_seconds(t)}?"
            a = f"{when}, the ego vehicle's speed will be {ve[t]} m/s."
        else:
            q = f"What will the speed of {region} be in {_seconds(t)}?"
            a = f"{when}, {region} will be moving at {vt[t]} m/s."
        vals = {"distance": d_v[t], "direction": b_v[t], "velocity": ve_v[t] if is_ego else vt_v[t]}
        out.append({"qa_category": cat, "t": t, "question": q, "gt": a,
                    "gt_value": {k: vals[k] for k in qtypes}, "unit": {k: UNITS[k] for k in qtypes}})
    return out


def bench_image_name(g: Group, k: int) -> str:
    """Image path of context frame ``k`` relative to the bench folder (the toolkit's --image-folder)."""
    return f"images/{g.front_camera}/{safe_name(g.scene_id)}_{g.context_frames[k]:06d}.jpg"


# the keys that close every annotation record, the same in every question of its group: a part keeps them once per
# group (``scene_record``'s ``shared``), the list writer renders them once per group (``_record_text``)
GROUP_KEYS = ("images", "rle", "region_id", "object_class", "object_type", "relation", "oov", "split", "token_info")


def scene_record(groups: list[Group], decimals: int = 2) -> dict:
    """One scene's groups as a part of the export (``generator.runfolder.parts``; JSON-able): per group its
    annotation-sheet row, its questions ``[t, record]``, both without the ids ``merge_bench`` numbers over the
    export, and the ``GROUP_KEYS`` every one of its records ends with (``shared``: kept once, not in each of ~11
    records). Every record carries the four context images, the RLE per bucket and the target's region number at
    the keyframe (``region_id``, the QA's ``Region [X]``). The ego-speed questions do not depend on the target:
    they are asked once per keyframe, in its first group (13 questions; its other groups have the 9 about their
    target)."""
    out = []
    ego_asked: set[tuple[str, int]] = set()
    for g in groups:
        images = [bench_image_name(g, k) for k in range(4)]
        rle = dict(zip(CONTEXT_BUCKETS, g.rles))
        token_info = {"scene_id": g.scene_id, "keyframe_index": g.keyframe_index, "track_id": g.track_id,
                      "instance_token": g.instance_token, "context_frame_indices": g.context_frames,
                      "context_sample_tokens": g.context_tokens, "horizon_frame_indices": g.horizon_frames,
                      "camera": g.front_camera}
        keyframe = (g.scene_id, g.keyframe_index)
        questions = []
        for q in group_questions(g, decimals, ego=keyframe not in ego_asked):
            t = q.pop("t")
            questions.append([t, q])
        ego_asked.add(keyframe)
        shared = dict(zip(GROUP_KEYS, (images, rle, g.region_id, g.class_name,
                                       OBJECT_TYPES.get(g.class_name, g.class_name), TOOLKIT_RELATION[g.scenario],
                                       g.oov, g.split, token_info)))
        out.append({"sheet": {"object_type": OBJECT_TYPES.get(g.class_name, g.class_name),
                              "relation": TOOLKIT_RELATION[g.scenario], "oov": g.oov, "scene_id": g.scene_id,
                              "keyframe_index": g.keyframe_index, "track_id": g.track_id, "region_id": g.region_id,
                              "class_name": g.class_name, "instance_token": g.instance_token, "split": g.split},
                    "questions": questions, "shared": shared})
    return {"groups": out}


def bench_records(groups: list[Group], decimals: int = 2) -> tuple[dict[int, list[dict]], list[dict]]:
    """Annotation records per horizon {t: [record, ...]} and annotation-sheet rows for ``groups`` (in memory:
    ``merge_bench`` writes the same records from per-scene parts as a stream).

    question_id = ``q<N:08d>_g<M:05d>`` (N counts questions over the export, M groups), group_id =
    ``g<M:05d>``."""
    per_t: dict[int, list[dict]] = {0: [], 1: [], 2: [], 3: []}
    sheet: list[dict] = []
    _number([scene_record(groups, decimals)], lambda t, rec: per_t[t].append(rec), sheet.append)
    return per_t, sheet


def _number(parts, record: Callable[[int, dict], None], sheet_row: Callable[[dict], None]) -> None:
    """Give the groups and questions of ``parts`` (``scene_record``s, in order) their ids over the export."""
    n = m = 0
    for part in parts:
        for grp in part["groups"]:
            gid = f"g{m:05d}"
            shared = grp.get("shared") or {}  # parts built before the group's fields were kept once: in each q
            for t, q in grp["questions"]:
                record(t, {"question_id": f"q{n:08d}_{gid}", "group_id": gid, **q, **shared})
                n += 1
            sheet_row({"group_id": gid, **grp["sheet"]})
            m += 1


SHEET_COLUMNS = ("group_id", "object_type", "relation", "oov", "scene_id", "keyframe_index", "track_id",
                 "region_id", "class_name", "instance_token", "split")


def summarize(sheet: Iterable[dict], drops: Counter, questions: int) -> dict:
    """Counts like App. C Tables 8 (scenario, OOV; by the toolkit's relation names) and 9 (object types), from
    the groups' annotation-sheet rows; ``questions``: how many records were written."""
    scen = {s: {"groups": 0, "oov": 0} for s in RELATIONS}
    types: Counter = Counter()
    groups = oov = 0
    for row in sheet:
        scen[row["relation"]]["groups"] += 1
        scen[row["relation"]]["oov"] += int(row["oov"])
        types[row["object_type"]] += 1
        groups += 1
        oov += int(row["oov"])
    for v in scen.values():
        v["oov_rate"] = round(v["oov"] / v["groups"], 4) if v["groups"] else None
    return {"groups": groups, "questions": questions, "scenarios": scen,
            "object_types": dict(types.most_common()), "oov_groups": oov,
            "dropped": dict(sorted(drops.items()))}


# ------------------------------------------------------------------------------------------ files
def scene_images(groups: list[Group], put: Callable[[str, bytes], None], image_root: str | os.PathLike | None = None,
                 publish=None, published: Callable[[int, str], bytes | None] | None = None) -> list[str]:
    """Put each context image of one scene's ``groups`` once (``put(rel, bytes)``, ``rel`` as
    ``bench_image_name``), blurred by ``publish`` (a ``generator.writers.anonymize.ScenePublisher``; None: as
    they are); returns the names put. ``published(frame_index, camera)``: the image as ``publish`` made it
    already (the run's WebDataset shards hold it), or None; such an image is taken as it is."""
    done: list[str] = []
    for g in groups:
        for k in range(4):
            rel = bench_image_name(g, k)
            if rel in done:
                continue
            data = published(g.context_frames[k], g.front_camera) if published is not None else None
            if data is None:
                src = str(g.image_paths[k])  # a path, or an object's URI for logs on object storage
                if not is_remote(src) and not os.path.isabs(src) and image_root is not None:
                    src = str(Path(image_root) / src)
                data = read_jpeg(src, g.scene_id)
                data = publish(data, g.context_frames[k], g.front_camera) if publish is not None else data
            put(rel, data)
            done.append(rel)
    return done


def _items_text(d: dict) -> str:
    """The lines of ``d``'s items as ``json.dumps(d, indent=1, ensure_ascii=False)`` writes them (inside its
    braces)."""
    return json.dumps(d, indent=1, ensure_ascii=False)[2:-2] if d else ""


def _record_text(tails: dict) -> Callable[[dict], str]:
    """``record_text(item)``: ``json.dumps(item, indent=1, ensure_ascii=False)`` of an annotation record, with the
    ``GROUP_KEYS`` that close it rendered once while they are the very same objects as the record before's (a
    group's ``shared`` values, which ``_number`` gives each of its records), kept in ``tails`` (shared by the
    horizons' files): Python's encoder with an indent runs in Python, and these are most of a record."""
    n_tail = len(GROUP_KEYS)

    def record_text(item: dict) -> str:
        keys = list(item)
        if len(keys) <= n_tail or tuple(keys[-n_tail:]) != GROUP_KEYS:
            return json.dumps(item, indent=1, ensure_ascii=False)
        tail = [item[k] for k in GROUP_KEYS]
        last = tails.get("values")
        if last is None or any(a is not b for a, b in zip(last, tail)):
            tails.update(values=tail, text=_items_text(dict(zip(GROUP_KEYS, tail))))
        return "{\n" + _items_text({k: item[k] for k in keys[:-n_tail]}) + ",\n" + tails["text"] + "\n}"

    return record_text


def _json_list_writer(path: Path, tails: dict):
    """Write a JSON list of annotation records to ``path`` one at a time, byte for byte as ``json.dumps(items,
    indent=1, ensure_ascii=False)`` writes the whole list (``_record_text``, with the cache ``tails``)."""
    fh = path.open("w", encoding="utf-8")
    state = {"n": 0}
    text = _record_text(tails)

    def add(item: dict) -> None:
        fh.write(("[\n " if state["n"] == 0 else ",\n ") + text(item).replace("\n", "\n "))
        state["n"] += 1

    def close() -> None:
        fh.write("[]" if state["n"] == 0 else "\n]")
        fh.close()

    return add, close


def merge_bench(parts: Iterable[dict], out_dir: str | os.PathLike, drops: Counter | None = None,
                images: Iterable[str] = ()) -> dict:
    """Write the bench's annotation files of ``parts`` (``scene_record``s, in scene order, read one at a time)
    into the local folder ``out_dir`` (annotation_files/, export_summary.json: a fresh staging folder the caller
    commits), numbering groups and questions over the export; ``images``: the image files of the export (put
    beside by ``scene_images``), listed in the summary. Returns the summary; its ``files`` lists every file of
    the export, relative to its folder."""
    out = Path(out_dir)
    ann = out / ANNOTATION_DIR
    ann.mkdir(parents=True, exist_ok=True)
    tails: dict = {}  # a group's closing keys, rendered once for its questions of every horizon
    writers = {t: _json_list_writer(ann / f"strideqa_bench_t{t}.json", tails) for t in range(4)}
    sheet: list[dict] = []
    counts = {"questions": 0}

    def record(t: int, rec: dict) -> None:
        writers[t][0](rec)
        counts["questions"] += 1

    try:
        _number(parts, record, sheet.append)
    finally:
        for _, close in writers.values():
            close()
    files = [f"{ANNOTATION_DIR}/strideqa_bench_t{t}.json" for t in range(4)]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(SHEET_COLUMNS), lineterminator="\n")
    w.writeheader()
    w.writerows(sheet)
    (ann / "annotation_sheet.csv").write_text(buf.getvalue())
    files.append(f"{ANNOTATION_DIR}/annotation_sheet.csv")
    names = sorted(images)
    summary = summarize(sheet, drops or Counter(), counts["questions"])
    summary["images"] = len(names)
    summary["format"] = EXPORT_FORMAT
    summary["files"] = files + names + [EXPORT_SUMMARY]
    (out / EXPORT_SUMMARY).write_text(json.dumps(summary, indent=2))
    return summary


def write_bench(groups: list[Group], out_dir: str | os.PathLike, decimals: int = 2,
                image_root: str | os.PathLike | None = None, drops: Counter | None = None,
                publishers: dict | None = None) -> dict:
    """Write the bench files of ``groups`` into the local folder ``out_dir`` (annotation_files/, images/,
    export_summary.json; a fresh staging folder: the caller commits it, ``generator.pipeline.exports``).
    ``publishers``: scene id -> ``generator.writers.anonymize.ScenePublisher`` that blurs faces and plates in
    the images (None: images copied as they are). Returns the summary; its ``files`` lists every file written,
    relative to ``out_dir``."""
    out = Path(out_dir)

    def put(rel: str, data: bytes) -> None:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)

    names: list[str] = []
    parts = []
    for sid, grp in itertools.groupby(groups, key=lambda g: g.scene_id):
        grp = list(grp)
        names += scene_images(grp, put, image_root, (publishers or {}).get(sid))
        parts.append(scene_record(grp, decimals))
    return merge_bench(parts, out, drops, names)
