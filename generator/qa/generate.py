"""Template QA over attribute tables (STRIDE-QA §3, §4.2 "Question Generator"), fully columnar.

``generate_qa(frames, attributes, projections, cfg, templates)`` takes any number of scenes at once and
returns QA rows (schemas.tables.QA) in a canonical order: scene, keyframe, family, question type, regions,
horizon. What it does, in order:

1. Anchors are the frames with ``is_anchor``. At an anchor, the candidates are the tracked objects with an
   attributes row that passed the visibility filter (``visible``) in at least one camera. They are numbered
   ``Region [0]``, ``Region [1]``, ... by distance from the ego (then track id) — set-of-mark style, one
   numbering per keyframe shared by all families — and only the nearest ``cfg.qa.max_objects_per_keyframe``
   are kept.
2. ego_spatial: one question per candidate and question type. object_spatial: unordered candidate pairs
   of a keyframe, at most ``cfg.qa.max_pairs_per_keyframe`` of them chosen by a seeded hash; the order
   (A, B) inside a pair is also drawn from the hash so yes/no answers are balanced. Qualitative relations
   whose margin is within ``RELATION_MARGINS`` (e.g. two objects 0.2 m apart laterally for left/right) are
   not asked: their answer would be a coin flip of detection noise.
3. ego_spatiotemporal: candidates also visible in the front camera at the keyframe (``cfg.qa.front_camera``;
   for a log without a camera of that name, a known front camera (AV2 ring_front_center) or the camera
   looking most forward). Context frames
   at -1.5, -1.0, -0.5 s and the keyframe (four frames at 2 Hz), and targets at each ``cfg.qa.horizons_s``
   after it: the frame nearest each wanted time within ``cfg.keyframes.match_tolerance_s``. At a horizon
   the target's distance, bearing and speed are read from its attributes row in that frame (in that frame's
   ego frame) and the ego speed from the poses; ``out_of_view`` = no visible front-camera projection of the
   target in that frame. A horizon without a frame, or without the target's row, gets no question.
4. Every row has grounding: for spatial families the object's box and mask at the keyframe in the visible
   camera where its box is largest; for spatiotemporal the front-camera box and mask in each context,
   current and future frame where the target is visible. Entries carry camera, image path, frame, track and
   region id. Grounding lists are built with Arrow list arrays from offsets (no per-row Python).
5. Template choice: ``hash(cfg.qa.seed, qa_id fields) mod (number of templates of the type)``; rendering is
   columnar (``generator.qa.render``). ``qa_id`` = ``scene:keyframe_index:family:type:track[-track][:+Hs]``;
   ``split`` = 'val' when a hash of the scene id falls below ``cfg.qa.val_fraction``, else 'train'.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import (KeyIndex, codes, column, dense_pair_codes, fixed_list_to_numpy,
                                         rank_in_group, ranges_to_indices, to_numpy, unique_strings)
from generator.attributes.compute import clock_from_bearing, pair_relations
from generator.attributes.ego import ego_states
from generator.qa.fields import FAMILIES, QUESTION_TYPES, UNIT_TEXT, QuestionType
from generator.qa.render import FieldColumns, render
from generator.qa.templates import TemplateSet
from schemas.tables import QA, QA_GROUNDING

FRONT_CAMERA_NAMES = ("CAM_FRONT", "ring_front_center")  # nuScenes, Argoverse 2
CONTEXT_OFFSETS_S = (-1.5, -1.0, -0.5)  # plus the keyframe itself: four context frames at 2 Hz
RELATION_MARGINS = {"lateral_m": 0.5, "longitudinal_m": 0.5, "volume_ratio": 1.1, "height_m": 0.1,
                    "width_m": 0.1, "ego_lateral_m": 0.5, "ego_longitudinal_m": 0.5}
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


# --------------------------------------------------------------------------------------------- hashing
def stable_hash(text: str) -> int:
    """64-bit hash of a string, stable across processes and platforms."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over uint64 arrays (wrapping arithmetic)."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def hash_fields(seed: int, *cols) -> np.ndarray:
    """Row-wise 64-bit hash of a seed and integer columns (each (N,) int or uint64)."""
    h = mix64(np.uint64(seed & 0xFFFFFFFFFFFFFFFF))
    for c in cols:
        c = np.asarray(c)
        u = c if c.dtype == np.uint64 else c.astype(np.int64).view(np.uint64)
        h = mix64(h ^ u)
    return h


def scene_split(scene_ids, val_fraction: float) -> list[str]:
    """'val' for scenes whose id hashes below ``val_fraction`` (uniform in [0, 1)), else 'train'."""
    return ["val" if stable_hash(s) / 2.0 ** 64 < val_fraction else "train" for s in scene_ids]


# ------------------------------------------------------------------------------------------ containers
@dataclass
class Batch:
    """Questions of one type before rendering, rows in canonical order (keyframe group, regions, horizon).

    Metadata arrays are numpy (length n). Text fields are lazy: ``(vocabulary Arrow array, index array)``,
    materialised with one ``take`` only when a template uses them; quantities are float64 arrays."""

    qt: QuestionType
    group: np.ndarray  # keyframe group (dense, in (scene, keyframe index) order)
    a: np.ndarray  # candidate index of target A
    b: np.ndarray | None  # candidate index of target B (object_spatial) else None
    horizon_idx: np.ndarray | None  # index into the horizons (spatiotemporal)
    value: np.ndarray
    out_of_view: np.ndarray | None
    g_start: np.ndarray  # grounding segments: (n, k) starts / lengths into the pool
    g_len: np.ndarray
    text: dict = field(default_factory=dict)
    quantities: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.a)


