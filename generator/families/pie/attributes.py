"""PIE/JAAD samples and labels as the pedestrian behaviour benchmark defines them (seed 001, §III-A).

An *instance* is one pedestrian's track; a *sample* is an observation window of it (``observation_frames``,
0.5 s = 15 frames) with what is to be predicted from it. Windows start every ``PieConfig.sample_step_frames``
(30 % overlap: PCPA's ``int((1 - overlap) * obs_length)`` = 10 frames).

- **Action prediction** (task ``action``): will the pedestrian cross in front of the ego vehicle? The *event*
  is JAAD's ``crossing_point`` (the frame the crossing starts) or, for a pedestrian that does not cross, the
  last frame it is visible. Samples end 1-3 s before the event: time-to-event ``tte_frames`` in
  {90, 80, ..., 30} (``tte_max_frames`` down to ``tte_min_frames`` in steps of the window step, so the TTE
  buckets are the same for every pedestrian); windows that would start before the track are dropped ("only
  exclude samples below TTE of 1 s and instances shorter than observation length"). Label ``crossing``: 1
  when JAAD's ``crossing`` attribute is 1; 0 for ``crossing`` 0 / -1 (irrelevant) and for bystanders. A
  pedestrian whose crossing began before its track (``crossing`` 1, ``crossing_point`` -1) has its event at
  its first ``cross=crossing`` frame (the track's first frame in JAAD 0001-0250), so it yields no sample.
- **Event risk** (task ``risk``): windows over the whole track; the class comes from the centre of the box
  ``risk_horizon_frames`` (3 s) after the window's last frame, or the last box before that when the
  pedestrian is gone. The image is cut into vertical regions ``risk_region_width_px`` wide at
  ``risk_reference_width_px`` (160 px at 1920 px: 12 regions), scaled to the video's own width; region r
  (0-based, left to right) has class ``d_cls`` = its distance from the two centre regions (§III-D 2):
  0 = the centre (highest risk) ... 5 = the image edges.
- **Intention**: JAAD has no PIE-style intention votes; its binary convention (crossing intent for every
  pedestrian with behaviour tags, none for bystanders) is the ``intention`` column, which the paper
  describes and does not use (§III-A).
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import KeyIndex, codes, column, fixed_list_to_numpy, to_numpy, unique_strings
from generator.attributes.ego import ego_states, track_rows
from generator.families.pie.config import BENCHMARK_ACTION, PieConfig
from generator.sources.jaad import pedestrian_event
from generator.families.pie.tables import PIE_SAMPLES

SAMPLES_SCHEMA = PIE_SAMPLES  # declared with every other table in schemas.tables


# ------------------------------------------------------------------------------------------ risk regions
def risk_region(x_center_px, image_width_px, cfg: PieConfig | None = None) -> np.ndarray:
    """0-based vertical region (left to right) of an x coordinate: regions ``risk_region_width_px`` wide at
    ``risk_reference_width_px``, scaled to ``image_width_px``; centres outside the image fall in the edge
    regions."""
    cfg = cfg or PieConfig()
    n = cfg.risk_regions
    x = np.asarray(x_center_px, dtype=np.float64)
    w = np.asarray(image_width_px, dtype=np.float64) * (cfg.risk_region_width_px / cfg.risk_reference_width_px)
    return np.clip(np.floor(x / w), 0, n - 1).astype(np.int64)


def region_distance(region, n_regions: int) -> np.ndarray:
    """§III-D 2) ``d_cls`` of 0-based regions: with 1-based ``cls_r`` and ``m = ceil(N/2)``, ``|cls_r - m|``
    when N is odd or cls_r <= m, else ``|cls_r - m - 1|`` (0 for the centre region(s))."""
    cls = np.asarray(region, dtype=np.int64) + 1
    m = -(-n_regions // 2)
    if n_regions % 2 == 1:
        return np.abs(cls - m)
    return np.where(cls <= m, np.abs(cls - m), np.abs(cls - m - 1))


def risk_class(x_center_px, image_width_px, cfg: PieConfig | None = None) -> np.ndarray:
    """The risk class (0 = centre ... ``risk_regions // 2 - 1`` = edges) of box centres."""
    cfg = cfg or PieConfig()
    return region_distance(risk_region(x_center_px, image_width_px, cfg), cfg.risk_regions)


def risk_classes(cfg: PieConfig | None = None) -> int:
    cfg = cfg or PieConfig()
    return int(region_distance(np.array([0]), cfg.risk_regions)[0]) + 1


def risk_weight(classes, cfg: PieConfig | None = None) -> np.ndarray:
    """§III-D 2) ``w_r = exp(-1/2 (d_cls / (m sigma))^2)``, ``m = ceil(N_rc / 2)``; ``classes`` are d_cls."""
    cfg = cfg or PieConfig()
    m = -(-cfg.risk_regions // 2)
    d = np.asarray(classes, dtype=np.float64)
    return np.exp(-0.5 * (d / (m * cfg.risk_sigma)) ** 2)


def tte_weight(tte, sigma: float | None = None, max_tte=None) -> np.ndarray:
    """§III-D 1) ``w_a = exp(-1/2 (d_tte / sigma)^2) / sum w``, ``d_tte = (max TTE - tte_a) / max TTE`` (max
    over the samples unless given): samples close to the event weigh less."""
    sigma = PieConfig().tte_sigma if sigma is None else sigma
    t = np.asarray(tte, dtype=np.float64)
    if t.size == 0:
        return t
    mx = float(np.max(t)) if max_tte is None else float(max_tte)
    d = (mx - t) / mx if mx > 0 else np.zeros_like(t)
    w = np.exp(-0.5 * (d / sigma) ** 2)
    return w / w.sum()


# ------------------------------------------------------------------------------------------ windows
def complete_windows(present: np.ndarray, ends: np.ndarray, obs: int) -> np.ndarray:
    """Which windows [end - obs + 1, end] (indices into ``present``, a per-frame bool) are fully present."""
    cs = np.concatenate([[0], np.cumsum(present.astype(np.int64))])
    ends = np.asarray(ends, dtype=np.int64)
    ok = (ends - obs + 1 >= 0) & (ends < present.size)
    e = np.clip(ends, 0, present.size - 1)
    s = np.clip(ends - obs + 1, 0, present.size)
    return ok & ((cs[e + 1] - cs[s]) == obs)


def action_window_ends(event_frame: int, cfg: PieConfig | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Candidate (last observed frame, TTE in frames) of the action samples of an event, farthest first."""
    cfg = cfg or PieConfig()
    tte = np.arange(cfg.tte_max_frames, cfg.tte_min_frames - 1, -cfg.sample_step_frames, dtype=np.int64)
    return event_frame - tte, tte


def benchmark_action_windows(frames: np.ndarray, label: str, attrs: dict | None, stats: Counter,
                             bystanders: bool = False) -> tuple[np.ndarray | None, np.ndarray | None, int]:
    """``pie.profile: benchmark``: one track's action windows as PedestrianActionBenchmark cuts them for JAAD
    (``BENCHMARK_ACTION``; its ``jaad_data._get_crossing`` and ``ActionPredict.get_data_sequence``).

    - Behaviour pedestrians ('pedestrian' tracks, ids ending in ``b``) only (``sample_type: beh``, JAAD_beh), or
      with ``bystanders`` also the 'ped' tracks (``sample_type: all``, JAAD_all); never the 'people' groups
      (ids ending in ``p``), which the benchmark skips in both sets.
    - The track is cut at its event box: the box of ``crossing_point``, or, without one (-1, and for every
      bystander, which has no crossing point), the third-to-last box (the benchmark slices ``[:-2]``).
      Positions count boxes, not frames: a gap in the track is not seen.
    - Tracks with fewer than ``observation + tte_max`` (76) boxes up to the event are dropped.
    - Window starts ``i`` run from ``L - obs - tte_max`` to ``L - obs - tte_min`` inclusive in steps of
      ``int((1 - overlap) * obs)`` (3), with ``L`` the kept boxes; TTE = ``L - (i + obs)`` boxes: 60, 57, ..., 30.

    -> (positions (samples, obs) into the track's boxes, TTE per sample, the event box's position), or
    (None, None, -1) with the reason counted in ``stats``. A crossing point that is none of the track's frames
    (the benchmark fails on it: ``list.index``) drops the pedestrian, counted."""
    b = BENCHMARK_ACTION
    obs, lo, hi = b["observation_frames"], b["tte_min_frames"], b["tte_max_frames"]
    step = max(1, int((1.0 - b["overlap"]) * obs))
    if label != "pedestrian" and not (bystanders and label == "ped"):
        stats["benchmark: not a behaviour pedestrian"] += 1
        return None, None, -1
    cp = (attrs or {}).get("crossing_point") if label == "pedestrian" else None
    if cp is not None and cp != -1:
        at = int(np.searchsorted(frames, cp))
        if at >= frames.size or frames[at] != cp:
            stats["benchmark: crossing_point is none of the track's frames"] += 1
            return None, None, -1
        event_pos = at
    else:
        event_pos = frames.size - 3
    kept = event_pos + 1
    if kept < obs + hi:
        stats[f"benchmark: fewer than {obs + hi} boxes up to the event"] += 1
        return None, None, -1
    starts = np.arange(kept - obs - hi, kept - obs - lo + 1, step, dtype=np.int64)
    return starts[:, None] + np.arange(obs), kept - (starts + obs), event_pos


def horizon_boxes(frames: np.ndarray, ends: np.ndarray, horizon: int) -> np.ndarray:
    """Index into the sorted ``frames`` of the box at ``end + horizon``, or the last one before it."""
    return np.searchsorted(frames, np.asarray(ends) + horizon, side="right") - 1


# ------------------------------------------------------------------------------------------ samples
def build_samples(videos: pa.Table, boxes: pa.Table, pedestrians: pa.Table, vehicle: pa.Table,
                  cfg: PieConfig | None = None, tasks: tuple[str, ...] = ("action", "risk")) -> tuple[pa.Table, dict]:
    """The action and risk samples of JAAD tables (``generator.sources.jaad``); also a dict of counts (why
    pedestrians gave no sample)."""
    cfg = cfg or PieConfig()
    obs, step, h = cfg.observation_frames, cfg.sample_step_frames, cfg.risk_horizon_frames
    vmeta = {r["video_id"]: r for r in videos.to_pylist()}
    attrs = {(r["video_id"], r["ped_id"]): r for r in pedestrians.to_pylist()}
    ego: dict[str, np.ndarray] = {}
    if vehicle.num_rows:
        vv = vehicle.column("video_id").to_numpy(zero_copy_only=False)
        vf = vehicle.column("frame").to_numpy()
        va = np.asarray(vehicle.column("action").to_pylist(), dtype=object)
        for vid in np.unique(vv):
            m = vv == vid
            arr = np.full(int(vf[m].max()) + 1, None, dtype=object)
            arr[vf[m]] = va[m]
            ego[str(vid)] = arr
    keep_labels = ["pedestrian", "ped"] if any(cfg.bystanders(t) for t in tasks) else ["pedestrian"]
    b = boxes.filter(pc.is_in(boxes.column("label"), pa.array(keep_labels)))
    b = b.sort_by([("video_id", "ascending"), ("ped_id", "ascending"), ("frame", "ascending")])
    vid_a = b.column("video_id").to_numpy(zero_copy_only=False)
    pid_a = b.column("ped_id").to_numpy(zero_copy_only=False)
    frame_a = b.column("frame").to_numpy().astype(np.int64)
    xyxy = np.stack([b.column(c).to_numpy() for c in ("x1_px", "y1_px", "x2_px", "y2_px")], axis=1).astype(np.float32)
    occ_a = np.asarray(b.column("occlusion").to_pylist(), dtype=object)
    cross_a = b.column("cross").to_pylist()
    label_a = b.column("label").to_numpy(zero_copy_only=False)
    key_change = np.flatnonzero((vid_a[1:] != vid_a[:-1]) | (pid_a[1:] != pid_a[:-1])) + 1
    bounds = np.concatenate([[0], key_change, [len(vid_a)]]).astype(np.int64)

    rows: dict[str, list] = {n: [] for n in SAMPLES_SCHEMA.names}
    stats: Counter = Counter()
    for i0, i1 in zip(bounds[:-1], bounds[1:]):
        if i1 <= i0:
            continue
        vid, pid, label = str(vid_a[i0]), str(pid_a[i0]), str(label_a[i0])
        meta = vmeta.get(vid)
        if meta is None:
            continue
        fr = frame_a[i0:i1]
        f0 = int(fr[0])
        present = np.zeros(int(fr[-1]) - f0 + 1, dtype=bool)
        present[fr - f0] = True
        a = attrs.get((vid, pid))
        if label == "pedestrian" and a is None:
            stats["behaviour pedestrian without attributes"] += 1
        event, y, intent, how = pedestrian_event(label, fr, cross_a[i0:i1], a)
        stats[f"event: {how}"] += 1
        if fr.size < obs:
            stats["instance shorter than the observation"] += 1
            continue
        width = int(meta["width_px"])
        ego_v = ego.get(vid, np.empty(0, dtype=object))
        for task in tasks:
            if task == "action" and cfg.profile == "benchmark":
                pos, tte, event_pos = benchmark_action_windows(fr, label, a, stats, cfg.bystanders(task))
                if pos is None:
                    continue
                ev = int(fr[event_pos])
            elif label != "pedestrian" and not cfg.bystanders(task):
                continue
            elif task == "action":
                ev = event
                ends, tte = action_window_ends(event, cfg)
                ok = complete_windows(present, ends - f0, obs)
                ends, tte = ends[ok], tte[ok]
                if ends.size == 0:
                    stats["action: no window 1-3 s before the event"] += 1
                    continue
                pos = np.searchsorted(fr, ends - obs + 1)[:, None] + np.arange(obs)  # complete: consecutive
            else:
                ev = event
                ends = np.arange(f0 + obs - 1, int(fr[-1]) + 1, step, dtype=np.int64)
                ends = ends[complete_windows(present, ends - f0, obs)]
                if ends.size == 0:
                    continue
                tte = event - ends
                pos = np.searchsorted(fr, ends - obs + 1)[:, None] + np.arange(obs)
            # pos: (samples, window) positions in the track's boxes; the window's last box is its end
            ends = fr[pos[:, -1]]
            hi = horizon_boxes(fr, ends, h)
            hbox = xyxy[i0:i1][hi]
            xc = (hbox[:, 0] + hbox[:, 2]) / 2.0
            reg = risk_region(xc, width, cfg)
            rcls = region_distance(reg, cfg.risk_regions)
            hframe = fr[hi]
            for k, e in enumerate(ends.tolist()):
                frames = fr[pos[k]].tolist()
                rows["sample_id"].append(f"{task}/{vid}/{pid}/{e}")
                rows["task"].append(task)
                rows["split"].append(meta.get("split"))
                rows["video_id"].append(vid)
                rows["ped_id"].append(pid)
                rows["track_label"].append(label)
                rows["start_frame"].append(frames[0])
                rows["end_frame"].append(e)
                rows["frames"].append(frames)
                rows["boxes_px"].append(xyxy[i0:i1][pos[k]].tolist())
                rows["occlusion"].append(occ_a[i0:i1][pos[k]].tolist())
                rows["ego_action"].append([ego_v[f] if f < ego_v.size else None for f in frames])
                rows["image_paths"].append([f"images/{vid}/{f:05d}.png" for f in frames])
                rows["video_path"].append(f"clips/{vid}.mp4")
                rows["image_width_px"].append(width)
                rows["image_height_px"].append(int(meta["height_px"]))
                rows["crossing"].append(y)
                rows["intention"].append(intent)
                rows["event_frame"].append(ev)
                rows["tte_frames"].append(int(tte[k]))
                rows["tte_s"].append(float(tte[k]) / cfg.fps)
                rows["risk_horizon_frame"].append(int(hframe[k]))
                rows["risk_box_visible"].append(bool(hframe[k] == e + h))
                rows["risk_x_center_px"].append(float(xc[k]))
                rows["risk_region"].append(int(reg[k]))
                rows["risk_class"].append(int(rcls[k]))
    return pa.Table.from_pydict(rows, schema=SAMPLES_SCHEMA), dict(sorted(stats.items()))


def video_samples(video, cfg) -> pa.Table:
    """The samples of one camera-only video (``generator.pipeline.video.Video``, ``build_samples``) with their
    ``image_paths`` (the URIs of the frames the run extracts; null when it extracts none) and ``video_path``
    (the clip read; null without one)."""
    t = video.tables
    samples, _ = build_samples(t["videos"], t["boxes"], t["pedestrians"], t["vehicle"], cfg.pie)
    n = samples.num_rows
    if video.image_uri is not None and n:
        frames = samples.column("frames").combine_chunks()
        flat = pc.list_flatten(frames).to_numpy().astype(np.int64)
        uniq, inv = np.unique(flat, return_inverse=True)
        names = pa.array([video.image_uri(f) for f in uniq.tolist()], pa.string())
        paths = pa.ListArray.from_arrays(frames.offsets, names.take(pa.array(inv)))
    else:
        paths = pa.nulls(n, samples.schema.field("image_paths").type)
    samples = samples.set_column(samples.schema.get_field_index("image_paths"), "image_paths", paths)
    clip = video.location if video.clip is not None else None
    return samples.set_column(samples.schema.get_field_index("video_path"), "video_path",
                              pa.array([clip] * n, pa.string()))


def sample_frames(samples: pa.Table | None) -> np.ndarray | None:
    """The frames the samples name an image for (extracted by the video stage)."""
    if samples is None or samples.num_rows == 0:
        return None
    paths = samples.column("image_paths").combine_chunks()
    if paths.null_count == len(paths):
        return None
    return np.unique(pc.list_flatten(samples.column("frames").combine_chunks().filter(paths.is_valid()))
                     .to_numpy().astype(np.int64))


def video_sample_counts(samples: pa.Table | None) -> dict[str, int]:
    """A video's sample counts for its manifest: action and risk samples, crossing action samples."""
    if samples is None:
        return {}
    task = samples.column("task")
    out = {f"pie_{k}_samples": int(pc.sum(pc.equal(task, k)).as_py() or 0) for k in ("action", "risk")}
    out["pie_crossing_samples"] = int(pc.sum(pc.and_(pc.equal(task, "action"),
                                                     pc.equal(samples.column("crossing"), 1))).as_py() or 0)
    return out


def sample_counts(samples: pa.Table) -> dict:
    """The counts an export's summary reports: per task and split; action samples per TTE bucket x label; risk classes."""
    out: dict = {}
    for task in sorted(set(samples.column("task").to_pylist())):
        t = samples.filter(pc.equal(samples.column("task"), task))
        split = Counter("unsplit" if s is None else s for s in t.column("split").to_pylist())
        c: dict = {"samples": t.num_rows, "pedestrians": len(set(zip(t.column("video_id").to_pylist(),
                                                                     t.column("ped_id").to_pylist()))),
                   "per_split": dict(sorted(split.items()))}
        if task == "action":
            y = np.asarray(t.column("crossing").to_pylist())
            tte = np.asarray(t.column("tte_frames").to_pylist())
            c["crossing"] = int((y == 1).sum())
            c["non_crossing"] = int((y == 0).sum())
            c["per_tte_frames"] = {int(v): {"crossing": int(((tte == v) & (y == 1)).sum()),
                                            "non_crossing": int(((tte == v) & (y == 0)).sum())}
                                   for v in np.unique(tte)}
        rc = Counter(int(v) for v in t.column("risk_class").to_pylist())
        c["risk_class"] = {k: rc[k] for k in sorted(rc)}
        out[task] = c
    return out


# ------------------------------------------------------------------------------------------ from 3D logs
def log_config(cfg: PieConfig, fps: float) -> PieConfig:
    """The benchmark's windows, defined in frames at ``cfg.fps`` (30), in frames of a log at ``fps``: the same
    seconds, rounded, at least one frame (at 2 Hz: a 1-frame observation, TTE 2-6 frames = 1-3 s, a 6-frame
    risk horizon). The paper's profile always: ``pie.profile: benchmark`` cuts JAAD's 30 fps box lists by
    position, which has no meaning at a log's rate."""
    def frames(n: int, least: int) -> int:
        return max(least, int(round(n / cfg.fps * fps)))

    return cfg.model_copy(update={"fps": float(fps), "profile": "paper",
                                  "observation_frames": frames(cfg.observation_frames, 1),
                                  "tte_min_frames": frames(cfg.tte_min_frames, 0),
                                  "tte_max_frames": frames(cfg.tte_max_frames, 1),
                                  "risk_horizon_frames": frames(cfg.risk_horizon_frames, 1)})


def pedestrian_rows(attributes: pa.Table) -> pa.Table:
    """The tracked pedestrians' rows of an ATTRIBUTES table (one row per OBJECTS row, centre split into x/y/z) in
    the OBJECTS columns ``path_entry`` reads: scene_id, frame_index, track_id, class_name, center_ego_m."""
    keep = pc.and_(pc.equal(column(attributes, "class_name"), "pedestrian"),
                   pc.greater_equal(column(attributes, "track_id"), 0))
    a = attributes.filter(pc.fill_null(keep, False))
    xyz = np.stack([to_numpy(column(a, k), np.float64, fill=np.nan) for k in ("x_ego_m", "y_ego_m", "z_ego_m")], 1)
    return pa.table({"scene_id": column(a, "scene_id"), "frame_index": column(a, "frame_index"),
                     "track_id": column(a, "track_id"), "class_name": column(a, "class_name"),
                     "center_ego_m": pa.FixedSizeListArray.from_arrays(pa.array(xyz.reshape(-1)), 3)})


def path_entry(frames: pa.Table, objects: pa.Table, cfg: PieConfig, body, ego=None) -> pa.Table:
    """Per tracked pedestrian (``objects`` rows of class pedestrian, track_id >= 0) of 3D logs: the frame at which
    it first stands in the ego's path ahead, the crossing event of the 3D-log PIE tasks (-1: never).

    "In the path" at time t: the pedestrian's centre at t lies inside the ego's body (``body``: the config's
    ``ego`` section) widened by ``cfg.path_margin_m`` on each side at one of the ego's logged poses t + tau,
    tau in [0, ``cfg.path_horizon_s``] every ``cfg.path_step_s``, no farther than ``cfg.path_ahead_m`` from
    where the ego is at t: where the ego is going to drive (a pedestrian on the zebra crossing in front of
    the stopped ego is in it; one waiting at the kerb, or walking behind the ego, never is). Columns:
    scene_id, track_id, first_frame, last_frame, event_frame, event_t_s (seconds since the scene's first
    frame; NaN without an event). ``ego``: ``ego_states(frames)`` when the caller has it already."""
    out_schema = pa.schema([("scene_id", pa.string()), ("track_id", pa.int64()), ("first_frame", pa.int64()),
                            ("last_frame", pa.int64()), ("event_frame", pa.int64()), ("event_t_s", pa.float64())])
    if objects is None or objects.num_rows == 0:
        return out_schema.empty_table()
    ped = pc.and_(pc.equal(objects.column("class_name"), "pedestrian"), pc.greater_equal(objects.column("track_id"), 0))
    objects = objects.filter(ped)
    if objects.num_rows == 0:
        return out_schema.empty_table()
    ego = ego_states(frames) if ego is None else ego
    tr = track_rows(objects, ego)
    n = objects.num_rows
    taus = np.arange(0.0, cfg.path_horizon_s + 1e-9, cfg.path_step_s)
    k = len(taus)
    # the ego's future poses depend only on the frame: interpolated once per frame the pedestrians are seen in
    # (a pedestrian row is at its frame's time), then spread to the rows
    f_rows, f_of = np.unique(tr.row, return_inverse=True)
    qt = (ego.t_s[f_rows][:, None] + taus[None, :]).reshape(-1)
    qs = np.repeat(ego.scene_code[f_rows], k)
    f_xy = ego.interp(ego.position_m[:, :2], qs, qt).reshape(len(f_rows), k, 2)
    f_yaw = ego.interp(ego.yaw_rad, qs, qt).reshape(len(f_rows), k)
    f_near = np.hypot(*(f_xy - f_xy[:, :1]).transpose(2, 0, 1)) <= cfg.path_ahead_m
    e_xy, near = f_xy[f_of], f_near[f_of]
    c, s = np.cos(f_yaw)[f_of], np.sin(f_yaw)[f_of]
    d = tr.center_city_m[:, None, :2] - e_xy
    along = c * d[..., 0] + s * d[..., 1]  # in the ego pose's frame, from the rear-axle origin
    across = -s * d[..., 0] + c * d[..., 1]
    front = body.center_offset_m + body.length_m / 2
    rear = body.center_offset_m - body.length_m / 2
    inside = near & (along >= rear) & (along <= front) & (np.abs(across) <= body.width_m / 2 + cfg.path_margin_m)
    in_path = inside.any(axis=1)  # NaN (no ego pose that late) compares False
    fi = to_numpy(column(objects, "frame_index"), np.int64)
    order = tr.order  # by (scene, track, time)
    g = tr.group_sorted
    starts = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
    ends = np.r_[starts[1:], n]
    fo, io = fi[order], in_path[order]
    first_hit = np.full(len(starts), -1, np.int64)
    hit_rows = np.flatnonzero(io)
    if len(hit_rows):
        grp = g[hit_rows]
        first = np.unique(grp, return_index=True)
        first_hit[first[0]] = hit_rows[first[1]]
    event = np.where(first_hit >= 0, fo[np.maximum(first_hit, 0)], -1)
    event_t = np.where(first_hit >= 0, tr.t_s[order][np.maximum(first_hit, 0)], np.nan)
    return pa.table({
        "scene_id": pc.take(column(objects, "scene_id"), pa.array(order[starts])),
        "track_id": pa.array(tr.track[order][starts]), "first_frame": pa.array(fo[starts]),
        "last_frame": pa.array(fo[ends - 1]), "event_frame": pa.array(event),
        "event_t_s": pa.array(event_t, pa.float64())}, schema=out_schema)


def jaad_tables_from_log(projections: pa.Table, entries: pa.Table, front: pa.Table,
                         splits: dict) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    """JAAD-shaped tables (``generator.sources.jaad``: videos, boxes, pedestrians, vehicle) of 3D logs, so that
    ``build_samples`` makes their samples by the benchmark's own rules: a scene is a video seen through its
    front camera (``front``: ``generator.sources.front_camera_images`` of its frames), a tracked pedestrian
    (``entries`` of ``path_entry``) a behavioural pedestrian whose ``crossing`` is 1 with ``crossing_point`` its
    event frame when it enters the ego's path, else 0; its boxes are its projected boxes in that camera
    (``projections`` rows with a finite box). ``splits[scene]``: the scene's split."""
    first = front.group_by("scene_id", use_threads=False).aggregate(
        [("name", "first"), ("width_px", "first"), ("height_px", "first")])
    vids = first.column("scene_id")
    videos = pa.table({"video_id": vids, "width_px": first.column("width_px_first"),
                       "height_px": first.column("height_px_first"),
                       "split": pa.array([splits.get(s) for s in vids.to_pylist()], pa.string())})
    empty = {"video_id": pa.string(), "ped_id": pa.string(), "frame": pa.int64(), "x1_px": pa.float32(),
             "y1_px": pa.float32(), "x2_px": pa.float32(), "y2_px": pa.float32(), "occlusion": pa.string(),
             "cross": pa.string(), "label": pa.string()}
    boxes = pa.schema(empty).empty_table()
    if projections is not None and projections.num_rows and entries.num_rows:
        p = projections
        scenes = unique_strings(column(p, "scene_id"), column(entries, "scene_id"), vids)
        p_sc = codes(column(p, "scene_id"), scenes)
        p_tr = to_numpy(column(p, "track_id"), np.int64)
        ped = KeyIndex((codes(column(entries, "scene_id"), scenes) << 32)
                       | to_numpy(column(entries, "track_id"), np.int64)).find((p_sc << 32) | p_tr) >= 0
        cam_of = pc.take(first.column("name_first"), pc.index_in(column(p, "scene_id"), value_set=vids))
        in_front = to_numpy(pc.fill_null(pc.equal(column(p, "camera"), cam_of), False), bool)
        xyxy = fixed_list_to_numpy(p.column("box2d_proj_xyxy"), 4).astype(np.float32)
        sel = np.flatnonzero(ped & in_front & np.isfinite(xyxy).all(axis=1))
        n = len(sel)
        boxes = pa.table({"video_id": pc.take(column(p, "scene_id"), pa.array(sel)),
                          "ped_id": pc.cast(pa.array(p_tr[sel]), pa.string()),
                          "frame": pa.array(to_numpy(column(p, "frame_index"), np.int64)[sel]),
                          "x1_px": xyxy[sel, 0], "y1_px": xyxy[sel, 1], "x2_px": xyxy[sel, 2], "y2_px": xyxy[sel, 3],
                          "occlusion": pa.nulls(n, pa.string()), "cross": pa.nulls(n, pa.string()),
                          "label": pa.array(np.full(n, "pedestrian"), pa.string())}, schema=pa.schema(empty))
    ev = to_numpy(column(entries, "event_frame"), np.int64)
    pedestrians = pa.table({"video_id": column(entries, "scene_id"),
                            "ped_id": pc.cast(column(entries, "track_id"), pa.string()),
                            "crossing": pa.array(np.where(ev >= 0, 1, 0)), "crossing_point": pa.array(ev)})
    vehicle = pa.table({"video_id": pa.array([], pa.string()), "frame": pa.array([], pa.int64()),
                        "action": pa.array([], pa.string())})
    return videos, boxes, pedestrians, vehicle
