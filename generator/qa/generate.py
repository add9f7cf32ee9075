"""The columnar plan behind every QA family (STRIDE-QA §3, §4.2 "Question Generator").

``make_plan(frames, attributes, projections, cfg, tables)`` does what all families share, for any number
of scenes at once; ``generate(plan, families, templates)`` lets each registered family
(``generator.qa.families``) build its question batches and lays every row out in a canonical order: scene,
keyframe, family (registration order), question type, regions, horizon. In order:

1. Keyframes are the frames with ``is_anchor``, one group each. At a keyframe the candidates are the
   tracked objects with an attributes row that passed the visibility filter (``visible``) in at least one
   camera. They are numbered ``Region [0]``, ``Region [1]``, ... by distance from the ego (then track id)
   — set-of-mark style, one numbering per keyframe shared by all families — and only the nearest
   ``cfg.qa.max_objects_per_keyframe`` are kept.
2. Families turn candidates (or keyframes, for questions about the ego) into ``Batch`` es: one question
   type each, rows in canonical order, a value per row, text fields as lazy vocabulary lookups, quantities
   as arrays, and segments of the grounding pool. A family may read any run table it declares
   (``Plan.tables``: the behaviour labels, ...), through lookups built here (``Plan.attr_index``,
   ``front_index``, ``ego``, ``keyframe_pool``, ``context_pool``). A question about the ego is asked once
   per keyframe (and horizon), never once per candidate.
3. Every row has grounding: pool entries (camera, image path, frame, track, region, 2D box, COCO RLE mask)
   that rows point into; part 1 is each candidate at its keyframe in the visible camera where its box is
   largest, families add their own (context and future frames, keyframe and context images without an
   object). Grounding lists are built with Arrow list arrays from offsets (no per-row Python). Beside its
   targets' track ids a row carries their ``instance_tokens``: the source's identity of each target at the
   keyframe (ATTRIBUTES ``instance_token``; '' where there is none).
4. Template choice: ``hash(cfg.qa.seed, qa_id fields) mod (number of templates of the type)``; rendering is
   columnar (``generator.qa.render``). ``qa_id`` = ``scene:keyframe_index:family:type:track[-track][:+Hs]``
   (``ego`` in place of the track for questions about the ego); ``split`` = 'val' when a hash of the scene
   id falls below ``cfg.qa.val_fraction``, else 'train'.
5. Where the objects of a keyframe are unknown (the run's ``issues`` table says the detector saw nothing there:
   ``schemas.tables.no_detection_rows``; e.g. a frame past its log's annotations under the 'labels' backend),
   only the question types about the ego's poses (``QuestionType.pose_only``) are asked: every other answer,
   an absence ("continue", no risk) included, would be taken from objects nobody looked for.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import (KeyIndex, codes, column, dense_pair_codes, fixed_list_to_numpy,
                                         rank_in_group, ranges_to_indices, to_numpy, unique_strings)
from generator.attributes.ego import ego_states
from generator.qa.fields import UNIT_TEXT, QuestionType
from generator.qa.render import FieldColumns, render
from generator.qa.templates import TemplateSet
from generator.sources.keyframes import nearest_frame_rows
from generator.types import scene_front_cameras
from schemas.tables import QA, QA_GROUNDING, no_detection_rows
from schemas.vocab import GROUNDING_ROLES

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

    def take(self, rows: np.ndarray) -> "Batch":
        """The batch's rows ``rows`` (ascending: the canonical order stays)."""
        opt = lambda v: None if v is None else v[rows]  # noqa: E731
        return Batch(qt=self.qt, group=self.group[rows], a=self.a[rows], b=opt(self.b),
                     horizon_idx=opt(self.horizon_idx), value=self.value[rows], out_of_view=opt(self.out_of_view),
                     g_start=self.g_start[rows], g_len=self.g_len[rows],
                     text={k: (v[0], np.asarray(v[1])[rows]) for k, v in self.text.items()},
                     quantities={k: np.asarray(v)[rows] for k, v in self.quantities.items()})


