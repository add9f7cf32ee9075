"""DRAMA-X (``../shared/seeds/000_cca7d6292c5feb99.txt`` §3.2, App. A): risk and suggested ego action from
hindsight, DRAMA-X's image-based intent with camera-motion compensation, and its Hungarian object matching.
Pure functions over numpy arrays and Arrow tables; every threshold is a field of ``schemas.config.DramaXConfig``.

**Risk** (``risk_table``), per tracked object and frame t. The future is sampled at tau = t, t + step, ...,
t + H (H = ``risk.horizon_s``). The ego's *corridor* at tau' is its footprint at its pose at tau' (the
config's ``ego`` body: origin -> front bumper ``front_m`` + ``front_buffer_m`` ahead, ``rear_m`` behind) widened
by ``lateral_margin_m`` and the object's half width on each side of its ``width_m``. The object *conflicts* at
tau when its centre p(tau) (its track's city-frame position, interpolated; no extrapolation) lies in the
corridor at some tau' in [tau, tau + ``encroachment_s``]: the ego will be where the object is within that
time (a post-encroachment time). Places the ego has already passed do not count, nor do objects the ego
only reaches much later (a lead car at a safe headway). Risk = some conflict within H;
``time_to_conflict_s`` = the first conflicting tau - t. Objects tracked for less than ``min_track_s`` of the
horizon get no risk (too little future to judge).

**Suggested action** (``schemas.vocab.DRAMA_ACTIONS``), per object, first rule that applies:

1. no risk -> ``continue``;
2. time-to-conflict <= ``stop_ttc_s`` -> ``stop``;
3. a VRU (pedestrian, cyclist) with time-to-conflict <= ``yield_ttc_s`` -> ``yield``;
4. the ego moves (speed > ``moving_speed_mps``) and time-to-conflict <= ``slow_ttc_s`` -> ``slow down``;
5. otherwise -> ``be aware or cautious``.

A frame's Risk is any of its objects' risk and its action the most severe of theirs (``frame_risk``).

**Image intent** (``image_intent``), DRAMA-X's method for camera-only logs: for a 2D track in the front
camera, the object's image displacement over each window (box centre for lateral, box bottom for vertical)
minus the camera displacement: the dense Farneback flow (``cv2.calcOpticalFlowFarneback``) in a ring around
the object's box (the box and the other objects' boxes excluded), chained over the frames of the window.
Displacements are divided by the box height (scale-free: a person is ~1.7 m tall at any range) and the
window; their mean over the windows gives left/right past ``lateral_rate`` and towards (down the image) /
away past ``vertical_rate``.

**Camera-only videos** (``drivegen run --source jaad``): ``video_image_intent`` runs it on every pedestrian track of
a video at ``video_fps`` (frames scaled to ``video_max_width_px``); ``video_risk`` adds the position from the box
centre's x in the image (``image_position``, as DRAMA-X §3.2 does), and hindsight risk and action from the
video's own annotations: a behavioural pedestrian crossing in front of the ego within the horizon (its JAAD
crossing event), or tagged crossing at the frame.

**Matching** (``match_boxes``): App. A.3: Hungarian assignment (scipy ``linear_sum_assignment``) on
C = 1 - IoU, keeping pairs with IoU >= theta (0.3); when the solver fails (non-finite or degenerate cost
matrix) a greedy assignment takes the lowest-cost valid pairs in turn.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import KeyIndex, column, fixed_list_to_numpy, to_numpy
from generator.attributes.ego import ego_states, track_rows
from generator.families.drama_x.config import DramaImageIntentConfig, DramaRiskConfig, DramaXConfig
from generator.families.drama_x.tables import DRAMA_RISK, DRAMA_VIDEO
from generator.families.drama_x.vocab import DRAMA_ACTIONS, DRAMA_POSITIONS
from generator.sources.jaad import pedestrian_event
from schemas.config import EgoBodyConfig
from schemas.vocab import INTENT_LATERAL, INTENT_VERTICAL, VIDEO_REGION_LABELS, VRU_CLASSES

CONTINUE, AWARE, SLOW, YIELD, STOP = range(5)  # indices into DRAMA_ACTIONS (severity order)


# ------------------------------------------------------------------------------------------------- risk
def suggested_actions(risk: np.ndarray, ttc_s: np.ndarray, is_vru: np.ndarray, ego_speed_mps: np.ndarray,
                      th: DramaRiskConfig) -> np.ndarray:
    """Action codes (indices into DRAMA_ACTIONS) by the module docstring's rules."""
    ttc = np.where(risk, ttc_s, np.inf)
    act = np.full(len(risk), AWARE, dtype=np.int64)
    act = np.where((ego_speed_mps > th.moving_speed_mps) & (ttc <= th.slow_ttc_s), SLOW, act)
    act = np.where(is_vru & (ttc <= th.yield_ttc_s), YIELD, act)
    act = np.where(ttc <= th.stop_ttc_s, STOP, act)
    return np.where(risk, act, CONTINUE)


