"""Tables only: nuScenes-format table sets at the density of the real trainval set, without sensor files.

For what grows with a table set (its index, the memory of the processes that read it) rather than with its
sensor data: ``make_tables(root, num_scenes)`` writes ``<root>/<version>/*.json`` (the 13 tables, streamed scene
by scene: the writer holds one scene) and one small map mask per map. The shape follows nuScenes v1.0-trainval:
20 s scenes with 40 samples at 2 Hz; LIDAR_TOP at 20 Hz, six cameras at 12 Hz and five radars at 13 Hz (each
channel's frame nearest a sample is its keyframe; the others are sweeps), an ego pose per sample_data, about
100 instances annotated over contiguous runs of samples (about 1,400 annotations), 12 calibrated sensors per
scene, a log per 12 scenes and four maps: about 7,800 rows per scene (trainval: 850 scenes, about 7,700 rows
each). Sensor files are named but not written, so a source opens these logs with ``check_files=False``.
Same arguments, same bytes.
"""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from generator.geometry import yaw_to_quat_wxyz
from generator.synth import rig
from generator.synth.writer import ATTRIBUTES, CATEGORIES, VISIBILITY, token
from schemas.errors import InputError
from schemas.vocab import NUSCENES_CAMERAS

RADARS = ("RADAR_FRONT", "RADAR_FRONT_LEFT", "RADAR_FRONT_RIGHT", "RADAR_BACK_LEFT", "RADAR_BACK_RIGHT")
RATES_HZ = {rig.LIDAR_CHANNEL: 20.0, **{c: 12.0 for c in NUSCENES_CAMERAS}, **{r: 13.0 for r in RADARS}}
SAMPLE_HZ, SCENE_S = 2.0, 20.0
SCENES_PER_LOG, MAPS = 12, 4
BASE_TIMESTAMP_US = 1_533_000_000_000_000
# (category, attribute, size w l h in m, speed range m/s): the mix of a city drive
KINDS = (("vehicle.car", "vehicle.moving", (1.9, 4.6, 1.7), (0.0, 12.0)),
         ("vehicle.car", "vehicle.parked", (1.9, 4.5, 1.6), (0.0, 0.0)),
         ("human.pedestrian.adult", "pedestrian.moving", (0.7, 0.7, 1.8), (0.5, 1.6)),
         ("movable_object.barrier", None, (2.5, 0.5, 1.0), (0.0, 0.0)),
         ("movable_object.trafficcone", None, (0.4, 0.4, 0.8), (0.0, 0.0)),
         ("vehicle.truck", "vehicle.moving", (2.5, 7.0, 3.0), (0.0, 10.0)),
         ("vehicle.bicycle", "cycle.with_rider", (0.6, 1.8, 1.3), (2.0, 6.0)),
         ("vehicle.bus.rigid", "vehicle.moving", (2.9, 11.0, 3.4), (0.0, 9.0)))
_RADAR_POSE = {"RADAR_FRONT": (0.0, [3.41, 0.0, 0.5]), "RADAR_FRONT_LEFT": (1.54, [2.42, 0.80, 0.5]),
               "RADAR_FRONT_RIGHT": (-1.54, [2.42, -0.80, 0.5]), "RADAR_BACK_LEFT": (3.05, [-0.56, 0.62, 0.5]),
               "RADAR_BACK_RIGHT": (-3.05, [-0.56, -0.62, 0.5])}
_PER_SCENE = ("scene", "sample", "sample_data", "ego_pose", "calibrated_sensor", "sample_annotation", "instance",
              "log")


class _Writers:
    """One JSON array file per table, a scene's rows gathered (``add``) and written together (``flush``: one call of
    the JSON encoder per table and scene)."""

    def __init__(self, folder: Path, names):
        self.fh = {n: open(folder / f"{n}.json", "w") for n in names}
        self.rows: dict[str, list] = {n: [] for n in names}
        self.first = dict.fromkeys(names, True)
        for fh in self.fh.values():
            fh.write("[\n")

    def add(self, name: str, row: dict) -> None:
        self.rows[name].append(row)

    def flush(self) -> None:
        for name, rows in self.rows.items():
            if rows:
                self.fh[name].write(("" if self.first[name] else ",\n") + json.dumps(rows)[1:-1])
                self.first[name] = False
                rows.clear()

    def close(self) -> None:
        self.flush()
        for fh in self.fh.values():
            fh.write("\n]\n")
            fh.close()


_KIND = {k: i for i, k in enumerate(("scene", "sample", "cs", "sd", "pose", "instance", "ann"))}


def _tok(seed: int, scene: int, kind: str, a: int = 0, b: int = 0) -> str:
    """A 32-hex-digit token unique to (seed modulo 2^16, scene, kind, a, b)."""
    return f"{seed & 0xFFFF:04x}{scene:08x}{_KIND[kind]:02x}{a:06x}{b:06x}7ab1e5"