@dataclass
class Context:
    """Everything shared by the question builders of one call."""

    cfg: object
    scenes: pa.Array
    scene_hash: np.ndarray
    frames_fi: np.ndarray
    frames_ts: np.ndarray
    frames_sc: np.ndarray
    attrs: pa.Table
    cand: dict  # candidate objects at the anchors, in (scene, keyframe, region) order
    horizons: np.ndarray


# --------------------------------------------------------------------------------------- frame search
def nearest_frame_rows(frames_sc, frames_ts_us, q_scene, q_t_us, tol_s) -> np.ndarray:
    """FRAMES row nearest each wanted time (same scene) when within ``tol_s``, else -1. Vectorised over
    queries and scenes (the per-clip ``generator.sources.keyframes.context_indices`` rule: nearest frame,
    kept when |t - wanted| <= tol)."""
    order = np.lexsort((frames_ts_us, frames_sc))
    s_sorted = frames_sc[order].astype(np.int64)
    t_sorted = frames_ts_us[order].astype(np.int64)
    q_scene = np.asarray(q_scene, np.int64)
    q_t = np.asarray(q_t_us, np.int64)
    # lexicographic search on (scene, time) via a structured view
    key_sorted = np.rec.fromarrays([s_sorted, t_sorted], names="s,t")
    key_q = np.rec.fromarrays([q_scene, q_t], names="s,t")
    pos = np.searchsorted(key_sorted, key_q)
    n = len(order)
    best = np.full(len(q_t), -1, dtype=np.int64)
    best_dt = np.full(len(q_t), np.inf)
    for cand in (pos - 1, pos):
        ok = (cand >= 0) & (cand < n)
        c = np.clip(cand, 0, max(n - 1, 0))
        same = ok & (s_sorted[c] == q_scene) if n else np.zeros(len(q_t), bool)
        dt = np.where(same, np.abs(t_sorted[c] - q_t) / 1e6, np.inf) if n else best_dt
        better = dt < best_dt
        best = np.where(better, order[c] if n else -1, best)
        best_dt = np.where(better, dt, best_dt)
    return np.where(best_dt <= tol_s + 1e-9, best, -1)


