"""Write scripted scenes as a nuScenes-format log set (tables + LiDAR + JPEGs + a scenario side file).

Layout under ``root`` (what ``nuscenes.NuScenes(version, dataroot=root)`` expects):
``<version>/*.json`` (13 tables + ``drivegen_scenarios.json``), ``samples/LIDAR_TOP/*.pcd.bin`` and
``sweeps/LIDAR_TOP/*.pcd.bin`` (float32 x5 in the LiDAR frame), ``samples/CAM_*/*.jpg``, ``maps/*.png``.
Tokens are md5 digests of (seed, scene, role), timestamps are fixed by (seed, scene): no wall clock.
"""
from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from generator.geometry import SE3, yaw_to_quat_wxyz
from generator.sources import GENERATED_MARKER
from generator.sources.vehicles import GENERATED_EGO_VEHICLE
from generator.types import DrivegenError
from schemas.errors import InputError
from schemas.vocab import MANEUVERS, NUSCENES_CAMERAS, SPEED_STATUS
from generator.synth import rig
from generator.synth.lidar import BoxSet, cast_sweep
from generator.synth.render import CameraRenderer
from generator.synth.roads import SURFACE_INTENSITY, ground_surface, marking_quads, road_polygons
from generator.synth.world import (SIDEWALK_HALF_M, TIME_GRID_S, SceneScript, Track,
                                   script_scene)

log = logging.getLogger(__name__)

KEYFRAME_HZ = 2.0
NUM_KEYFRAMES = 40
ANNOTATION_RANGE_M = 70.0
SCENARIO_FILE = GENERATED_MARKER  # the one name: sources recognise generated logs by it
BASE_TIMESTAMP_US = 1_546_300_800_000_000  # 2019-01-01T00:00:00Z
MAP_RESOLUTION_M = 0.1

CATEGORIES = {  # the nuScenes category taxonomy (names and short descriptions)
    "human.pedestrian.adult": "Adult subcategory.",
    "human.pedestrian.child": "Child subcategory.",
    "human.pedestrian.wheelchair": "Wheelchairs.",
    "human.pedestrian.stroller": "Strollers.",
    "human.pedestrian.personal_mobility": "A small electric or self-propelled vehicle.",
    "human.pedestrian.police_officer": "Police officer.",
    "human.pedestrian.construction_worker": "Construction worker.",
    "animal": "All animals.",
    "vehicle.car": "Vehicle designed primarily for personal use.",
    "vehicle.motorcycle": "Gasoline or electric powered 2-wheeled vehicle.",
    "vehicle.bicycle": "Human or electric powered 2-wheeled vehicle; a rider is included in the box.",
    "vehicle.bus.bendy": "Bendy bus subcategory.",
    "vehicle.bus.rigid": "Rigid bus subcategory.",
    "vehicle.truck": "Vehicles primarily designed to haul cargo.",
    "vehicle.construction": "Vehicles primarily designed for construction.",
    "vehicle.emergency.ambulance": "All types of ambulances.",
    "vehicle.emergency.police": "All types of police vehicles.",
    "vehicle.trailer": "Any vehicle trailer.",
    "movable_object.barrier": "Temporary road barrier placed in the scene to redirect traffic.",
    "movable_object.trafficcone": "All types of traffic cone.",
    "movable_object.pushable_pullable": "Objects that a pedestrian may push or pull.",
    "movable_object.debris": "Movable object that is left on the driveable surface.",
    "static_object.bicycle_rack": "Area or device intended to park or secure the bicycles in a row.",
}
ATTRIBUTES = {
    "vehicle.moving": "Vehicle is moving.",
    "vehicle.stopped": "Vehicle, with a driver/rider in/on it, is currently stationary but has an intent to move.",
    "vehicle.parked": "Vehicle is stationary (usually for longer duration) with no immediate intent to move.",
    "cycle.with_rider": "There is someone riding the bicycle or motorcycle.",
    "cycle.without_rider": "There is NO rider on the bicycle or motorcycle.",
    "pedestrian.sitting_lying_down": "The human is sitting or lying down.",
    "pedestrian.standing": "The human is standing.",
    "pedestrian.moving": "The human is moving.",
}
VISIBILITY = [("1", "v0-40", "visibility of whole object is between 0 and 40%"),
              ("2", "v40-60", "visibility of whole object is between 40 and 60%"),
              ("3", "v60-80", "visibility of whole object is between 60 and 80%"),
              ("4", "v80-100", "visibility of whole object is between 80 and 100%")]