def _quat(yaw: float) -> list[float]:
    return [float(x) for x in yaw_to_quat_wxyz(np.array(yaw))]


def _scene(w: _Writers, seed: int, index: int, logs: dict, sensor_tokens: dict, category_tokens: dict,
           attribute_tokens: dict, instances: int) -> int:
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(index), 0x7AB1E5]))
    log_i = index // SCENES_PER_LOG
    log_tok = token("tables", seed, "log", log_i)
    logfile = f"tables-s{seed}-log{log_i:04d}"
    if log_i not in logs:
        logs[log_i] = log_tok
        w.add("log", {"token": log_tok, "logfile": logfile, "vehicle": "drivegen-ego", "date_captured": "2018-08-01",
                      "location": f"map-{log_i % MAPS}"})
    scene_tok = _tok(seed, index, "scene")
    ts0 = BASE_TIMESTAMP_US + int(index) * 60_000_000
    n_samples = int(SCENE_S * SAMPLE_HZ)
    key_t = np.arange(n_samples) / SAMPLE_HZ
    sample_toks = [_tok(seed, index, "sample", k) for k in range(n_samples)]
    for k in range(n_samples):
        w.add("sample", {"token": sample_toks[k], "timestamp": ts0 + int(round(key_t[k] * 1e6)),
                         "prev": sample_toks[k - 1] if k else "",
                         "next": sample_toks[k + 1] if k + 1 < n_samples else "", "scene_token": scene_tok})
    # ego: a straight drive at a steady speed from a point of its map
    yaw = float(rng.uniform(-np.pi, np.pi))
    speed = float(rng.uniform(3.0, 12.0))
    start = np.array([rng.uniform(200, 1800), rng.uniform(200, 1800), 0.0])
    heading = np.array([np.cos(yaw), np.sin(yaw), 0.0])
    q_ego = _quat(yaw)
    rows = n_samples + 1
    cs_tok = {}
    for c, ch in enumerate(RATES_HZ):
        cs_tok[ch] = _tok(seed, index, "cs", c)
        if ch == rig.LIDAR_CHANNEL:
            q, t, K = rig.LIDAR_QUAT_WXYZ, rig.LIDAR_TRANSLATION_M, []
        elif ch in NUSCENES_CAMERAS:
            q, t = rig.camera_extrinsics(ch)
            K = rig.camera_rig(rig.NATIVE_WIDTH_PX, rig.NATIVE_HEIGHT_PX)[ch].K.tolist()
        else:
            q, t, K = _quat(_RADAR_POSE[ch][0]), _RADAR_POSE[ch][1], []
        w.add("calibrated_sensor", {"token": cs_tok[ch], "sensor_token": sensor_tokens[ch], "translation": list(t),
                                    "rotation": list(q), "camera_intrinsic": K})
        rows += 1
    for c, (ch, hz) in enumerate(RATES_HZ.items()):
        offset = 0.0 if ch == rig.LIDAR_CHANNEL else 0.002 * (c + 1)
        t = offset + np.arange(int(SCENE_S * hz)) / hz
        key_j = set(np.abs(t[None, :] - key_t[:, None]).argmin(axis=1).tolist())  # each sample's nearest frame
        nearest = np.minimum(np.round(t * SAMPLE_HZ).astype(int), n_samples - 1)
        ext = "pcd.bin" if ch == rig.LIDAR_CHANNEL else "jpg" if ch in NUSCENES_CAMERAS else "pcd"
        toks = [_tok(seed, index, "sd", c, j) for j in range(len(t))]
        where = (start[None, :] + heading[None, :] * speed * t[:, None]).tolist()
        stamps = (ts0 + np.round(t * 1e6).astype(np.int64)).tolist()
        for j, ts in enumerate(stamps):
            pose_tok = _tok(seed, index, "pose", c, j)
            w.add("ego_pose", {"token": pose_tok, "timestamp": ts, "rotation": q_ego, "translation": where[j]})
            key = j in key_j
            w.add("sample_data", {
                "token": toks[j], "sample_token": sample_toks[int(nearest[j])], "ego_pose_token": pose_tok,
                "calibrated_sensor_token": cs_tok[ch], "timestamp": ts, "fileformat": ext.split(".")[0],
                "is_key_frame": key, "height": 900 if ext == "jpg" else 0, "width": 1600 if ext == "jpg" else 0,
                "filename": f"{'samples' if key else 'sweeps'}/{ch}/{logfile}__{ch}__{ts}.{ext}",
                "prev": toks[j - 1] if j else "", "next": toks[j + 1] if j + 1 < len(t) else ""})
        rows += 2 * len(t)
    # objects: each seen over a run of samples, near the ego's path, moving along it or still
    for a in range(instances):
        cat, attr, wlh, (v0, v1) = KINDS[int(rng.integers(len(KINDS)))]
        first = int(rng.integers(0, n_samples - 1))
        last = min(n_samples - 1, first + int(rng.integers(2, 33)))
        side = rng.choice([-1.0, 1.0]) * rng.uniform(3.0, 25.0)
        along = rng.uniform(-20.0, 80.0)
        v = float(rng.uniform(v0, v1))
        inst_tok = _tok(seed, index, "instance", a)
        ann = [_tok(seed, index, "ann", a, k) for k in range(first, last + 1)]
        normal = np.array([-heading[1], heading[0], 0.0])
        ks = np.arange(first, last + 1)
        where = (start[None, :] + heading[None, :] * (along + v * key_t[ks])[:, None] + normal[None, :] * side
                 + np.array([0.0, 0.0, wlh[2] / 2])).tolist()
        vis = rng.integers(len(VISIBILITY), size=len(ks)).tolist()
        pts = rng.integers(1, 400, size=len(ks)).tolist()
        radar = rng.integers(0, 6, size=len(ks)).tolist()
        for i, k in enumerate(ks.tolist()):
            w.add("sample_annotation", {
                "token": ann[i], "sample_token": sample_toks[k], "instance_token": inst_tok,
                "visibility_token": VISIBILITY[vis[i]][0],
                "attribute_tokens": [attribute_tokens[attr]] if attr else [], "translation": where[i],
                "size": list(wlh), "rotation": q_ego, "prev": ann[i - 1] if i else "",
                "next": ann[i + 1] if i + 1 < len(ann) else "", "num_lidar_pts": pts[i], "num_radar_pts": radar[i]})
        w.add("instance", {"token": inst_tok, "category_token": category_tokens[cat], "nbr_annotations": len(ann),
                           "first_annotation_token": ann[0], "last_annotation_token": ann[-1]})
        rows += len(ann) + 1
    w.add("scene", {"token": scene_tok, "log_token": log_tok, "nbr_samples": n_samples,
                    "first_sample_token": sample_toks[0], "last_sample_token": sample_toks[-1],
                    "name": f"scene-{index:05d}", "description": "drivegen tables only"})
    return rows