# ------------------------------------------------------------------------------------------------ main
def generate_qa(frames: pa.Table, attributes: pa.Table, projections: pa.Table, cfg,
                templates: TemplateSet) -> pa.Table:
    """QA rows (schemas.tables.QA) for every anchor frame in ``frames``. See the module docstring."""
    qa_cfg = cfg.qa
    scenes = unique_strings(frames.column("scene_id"))
    if frames.num_rows == 0 or attributes.num_rows == 0:
        return QA.empty_table()
    f_sc = codes(column(frames, "scene_id"), scenes)
    f_fi = to_numpy(column(frames, "frame_index"), np.int64)
    f_ts = to_numpy(column(frames, "timestamp_us"), np.int64)
    f_anchor = to_numpy(column(frames, "is_anchor"), bool, fill=False)
    frame_index = KeyIndex((f_sc << 32) | f_fi)

    # cameras: image path per (frame row, camera)
    cams = column(frames, "cameras")
    flat_cams = pc.list_flatten(cams)
    cam_parent = to_numpy(pc.list_parent_indices(cams), np.int64)
    cam_names = pc.struct_field(flat_cams, "name")
    cam_paths = pc.struct_field(flat_cams, "image_path")
    cam_universe = unique_strings(cam_names, projections.column("camera"))
    n_cam = max(len(cam_universe), 1)
    cam_code = codes(cam_names, cam_universe)
    img_index = KeyIndex(cam_parent * n_cam + cam_code)
    front_of_scene = _front_cameras(f_sc[cam_parent], cam_code, cam_names, flat_cams, qa_cfg.front_camera,
                                    len(scenes))

    # attributes rows -> frame rows; tracked objects only
    a_sc = codes(column(attributes, "scene_id"), scenes)
    a_fr = frame_index.find((a_sc << 32) | to_numpy(column(attributes, "frame_index"), np.int64))
    a_tr = to_numpy(column(attributes, "track_id"), np.int64)
    keep = (a_fr >= 0) & (a_tr >= 0)
    if not keep.all():
        attributes = attributes.filter(pa.array(keep))
        a_sc, a_fr, a_tr = a_sc[keep], a_fr[keep], a_tr[keep]

    # projections rows -> frame rows
    p_sc = codes(column(projections, "scene_id"), scenes)
    p_fr = frame_index.find((p_sc << 32) | to_numpy(column(projections, "frame_index"), np.int64))
    p_tr = to_numpy(column(projections, "track_id"), np.int64)
    p_cam = codes(column(projections, "camera"), cam_universe)
    p_vis = to_numpy(column(projections, "visible"), bool, fill=False) & (p_fr >= 0) & (p_tr >= 0)

    # dense (scene, track) codes shared by attributes and projections
    tcode, n_tr = dense_pair_codes(np.concatenate([a_sc, p_sc]), np.concatenate([a_tr, p_tr]))
    a_tc, p_tc = tcode[:len(a_sc)], tcode[len(a_sc):]
    n_tr = max(n_tr, 1)
    a_key = a_fr * n_tr + a_tc
    a_unique = _first_unique_rows(a_key)  # a (frame, track) listed twice keeps its first row
    attr_index = KeyIndex(a_key[a_unique], a_unique)
    p_key = p_fr * n_tr + p_tc

    # best visible camera per (frame, track): largest box area, then camera name
    p_box = _box_xyxy(projections)
    area = np.clip(p_box[:, 2] - p_box[:, 0], 0, None) * np.clip(p_box[:, 3] - p_box[:, 1], 0, None)
    area = np.nan_to_num(area, nan=0.0)
    vis_rows = np.nonzero(p_vis)[0]
    o = vis_rows[np.lexsort((p_cam[vis_rows], -area[vis_rows], p_key[vis_rows]))]
    first = np.ones(len(o), bool)
    first[1:] = p_key[o][1:] != p_key[o][:-1]
    best_rows = o[first]
    best_index = KeyIndex(p_key[best_rows], best_rows)
    front_rows = vis_rows[p_cam[vis_rows] == front_of_scene[p_sc[vis_rows]]]
    front_rows = front_rows[_first_unique_rows(p_key[front_rows])]
    front_index = KeyIndex(p_key[front_rows], front_rows)

    # candidates at anchors
    is_first = np.zeros(len(a_key), bool)
    is_first[a_unique] = True
    at_anchor = f_anchor[a_fr] & (best_index.find(a_key) >= 0) & is_first
    c_attr = np.nonzero(at_anchor)[0]
    dist = to_numpy(column(attributes, "distance_m"), np.float64, fill=np.nan)
    o = np.lexsort((a_tr[c_attr], np.nan_to_num(dist[c_attr], nan=np.inf), f_fi[a_fr[c_attr]], a_sc[c_attr]))
    c_attr = c_attr[o]
    region = rank_in_group(a_fr[c_attr])
    ok = region < qa_cfg.max_objects_per_keyframe
    c_attr, region = c_attr[ok], region[ok]
    kf_first = np.ones(len(c_attr), bool)
    kf_first[1:] = a_fr[c_attr][1:] != a_fr[c_attr][:-1]
    cand = {"attr": c_attr, "frame_row": a_fr[c_attr], "scene": a_sc[c_attr], "track": a_tr[c_attr],
            "region": region.astype(np.int64), "proj": best_index.find(a_key[c_attr]),
            "front_proj": front_index.find(a_key[c_attr]), "group": np.cumsum(kf_first) - 1}

    classes = column(attributes, "class_name")
    cls_c = pc.take(classes, pa.array(c_attr))
    cand["class_text"] = pc.replace_substring(pc.fill_null(cls_c, "object"), "_", " ")
    cand["region_text"] = pc.binary_join_element_wise("Region [", pc.cast(pa.array(cand["region"]), pa.string()),
                                                      "]", "")

    # grounding pool 1: each candidate at its keyframe in its best camera (pool index = candidate index)
    proj_img = img_index.find(cand["frame_row"] * n_cam + p_cam[cand["proj"]])
    gsrc = GroundingSource.build(projections, cam_paths, cam_universe, p_cam)
    pool_parts = [_pool_entries("current", cand["frame_row"], cand["proj"], proj_img, cand["track"], cand["region"],
                                f_fi, f_ts)]
    n_pool1 = len(c_attr)

    scene_hash = np.array([stable_hash(s) for s in scenes.to_pylist()], dtype=np.uint64)
    horizons = np.asarray(qa_cfg.horizons_s, dtype=np.float64)
    ctx = Context(cfg=cfg, scenes=scenes, scene_hash=scene_hash, frames_fi=f_fi, frames_ts=f_ts, frames_sc=f_sc,
                  attrs=attributes, cand=cand, horizons=horizons)

    batches: list[Batch] = []
    if "ego_spatial" in qa_cfg.families:
        batches += _ego_spatial(ctx)
    if "object_spatial" in qa_cfg.families:
        batches += _object_spatial(ctx)
    if "ego_spatiotemporal" in qa_cfg.families:
        ego = ego_states(frames, scenes)
        st_batches, st_pool = _spatiotemporal(ctx, ego, attr_index, n_tr, a_tc, front_index, p_cam, img_index,
                                              n_cam, n_pool1)
        batches += st_batches
        pool_parts.append(st_pool)
    pool = _concat_pool(pool_parts, gsrc)
    batches = [b for b in batches if b.n and templates.variants(b.qt.family, b.qt.name)]
    if not batches:
        return QA.empty_table()
    return _assemble(ctx, batches, pool, templates)


def _front_cameras(entry_scene, entry_cam, names, flat_cams, preferred: str, n_scenes: int) -> np.ndarray:
    """Camera code of each scene's front camera: ``preferred`` (cfg.qa.front_camera) where the scene has
    it, else a known front camera of another log format (``FRONT_CAMERA_NAMES``: AV2 'ring_front_center'),
    else the camera whose optical axis points most along the ego's +x."""
    out = np.full(n_scenes, -1, np.int64)
    if len(entry_cam) == 0:
        return out
    T = fixed_list_to_numpy(pc.struct_field(flat_cams, "ego_SE3_cam"), 16)
    fwd = np.nan_to_num(T[:, 2], nan=-2.0)  # x component of the optical (z) axis in the ego frame
    is_pref = to_numpy(pc.equal(names, preferred), bool, fill=False)
    is_known = to_numpy(pc.is_in(names, value_set=pa.array(FRONT_CAMERA_NAMES)), bool, fill=False)
    score = np.where(is_pref, 20.0, np.where(is_known, 10.0, fwd))
    o = np.lexsort((entry_cam, -score, entry_scene))
    first = np.ones(len(o), bool)
    first[1:] = entry_scene[o][1:] != entry_scene[o][:-1]
    out[entry_scene[o][first]] = entry_cam[o][first]
    return out