CLASS_INTENSITY = {
    "vehicle.car": 45.0, "vehicle.truck": 50.0, "vehicle.bus.rigid": 55.0, "vehicle.trailer": 50.0,
    "vehicle.construction": 55.0, "human.pedestrian.adult": 25.0, "human.pedestrian.child": 25.0,
    "vehicle.motorcycle": 40.0, "vehicle.bicycle": 35.0, "movable_object.trafficcone": 150.0,
    "movable_object.barrier": 90.0,
}
_CYCLES = ("vehicle.bicycle", "vehicle.motorcycle")


@dataclass(frozen=True)
class SynthSummary:
    """What ``make_dataset`` wrote."""

    root: Path
    version: str
    seed: int
    scene_tokens: tuple[str, ...]
    scene_names: tuple[str, ...]
    num_samples: int
    num_sample_data: int
    num_annotations: int
    num_instances: int
    bytes_written: int
    image_size_px: tuple[int, int]
    sweep_hz: int
    extra: dict = field(default_factory=dict)


def token(*parts) -> str:
    return hashlib.md5("/".join(str(p) for p in ("drivegen",) + parts).encode()).hexdigest()


def ground_intensity(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return SURFACE_INTENSITY[ground_surface(x, y)]


def attribute_name(track: Track, speed_mps: float) -> str | None:
    cat = track.category
    if cat.startswith("human.pedestrian"):
        return "pedestrian.moving" if speed_mps > 0.3 else "pedestrian.standing"
    if cat in _CYCLES:
        return "cycle.with_rider" if track.ridden else "cycle.without_rider"
    if cat.startswith("vehicle."):
        if speed_mps > 0.5:
            return "vehicle.moving"
        return "vehicle.parked" if track.parked else "vehicle.stopped"
    return None


def visibility_token(visible_frac: float) -> str:
    return "1" if visible_frac < 0.4 else "2" if visible_frac < 0.6 else "3" if visible_frac < 0.8 else "4"


def _interp_state(times_s: np.ndarray, x, y, yaw):
    return (np.interp(times_s, TIME_GRID_S, x), np.interp(times_s, TIME_GRID_S, y),
            np.interp(times_s, TIME_GRID_S, yaw))


def _se3_yaw(x, y, yaw, z=0.0) -> SE3:
    c, s = np.cos(yaw), np.sin(yaw)
    return SE3(np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]), np.array([x, y, z]))


def _write_map(path: Path, local_to_global: SE3, width_m: float, height_m: float) -> None:
    """Semantic prior mask (carriageways and sidewalks = 255) at 0.1 m/pixel, global origin bottom-left."""
    W, H = int(np.ceil(width_m / MAP_RESOLUTION_M)), int(np.ceil(height_m / MAP_RESOLUTION_M))
    mask = np.zeros((H, W), dtype=np.uint8)
    half = max(width_m, height_m) * 1.5
    for poly in road_polygons(half, SIDEWALK_HALF_M):
        g = local_to_global.transform_points(poly)
        px = np.stack([g[:, 0] / MAP_RESOLUTION_M, H - g[:, 1] / MAP_RESOLUTION_M], axis=1)
        cv2.fillPoly(mask, [np.round(px).astype(np.int32)], 255)
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), mask, [cv2.IMWRITE_PNG_COMPRESSION, 1])


class _Tables:
    def __init__(self):
        self.rows = {name: [] for name in ("log", "scene", "sample", "sample_data", "ego_pose", "calibrated_sensor",
                                           "sample_annotation", "instance", "map")}


def _chain(rows: list[dict]) -> None:
    for a, b in zip(rows, rows[1:]):
        a["next"] = b["token"]
        b["prev"] = a["token"]


