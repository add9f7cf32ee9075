"""The three STRIDE-QA families (§3): object-centric spatial, ego-centric spatial and ego-centric
spatiotemporal, with the question types and fields each declares for its templates
(``generator/qa/templates/<family>.yaml``).

* object_spatial: unordered candidate pairs of a keyframe, at most ``cfg.qa.max_pairs_per_keyframe`` chosen
  by a seeded hash; the order (A, B) inside a pair is also drawn from the hash so yes/no answers are
  balanced. Qualitative relations whose margin is within ``cfg.qa.relation_margins`` (e.g. two objects 0.2 m
  apart laterally for left/right) are not asked: their answer would be a coin flip of detection noise.
  SpatialRGPT's object-centric quantities, which STRIDE-QA compares against, each have a qualitative and a
  quantitative form: direct distance (closer / distance), horizontal distance (left_of, in_front_of /
  horizontal_distance), vertical distance (above / vertical_distance), width (wider / ego_spatial width)
  and height (taller / ego_spatial height); direction is object_spatial direction.
* ego_spatial: one question per candidate and question type.
* ego_spatiotemporal: candidates also visible in the front camera at the keyframe
  (``generator.types.front_camera``). Context frames at ``cfg.keyframes.context_offsets_s()`` (default
  -1.5, -1.0, -0.5 s and the keyframe), and targets at each ``cfg.qa.horizons_s`` after it: the frame
  nearest each wanted time within ``cfg.keyframes.match_tolerance_s``
  (``generator.sources.keyframes.nearest_frame_rows``). At a horizon the target's distance, bearing and
  speed are read from its attributes row in that frame (in that frame's ego frame); ``out_of_view`` = no
  visible front-camera projection of the target in that frame. A horizon without a frame, or without the
  target's row, gets no question. Grounding: the front-camera box and mask in each context, current and
  future frame where the target is visible. The ego's speed is a question about the ego, one per keyframe
  and horizon (no region; from the poses), grounded in the context frames' front-camera images. Questions
  at horizon 0 are in the present tense, later ones in the future (the ``_TIME`` fields).
"""
from __future__ import annotations

import numpy as np

from generator.attributes.arrays import column, rank_in_group, to_numpy
from generator.attributes.compute import along_ego, clock_from_bearing, pair_relations
from generator.qa.answers import Clock, Relation, Sided
from generator.qa.fields import Family, Field, QuestionType
from generator.qa.generate import (Batch, Plan, attr, clock_text, hash_fields, keyframe_batch, pool_entries, single,
                                   vocabulary, words)
from generator.sources.keyframes import nearest_frame_rows
from schemas.vocab import EGO_LONGITUDINAL_PHRASES

_PAIR = (Field("region_a", "text", doc="'Region [X]' of object A"), Field("region_b", "text", doc="of object B"),
         Field("class_a", "text", doc="class of A, e.g. 'traffic cone'"), Field("class_b", "text"))
_ONE = (Field("region", "text", doc="'Region [X]' of the object"), Field("class_name", "text"))
# the time of a spatiotemporal question, in the tense it needs: present at horizon 0, future after it
_TIME = (Field("when", "text", doc="'now', 'in 1 second', 'in 2 seconds', ..."),
         Field("after_last", "text", doc="'in the last frame', '1 s after the last frame', ..."),
         Field("is_will_be", "text", doc="'is' at horizon 0, 'will be' after it"),
         Field("horizon_s", "quantity", "s", doc="seconds after the keyframe"))
_ST = _ONE + _TIME
YES_NO = Field("yes_no", "text", answer=True, doc="'Yes' | 'No' for the type's predicate")


def _q(family, name, kind, fields, value_field=None, unit="bool", doc="", **more):
    more.setdefault("reading", READINGS.get((family, name)))
    return QuestionType(family, name, kind, tuple(fields), value_field, unit, doc, **more)