def _first_unique_rows(keys: np.ndarray) -> np.ndarray:
    """Row positions of the first occurrence of each key (in row order)."""
    if len(keys) == 0:
        return np.zeros(0, np.int64)
    _, idx = np.unique(keys, return_index=True)
    return np.sort(idx)


def _box_xyxy(projections: pa.Table) -> np.ndarray:
    """(N, 4) 2D box per projection: the mask's box when present, else the projected 3D box."""
    mb = fixed_list_to_numpy(projections.column("mask_box_xyxy"), 4)
    pb = fixed_list_to_numpy(projections.column("box2d_proj_xyxy"), 4)
    bad = ~np.isfinite(mb).all(axis=1)
    mb[bad] = pb[bad]
    return mb


ROLES = ("context", "current", "future")  # grounding roles, in QA_GROUNDING.role's dictionary order


@dataclass(frozen=True)
class GroundingSource:
    """The batch-wide arrays grounding entries point into. Grounding strings are dictionary-encoded
    (``schemas.tables.QA_GROUNDING``): an entry stores int32 indices into these dictionaries, so building
    (and taking) groundings never copies an image path or a mask string, and a shard stores each once."""
    roles: pa.Array  # ROLES
    cameras: pa.Array  # camera names; p_cam indexes it
    p_cam: np.ndarray  # (P,) camera code of each projection row
    image_paths: pa.Array  # (F*C,) image path of each (frame, camera) entry of the flattened frames.cameras
    mask_size: pa.Array  # (P,) RLE size [h, w] per projection row
    mask_counts: pa.Array  # (P,) RLE counts string per projection row (dictionary values)
    mask_null: np.ndarray  # (P,) projection row without a mask
    box: pa.Array  # (P,) 2D box: the mask's box when present, else the projected 3D box

    @classmethod
    def build(cls, projections: pa.Table, cam_paths, cam_universe: pa.Array, p_cam: np.ndarray):
        rle = column(projections, "mask_rle")
        paths = cam_paths.combine_chunks() if isinstance(cam_paths, pa.ChunkedArray) else cam_paths
        return cls(roles=pa.array(ROLES, pa.string()), cameras=cam_universe.cast(pa.string()),
                   p_cam=p_cam.astype(np.int32), image_paths=paths.cast(pa.string()),
                   mask_size=pc.struct_field(rle, "size"), mask_counts=pc.struct_field(rle, "counts"),
                   mask_null=to_numpy(rle.is_null(), bool),
                   box=pc.coalesce(column(projections, "mask_box_xyxy"), column(projections, "box2d_proj_xyxy")))


def _pool_entries(role, frame_rows, proj_rows, img_rows, track, region, f_fi, f_ts) -> dict:
    """Grounding entries for parallel arrays of (frame row, projection row): QA_GROUNDING's plain columns
    as arrays; its dictionary columns (and the mask) as int32 index arrays, -1 = null, that
    ``_concat_pool`` turns into dictionary arrays over a ``GroundingSource``. ``role`` is a ROLES name
    or an array of ROLES codes."""
    n = len(proj_rows)
    if isinstance(role, str):
        role = np.full(n, ROLES.index(role), np.int32)
    return {
        "role": np.asarray(role, np.int32),
        "frame_index": f_fi[frame_rows].astype(np.int32),
        "timestamp_us": f_ts[frame_rows].astype(np.int64),
        "image_path": np.where(img_rows >= 0, img_rows, -1).astype(np.int32),
        "track_id": np.asarray(track, np.int64),
        "region_id": np.asarray(region, np.int32),
        "proj": np.asarray(proj_rows, np.int64),
    }


def _dictionary(indices: np.ndarray, values: pa.Array) -> pa.DictionaryArray:
    null = indices < 0
    idx = pa.array(np.where(null, 0, indices).astype(np.int32), mask=null if null.any() else None)
    return pa.DictionaryArray.from_arrays(idx, values)


def _concat_pool(parts: list[dict], src: GroundingSource) -> pa.StructArray:
    """One StructArray of QA_GROUNDING from ``_pool_entries`` parts (pool index = position in order)."""
    cat = {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, np.int64) for k in
           ("role", "frame_index", "timestamp_us", "image_path", "track_id", "region_id", "proj")}
    proj = cat["proj"]
    pr = pa.array(proj, pa.int64())
    no_mask = src.mask_null[proj]
    mask = pa.StructArray.from_arrays(
        [pc.take(src.mask_size, pr), _dictionary(np.where(no_mask, -1, proj), src.mask_counts)],
        fields=list(QA_GROUNDING.field("mask_rle").type), mask=pa.array(no_mask) if no_mask.any() else None)
    arrays = {
        "role": _dictionary(cat["role"], src.roles),
        "frame_index": pa.array(cat["frame_index"].astype(np.int32)),
        "timestamp_us": pa.array(cat["timestamp_us"].astype(np.int64)),
        "camera": _dictionary(src.p_cam[proj], src.cameras),
        "image_path": _dictionary(cat["image_path"], src.image_paths),
        "track_id": pa.array(cat["track_id"].astype(np.int64)),
        "region_id": pa.array(cat["region_id"].astype(np.int32)),
        "box_xyxy": pc.take(src.box, pr),
        "mask_rle": mask,
    }
    return pa.StructArray.from_arrays([arrays[f.name].cast(f.type) for f in QA_GROUNDING], fields=list(QA_GROUNDING))