def _write_scene(root: Path, tables: _Tables, scenarios: dict, seed: int, index: int, *, sweep_hz: int,
                 renderers: dict[str, CameraRenderer], rig_cams, jpeg_quality: int, num_azimuth: int,
                 sensor_tokens: dict, category_tokens: dict, attribute_tokens: dict,
                 num_keyframes: int = NUM_KEYFRAMES) -> int:
    sc: SceneScript = script_scene(seed, index)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(index), 0xC0FFEE]))
    scene_name = f"scene-{index:04d}"
    scene_tok = token(seed, index, "scene")
    log_tok = token(seed, index, "log")
    logfile = f"drivegen-s{seed}-{index:04d}"
    ts0 = BASE_TIMESTAMP_US + (int(seed) % 100000) * 86_400_000_000 + int(index) * 60_000_000
    nbytes = 0

    # local (scene) frame -> global (map) frame
    theta = float(rng.uniform(-np.pi, np.pi))
    lo, hi = sc.local_extent_m
    rect = np.array([[lo[0], lo[1], 0], [hi[0], lo[1], 0], [hi[0], hi[1], 0], [lo[0], hi[1], 0]])
    rot = _se3_yaw(0.0, 0.0, theta)
    rr = rot.transform_points(rect)
    margin = 20.0
    shift = margin - rr[:, :2].min(axis=0)
    local_to_global = _se3_yaw(shift[0], shift[1], theta)
    map_w, map_h = (rr[:, :2].max(axis=0) - rr[:, :2].min(axis=0)) + 2 * margin
    map_tok = token(seed, index, "map")
    map_file = f"maps/{map_tok}.png"
    _write_map(root / map_file, local_to_global, float(map_w), float(map_h))
    nbytes += (root / map_file).stat().st_size
    tables.rows["map"].append({"token": map_tok, "log_tokens": [log_tok], "category": "semantic_prior",
                               "filename": map_file})
    tables.rows["log"].append({"token": log_tok, "logfile": logfile, "vehicle": GENERATED_EGO_VEHICLE,
                               "date_captured": "2019-01-01", "location": f"drivegen-{seed}-{index:04d}"})

    # calibrated sensors
    cs_tok = {}
    ego_SE3_lidar = rig.ego_SE3_lidar()
    cs_tok[rig.LIDAR_CHANNEL] = token(seed, index, "cs", rig.LIDAR_CHANNEL)
    tables.rows["calibrated_sensor"].append({
        "token": cs_tok[rig.LIDAR_CHANNEL], "sensor_token": sensor_tokens[rig.LIDAR_CHANNEL],
        "translation": list(rig.LIDAR_TRANSLATION_M), "rotation": list(rig.LIDAR_QUAT_WXYZ), "camera_intrinsic": []})
    for name in NUSCENES_CAMERAS:
        q, t = rig.camera_extrinsics(name)
        cs_tok[name] = token(seed, index, "cs", name)
        tables.rows["calibrated_sensor"].append({
            "token": cs_tok[name], "sensor_token": sensor_tokens[name], "translation": t, "rotation": q,
            "camera_intrinsic": rig_cams[name].K.tolist()})

    # time axes
    key_t = np.arange(num_keyframes) / KEYFRAME_HZ
    if sweep_hz > int(KEYFRAME_HZ):
        step = 1.0 / sweep_hz
        lidar_t = np.round(np.arange(-0.5 + step, key_t[-1] + 1e-9, step), 6)
    else:
        lidar_t = key_t.copy()
    is_key = np.isin(np.round(lidar_t * KEYFRAME_HZ, 6), np.arange(num_keyframes)) & (lidar_t >= 0)
    key_of = np.searchsorted(key_t, lidar_t - 1e-9)  # the keyframe at or after each sweep
    ts_of = lambda t: int(ts0 + round(float(t) * 1e6))

    sample_toks = [token(seed, index, "sample", k) for k in range(num_keyframes)]
    samples = [{"token": sample_toks[k], "timestamp": ts_of(key_t[k]), "prev": "", "next": "",
                "scene_token": scene_tok} for k in range(num_keyframes)]
    _chain(samples)
    tables.rows["sample"].extend(samples)

    # states at every LiDAR time
    ego = sc.ego
    ex, ey, eyaw = _interp_state(lidar_t, ego.x, ego.y, ego.yaw)
    tracks = sc.tracks
    n_agents = len(tracks)
    A_x = np.zeros((n_agents, len(lidar_t)))
    A_y = np.zeros_like(A_x)
    A_yaw = np.zeros_like(A_x)
    for a, tr in enumerate(tracks):
        A_x[a], A_y[a], A_yaw[a] = _interp_state(lidar_t, tr.x, tr.y, tr.yaw)
    A_size_lwh = np.array([[tr.size_wlh_m[1], tr.size_wlh_m[0], tr.size_wlh_m[2]] for tr in tracks]).reshape(-1, 3)
    A_z = A_size_lwh[:, 2] / 2
    A_int = np.array([CLASS_INTENSITY[tr.category] for tr in tracks])
    statics = sc.statics
    S_c = np.array([s.center_m for s in statics]).reshape(-1, 3)
    S_s = np.array([s.size_lwh_m for s in statics]).reshape(-1, 3)
    S_yaw = np.array([s.yaw_rad for s in statics])
    S_int = np.array([s.intensity for s in statics])
    static_draw = [(s.center_m, s.size_lwh_m, s.yaw_rad, s.color_rgb, s.kind) for s in statics]

    dirs = rig.lidar_ray_dirs(num_azimuth)
    key_hits = np.zeros((num_keyframes, n_agents), dtype=np.int64)
    key_unocc = np.zeros((num_keyframes, n_agents), dtype=np.int64)
    lidar_rows = []
    cam_rows = {name: [] for name in NUSCENES_CAMERAS}
    for j, t in enumerate(lidar_t):
        local_SE3_ego = _se3_yaw(ex[j], ey[j], eyaw[j])
        global_SE3_ego = local_to_global.compose(local_SE3_ego)
        ts = ts_of(t)
        boxes = BoxSet(np.concatenate([np.stack([A_x[:, j], A_y[:, j], A_z], axis=1), S_c]),
                       np.concatenate([A_size_lwh, S_s]), np.concatenate([A_yaw[:, j], S_yaw]),
                       np.concatenate([A_int, S_int]))
        sweep_rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(index), 0x11DA5, j]))
        sw = cast_sweep(local_SE3_ego.compose(ego_SE3_lidar), dirs, boxes, ground_intensity, sweep_rng)
        key = bool(is_key[j])
        k = int(key_of[j])
        folder = "samples" if key else "sweeps"
        fname = f"{folder}/{rig.LIDAR_CHANNEL}/{logfile}__{rig.LIDAR_CHANNEL}__{ts}.pcd.bin"
        path = root / fname
        path.parent.mkdir(parents=True, exist_ok=True)
        sw.points.tofile(path)
        nbytes += sw.points.nbytes
        sd_tok = token(seed, index, "sd", rig.LIDAR_CHANNEL, j)
        pose_tok = token(seed, index, "pose", rig.LIDAR_CHANNEL, j)
        q = yaw_to_quat_wxyz(np.array(global_SE3_ego.yaw_rad)).tolist()
        tables.rows["ego_pose"].append({"token": pose_tok, "timestamp": ts, "rotation": q,
                                        "translation": global_SE3_ego.translation.tolist()})
        lidar_rows.append({"token": sd_tok, "sample_token": sample_toks[k], "ego_pose_token": pose_tok,
                           "calibrated_sensor_token": cs_tok[rig.LIDAR_CHANNEL], "timestamp": ts,
                           "fileformat": "pcd", "is_key_frame": key, "height": 0, "width": 0, "filename": fname,
                           "prev": "", "next": ""})
        if not key:
            continue
        key_hits[k] = sw.hits[:n_agents]
        key_unocc[k] = sw.unoccluded[:n_agents]
        agents_draw = [(np.array([A_x[a, j], A_y[a, j], A_z[a]]), A_size_lwh[a], A_yaw[a, j], tracks[a].category)
                       for a in range(n_agents)]
        paint = marking_quads(np.array([ex[j], ey[j]]), 62.0)
        for name in NUSCENES_CAMERAS:
            cam = rig_cams[name]
            img = renderers[name].render(local_SE3_ego.compose(cam.ego_SE3_cam), static_draw, agents_draw, paint)
            cfile = f"samples/{name}/{logfile}__{name}__{ts}.jpg"
            cpath = root / cfile
            cpath.parent.mkdir(parents=True, exist_ok=True)
            ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality])
            if not ok:
                raise DrivegenError("JPEG encoding failed", scene=scene_name, file=str(cpath), stage="synth")
            cpath.write_bytes(buf.tobytes())
            nbytes += len(buf)
            c_tok = token(seed, index, "sd", name, k)
            c_pose = token(seed, index, "pose", name, k)
            tables.rows["ego_pose"].append({"token": c_pose, "timestamp": ts, "rotation": q,
                                            "translation": global_SE3_ego.translation.tolist()})
            cam_rows[name].append({"token": c_tok, "sample_token": sample_toks[k], "ego_pose_token": c_pose,
                                   "calibrated_sensor_token": cs_tok[name], "timestamp": ts, "fileformat": "jpg",
                                   "is_key_frame": True, "height": cam.height_px, "width": cam.width_px,
                                   "filename": cfile, "prev": "", "next": ""})
    _chain(lidar_rows)
    tables.rows["sample_data"].extend(lidar_rows)
    for name in NUSCENES_CAMERAS:
        _chain(cam_rows[name])
        tables.rows["sample_data"].extend(cam_rows[name])

    # annotations: agents within range of the ego at keyframes, contiguous from first to last
    kj = np.nonzero(is_key)[0]
    kx, ky = ex[kj], ey[kj]
    dist = np.hypot(A_x[:, kj] - kx, A_y[:, kj] - ky)  # (A, K)
    inst_scen = {}
    for a, tr in enumerate(tracks):
        inr = np.nonzero(dist[a] <= ANNOTATION_RANGE_M)[0]
        if not len(inr):
            continue
        ks = np.arange(inr[0], inr[-1] + 1)
        inst_tok = token(seed, index, "instance", a)
        ann_rows = []
        speeds = np.interp(key_t[ks], TIME_GRID_S, tr.speed_mps)
        for k, v in zip(ks, speeds):
            j = kj[k]
            c_local = np.array([A_x[a, j], A_y[a, j], A_z[a]])
            g = local_to_global.transform_points(c_local[None])[0]
            yaw_g = A_yaw[a, j] + theta
            attr = attribute_name(tr, float(v))
            unocc = key_unocc[k, a]
            vis = key_hits[k, a] / unocc if unocc > 0 else 0.0
            ann_rows.append({
                "token": token(seed, index, "ann", a, int(k)), "sample_token": sample_toks[k],
                "instance_token": inst_tok, "visibility_token": visibility_token(vis),
                "attribute_tokens": [attribute_tokens[attr]] if attr else [],
                "translation": g.tolist(), "size": [float(x) for x in tr.size_wlh_m],
                "rotation": yaw_to_quat_wxyz(np.array(yaw_g)).tolist(), "prev": "", "next": "",
                "num_lidar_pts": int(key_hits[k, a]), "num_radar_pts": 0})
        _chain(ann_rows)
        tables.rows["sample_annotation"].extend(ann_rows)
        tables.rows["instance"].append({"token": inst_tok, "category_token": category_tokens[tr.category],
                                        "nbr_annotations": len(ann_rows),
                                        "first_annotation_token": ann_rows[0]["token"],
                                        "last_annotation_token": ann_rows[-1]["token"]})
        inst_scen[inst_tok] = {
            "scenario": tr.scenario, "category": tr.category, "details": tr.details,
            "first_sample_token": sample_toks[ks[0]], "last_sample_token": sample_toks[ks[-1]],
            "speed_mps": [round(float(v), 4) for v in speeds]}

    # ego manoeuvre timeline
    key_idx = np.searchsorted(TIME_GRID_S, key_t - 1e-9)
    keyframes = [{"sample_token": sample_toks[k], "timestamp": ts_of(key_t[k]),
                  "maneuver": str(ego.maneuver[i]), "speed_status": str(ego.speed_status[i]),
                  "speed_mps": round(float(ego.speed_mps[i]), 4), "accel_mps2": round(float(ego.accel_mps2[i]), 4)}
                 for k, i in enumerate(key_idx)]
    obs = (TIME_GRID_S >= 0) & (TIME_GRID_S <= key_t[-1] + 1e-9)
    gi = np.nonzero(obs)[0]
    segments = []
    for i in gi:
        m = str(ego.maneuver[i])
        if segments and segments[-1]["maneuver"] == m:
            segments[-1]["end_timestamp"] = ts_of(TIME_GRID_S[i])
        else:
            segments.append({"maneuver": m, "start_timestamp": ts_of(TIME_GRID_S[i]),
                             "end_timestamp": ts_of(TIME_GRID_S[i])})
    scenarios[scene_tok] = {"name": scene_name, "t0_timestamp": ts_of(0.0), "ego": {"plan": ego.plan, "segments": segments,
                                                       "keyframes": keyframes},
                            "instances": inst_scen}
    desc = ", ".join(dict.fromkeys(s["maneuver"] for s in segments))
    tables.rows["scene"].append({"token": scene_tok, "log_token": log_tok, "nbr_samples": num_keyframes,
                                 "first_sample_token": sample_toks[0], "last_sample_token": sample_toks[-1],
                                 "name": scene_name, "description": f"drivegen synthetic: {desc}"})
    return nbytes