READINGS = {
    ("object_spatial", "left_of"): Relation(("left",), ("right",), "pair"),
    ("object_spatial", "in_front_of"): Relation(("in front", "ahead"), ("behind",), "pair"),
    ("object_spatial", "bigger"): Relation(("bigger", "larger"), ("smaller",), "pair"),
    ("object_spatial", "taller"): Relation(("taller",), ("shorter",), "pair"),
    ("object_spatial", "wider"): Relation(("wider", "broader"), ("thinner", "narrower"), "pair"),
    ("object_spatial", "above"): Relation(("above", "higher"), ("below", "lower", "beneath", "under"), "pair"),
    ("object_spatial", "closer"): Relation(("closer", "nearer"), ("farther", "further"), "pair"),
    ("ego_spatial", "left_right"): Relation(("left",), ("right",), "ego"),
    ("ego_spatial", "front_behind"): Sided((("behind",), ("in front", "ahead"),
                                             ("beside", "alongside", "next to", "level with")), (1, 0, 2)),
    ("ego_spatial", "clock"): Clock(),
}
"""How ``drivegen score qa`` reads an answer to each question type (``generator.qa.answers``): the words of
its predicate (true, then false), read from A's side for a pair ('pair') or the region's for the ego's types
('ego'); the clock position. The other types are quantities (``generator.qa.answers.parse``)."""


_TYPES = [
    # object-centric spatial: two agents in one keyframe (relations in the ego frame, attributes.pair_relations)
    _q("object_spatial", "left_of", "qualitative", _PAIR + (YES_NO, Field("side", "text", answer=True,
       doc="'left' | 'right': where A is relative to B")), doc="A left of B (y_A > y_B)"),
    _q("object_spatial", "in_front_of", "qualitative", _PAIR + (YES_NO, Field("front_back", "text", answer=True,
       doc="'in front of' | 'behind'")), doc="A in front of B (x_A > x_B)"),
    _q("object_spatial", "bigger", "qualitative", _PAIR + (YES_NO, Field("bigger_smaller", "text", answer=True,
       doc="'bigger' | 'smaller'")), doc="box volume of A > B"),
    _q("object_spatial", "taller", "qualitative", _PAIR + (YES_NO, Field("taller_shorter", "text", answer=True,
       doc="'taller' | 'shorter'")), doc="height of A > B"),
    _q("object_spatial", "wider", "qualitative", _PAIR + (YES_NO, Field("wider_thinner", "text", answer=True,
       doc="'wider' | 'thinner'")), doc="width of A > B"),
    _q("object_spatial", "above", "qualitative", _PAIR + (YES_NO, Field("above_below", "text", answer=True,
       doc="'above' | 'below'")), doc="A's box centre higher than B's (z_A > z_B)"),
    _q("object_spatial", "closer", "qualitative", _PAIR + (YES_NO, Field("closer_farther", "text", answer=True,
       doc="'closer to' | 'farther from'")), doc="A's box centre nearer the ego origin than B's"),
    _q("object_spatial", "distance", "quantitative", _PAIR + (Field("distance_m", "quantity", "m", answer=True),),
       "distance_m", "m", doc="distance between the box centres"),
    _q("object_spatial", "horizontal_distance", "quantitative",
       _PAIR + (Field("horizontal_distance_m", "quantity", "m", answer=True),), "horizontal_distance_m", "m",
       doc="distance between the box centres in the ground plane (ego x-y)"),
    _q("object_spatial", "vertical_distance", "quantitative",
       _PAIR + (Field("vertical_distance_m", "quantity", "m", answer=True),), "vertical_distance_m", "m",
       doc="height difference of the box centres"),
    _q("object_spatial", "direction", "quantitative", _PAIR + (
        Field("direction_deg", "quantity", "deg", answer=True, doc="bearing of B seen from A, ego axes"),
        Field("clock", "text", answer=True, doc="e.g. '2 o'clock'")), "direction_deg", "deg", pair_reversed="opposite"),
    # ego-centric spatial: the ego and one agent
    _q("ego_spatial", "left_right", "qualitative", _ONE + (Field("side", "text", answer=True, doc="'left' | 'right'"),),
       doc="value 1 = left"),
    _q("ego_spatial", "front_behind", "qualitative", _ONE + (Field("front_back", "text", answer=True,
       doc="'in front of' | 'behind' | 'beside': against the ego's body (attributes.compute.along_ego)"),),
       unit="front_behind", doc="value = index in schemas.vocab.EGO_LONGITUDINAL_PHRASES: 0 behind, 1 in front, "
       "2 beside (overlapping the ego's length)"),
    _q("ego_spatial", "clock", "qualitative", _ONE + (Field("clock", "text", answer=True, doc="e.g. '3 o'clock'"),),
       unit="o'clock", doc="value = clock hour"),
    _q("ego_spatial", "distance", "quantitative", _ONE + (Field("distance_m", "quantity", "m", answer=True),),
       "distance_m", "m"),
    _q("ego_spatial", "bearing", "quantitative", _ONE + (Field("bearing_deg", "quantity", "deg", answer=True),
       Field("clock", "text", answer=True)), "bearing_deg", "deg"),
    _q("ego_spatial", "width", "quantitative", _ONE + (Field("width_m", "quantity", "m", answer=True),),
       "width_m", "m"),
    _q("ego_spatial", "height", "quantitative", _ONE + (Field("height_m", "quantity", "m", answer=True),),
       "height_m", "m"),
    _q("ego_spatial", "length", "quantitative", _ONE + (Field("length_m", "quantity", "m", answer=True),),
       "length_m", "m"),
    # ego-centric spatiotemporal: one target in the front camera, values at a horizon after the keyframe
    _q("ego_spatiotemporal", "distance", "quantitative", _ST + (Field("distance_m", "quantity", "m", answer=True),),
       "distance_m", "m"),
    _q("ego_spatiotemporal", "bearing", "quantitative", _ST + (Field("bearing_deg", "quantity", "deg", answer=True),),
       "bearing_deg", "deg", doc="heading angle from the ego to the target: 0 = forward, CCW positive"),
    _q("ego_spatiotemporal", "ego_speed", "quantitative",
       _TIME + (Field("ego_speed_mps", "quantity", "mps", answer=True),), "ego_speed_mps", "mps",
       doc="about the ego: one per keyframe and horizon, no region", pose_only=True),
    _q("ego_spatiotemporal", "target_speed", "quantitative",
       _ST + (Field("speed_mps", "quantity", "mps", answer=True),), "speed_mps", "mps"),
]