def make_tables(root, num_scenes: int, seed: int = 0, version: str = "v1.0-tables", *, instances: int = 100,
                progress=None) -> dict:
    """Write ``num_scenes`` scenes of tables (see the module docstring) under ``root``; returns
    ``{"scenes", "rows", "bytes", "table_root"}``. ``progress(done, total)``: called after each scene."""
    if num_scenes < 1 or instances < 0:
        raise InputError(f"num_scenes must be >= 1 and instances >= 0, got {num_scenes} and {instances}")
    root = Path(root)
    folder = root / version
    if (folder / "scene.json").exists():
        raise InputError(f"{folder} already holds a nuScenes table set", file=str(folder))
    folder.mkdir(parents=True, exist_ok=True)
    sensor_tokens = {ch: token("sensor", ch) for ch in RATES_HZ}
    category_tokens = {name: token("category", name) for name in CATEGORIES}
    attribute_tokens = {name: token("attribute", name) for name in ATTRIBUTES}
    w = _Writers(folder, _PER_SCENE)
    logs: dict[int, str] = {}
    rows = 0
    try:
        for i in range(num_scenes):
            rows += _scene(w, seed, i, logs, sensor_tokens, category_tokens, attribute_tokens, instances)
            w.flush()
            if progress is not None:
                progress(i + 1, num_scenes)
    finally:
        w.close()
    small = {
        "category": [{"token": category_tokens[n], "name": n, "description": d} for n, d in CATEGORIES.items()],
        "attribute": [{"token": attribute_tokens[n], "name": n, "description": d} for n, d in ATTRIBUTES.items()],
        "visibility": [{"token": t, "level": lvl, "description": d} for t, lvl, d in VISIBILITY],
        "sensor": [{"token": sensor_tokens[ch], "channel": ch,
                    "modality": "lidar" if ch == rig.LIDAR_CHANNEL else "camera" if ch in NUSCENES_CAMERAS
                    else "radar"} for ch in RATES_HZ],
        "map": [{"token": token("tables", seed, "map", m), "category": "semantic_prior",
                 "filename": f"maps/tables-{seed}-{m}.png",
                 "log_tokens": [tok for i, tok in sorted(logs.items()) if i % MAPS == m]} for m in range(MAPS)]}
    (root / "maps").mkdir(exist_ok=True)
    for m in small["map"]:
        cv2.imwrite(str(root / m["filename"]), np.full((64, 64), 255, np.uint8))
    for name, table in small.items():
        (folder / f"{name}.json").write_text(json.dumps(table, indent=0))
        rows += len(table)
    nbytes = sum(p.stat().st_size for p in folder.glob("*.json"))
    return {"scenes": num_scenes, "rows": rows, "bytes": nbytes, "table_root": str(folder)}