@dataclass
class Plan:
    """Everything the question families of one call share: the config, the keyframes (one group per anchor
    frame, in (scene, frame) order), the candidate objects at the keyframes (numbered ``Region [X]``),
    lookups from (frame, track) to attribute and projection rows, the run tables families read, and the
    grounding pool (entries that rows point into)."""

    cfg: object
    frames: pa.Table
    scenes: pa.Array
    scene_hash: np.ndarray
    frames_fi: np.ndarray
    frames_ts: np.ndarray
    frames_sc: np.ndarray
    attrs: pa.Table
    cand: dict  # candidate objects at the anchors, in (scene, keyframe, region) order
    horizons: np.ndarray
    anchors: np.ndarray  # FRAMES row of each keyframe group
    attr_index: KeyIndex  # (frame row * n_tr + track code) -> attribute row
    n_tr: int
    a_tc: np.ndarray  # dense (scene, track) code of each attribute row
    front_index: KeyIndex  # (frame row * n_tr + track code) -> visible front-camera projection row
    p_cam: np.ndarray  # camera code of each projection row
    img_index: KeyIndex  # (frame row * n_cam + camera code) -> flattened cameras entry
    n_cam: int
    front_of_scene: np.ndarray  # camera code of each scene's front camera (-1: none)
    tables: dict  # other run tables families read, by layout name ('labels'), or absent
    pool_parts: list = field(default_factory=list)
    pool_size: int = 0
    grounding_source: object = None
    _ego: object = None
    _image_pools: dict = field(default_factory=dict)  # front_image_pool's segments, by offsets

    def add_pool(self, part: dict) -> int:
        """Append grounding entries (``pool_entries``); returns the pool index of the first."""
        start = self.pool_size
        self.pool_parts.append(part)
        self.pool_size += len(part["proj"])
        return start

    def objects_unknown(self) -> np.ndarray:
        """Per keyframe group: whether its objects are unknown (an ``issues`` row of the keyframe's frame that
        leaves it without detector output, ``schemas.tables.no_detection_rows``); all False without issues."""
        out = np.zeros(len(self.anchors), bool)
        issues = self.tables.get("issues")
        if issues is None or issues.num_rows == 0 or len(self.anchors) == 0:
            return out
        lost = issues.filter(no_detection_rows(issues))
        sc = codes(column(lost, "scene_id"), self.scenes)
        keys = KeyIndex(np.unique((sc << 32) | to_numpy(column(lost, "frame_index"), np.int64)))  # a frame: any number
        return keys.find((self.frames_sc[self.anchors] << 32) | self.frames_fi[self.anchors]) >= 0

    @property
    def ego(self):
        """Ego states of every frame (``generator.attributes.ego.ego_states``), computed once."""
        if self._ego is None:
            self._ego = ego_states(self.frames, self.scenes)
        return self._ego

    def keyframe_pool(self) -> tuple[np.ndarray, np.ndarray]:
        """Per keyframe group, the pool segment of its front-camera image without a box (start, length;
        length 0 for a keyframe without a front camera). Built once."""
        return self.front_image_pool((0.0,))

    def context_pool(self) -> tuple[np.ndarray, np.ndarray]:
        """Per keyframe group, the pool segment of the front-camera images of its context frames
        (``cfg.keyframes.context_offsets_s()``: oldest first, the keyframe last), without a box: what a
        question about the ego over the keyframe's context is grounded in. Built once."""
        return self.front_image_pool(tuple(self.cfg.keyframes.context_offsets_s()))

    def front_image_pool(self, offsets_s: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Per keyframe group, the pool segment (start, length) of the front-camera images of the frames
        nearest ``keyframe time + offset`` for each offset (within ``cfg.keyframes.match_tolerance_s``;
        ``nearest_frame_rows``), in offset order, without a box or mask: role 'current' at offset 0,
        'context' before it, 'future' after it. A frame without such an image is left out (length 0 for
        a keyframe without a front camera). Built once per ``offsets_s``."""
        if offsets_s not in self._image_pools:
            offs = np.asarray(offsets_s, np.float64)
            rows = self.anchors
            n, k = len(rows), len(offs)
            sc = self.frames_sc[rows]
            want = np.repeat(self.frames_ts[rows], k) + np.round(np.tile(offs, n) * 1e6).astype(np.int64)
            win = nearest_frame_rows(self.frames_sc, self.frames_ts, np.repeat(sc, k), want,
                                     self.cfg.keyframes.match_tolerance_s).reshape(n, k)
            win[:, np.abs(offs) < 1e-9] = rows[:, None]  # the keyframe itself
            cam = np.broadcast_to(self.front_of_scene[sc][:, None], (n, k))
            img = self.img_index.find(np.where((win >= 0) & (cam >= 0), win * self.n_cam + cam, -1).reshape(-1))
            has = (img >= 0).reshape(n, k)
            role = np.select([offs < -1e-9, offs > 1e-9], [ROLES.index("context"), ROLES.index("future")],
                             ROLES.index("current"))
            none = np.full(int(has.sum()), -1)
            part = pool_entries(np.broadcast_to(role, (n, k))[has], win[has], none, img[has.reshape(-1)], none, none,
                                self.frames_fi, self.frames_ts, camera=cam[has])
            first = self.add_pool(part)
            length = has.sum(axis=1).astype(np.int64)
            self._image_pools[offsets_s] = (first + np.cumsum(length) - length, length)
        return self._image_pools[offsets_s]


# ------------------------------------------------------------------------------------------------ main
def make_plan(frames: pa.Table, attributes: pa.Table, projections: pa.Table, cfg,
              tables: dict | None = None) -> Plan | None:
    """The shared part of QA generation for every anchor frame in ``frames`` (see the module docstring,
    steps 1 and 4); None without frames. A scene without objects still has its keyframes: the questions
    about the ego are asked there."""
    qa_cfg = cfg.qa
    scenes = unique_strings(frames.column("scene_id"))
    if frames.num_rows == 0:
        return None
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
    front_of_scene = _front_cameras(f_sc[cam_parent], cam_parent, cam_code, cam_names, flat_cams,
                                    qa_cfg.front_camera, len(scenes))

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

    # keyframe groups: every anchor frame, in (scene, frame index) order
    anchor_rows = np.flatnonzero(f_anchor)
    anchors = anchor_rows[np.lexsort((f_fi[anchor_rows], f_sc[anchor_rows]))]
    group_of_row = np.full(frames.num_rows, -1, np.int64)
    group_of_row[anchors] = np.arange(len(anchors))

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
    cand = {"attr": c_attr, "frame_row": a_fr[c_attr], "scene": a_sc[c_attr], "track": a_tr[c_attr],
            "region": region.astype(np.int64), "proj": best_index.find(a_key[c_attr]),
            "front_proj": front_index.find(a_key[c_attr]), "group": group_of_row[a_fr[c_attr]]}

    cand["token"] = _instance_tokens(attributes, c_attr)
    classes = column(attributes, "class_name")
    cls_c = pc.take(classes, pa.array(c_attr))
    cand["class_text"] = pc.replace_substring(pc.fill_null(cls_c, "object"), "_", " ")
    cand["region_text"] = pc.binary_join_element_wise("Region [", pc.cast(pa.array(cand["region"]), pa.string()),
                                                      "]", "")
    plan = Plan(cfg=cfg, frames=frames, scenes=scenes,
                scene_hash=np.array([stable_hash(x) for x in scenes.to_pylist()], dtype=np.uint64),
                frames_fi=f_fi, frames_ts=f_ts, frames_sc=f_sc, attrs=attributes, cand=cand,
                horizons=np.asarray(qa_cfg.horizons_s, dtype=np.float64), anchors=anchors, attr_index=attr_index,
                n_tr=n_tr, a_tc=a_tc, front_index=front_index, p_cam=p_cam, img_index=img_index, n_cam=n_cam,
                front_of_scene=front_of_scene, tables=dict(tables or {}))
    plan.grounding_source = GroundingSource.build(projections, cam_paths, cam_universe, p_cam)
    # grounding pool part 1: each candidate at its keyframe in its best camera (pool index = candidate index)
    proj_img = img_index.find(cand["frame_row"] * n_cam + p_cam[cand["proj"]])
    plan.add_pool(pool_entries("current", cand["frame_row"], cand["proj"], proj_img, cand["track"], cand["region"],
                               f_fi, f_ts, camera=p_cam[cand["proj"]]))
    return plan


def _instance_tokens(attributes: pa.Table, rows: np.ndarray) -> pa.DictionaryArray:
    """The source's identity (ATTRIBUTES ``instance_token``; '' where it has none, or for attributes
    without that column) of the given attribute rows, dictionary-encoded."""
    if "instance_token" not in attributes.column_names:
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(rows), np.int32)), pa.array([""]))
    tokens = pc.fill_null(pc.take(column(attributes, "instance_token"), pa.array(rows)), "")
    return pc.dictionary_encode(tokens).cast(pa.dictionary(pa.int32(), pa.string()))


def generate(plan: Plan | None, families, templates: TemplateSet) -> pa.Table:
    """QA rows (schemas.tables.QA) of ``families`` (``generator.qa.families.Family``, in canonical order)
    over ``plan``: each family builds its batches, then every batch is rendered and laid out."""
    if plan is None:
        return QA.empty_table()
    batches: list[Batch] = []
    order = {}
    for k, fam in enumerate(families):
        order[fam.name] = k
        batches += [b for b in fam.build(plan) if b is not None]
    unknown = plan.objects_unknown()
    if unknown.any():  # only the questions about the ego's poses where nobody looked for objects (step 5)
        batches = [b if b.qt.pose_only else b.take(np.flatnonzero(~unknown[b.group])) for b in batches]
    pool = _concat_pool(plan.pool_parts, plan.grounding_source)
    batches = [b for b in batches if b.n and templates.variants(b.qt.family, b.qt.name)]
    if not batches:
        return QA.empty_table()
    return _assemble(plan, batches, pool, templates, order)


def _front_cameras(entry_scene, entry_frame, entry_cam, names, flat_cams, preferred: str,
                   n_scenes: int) -> np.ndarray:
    """Camera code of each scene's front camera (``generator.types.scene_front_cameras``), -1 for a scene
    without cameras."""
    out = np.full(n_scenes, -1, np.int64)
    if len(entry_cam):
        T = fixed_list_to_numpy(pc.struct_field(flat_cams, "ego_SE3_cam"), 16)
        keys, chosen = scene_front_cameras(entry_scene, entry_frame, names, T, preferred)
        out[keys] = entry_cam[chosen]
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


ROLES = GROUNDING_ROLES  # in QA_GROUNDING.role's dictionary order


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


def pool_entries(role, frame_rows, proj_rows, img_rows, track, region, f_fi, f_ts, camera) -> dict:
    """Grounding entries for parallel arrays of (frame row, projection row): QA_GROUNDING's plain columns
    as arrays; its dictionary columns (and the mask) as int32 index arrays, -1 = null, that
    ``_concat_pool`` turns into dictionary arrays over a ``GroundingSource``. ``role`` is a ROLES name
    or an array of ROLES codes; ``camera`` the camera code of each entry. A projection row of -1 is an
    image without an object (no box, no mask; track and region null)."""
    n = len(proj_rows)
    if isinstance(role, str):
        role = np.full(n, ROLES.index(role), np.int32)
    return {
        "camera": np.asarray(camera, np.int64),
        "role": np.asarray(role, np.int32),
        "frame_index": f_fi[frame_rows].astype(np.int32),
        "timestamp_us": f_ts[frame_rows].astype(np.int64),
        "image_path": np.where(img_rows >= 0, img_rows, -1).astype(np.int32),
        "track_id": np.asarray(track, np.int64),
        "region_id": np.asarray(region, np.int32),
        "proj": np.asarray(proj_rows, np.int64),
    }


def _nullable(values: np.ndarray) -> pa.Array:
    """Float64 values with NaN as null (a row without one number: an instruction answered by a trajectory)."""
    nan = np.isnan(values)
    return pa.array(values, mask=nan if nan.any() else None)


def _dictionary(indices: np.ndarray, values: pa.Array) -> pa.DictionaryArray:
    null = indices < 0
    idx = pa.array(np.where(null, 0, indices).astype(np.int32), mask=null if null.any() else None)
    return pa.DictionaryArray.from_arrays(idx, values)


def _concat_pool(parts: list[dict], src: GroundingSource) -> pa.StructArray:
    """One StructArray of QA_GROUNDING from ``pool_entries`` parts (pool index = position in order)."""
    cat = {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, np.int64) for k in
           ("role", "frame_index", "timestamp_us", "image_path", "track_id", "region_id", "proj", "camera")}
    proj = cat["proj"]
    no_obj = proj < 0
    pr = pa.array(np.maximum(proj, 0), pa.int64(), mask=no_obj if no_obj.any() else None)
    no_mask = no_obj | (src.mask_null[np.maximum(proj, 0)] if len(src.mask_null) else True)  # (no projection at all)
    mask = pa.StructArray.from_arrays(
        [pc.take(src.mask_size, pr), _dictionary(np.where(no_mask, -1, proj), src.mask_counts)],
        fields=list(QA_GROUNDING.field("mask_rle").type), mask=pa.array(no_mask) if no_mask.any() else None)
    arrays = {
        "role": _dictionary(cat["role"], src.roles),
        "frame_index": pa.array(cat["frame_index"].astype(np.int32)),
        "timestamp_us": pa.array(cat["timestamp_us"].astype(np.int64)),
        "camera": _dictionary(cat["camera"], src.cameras),
        "image_path": _dictionary(cat["image_path"], src.image_paths),
        "track_id": pa.array(cat["track_id"].astype(np.int64), mask=no_obj if no_obj.any() else None),
        "region_id": pa.array(cat["region_id"].astype(np.int32), mask=no_obj if no_obj.any() else None),
        "box_xyxy": pc.take(src.box, pr),
        "mask_rle": mask,
    }
    return pa.StructArray.from_arrays([arrays[f.name].cast(f.type) for f in QA_GROUNDING], fields=list(QA_GROUNDING))


# -------------------------------------------------------------------------------------------- family helpers
def attr(plan: "Plan", name: str, rows: np.ndarray) -> np.ndarray:
    """An ATTRIBUTES column as float64 at the given attribute rows (NaN for nulls)."""
    return to_numpy(column(plan.attrs, name), np.float64, fill=np.nan)[rows]


def single(plan: "Plan", qt: QuestionType, sel: np.ndarray, value: np.ndarray, text=None, quantities=None,
           pool_start=None, pool_len=None, horizon_idx=None, out_of_view=None) -> Batch:
    """A batch about one candidate per row (``sel`` = candidate indices, in canonical order); grounded by
    default in the candidate's keyframe entry (pool index = candidate index)."""
    c = plan.cand
    t = {"region": (c["region_text"], sel), "class_name": (c["class_text"], sel)}
    t.update(text or {})
    return Batch(qt=qt, group=c["group"][sel], a=sel, b=None, horizon_idx=horizon_idx,
                 value=np.asarray(value, np.float64), out_of_view=out_of_view,
                 g_start=(sel if pool_start is None else pool_start)[:, None],
                 g_len=(np.ones(len(sel), np.int64) if pool_len is None else pool_len)[:, None],
                 text=t, quantities=quantities or {})