OBJECT_SPATIAL_TYPES = {qt.name: qt for qt in _TYPES if qt.family == "object_spatial"}
EGO_SPATIAL_TYPES = {qt.name: qt for qt in _TYPES if qt.family == "ego_spatial"}
EGO_SPATIOTEMPORAL_TYPES = {qt.name: qt for qt in _TYPES if qt.family == "ego_spatiotemporal"}


# ------------------------------------------------------------------------------------------ builders
def build_ego_spatial(plan: Plan) -> list[Batch]:
    c = plan.cand
    rows = c["attr"]
    n = len(rows)
    allc = np.arange(n)
    x, y = attr(plan, "x_ego_m", rows), attr(plan, "y_ego_m", rows)
    bearing = attr(plan, "bearing_deg", rows)
    clock = clock_from_bearing(bearing)
    out = []
    m = plan.cfg.qa.relation_margins
    sel = allc[np.abs(y) >= m.ego_lateral_m]
    out.append(single(plan, EGO_SPATIAL_TYPES["left_right"], sel, (y[sel] >= 0).astype(float),
                       text={"side": words(y[sel] >= 0, "left", "right")}))
    along, margin = along_ego(x, attr(plan, "length_m", rows), attr(plan, "width_m", rows),
                              attr(plan, "heading_ego_deg", rows), plan.cfg.ego)
    sel = allc[margin >= m.ego_longitudinal_m]
    out.append(single(plan, EGO_SPATIAL_TYPES["front_behind"], sel, along[sel].astype(float),
                       text={"front_back": vocabulary(EGO_LONGITUDINAL_PHRASES, along[sel])}))
    sel = allc[np.isfinite(bearing)]
    out.append(single(plan, EGO_SPATIAL_TYPES["clock"], sel, clock[sel].astype(float),
                       text={"clock": clock_text(clock[sel])}))
    for qt_name, col, fname in (("distance", "distance_m", "distance_m"), ("width", "width_m", "width_m"),
                                ("height", "height_m", "height_m"), ("length", "length_m", "length_m")):
        v = attr(plan, col, rows)
        sel = allc[np.isfinite(v)]
        out.append(single(plan, EGO_SPATIAL_TYPES[qt_name], sel, v[sel], quantities={fname: v[sel]}))
    sel = allc[np.isfinite(bearing)]
    out.append(single(plan, EGO_SPATIAL_TYPES["bearing"], sel, bearing[sel], quantities={"bearing_deg": bearing[sel]},
                       text={"clock": clock_text(clock[sel])}))
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