# -------------------------------------------------------------------------------------------- families
def _attr(ctx: Context, name: str, rows: np.ndarray) -> np.ndarray:
    return to_numpy(column(ctx.attrs, name), np.float64, fill=np.nan)[rows]


def _single(ctx: Context, qt_name: str, family: str, sel: np.ndarray, value: np.ndarray, text=None,
            quantities=None, pool_start=None, pool_len=None, horizon_idx=None, out_of_view=None) -> Batch:
    """A batch about one candidate per row (``sel`` = candidate indices, in canonical order)."""
    c = ctx.cand
    qt = QUESTION_TYPES[(family, qt_name)]
    t = {"region": (c["region_text"], sel), "class_name": (c["class_text"], sel)}
    t.update(text or {})
    return Batch(qt=qt, group=c["group"][sel], a=sel, b=None, horizon_idx=horizon_idx,
                 value=np.asarray(value, np.float64), out_of_view=out_of_view,
                 g_start=(sel if pool_start is None else pool_start)[:, None],
                 g_len=(np.ones(len(sel), np.int64) if pool_len is None else pool_len)[:, None],
                 text=t, quantities=quantities or {})


_VOCAB: dict[tuple, pa.Array] = {}


def _words(mask: np.ndarray, yes: str, no: str) -> tuple[pa.Array, np.ndarray]:
    """Lazy text field: ``yes`` where mask else ``no``."""
    key = (yes, no)
    if key not in _VOCAB:
        _VOCAB[key] = pa.array([yes, no], pa.string())
    return _VOCAB[key], np.where(mask, 0, 1)


_CLOCKS = pa.array([f"{h} o'clock" for h in range(13)], pa.string())