def keyframe_batch(plan: "Plan", qt: QuestionType, groups: np.ndarray, value: np.ndarray, text=None,
                   quantities=None, horizon_idx=None, pool=None) -> Batch:
    """A batch of questions about the ego at keyframes (no target object, no region): one row per entry of
    ``groups`` (keyframe groups, ascending; with ``horizon_idx``, ascending horizons within a group),
    grounded in the keyframe's front-camera image (no box, no mask), or in ``pool``: per keyframe group a
    (start, length) pool segment, e.g. ``plan.context_pool()``."""
    groups = np.asarray(groups, np.int64)
    start, length = plan.keyframe_pool() if pool is None else pool
    return Batch(qt=qt, group=groups, a=np.full(len(groups), -1, np.int64), b=None, horizon_idx=horizon_idx,
                 value=np.asarray(value, np.float64), out_of_view=None,
                 g_start=start[groups][:, None], g_len=length[groups][:, None], text=text or {},
                 quantities=quantities or {})


_VOCAB: dict[tuple, pa.Array] = {}


def words(mask: np.ndarray, yes: str, no: str) -> tuple[pa.Array, np.ndarray]:
    """Lazy text field: ``yes`` where mask else ``no``."""
    key = (yes, no)
    if key not in _VOCAB:
        _VOCAB[key] = pa.array([yes, no], pa.string())
    return _VOCAB[key], np.where(mask, 0, 1)