def build_object_spatial(plan: Plan) -> list[Batch]:
    c = plan.cand
    seed = plan.cfg.qa.seed
    i, j = _pairs_within_groups(c["group"])  # candidates are sorted by keyframe group
    if len(i) == 0:
        return []
    fi = plan.frames_fi[c["frame_row"][i]]
    h = hash_fields(seed, plan.scene_hash[c["scene"][i]].view(np.int64), fi, c["track"][i], c["track"][j],
                    np.full(len(i), 0x9A1))
    # cap pairs per keyframe: the lowest hashes win
    o = np.lexsort((h, c["group"][i]))
    i, j, h = i[o], j[o], h[o]
    keep = rank_in_group(c["group"][i]) < plan.cfg.qa.max_pairs_per_keyframe
    i, j, h = i[keep], j[keep], h[keep]
    swap = (h >> np.uint64(17)) & np.uint64(1)
    a = np.where(swap == 1, j, i)
    b = np.where(swap == 1, i, j)
    o = np.lexsort((c["region"][b], c["region"][a], c["group"][a]))
    a, b = a[o], b[o]
    rel = pair_relations(plan.attrs, c["attr"][a], c["attr"][b])
    r = {k: to_numpy(rel.column(k)) for k in rel.column_names}
    m = plan.cfg.qa.relation_margins
    out = []

    def batch(qt_name, sel, value, text=None, quantities=None):
        qt = OBJECT_SPATIAL_TYPES[qt_name]
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
        return words(pred, "Yes", "No")

    # qualitative relations asked beyond their margin: (type, margin column, margin, predicate column,
    # answer field, its words when the predicate holds / does not)
    for qt_name, gap, margin, pred, fname, yes, no in (
            ("left_of", "lateral_gap_m", m.lateral_m, "a_left_of_b", "side", "left", "right"),
            ("in_front_of", "longitudinal_gap_m", m.longitudinal_m, "a_in_front_of_b", "front_back", "in front of",
             "behind"),
            ("taller", "height_diff_m", m.height_m, "a_taller_than_b", "taller_shorter", "taller", "shorter"),
            ("wider", "width_diff_m", m.width_m, "a_wider_than_b", "wider_thinner", "wider", "thinner"),
            ("above", "vertical_gap_m", m.vertical_m, "a_above_b", "above_below", "above", "below"),
            ("closer", "range_gap_m", m.range_m, "a_closer_than_b", "closer_farther", "closer to", "farther from")):
        sel = allp[np.abs(r[gap]) >= margin]
        p = r[pred][sel]
        out.append(batch(qt_name, sel, p.astype(float), {"yes_no": yes_no(p), fname: words(p, yes, no)}))
    ratio = r["volume_ratio"]  # bigger: a ratio of volumes, asked beyond relation_margins.volume_ratio
    with np.errstate(divide="ignore", invalid="ignore"):
        clear = np.isfinite(ratio) & (ratio > 0) & (np.maximum(ratio, 1 / ratio) >= m.volume_ratio)
    sel = allp[clear]
    p = r["a_bigger_than_b"][sel]
    out.append(batch("bigger", sel, p.astype(float),
                     {"yes_no": yes_no(p), "bigger_smaller": words(p, "bigger", "smaller")}))
    for qt_name in ("distance", "horizontal_distance", "vertical_distance"):
        d = r[f"{qt_name}_m"]
        sel = allp[np.isfinite(d)]
        out.append(batch(qt_name, sel, d[sel], quantities={f"{qt_name}_m": d[sel]}))
    dd = r["direction_deg"]
    sel = allp[np.isfinite(dd)]
    out.append(batch("direction", sel, dd[sel], text={"clock": clock_text(r["direction_clock"][sel])},
                     quantities={"direction_deg": dd[sel]}))
    return out