def conflict_times(obj_xy: np.ndarray, obj_half_width_m: np.ndarray, ego_xy: np.ndarray, ego_yaw: np.ndarray,
                   step_s: float, th: DramaRiskConfig, body: EgoBodyConfig) -> np.ndarray:
    """First conflict time (s after the first sample; NaN: none) per row.

    obj_xy (N, K, 2) object centres at K future samples ``step_s`` apart (NaN where untracked), ego_xy (N, K, 2)
    and ego_yaw (N, K) the ego's poses at the same times (city frame), obj_half_width_m (N,)."""
    n, k = obj_xy.shape[:2]
    lag = int(np.floor(th.encroachment_s / step_s + 1e-9))
    c, s = np.cos(ego_yaw), np.sin(ego_yaw)  # (N, K')
    d = obj_xy[:, :, None, :] - ego_xy[:, None, :, :]  # (N, K tau, K' tau', 2)
    x = c[:, None, :] * d[..., 0] + s[:, None, :] * d[..., 1]  # in the ego frame at tau'
    y = -s[:, None, :] * d[..., 0] + c[:, None, :] * d[..., 1]
    half_w = body.width_m / 2 + th.lateral_margin_m + obj_half_width_m[:, None, None]
    with np.errstate(invalid="ignore"):
        inside = (x >= -body.rear_m) & (x <= body.front_m + th.front_buffer_m) & (np.abs(y) <= half_w)
    i_tau = np.arange(k)[:, None]
    i_ego = np.arange(k)[None, :]
    window = (i_ego >= i_tau) & (i_ego <= i_tau + lag)
    hit = (inside & window[None]).any(axis=2)  # (N, K)
    first = np.argmax(hit, axis=1)
    return np.where(hit.any(axis=1), first * step_s, np.nan)