def vocabulary(names, codes_: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Lazy text field over a fixed vocabulary: ``names[codes]``."""
    key = tuple(names)
    if key not in _VOCAB:
        _VOCAB[key] = pa.array(list(names), pa.string())
    return _VOCAB[key], np.asarray(codes_, np.int64)


_CLOCKS = pa.array([f"{h} o'clock" for h in range(13)], pa.string())


def clock_text(clock: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    return _CLOCKS, np.asarray(clock, np.int64)


# -------------------------------------------------------------------------------------------- assembly
def _assemble(ctx: Plan, batches: list[Batch], pool: pa.StructArray, templates: TemplateSet,
              family_order: dict[str, int]) -> pa.Table:
    """Render every batch and lay all rows out in canonical order.

    Each batch's rows are already in (keyframe group, regions, horizon) order, so the canonical order
    (group, family, type, regions, horizon) is a stable sort on one integer key (group, batch number);
    only the rendered question/answer strings need one reordering take (they come out grouped by template)."""
    cfg = ctx.cfg
    c = ctx.cand
    batches = sorted(batches, key=lambda bt: (family_order[bt.qt.family], bt.qt.name))
    nb = len(batches)
    horizons = ctx.horizons
    horizon_ms = np.round(horizons * 1000).astype(np.int64)
    kf_rows = ctx.anchors  # keyframe FRAMES row per group
    kf_scene = ctx.frames_sc[kf_rows]
    track_of = np.append(c["track"], -1)  # index -1 (no target: a question about the ego) -> -1

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
                        np.full(n, stable_hash(f"{bt.qt.family}/{bt.qt.name}"), np.uint64), track_of[bt.a],
                        track_of[b],
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
    render_pos = pa.array(m["render_pos"])  # (one array, then one take: Arrow's take over many chunks is slower)
    questions = pa.concat_arrays(q_chunks).take(render_pos)
    answers = pa.concat_arrays(a_chunks).take(render_pos)

    # ids: "scene:keyframe:" per group + "family:type:" per batch + tracks + ":+Hs"
    grp = pa.array(m["group"])
    kf_index = ctx.frames_fi[kf_rows]
    prefix = pc.binary_join_element_wise(pc.take(ctx.scenes, pa.array(kf_scene)),
                                         pc.cast(pa.array(kf_index), pa.string()), "", ":")
    famtype = pa.array([f"{bt.qt.family}:{bt.qt.name}:" for bt in batches], pa.string())
    track_str = pc.cast(pa.array(c["track"]), pa.string())
    b_str = pc.binary_join_element_wise("-", track_str, "")
    has_a, has_b = m["a"] >= 0, m["b"] >= 0
    a_str = pa.concat_arrays([track_str, pa.array(["ego"], pa.string())])  # no target: about the ego
    b_str = pa.concat_arrays([b_str, pa.array([""], pa.string())])
    h_tab = pa.array([f":+{h:g}s" for h in horizons] + [""], pa.string())
    batch_idx = pa.array(m["batch"])
    qa_id = pc.binary_join_element_wise(
        pc.take(prefix, grp), pc.take(famtype, batch_idx),
        pc.take(a_str, pa.array(np.where(has_a, m["a"], len(c["track"])))),
        pc.take(b_str, pa.array(np.where(has_b, m["b"], len(c["track"])))),
        pc.take(h_tab, pa.array(np.where(m["hidx"] >= 0, m["hidx"], len(horizons)))), "")

    row_scene = kf_scene[m["group"]]
    splits = pa.array(scene_split(ctx.scenes.to_pylist(), cfg.qa.val_fraction), pa.string())
    fam_arr = pa.array([bt.qt.family for bt in batches], pa.string())
    type_arr = pa.array([bt.qt.name for bt in batches], pa.string())
    kind_arr = pa.array([bt.qt.kind for bt in batches], pa.string())
    unit_arr = pa.array([UNIT_TEXT.get(bt.qt.unit, bt.qt.unit) for bt in batches], pa.string())

    # list columns: no, one or two targets per row
    nper = has_a.astype(np.int64) + has_b
    offs = np.zeros(n + 1, np.int32)
    offs[1:] = np.cumsum(nper)
    flat_c = np.stack([m["a"], m["b"]], axis=1).reshape(-1)
    flat_c = flat_c[flat_c >= 0]
    offs_arr = pa.array(offs)
    region_ids = pa.ListArray.from_arrays(offs_arr, pa.array(c["region"][flat_c].astype(np.int32)))
    track_ids = pa.ListArray.from_arrays(offs_arr, pa.array(c["track"][flat_c]))
    token = c["token"]
    instance_tokens = pa.ListArray.from_arrays(offs_arr, pa.DictionaryArray.from_arrays(
        pc.take(token.indices, pa.array(flat_c)), token.dictionary))
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
        "question": questions, "answer": answers, "value": _nullable(m["value"]),
        "unit": pc.take(unit_arr, batch_idx),
        "horizon_s": pa.array(horizon_col, mask=~is_st),
        "region_ids": region_ids, "track_ids": track_ids, "instance_tokens": instance_tokens,
        "class_names": class_names,
        "out_of_view": pa.array(m["oov"], mask=~(is_st & has_a)), "grounding": grounding,
    })
    return table.cast(QA)