def _time_text(horizons: np.ndarray, hidx: np.ndarray) -> dict:
    """The time fields (``_TIME``) of rows at horizons ``horizons[hidx]``, as lazy vocabulary lookups: the
    present tense at horizon 0, the future after it."""
    now = [abs(float(h)) < 1e-9 for h in horizons]
    when = ["now" if z else f"in {h:g} {'second' if abs(h - 1.0) < 1e-9 else 'seconds'}"
            for h, z in zip(horizons.tolist(), now)]
    after = ["in the last frame" if z else f"{h:g} s after the last frame" for h, z in zip(horizons.tolist(), now)]
    be = ["is" if z else "will be" for z in now]
    return {"when": vocabulary(when, hidx), "after_last": vocabulary(after, hidx),
            "is_will_be": vocabulary(be, hidx)}


def build_ego_spatiotemporal(plan: Plan) -> list[Batch]:
    c = plan.cand
    n_tr, a_tc, p_cam, n_cam = plan.n_tr, plan.a_tc, plan.p_cam, plan.n_cam
    tol = plan.cfg.keyframes.match_tolerance_s
    st = np.nonzero(c["front_proj"] >= 0)[0]  # candidates visible in the front camera at the keyframe
    horizons = plan.horizons
    fut = horizons[horizons > 1e-9]
    before = np.asarray(plan.cfg.keyframes.context_offsets_s()[:-1])  # the context frames before the keyframe
    offsets = np.concatenate([before, [0.0], fut])
    roles_idx = np.concatenate([np.zeros(len(before), np.int64), [1], np.full(len(fut), 2)])
    n_st, n_off = len(st), len(offsets)
    kf_rows = c["frame_row"][st]
    tc = a_tc[c["attr"][st]]  # dense track code of each target
    q_scene = np.repeat(c["scene"][st], n_off)
    q_t = np.repeat(plan.frames_ts[kf_rows], n_off) + np.round(np.tile(offsets, n_st) * 1e6).astype(np.int64)
    win_rows = nearest_frame_rows(plan.frames_sc, plan.frames_ts, q_scene, q_t, tol).reshape(n_st, n_off)
    win_rows[:, len(before)] = kf_rows  # the keyframe itself
    fkey = np.where(win_rows >= 0, win_rows * n_tr + tc[:, None], -1)
    fp = plan.front_index.find(fkey.reshape(-1)).reshape(n_st, n_off)
    fp = np.where((win_rows >= 0) & (fp >= 0), fp, -1)
    # pool 2: visible front-camera entries in window order, grouped by target
    has = fp >= 0
    g_len = has.sum(axis=1).astype(np.int64)
    g_start = np.cumsum(g_len) - g_len  # + the pool offset, once the entries are added
    flat_rows = win_rows[has]
    flat_proj = fp[has]
    roles = np.broadcast_to(roles_idx, (n_st, n_off))[has]
    img = plan.img_index.find(flat_rows * n_cam + p_cam[flat_proj])
    g_start += plan.add_pool(pool_entries(roles, flat_rows, flat_proj, img,
                                          np.broadcast_to(c["track"][st][:, None], (n_st, n_off))[has],
                                          np.broadcast_to(c["region"][st][:, None], (n_st, n_off))[has],
                                          plan.frames_fi, plan.frames_ts, camera=p_cam[flat_proj]))

    # horizon frames and values
    h_cols = np.array([np.nonzero(np.isclose(offsets, h))[0][0] for h in horizons], dtype=np.int64)
    h_rows = win_rows[:, h_cols]  # (n_st, H)
    h_attr = plan.attr_index.find(np.where(h_rows >= 0, h_rows * n_tr + tc[:, None], -1).reshape(-1)).reshape(h_rows.shape)
    oov = ~(fp[:, h_cols] >= 0)
    st_rep = np.repeat(st, len(horizons))
    hidx = np.tile(np.arange(len(horizons)), n_st)
    attr_flat = h_attr.reshape(-1)
    oov_flat = oov.reshape(-1)
    gs = np.repeat(g_start, len(horizons))
    gl = np.repeat(g_len, len(horizons))
    out = []

    def batch(qt_name, sel, fname, value):
        return single(plan, EGO_SPATIOTEMPORAL_TYPES[qt_name], st_rep[sel], value,
                      text=_time_text(horizons, hidx[sel]), quantities={fname: value, "horizon_s": horizons[hidx[sel]]},
                      pool_start=gs[sel], pool_len=gl[sel], horizon_idx=hidx[sel],
                      out_of_view=oov_flat[sel]) if len(sel) else None

    has_row = attr_flat >= 0
    safe = np.maximum(attr_flat, 0)
    for qt_name, col, fname in (("distance", "distance_m", "distance_m"), ("bearing", "bearing_deg", "bearing_deg"),
                                ("target_speed", "speed_mps", "speed_mps")):
        v = np.where(has_row, to_numpy(column(plan.attrs, col), np.float64, fill=np.nan)[safe], np.nan)
        sel = np.nonzero(np.isfinite(v))[0]
        out.append(batch(qt_name, sel, fname, v[sel]))
    out.append(_ego_speed(plan))
    return [b for b in out if b is not None]