def _clock_text(clock: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    return _CLOCKS, np.asarray(clock, np.int64)


def _ego_spatial(ctx: Context) -> list[Batch]:
    c = ctx.cand
    rows = c["attr"]
    n = len(rows)
    allc = np.arange(n)
    x, y = _attr(ctx, "x_ego_m", rows), _attr(ctx, "y_ego_m", rows)
    bearing = _attr(ctx, "bearing_deg", rows)
    clock = clock_from_bearing(bearing)
    out = []
    m = RELATION_MARGINS
    sel = allc[np.abs(y) >= m["ego_lateral_m"]]
    out.append(_single(ctx, "left_right", "ego_spatial", sel, (y[sel] >= 0).astype(float),
                       text={"side": _words(y[sel] >= 0, "left", "right")}))
    sel = allc[np.abs(x) >= m["ego_longitudinal_m"]]
    out.append(_single(ctx, "front_behind", "ego_spatial", sel, (x[sel] >= 0).astype(float),
                       text={"front_back": _words(x[sel] >= 0, "in front of", "behind")}))
    sel = allc[np.isfinite(bearing)]
    out.append(_single(ctx, "clock", "ego_spatial", sel, clock[sel].astype(float),
                       text={"clock": _clock_text(clock[sel])}))
    for qt_name, col, fname in (("distance", "distance_m", "distance_m"), ("width", "width_m", "width_m"),
                                ("height", "height_m", "height_m"), ("length", "length_m", "length_m")):
        v = _attr(ctx, col, rows)
        sel = allc[np.isfinite(v)]
        out.append(_single(ctx, qt_name, "ego_spatial", sel, v[sel], quantities={fname: v[sel]}))
    sel = allc[np.isfinite(bearing)]
    out.append(_single(ctx, "bearing", "ego_spatial", sel, bearing[sel], quantities={"bearing_deg": bearing[sel]},
                       text={"clock": _clock_text(clock[sel])}))
    return out


def _pairs_within_groups(group_sorted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (i, j), i < j, of rows sharing a group value (rows sorted by group). Loops over distinct group
    sizes only (at most max_objects_per_keyframe of them)."""
    n = len(group_sorted)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = np.ones(n, bool)
    first[1:] = group_sorted[1:] != group_sorted[:-1]
    starts = np.nonzero(first)[0]
    sizes = np.diff(np.append(starts, n))
    ii, jj = [], []
    for size in np.unique(sizes):
        if size < 2:
            continue
        ti, tj = np.triu_indices(size, k=1)
        s = starts[sizes == size]
        ii.append((s[:, None] + ti[None, :]).reshape(-1))
        jj.append((s[:, None] + tj[None, :]).reshape(-1))
    if not ii:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    i, j = np.concatenate(ii), np.concatenate(jj)
    o = np.lexsort((j, i))
    return i[o], j[o]


def _object_spatial(ctx: Context) -> list[Batch]:
    c = ctx.cand
    seed = ctx.cfg.qa.seed
    i, j = _pairs_within_groups(c["group"])  # candidates are sorted by keyframe group
    if len(i) == 0:
        return []
    fi = ctx.frames_fi[c["frame_row"][i]]
    h = hash_fields(seed, ctx.scene_hash[c["scene"][i]].view(np.int64), fi, c["track"][i], c["track"][j],
                    np.full(len(i), 0x9A1))
    # cap pairs per keyframe: the lowest hashes win
    o = np.lexsort((h, c["group"][i]))
    i, j, h = i[o], j[o], h[o]
    keep = rank_in_group(c["group"][i]) < ctx.cfg.qa.max_pairs_per_keyframe
    i, j, h = i[keep], j[keep], h[keep]
    swap = (h >> np.uint64(17)) & np.uint64(1)
    a = np.where(swap == 1, j, i)
    b = np.where(swap == 1, i, j)
    o = np.lexsort((c["region"][b], c["region"][a], c["group"][a]))
    a, b = a[o], b[o]
    rel = pair_relations(ctx.attrs, c["attr"][a], c["attr"][b])
    r = {k: to_numpy(rel.column(k)) for k in rel.column_names}
    m = RELATION_MARGINS
    out = []

    def batch(qt_name, sel, value, text=None, quantities=None):
        qt = QUESTION_TYPES[("object_spatial", qt_name)]
        aa, bb = a[sel], b[sel]
        t = {"region_a": (c["region_text"], aa), "region_b": (c["region_text"], bb),
             "class_a": (c["class_text"], aa), "class_b": (c["class_text"], bb)}
        t.update(text or {})
        return Batch(qt=qt, group=c["group"][aa], a=aa, b=bb, horizon_idx=None,
                     value=np.asarray(value, np.float64), out_of_view=None,
                     g_start=np.stack([aa, bb], axis=1), g_len=np.ones((len(aa), 2), np.int64), text=t,
                     quantities=quantities or {})

    allp = np.arange(len(a))

    def yes_no(pred):
        return _words(pred, "Yes", "No")

    sel = allp[np.abs(r["lateral_gap_m"]) >= m["lateral_m"]]
    p = r["a_left_of_b"][sel]
    out.append(batch("left_of", sel, p.astype(float), {"yes_no": yes_no(p), "side": _words(p, "left", "right")}))
    sel = allp[np.abs(r["longitudinal_gap_m"]) >= m["longitudinal_m"]]
    p = r["a_in_front_of_b"][sel]
    out.append(batch("in_front_of", sel, p.astype(float),
                     {"yes_no": yes_no(p), "front_back": _words(p, "in front of", "behind")}))
    ratio = r["volume_ratio"]
    with np.errstate(divide="ignore", invalid="ignore"):
        clear = np.isfinite(ratio) & (ratio > 0) & (np.maximum(ratio, 1 / ratio) >= m["volume_ratio"])
    sel = allp[clear]
    p = r["a_bigger_than_b"][sel]
    out.append(batch("bigger", sel, p.astype(float),
                     {"yes_no": yes_no(p), "bigger_smaller": _words(p, "bigger", "smaller")}))
    sel = allp[np.abs(r["height_diff_m"]) >= m["height_m"]]
    p = r["a_taller_than_b"][sel]
    out.append(batch("taller", sel, p.astype(float),
                     {"yes_no": yes_no(p), "taller_shorter": _words(p, "taller", "shorter")}))
    sel = allp[np.abs(r["width_diff_m"]) >= m["width_m"]]
    p = r["a_wider_than_b"][sel]
    out.append(batch("wider", sel, p.astype(float),
                     {"yes_no": yes_no(p), "wider_thinner": _words(p, "wider", "thinner")}))
    d = r["distance_m"]
    sel = allp[np.isfinite(d)]
    out.append(batch("distance", sel, d[sel], quantities={"distance_m": d[sel]}))
    dd = r["direction_deg"]
    sel = allp[np.isfinite(dd)]
    out.append(batch("direction", sel, dd[sel], text={"clock": _clock_text(r["direction_clock"][sel])},
                     quantities={"direction_deg": dd[sel]}))
    return out


def _when_text(horizons: np.ndarray) -> pa.Array:
    def w(h):
        if abs(h) < 1e-9:
            return "now"
        unit = "second" if abs(h - 1.0) < 1e-9 else "seconds"
        return f"in {h:g} {unit}"
    return pa.array([w(float(h)) for h in horizons], pa.string())


def _spatiotemporal(ctx: Context, ego, attr_index, n_tr, a_tc, front_index, p_cam, img_index, n_cam, pool_offset):
    c = ctx.cand
    tol = ctx.cfg.keyframes.match_tolerance_s
    st = np.nonzero(c["front_proj"] >= 0)[0]  # candidates visible in the front camera at the keyframe
    horizons = ctx.horizons
    fut = horizons[horizons > 1e-9]
    offsets = np.concatenate([np.asarray(CONTEXT_OFFSETS_S), [0.0], fut])
    roles_idx = np.concatenate([np.zeros(len(CONTEXT_OFFSETS_S), np.int64), [1], np.full(len(fut), 2)])
    n_st, n_off = len(st), len(offsets)
    kf_rows = c["frame_row"][st]
    tc = a_tc[c["attr"][st]]  # dense track code of each target
    q_scene = np.repeat(c["scene"][st], n_off)
    q_t = np.repeat(ctx.frames_ts[kf_rows], n_off) + np.round(np.tile(offsets, n_st) * 1e6).astype(np.int64)
    win_rows = nearest_frame_rows(ctx.frames_sc, ctx.frames_ts, q_scene, q_t, tol).reshape(n_st, n_off)
    win_rows[:, len(CONTEXT_OFFSETS_S)] = kf_rows  # the keyframe itself
    fkey = np.where(win_rows >= 0, win_rows * n_tr + tc[:, None], -1)
    fp = front_index.find(fkey.reshape(-1)).reshape(n_st, n_off)
    fp = np.where((win_rows >= 0) & (fp >= 0), fp, -1)
    # pool 2: visible front-camera entries in window order, grouped by target
    has = fp >= 0
    g_len = has.sum(axis=1).astype(np.int64)
    g_start = pool_offset + np.cumsum(g_len) - g_len
    flat_rows = win_rows[has]
    flat_proj = fp[has]
    roles = np.broadcast_to(roles_idx, (n_st, n_off))[has]
    img = img_index.find(flat_rows * n_cam + p_cam[flat_proj])
    pool = _pool_entries(roles, flat_rows, flat_proj, img,
                         np.broadcast_to(c["track"][st][:, None], (n_st, n_off))[has],
                         np.broadcast_to(c["region"][st][:, None], (n_st, n_off))[has], ctx.frames_fi, ctx.frames_ts)

    # horizon frames and values
    h_cols = np.array([np.nonzero(np.isclose(offsets, h))[0][0] for h in horizons], dtype=np.int64)
    h_rows = win_rows[:, h_cols]  # (n_st, H)
    h_attr = attr_index.find(np.where(h_rows >= 0, h_rows * n_tr + tc[:, None], -1).reshape(-1)).reshape(h_rows.shape)
    oov = ~(fp[:, h_cols] >= 0)
    st_rep = np.repeat(st, len(horizons))
    hidx = np.tile(np.arange(len(horizons)), n_st)
    rows_flat = h_rows.reshape(-1)
    attr_flat = h_attr.reshape(-1)
    oov_flat = oov.reshape(-1)
    gs = np.repeat(g_start, len(horizons))
    gl = np.repeat(g_len, len(horizons))
    when = _when_text(horizons)
    out = []

    def batch(qt_name, sel, fname, value):
        return _single(ctx, qt_name, "ego_spatiotemporal", st_rep[sel], value, text={"when": (when, hidx[sel])},
                       quantities={fname: value, "horizon_s": horizons[hidx[sel]]},
                       pool_start=gs[sel], pool_len=gl[sel], horizon_idx=hidx[sel],
                       out_of_view=oov_flat[sel]) if len(sel) else None

    has_row = attr_flat >= 0
    safe = np.maximum(attr_flat, 0)
    for qt_name, col, fname in (("distance", "distance_m", "distance_m"), ("bearing", "bearing_deg", "bearing_deg"),
                                ("target_speed", "speed_mps", "speed_mps")):
        v = np.where(has_row, to_numpy(column(ctx.attrs, col), np.float64, fill=np.nan)[safe], np.nan)
        sel = np.nonzero(np.isfinite(v))[0]
        out.append(batch(qt_name, sel, fname, v[sel]))
    ev = np.where(rows_flat >= 0, ego.speed_mps[np.maximum(rows_flat, 0)], np.nan)
    sel = np.nonzero(np.isfinite(ev))[0]
    out.append(batch("ego_speed", sel, "ego_speed_mps", ev[sel]))
    return [b for b in out if b is not None], pool


# -------------------------------------------------------------------------------------------- assembly
def _assemble(ctx: Context, batches: list[Batch], pool: pa.StructArray, templates: TemplateSet) -> pa.Table:
    """Render every batch and lay all rows out in canonical order.

    Each batch's rows are already in (keyframe group, regions, horizon) order, so the canonical order
    (group, family, type, regions, horizon) is a stable sort on one integer key (group, batch number);
    only the rendered question/answer strings need one reordering take (they come out grouped by template)."""
    cfg = ctx.cfg
    c = ctx.cand
    fam_code = {f: i for i, f in enumerate(FAMILIES)}
    batches = sorted(batches, key=lambda bt: (fam_code[bt.qt.family], bt.qt.name))
    nb = len(batches)
    horizons = ctx.horizons
    horizon_ms = np.round(horizons * 1000).astype(np.int64)
    kf_rows = c["frame_row"][_group_starts(c["group"])]  # keyframe FRAMES row per group
    kf_scene = c["scene"][_group_starts(c["group"])]

    q_chunks, a_chunks, tpl_ids = [], [], []
    meta = {k: [] for k in ("group", "a", "b", "hidx", "batch", "value", "oov", "tpl", "render_pos", "gs", "gl")}
    offset = 0
    for bi, bt in enumerate(batches):
        n = bt.n
        variants = templates.variants(bt.qt.family, bt.qt.name)
        b = bt.b if bt.b is not None else np.full(n, -1)
        hidx = bt.horizon_idx if bt.horizon_idx is not None else np.full(n, -1)
        g = bt.group
        h = hash_fields(cfg.qa.seed, ctx.scene_hash[kf_scene[g]], ctx.frames_fi[kf_rows[g]],
                        np.full(n, stable_hash(f"{bt.qt.family}/{bt.qt.name}"), np.uint64), c["track"][bt.a],
                        np.where(b >= 0, c["track"][np.maximum(b, 0)], -1),
                        np.where(hidx >= 0, horizon_ms[np.maximum(hidx, 0)], -1))
        var = (h % np.uint64(len(variants))).astype(np.int64)
        order = np.argsort(var, kind="stable")
        counts = np.bincount(var, minlength=len(variants))
        used = {p.name for tpl in variants for p in tpl.question + tpl.answer if hasattr(p, "name")}
        cols = FieldColumns(bt.qt, {k: (v[0], v[1][order]) for k, v in bt.text.items() if k in used},
                            {k: np.asarray(v)[order] for k, v in bt.quantities.items() if k in used},
                            cfg.qa.decimals)
        start = 0
        base_tpl = len(tpl_ids)
        for k, tpl in enumerate(variants):
            tpl_ids.append(tpl.id)
            cnt = int(counts[k])
            if cnt == 0:
                continue
            q, ans = render(tpl, cols.slice(start, cnt), cnt)
            q_chunks.append(q)
            a_chunks.append(ans)
            start += cnt
        pos = np.empty(n, np.int64)
        pos[order] = offset + np.arange(n)  # where each row of the batch sits among the rendered strings
        offset += n
        k = bt.g_start.shape[1]
        gs = np.zeros((n, 2), np.int64)
        gl = np.zeros((n, 2), np.int64)
        gs[:, :k], gl[:, :k] = bt.g_start, bt.g_len
        oov = bt.out_of_view if bt.out_of_view is not None else np.zeros(n, bool)
        for key, val in (("group", g), ("a", bt.a), ("b", b), ("hidx", hidx), ("batch", np.full(n, bi)),
                         ("value", bt.value), ("oov", oov), ("tpl", base_tpl + var), ("render_pos", pos),
                         ("gs", gs), ("gl", gl)):
            meta[key].append(val)
    m = {k: np.concatenate(v) for k, v in meta.items()}
    final = np.argsort(m["group"] * nb + m["batch"], kind="stable")
    m = {k: v[final] for k, v in m.items()}
    n = len(final)
    questions = pa.chunked_array(q_chunks, pa.string()).take(pa.array(m["render_pos"]))
    answers = pa.chunked_array(a_chunks, pa.string()).take(pa.array(m["render_pos"]))

    # ids: "scene:keyframe:" per group + "family:type:" per batch + tracks + ":+Hs"
    grp = pa.array(m["group"])
    kf_index = ctx.frames_fi[kf_rows]
    prefix = pc.binary_join_element_wise(pc.take(ctx.scenes, pa.array(kf_scene)),
                                         pc.cast(pa.array(kf_index), pa.string()), "", ":")
    famtype = pa.array([f"{bt.qt.family}:{bt.qt.name}:" for bt in batches], pa.string())
    track_str = pc.cast(pa.array(c["track"]), pa.string())
    b_str = pc.binary_join_element_wise("-", track_str, "")
    has_b = m["b"] >= 0
    b_str = pa.concat_arrays([b_str, pa.array([""], pa.string())])
    h_tab = pa.array([f":+{h:g}s" for h in horizons] + [""], pa.string())
    batch_idx = pa.array(m["batch"])
    qa_id = pc.binary_join_element_wise(
        pc.take(prefix, grp), pc.take(famtype, batch_idx), pc.take(track_str, pa.array(m["a"])),
        pc.take(b_str, pa.array(np.where(has_b, m["b"], len(c["track"])))),
        pc.take(h_tab, pa.array(np.where(m["hidx"] >= 0, m["hidx"], len(horizons)))), "")

    row_scene = kf_scene[m["group"]]
    splits = pa.array(scene_split(ctx.scenes.to_pylist(), cfg.qa.val_fraction), pa.string())
    fam_arr = pa.array([bt.qt.family for bt in batches], pa.string())
    type_arr = pa.array([bt.qt.name for bt in batches], pa.string())
    kind_arr = pa.array([bt.qt.kind for bt in batches], pa.string())
    unit_arr = pa.array([UNIT_TEXT.get(bt.qt.unit, bt.qt.unit) for bt in batches], pa.string())

    # list columns: one or two targets per row
    nper = np.where(has_b, 2, 1)
    offs = np.zeros(n + 1, np.int32)
    offs[1:] = np.cumsum(nper)
    flat_c = np.stack([m["a"], m["b"]], axis=1).reshape(-1)
    flat_c = flat_c[flat_c >= 0]
    offs_arr = pa.array(offs)
    region_ids = pa.ListArray.from_arrays(offs_arr, pa.array(c["region"][flat_c].astype(np.int32)))
    track_ids = pa.ListArray.from_arrays(offs_arr, pa.array(c["track"][flat_c]))
    class_raw = pc.take(column(ctx.attrs, "class_name"), pa.array(c["attr"][flat_c]))
    class_names = pa.ListArray.from_arrays(offs_arr, class_raw)

    # grounding: the rows' pool segments, concatenated
    flat_idx = ranges_to_indices(m["gs"].reshape(-1), m["gl"].reshape(-1))
    g_offs = np.zeros(n + 1, np.int32)
    g_offs[1:] = np.cumsum(m["gl"].sum(axis=1))
    grounding = pa.ListArray.from_arrays(pa.array(g_offs), pool.take(pa.array(flat_idx)))

    is_st = m["hidx"] >= 0
    horizon_col = np.where(is_st, horizons[np.maximum(m["hidx"], 0)], np.nan)
    table = pa.table({
        "qa_id": qa_id, "scene_id": pc.take(ctx.scenes, pa.array(row_scene)),
        "split": pc.take(splits, pa.array(row_scene)),
        "keyframe_index": pa.array(kf_index[m["group"]].astype(np.int32)),
        "timestamp_us": pa.array(ctx.frames_ts[kf_rows][m["group"]]),
        "family": pc.take(fam_arr, batch_idx), "kind": pc.take(kind_arr, batch_idx),
        "question_type": pc.take(type_arr, batch_idx),
        "template_id": pc.take(pa.array(tpl_ids, pa.string()), pa.array(m["tpl"])),
        "question": questions, "answer": answers, "value": pa.array(m["value"]),
        "unit": pc.take(unit_arr, batch_idx),
        "horizon_s": pa.array(horizon_col, mask=~is_st),
        "region_ids": region_ids, "track_ids": track_ids, "class_names": class_names,
        "out_of_view": pa.array(m["oov"], mask=~is_st), "grounding": grounding,
    })
    return table.cast(QA)


def _group_starts(group: np.ndarray) -> np.ndarray:
    """Positions of the first row of each group (groups numbered 0..G-1 in sorted order)."""
    first = np.ones(len(group), bool)
    first[1:] = group[1:] != group[:-1]
    return np.nonzero(first)[0]