def risk_table(frames: pa.Table, objects: pa.Table, cfg: DramaXConfig | None = None,
               body: EgoBodyConfig | None = None) -> pa.Table:
    """DRAMA_RISK rows (scene_id, frame_index, track_id, risk, time_to_conflict_s, suggested_action) for every
    tracked OBJECTS row (track_id >= 0), from the run's FRAMES (ego poses) and OBJECTS (tracked boxes); ``body``:
    the config's ``ego`` section."""
    th = (cfg or DramaXConfig()).risk
    body = body or EgoBodyConfig()
    objects = objects.filter(pc.greater_equal(objects.column("track_id"), 0)) if objects.num_rows else objects
    n = objects.num_rows
    if n == 0:
        return DRAMA_RISK.empty_table()
    ego = ego_states(frames)
    tr = track_rows(objects, ego)  # one group per (scene, track), rows sorted by time inside it
    sc, row, t = tr.scene_code, tr.row, tr.t_s
    size = fixed_list_to_numpy(objects.column("size_lwh_m"), 3)
    half_w = np.nan_to_num(size[:, 1] / 2, nan=0.0)

    steps = np.arange(0.0, th.horizon_s + 1e-9, th.step_s)
    k = len(steps)
    qt = (t[:, None] + steps[None, :]).reshape(-1)
    obj_xy = tr.interp(tr.center_city_m[:, :2], np.repeat(tr.group, k), qt).reshape(n, k, 2)
    qs = np.repeat(sc, k)
    ego_xy = ego.interp(ego.position_m[:, :2], qs, qt).reshape(n, k, 2)
    ego_yaw = ego.interp(ego.yaw_rad, qs, qt).reshape(n, k)
    tracked_s = np.isfinite(obj_xy[..., 0]).sum(axis=1) * th.step_s - th.step_s
    ttc = np.full(n, np.nan)
    # in chunks: the (N, K, K) test is the memory peak
    chunk = max(1, 2_000_000 // (k * k))
    for a in range(0, n, chunk):
        ttc[a:a + chunk] = conflict_times(obj_xy[a:a + chunk], half_w[a:a + chunk], ego_xy[a:a + chunk],
                                          ego_yaw[a:a + chunk], th.step_s, th, body)
    risk = np.isfinite(ttc) & (tracked_s >= th.min_track_s)
    ttc = np.where(risk, ttc, np.nan)
    is_vru = to_numpy(pc.is_in(column(objects, "class_name"), value_set=pa.array(VRU_CLASSES)), bool, fill=False)
    act = suggested_actions(risk, ttc, is_vru, ego.speed_mps[row], th)
    return pa.table({
        "scene_id": column(objects, "scene_id"), "frame_index": column(objects, "frame_index"),
        "track_id": column(objects, "track_id"), "risk": pa.array(risk),
        "time_to_conflict_s": pa.array(ttc, from_pandas=True),
        "suggested_action": pc.take(pa.array(DRAMA_ACTIONS), pa.array(act)),
    }).cast(DRAMA_RISK)


def frame_risk(risk: pa.Table) -> pa.Table:
    """Per (scene_id, frame_index): Risk = any object's risk, suggested_action = the most severe action."""
    if risk.num_rows == 0:
        return pa.table({"scene_id": pa.array([], pa.string()), "frame_index": pa.array([], pa.int32()),
                         "risk": pa.array([], pa.bool_()), "suggested_action": pa.array([], pa.string())})
    sev = pc.index_in(risk.column("suggested_action"), value_set=pa.array(DRAMA_ACTIONS))
    t = risk.append_column("_sev", sev)
    agg = t.group_by(["scene_id", "frame_index"]).aggregate([("risk", "any"), ("_sev", "max")])
    return pa.table({"scene_id": agg.column("scene_id"), "frame_index": agg.column("frame_index"),
                     "risk": agg.column("risk_any"),
                     "suggested_action": pc.take(pa.array(DRAMA_ACTIONS), agg.column("_sev_max"))}
                    ).sort_by([("scene_id", "ascending"), ("frame_index", "ascending")])


def relative_position(x_ego_m: np.ndarray, y_ego_m: np.ndarray, front_deg: float) -> np.ndarray:
    """Codes into DRAMA_POSITIONS (Left / Front / Right) from the bearing of the object as seen from the ego
    (DRAMA-X §3.2 uses the final image x; this is its 3D equivalent)."""
    bearing = np.degrees(np.arctan2(y_ego_m, x_ego_m))
    return np.where(np.abs(bearing) <= front_deg, 1, np.where(bearing > 0, 0, 2))


# --------------------------------------------------------------------------------------- image intent
def farneback(prev_gray: np.ndarray, next_gray: np.ndarray, th: DramaImageIntentConfig) -> np.ndarray:
    """Dense optical flow (H, W, 2) from ``prev_gray`` to ``next_gray`` (uint8 grayscale)."""
    import cv2  # cv2: about a second to import; only where images are read or drawn

    return cv2.calcOpticalFlowFarneback(prev_gray, next_gray, None, th.flow_pyr_scale, th.flow_levels,
                                        th.flow_winsize, th.flow_iterations, th.flow_poly_n, th.flow_poly_sigma, 0)


def ring_region(box_xyxy: np.ndarray, shape_hw: tuple[int, int], th: DramaImageIntentConfig,
                exclude_xyxy: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask (H, W): the box grown by ``region_scale`` (at least ``region_min_px`` per side), minus the
    box itself and the ``exclude_xyxy`` boxes (other objects, whose own motion is not the camera's)."""
    h, w = shape_hw
    x1, y1, x2, y2 = box_xyxy
    bw, bh = x2 - x1, y2 - y1
    gx = max(bw * (th.region_scale - 1) / 2, th.region_min_px)
    gy = max(bh * (th.region_scale - 1) / 2, th.region_min_px)
    m = np.zeros((h, w), dtype=bool)
    r = [int(np.clip(np.floor(x1 - gx), 0, w)), int(np.clip(np.floor(y1 - gy), 0, h)),
         int(np.clip(np.ceil(x2 + gx), 0, w)), int(np.clip(np.ceil(y2 + gy), 0, h))]
    m[r[1]:r[3], r[0]:r[2]] = True
    for b in [box_xyxy] + ([] if exclude_xyxy is None else list(exclude_xyxy)):
        if np.all(np.isfinite(b)):
            m[int(np.clip(np.floor(b[1]), 0, h)):int(np.clip(np.ceil(b[3]), 0, h)),
              int(np.clip(np.floor(b[0]), 0, w)):int(np.clip(np.ceil(b[2]), 0, w))] = False
    return m


@dataclass
class ImageIntent:
    """Per (track, frame) of ``image_intent``'s input: codes into INTENT_LATERAL / INTENT_VERTICAL (-1: no
    label) and the compensated rates (box heights per second; lateral + = image right, vertical + = down)."""

    lateral: np.ndarray
    vertical: np.ndarray
    lateral_rate: np.ndarray
    vertical_rate: np.ndarray


def image_intent(gray: list[np.ndarray], t_s: np.ndarray, boxes_xyxy: np.ndarray,
                 cfg: DramaImageIntentConfig | None = None, flows: list[np.ndarray] | None = None) -> ImageIntent:
    """DRAMA-X image intent of M 2D tracks over F frames.

    ``gray``: F grayscale uint8 images (one camera, in time order), ``t_s`` (F,) their times,
    ``boxes_xyxy`` (M, F, 4) each track's box per frame (NaN where absent). ``flows`` (F - 1 flows between
    consecutive frames) may be given to share them between calls; otherwise each is computed when needed (a
    frame pair where no track is present gets none) and dropped after use. Returns ``ImageIntent`` with (M, F) arrays.
    The image's right is the ego's right for a forward camera: ``goes to the right`` = + image x.
    """
    th = cfg or DramaImageIntentConfig()
    boxes = np.asarray(boxes_xyxy, dtype=np.float64)
    m, f = boxes.shape[:2]
    t_s = np.asarray(t_s, dtype=np.float64)
    stat = np.median if th.statistic == "median" else np.mean
    # camera displacement at each track's box from frame i to i + 1
    cam = np.zeros((m, max(f - 1, 0), 2))
    if th.compensate:
        shape = gray[0].shape[:2]
        for i in range(f - 1):
            present = np.all(np.isfinite(boxes[:, i]), axis=1)
            if not present.any():
                continue
            # one flow at a time (a 30 fps video's flows would not fit in memory together)
            flow = flows[i] if flows is not None else farneback(gray[i], gray[i + 1], th)
            for j in np.nonzero(present)[0]:
                others = boxes[np.arange(m) != j, i]
                region = ring_region(boxes[j, i], shape, th, others)
                if region.any():
                    cam[j, i] = stat(flow[region], axis=0)
    cx = (boxes[..., 0] + boxes[..., 2]) / 2
    bottom = boxes[..., 3]
    height = boxes[..., 3] - boxes[..., 1]
    cum = np.concatenate([np.zeros((m, 1, 2)), np.cumsum(cam, axis=1)], axis=1)  # chained camera motion
    lat_sum = np.zeros((m, f))
    ver_sum = np.zeros((m, f))
    count = np.zeros((m, f))
    for w in th.windows_s:
        for i in range(f):
            # the frame closest to t_i + w (within half a frame interval)
            j = int(np.argmin(np.abs(t_s - (t_s[i] + w))))
            if j <= i or abs(t_s[j] - t_s[i] - w) > 0.5 * w:
                continue
            dt = t_s[j] - t_s[i]
            with np.errstate(invalid="ignore"):
                dx = (cx[:, j] - cx[:, i]) - (cum[:, j, 0] - cum[:, i, 0])
                dy = (bottom[:, j] - bottom[:, i]) - (cum[:, j, 1] - cum[:, i, 1])
                ok = np.isfinite(dx) & np.isfinite(dy) & (height[:, i] > 0)
                lat_sum[ok, i] += dx[ok] / height[ok, i] / dt
                ver_sum[ok, i] += dy[ok] / height[ok, i] / dt
            count[ok, i] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        lat = np.where(count > 0, lat_sum / count, np.nan)
        ver = np.where(count > 0, ver_sum / count, np.nan)
    lat_code = np.where(lat >= th.lateral_rate, 1, np.where(lat <= -th.lateral_rate, 0, 2))
    ver_code = np.where(ver >= th.vertical_rate, 0, np.where(ver <= -th.vertical_rate, 1, 2))
    ok = count > 0
    return ImageIntent(np.where(ok, lat_code, -1), np.where(ok, ver_code, -1), lat, ver)


# 2D tracks of a camera-only log whose intent is estimated: JAAD's behavioural pedestrians and bystanders
# (its 'people' tracks are groups, with no single motion)
VIDEO_INTENT_LABELS = VIDEO_REGION_LABELS


def video_intent_frames(boxes: pa.Table, fps: float, th: DramaImageIntentConfig) -> np.ndarray:
    """The frames of a camera-only video (``generator.sources.jaad`` BOXES rows of one video) that image intent
    decodes: every ``round(fps / th.video_fps)``-th frame from the first to the last box of a
    ``VIDEO_INTENT_LABELS`` track (sorted int64; empty without one)."""
    fr = boxes.filter(pc.is_in(boxes.column("label"), pa.array(VIDEO_INTENT_LABELS))).column("frame").to_numpy()
    if fr.size == 0:
        return np.empty(0, np.int64)
    step = max(1, int(round(fps / th.video_fps)))
    return np.arange(int(fr.min()), int(fr.max()) + 1, step, dtype=np.int64)


def image_position(x_center_px: np.ndarray, image_width_px: float, front_share: float) -> np.ndarray:
    """Codes into DRAMA_POSITIONS (Left / Front / Right) from a box centre's x in the image (DRAMA-X §3.2 takes
    the position from the final image x): the middle ``front_share`` of the width is Front."""
    rel = np.asarray(x_center_px, np.float64) / np.asarray(image_width_px, np.float64) - 0.5  # a width per box, or one
    return np.where(np.abs(rel) <= front_share / 2, 1, np.where(rel < 0, 0, 2))


def video_image_intent(video_id: str, boxes: pa.Table, frames: np.ndarray, gray: list[np.ndarray], scale: float,
                       fps: float, th: DramaImageIntentConfig) -> pa.Table:
    """DRAMA-X image intent of every ``VIDEO_INTENT_LABELS`` track of one camera-only video, at ``frames``
    (``video_intent_frames``), from ``gray``: those frames decoded, grayscale, scaled by ``scale`` (boxes are
    scaled alike; rates are per box height, so the scale does not change them). One
    ``schemas.tables.DRAMA_VIDEO`` row per track and frame with a label; position, risk and action are left
    null (``video_risk`` fills them)."""
    b = boxes.filter(pc.is_in(boxes.column("label"), pa.array(VIDEO_INTENT_LABELS)))
    ids = b.column("ped_id").to_numpy(zero_copy_only=False).astype(str)
    tracks, t_of = np.unique(ids, return_inverse=True)
    col = KeyIndex(frames).find(b.column("frame").to_numpy())  # the box's column on the frame grid (-1: off it)
    on_grid = col >= 0
    xyxy = np.stack([b.column(c).to_numpy() for c in ("x1_px", "y1_px", "x2_px", "y2_px")], axis=1).astype(np.float64)
    grid = np.full((len(tracks), len(frames), 4), np.nan)
    grid[t_of[on_grid], col[on_grid]] = xyxy[on_grid]
    labels = np.empty(len(tracks), dtype=object)
    labels[t_of] = b.column("label").to_numpy(zero_copy_only=False)
    if len(tracks) == 0 or len(frames) < 2:
        return DRAMA_VIDEO.empty_table()
    ii = image_intent(gray, frames / fps, grid * scale, th)
    ti, fi = np.nonzero(ii.lateral >= 0)
    return pa.table({
        "scene_id": pa.array([video_id] * len(ti), pa.string()),
        "ped_id": pa.array(tracks[ti], pa.string()),
        "track_label": pa.array(labels[ti].astype(str), pa.string()),
        "frame_index": pa.array(frames[fi], pa.int32()),
        "t_s": pa.array(frames[fi] / fps, pa.float64()),
        "box_xyxy": pa.FixedSizeListArray.from_arrays(pa.array(grid[ti, fi].reshape(-1).astype(np.float32)), 4),
        "lateral_intent": pa.array(np.asarray(INTENT_LATERAL, dtype=object)[ii.lateral[ti, fi]], pa.string()),
        "vertical_intent": pa.array(np.asarray(INTENT_VERTICAL, dtype=object)[ii.vertical[ti, fi]], pa.string()),
        "lateral_rate": pa.array(ii.lateral_rate[ti, fi], pa.float64()),
        "vertical_rate": pa.array(ii.vertical_rate[ti, fi], pa.float64()),
        "compensated": pa.array(np.full(len(ti), th.compensate), pa.bool_()),
        "position": pa.nulls(len(ti), pa.string()), "risk": pa.nulls(len(ti), pa.bool_()),
        "time_to_conflict_s": pa.nulls(len(ti), pa.float64()), "suggested_action": pa.nulls(len(ti), pa.string()),
    }).select(DRAMA_VIDEO.names).cast(DRAMA_VIDEO)


def video_risk(intent: pa.Table, tables: dict[str, pa.Table], fps: float, cfg: DramaXConfig) -> pa.Table:
    """``intent`` (``video_image_intent``'s rows of one video) with position, risk, time to conflict and the
    suggested action filled in, from hindsight over the video's JAAD tables (``generator.sources.jaad.read_video``):

    * position: ``image_position`` of the box centre (``cfg.image_front_share``);
    * risk: a behavioural pedestrian that crosses in front of the ego (JAAD's ``crossing`` = 1; its event frame
      is the benchmark's, ``generator.sources.jaad.pedestrian_event``) at most ``cfg.risk.horizon_s`` after the frame
      (time to conflict: the wait for it), or is tagged ``crossing`` at the frame (time to conflict 0);
      bystanders never;
    * action: ``suggested_actions`` over those, the ego moving unless JAAD's vehicle action at the frame is
      ``stopped``."""
    n = intent.num_rows
    if n == 0:
        return intent
    boxes, meta = tables["boxes"], tables["videos"].to_pylist()[0]
    attrs = {r["ped_id"]: r for r in tables["pedestrians"].to_pylist()}
    ped = intent.column("ped_id").to_numpy(zero_copy_only=False).astype(str)
    fr = intent.column("frame_index").to_numpy().astype(np.int64)
    b = boxes.filter(pc.is_in(boxes.column("ped_id"), pa.array(np.unique(ped)))).sort_by(
        [("ped_id", "ascending"), ("frame", "ascending")])
    b_ped = b.column("ped_id").to_numpy(zero_copy_only=False).astype(str)
    b_fr = b.column("frame").to_numpy().astype(np.int64)
    b_cross = np.asarray(b.column("cross").to_pylist(), dtype=object)
    b_label = b.column("label").to_numpy(zero_copy_only=False).astype(str)
    names, b_code = np.unique(b_ped, return_inverse=True)  # every intent row's pedestrian has boxes
    event, crosses = np.zeros(len(names), np.int64), np.zeros(len(names), bool)
    for k, p in enumerate(names):  # one benchmark event per pedestrian
        m = b_code == k
        e, y, _, _ = pedestrian_event(str(b_label[m][0]), b_fr[m], list(b_cross[m]), attrs.get(p))
        event[k], crosses[k] = e, y == 1
    code = np.searchsorted(names, ped)
    span = int(max(b_fr.max(initial=0), fr.max(initial=0))) + 1
    row = KeyIndex(b_code * span + b_fr).find(code * span + fr)
    crossing_now = (row >= 0) & (b_cross[np.maximum(row, 0)] == "crossing")
    ahead = (event[code] - fr) / fps
    soon = crosses[code] & (ahead >= 0) & (ahead <= cfg.risk.horizon_s + 1e-9)
    risk = crossing_now | soon
    ttc = np.where(crossing_now, 0.0, np.where(soon, ahead, np.nan))
    vehicle = tables["vehicle"]
    at = KeyIndex(vehicle.column("frame").to_numpy()).find(fr)
    stopped = to_numpy(pc.equal(vehicle.column("action"), "stopped"), bool, fill=False)
    moving = (at < 0) | ~stopped[np.maximum(at, 0)] if len(stopped) else np.ones(n, bool)
    act = suggested_actions(risk, ttc, np.ones(n, bool), np.where(moving, np.inf, 0.0), cfg.risk)
    box = fixed_list_to_numpy(intent.column("box_xyxy"), 4)
    where = image_position((box[:, 0] + box[:, 2]) / 2, meta["width_px"], cfg.image_front_share)
    out = intent
    for name, arr in (("position", pa.array(np.asarray(DRAMA_POSITIONS, dtype=object)[where], pa.string())),
                      ("risk", pa.array(risk)), ("time_to_conflict_s", pa.array(ttc, from_pandas=True)),
                      ("suggested_action", pc.take(pa.array(DRAMA_ACTIONS), pa.array(act)))):
        out = out.set_column(out.schema.get_field_index(name), name, arr)
    return out.cast(DRAMA_VIDEO)


def video_intent(video, cfg) -> pa.Table | None:
    """The ``drama_video`` rows of one camera-only video (``generator.pipeline.video.Video``): image intent at
    the frames ``video_intent_frames`` picks, decoded from its clip, with position, risk and action
    (``video_risk``); None without a clip."""
    if video.clip is None:
        return None
    th = cfg.drama_x.image_intent
    boxes = video.tables["boxes"]
    frames = video_intent_frames(boxes, video.fps, th)
    gray, scale = video.gray_frames(frames, th.video_max_width_px)
    intent = video_image_intent(video.video_id, boxes, frames, gray, scale, video.fps, th)
    return video_risk(intent, video.tables, video.fps, cfg.drama_x)


def intent_names(codes_: np.ndarray, vocab: tuple[str, ...]) -> list[str | None]:
    """Codes -> vocabulary strings (None for -1)."""
    return [vocab[c] if c >= 0 else None for c in np.asarray(codes_).tolist()]


# ---------------------------------------------------------------------------------------------- matching
def iou_matrix(a_xyxy: np.ndarray, b_xyxy: np.ndarray) -> np.ndarray:
    """(N, M) IoU of boxes a (N, 4) and b (M, 4); 0 where either box is empty or not finite."""
    a = np.asarray(a_xyxy, dtype=np.float64).reshape(-1, 4)[:, None, :]
    b = np.asarray(b_xyxy, dtype=np.float64).reshape(-1, 4)[None, :, :]
    iw = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    ih = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
    inter = iw * ih
    area_a = np.clip(a[..., 2] - a[..., 0], 0, None) * np.clip(a[..., 3] - a[..., 1], 0, None)
    area_b = np.clip(b[..., 2] - b[..., 0], 0, None) * np.clip(b[..., 3] - b[..., 1], 0, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = inter / (area_a + area_b - inter)
    return np.where(np.isfinite(iou), iou, 0.0)


def greedy_assignment(cost: np.ndarray, max_cost: float) -> list[tuple[int, int]]:
    """Lowest-cost valid pairs in turn (each row and column used once); non-finite costs are never taken."""
    pairs = []
    c = np.where(np.isfinite(cost), cost, np.inf)
    flat = np.argsort(c, axis=None, kind="stable")
    used_r, used_c = set(), set()
    for f in flat:
        i, j = divmod(int(f), c.shape[1])
        if c[i, j] > max_cost:
            break
        if i in used_r or j in used_c:
            continue
        pairs.append((i, j))
        used_r.add(i)
        used_c.add(j)
    return pairs


def match_boxes(tracks_xyxy: np.ndarray, labelled_xyxy: np.ndarray, iou_min: float = 0.3,
                cost: np.ndarray | None = None) -> tuple[list[tuple[int, int]], str]:
    """App. A.3 matching: (pairs (track index, labelled index) with IoU >= ``iou_min``, method) where method
    is 'hungarian' or 'greedy' (the solver failed: a degenerate cost matrix). ``cost`` (1 - IoU) may be given
    directly (tests feed degenerate matrices this way)."""
    from scipy.optimize import linear_sum_assignment  # scipy: over a second to import; only where this runs

    if cost is None:
        cost = 1.0 - iou_matrix(tracks_xyxy, labelled_xyxy)
    cost = np.asarray(cost, dtype=np.float64)
    max_cost = 1.0 - iou_min + 1e-12
    if cost.size == 0:
        return [], "hungarian"
    try:
        rows, cols = linear_sum_assignment(cost)
    except ValueError:  # NaN/inf entries or an infeasible matrix
        return greedy_assignment(cost, max_cost), "greedy"
    return [(int(i), int(j)) for i, j in zip(rows, cols) if cost[i, j] <= max_cost], "hungarian"


__all__ = ["risk_table", "frame_risk", "suggested_actions", "conflict_times", "relative_position",
           "image_intent", "ImageIntent", "farneback", "ring_region", "intent_names", "iou_matrix",
           "match_boxes", "greedy_assignment", "video_intent_frames", "video_image_intent", "VIDEO_INTENT_LABELS",
           "video_risk", "image_position", "DRAMA_POSITIONS", "INTENT_LATERAL", "INTENT_VERTICAL"]