def _ego_speed(plan: Plan) -> Batch | None:
    """The ego's speed at each horizon after each keyframe (from the poses of the frame nearest that time,
    within ``cfg.keyframes.match_tolerance_s``): one question per keyframe and horizon, about the ego (no
    region), grounded in the front-camera images of the keyframe's context frames."""
    horizons, rows = plan.horizons, plan.anchors
    n, nh = len(rows), len(horizons)
    want = np.repeat(plan.frames_ts[rows], nh) + np.round(np.tile(horizons, n) * 1e6).astype(np.int64)
    at = nearest_frame_rows(plan.frames_sc, plan.frames_ts, np.repeat(plan.frames_sc[rows], nh), want,
                            plan.cfg.keyframes.match_tolerance_s)
    speed = np.where(at >= 0, plan.ego.speed_mps[np.maximum(at, 0)], np.nan)
    sel = np.flatnonzero(np.isfinite(speed))  # (keyframe group, horizon) in order
    if len(sel) == 0:
        return None
    groups, hidx = sel // nh, sel % nh
    return keyframe_batch(plan, EGO_SPATIOTEMPORAL_TYPES["ego_speed"], groups, speed[sel],
                          text=_time_text(horizons, hidx),
                          quantities={"ego_speed_mps": speed[sel], "horizon_s": horizons[hidx]},
                          horizon_idx=hidx, pool=plan.context_pool())


OBJECT_SPATIAL = Family("object_spatial", "Object-centric Spatial QA", tuple(OBJECT_SPATIAL_TYPES.values()),
                        build_object_spatial)
EGO_SPATIAL = Family("ego_spatial", "Ego-centric Spatial QA", tuple(EGO_SPATIAL_TYPES.values()), build_ego_spatial,
                     reads={"attributes": ["heading_ego_deg"]})
EGO_SPATIOTEMPORAL = Family("ego_spatiotemporal", "Ego-centric Spatiotemporal QA",
                            tuple(EGO_SPATIOTEMPORAL_TYPES.values()), build_ego_spatiotemporal)