# Minimal scenes (``make_dataset(..., **MINIMAL_SCENES)``): the first 7 s of each script, keyframes only, 320x180
# images and a LiDAR of 400 columns (enough for the loader's azimuth-coverage check): a few tenths of a CPU second
# per scene through the pipeline, for the scale bench and tests that need many scenes.
MINIMAL_SCENES = {"sweep_hz": 0, "image_width_px": 320, "image_height_px": 180, "num_azimuth": 400, "num_keyframes": 14}


def version_problem(version: str) -> str | None:
    """Why ``version`` cannot name the table folder ``<root>/<version>``, or None: it must be one plain folder
    name (``--overwrite`` removes ``<root>/<version>``; '..' or a path would point outside ``root``)."""
    if not version or version in (".", "..") or any(c in version for c in "/\\\0"):
        return "must be a plain folder name such as v1.0-drivegen: not '.' or '..', without '/' or '\\'"
    return None


def make_dataset(root, num_scenes: int = 2, seed: int = 0, version: str = "v1.0-drivegen", *, sweep_hz: int = 10,
                 image_width_px: int = 800, image_height_px: int = 450, jpeg_quality: int = 90,
                 num_azimuth: int = 1084, first_scene_index: int = 0, overwrite: bool = False,
                 num_keyframes: int = NUM_KEYFRAMES) -> SynthSummary:
    """Write ``num_scenes`` scripted 20 s scenes (40 keyframes at 2 Hz) as a nuScenes log set under ``root``.
    ``num_keyframes``: the keyframes kept of each scene's script (fewer: the first seconds of it only; the scale
    bench's minimal scenes).

    ``sweep_hz``: LiDAR rate including keyframes (an even number: 10 gives 4 sweeps between keyframes;
    0 or 2 = keyframes only). ``image_width_px`` x ``image_height_px``: JPEG size (16:9), intrinsics scaled
    from nuScenes' 1600x900. ``num_azimuth``: LiDAR columns per revolution (x 32 beams). Scene i uses
    scene index ``first_scene_index + i``; the same (seed, index) always gives the same bytes.
    A ``root`` that already holds ``<version>/scene.json`` is refused unless ``overwrite``, which first removes
    ``<version>/``, ``samples/``, ``sweeps/`` and ``maps/`` under it (stale files would mix two datasets).
    Every argument is checked before anything is removed (``InputError``), so a bad value never costs the
    user the logs it was meant to replace; ``version`` must be a plain folder name.
    """
    root = Path(root)
    if num_scenes < 1:
        raise InputError(f"num_scenes must be >= 1, got {num_scenes}")
    if seed < 0 or first_scene_index < 0:
        raise InputError(f"seed and first_scene_index must be >= 0, got {seed} and {first_scene_index}")
    if not 1 <= num_keyframes <= NUM_KEYFRAMES:
        raise InputError(f"num_keyframes must be between 1 and {NUM_KEYFRAMES} (the scripts' 20 s), got {num_keyframes}")
    if sweep_hz < 0 or sweep_hz % 2:
        raise InputError(f"sweep_hz must be 0 or an even number of sweeps per second, got {sweep_hz}")
    if sweep_hz > 20:
        raise InputError(f"sweep_hz above 20 is not supported (the HDL-32E spins at 20 Hz), got {sweep_hz}")
    problem = version_problem(version)
    if problem:
        raise InputError(f"version {version!r}: {problem}")
    rig_cams = rig.camera_rig(image_width_px, image_height_px)  # refuses a size that is not 16:9
    if (root / version / "scene.json").exists():  # checked after the arguments: a bad call deletes nothing
        if not overwrite:
            raise InputError(f"{root / version} already holds a nuScenes table set; choose an empty --out "
                             f"or pass overwrite=True (--overwrite) to replace it", file=str(root / version))
        for sub in (version, "samples", "sweeps", "maps"):
            shutil.rmtree(root / sub, ignore_errors=True)
    table_root = root / version
    table_root.mkdir(parents=True, exist_ok=True)
    renderers = {name: CameraRenderer(cam, noise_seed=i) for i, (name, cam) in enumerate(rig_cams.items())}
    sensor_tokens = {ch: token("sensor", ch) for ch in (rig.LIDAR_CHANNEL,) + NUSCENES_CAMERAS}
    category_tokens = {name: token("category", name) for name in CATEGORIES}
    attribute_tokens = {name: token("attribute", name) for name in ATTRIBUTES}
    tables = _Tables()
    scenarios: dict = {}
    nbytes = 0
    for i in range(num_scenes):
        idx = first_scene_index + i
        log.info("synth: scene %d (%d/%d)", idx, i + 1, num_scenes)
        nbytes += _write_scene(root, tables, scenarios, seed, idx, sweep_hz=sweep_hz, renderers=renderers,
                               rig_cams=rig_cams, jpeg_quality=jpeg_quality, num_azimuth=num_azimuth,
                               sensor_tokens=sensor_tokens, category_tokens=category_tokens,
                               attribute_tokens=attribute_tokens, num_keyframes=num_keyframes)
    out = dict(tables.rows)
    out["category"] = [{"token": category_tokens[n], "name": n, "description": d} for n, d in CATEGORIES.items()]
    out["attribute"] = [{"token": attribute_tokens[n], "name": n, "description": d} for n, d in ATTRIBUTES.items()]
    out["visibility"] = [{"token": t, "level": lvl, "description": d} for t, lvl, d in VISIBILITY]
    out["sensor"] = [{"token": sensor_tokens[ch], "channel": ch, "modality": "lidar" if ch == rig.LIDAR_CHANNEL
                      else "camera"} for ch in (rig.LIDAR_CHANNEL,) + NUSCENES_CAMERAS]
    for name, rows in out.items():
        data = json.dumps(rows, indent=0)
        (table_root / f"{name}.json").write_text(data)
        nbytes += len(data)
    side = {"format": "drivegen-scenarios/1", "seed": int(seed), "version": version,
            "maneuvers": list(MANEUVERS), "speed_statuses": list(SPEED_STATUS), "scenes": scenarios}
    data = json.dumps(side, indent=1)
    (table_root / SCENARIO_FILE).write_text(data)
    nbytes += len(data)
    return SynthSummary(root=root, version=version, seed=int(seed),
                        scene_tokens=tuple(r["token"] for r in out["scene"]),
                        scene_names=tuple(r["name"] for r in out["scene"]), num_samples=len(out["sample"]),
                        num_sample_data=len(out["sample_data"]), num_annotations=len(out["sample_annotation"]),
                        num_instances=len(out["instance"]), bytes_written=nbytes,
                        image_size_px=(image_width_px, image_height_px), sweep_hz=int(sweep_hz))
