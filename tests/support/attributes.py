"""Builders of small, hand-computable FRAMES / OBJECTS / PROJECTIONS tables for the attributes and QA tests."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from schemas.tables import FRAMES, OBJECTS, PROJECTIONS

CAMS = ("CAM_FRONT", "CAM_BACK")


def pose(x: float, y: float, yaw_rad: float) -> np.ndarray:
    T = np.eye(4)
    c, s = np.cos(yaw_rad), np.sin(yaw_rad)
    T[:2, :2] = [[c, -s], [s, c]]
    T[0, 3], T[1, 3] = x, y
    return T


def make_frames(scene_id: str, t_s, poses, anchors=None, cameras=CAMS) -> pa.Table:
    """One scene's FRAMES rows: t_s (N,) seconds, poses (N, 4, 4) city_SE3_ego, anchors: frame indices."""
    t_s = np.asarray(t_s, dtype=np.float64)
    n = len(t_s)
    anchors = set(anchors or [])
    K = [1000.0, 0, 800, 0, 1000.0, 450, 0, 0, 1]
    cams = [[{"name": c, "image_path": f"{scene_id}/{c}/{i:04d}.jpg", "width_px": 1600, "height_px": 900,
              "K": K, "ego_SE3_cam": np.eye(4).reshape(-1).tolist()} for c in cameras] for i in range(n)]
    return pa.table({
        "scene_id": [scene_id] * n, "frame_index": np.arange(n, dtype=np.int32),
        "timestamp_us": (1_600_000_000_000_000 + np.round(t_s * 1e6)).astype(np.int64),
        "token": [f"{scene_id}-{i}" for i in range(n)], "is_anchor": [i in anchors for i in range(n)],
        "city_SE3_ego": [np.asarray(p, dtype=np.float64).reshape(-1).tolist() for p in poses],
        "ego_SE3_lidar": [np.eye(4).reshape(-1).tolist()] * n, "lidar_path": [""] * n,
        "lidar_format": ["nuscenes_bin"] * n, "cameras": cams,
    }, schema=FRAMES)


def make_objects(frames: pa.Table, rows: list[dict]) -> pa.Table:
    """OBJECTS rows from dicts with frame_index, track_id, class_name, center_ego (3), size (3), yaw, and
    optionally velocity_global (2). Global centres are derived from the frame's pose."""
    fidx = frames.column("frame_index").to_pylist()
    poses = {fi: np.asarray(p).reshape(4, 4) for fi, p in zip(fidx, frames.column("city_SE3_ego").to_pylist())}
    ts = dict(zip(frames.column("frame_index").to_pylist(), frames.column("timestamp_us").to_pylist()))
    scene = frames.column("scene_id")[0].as_py()
    out = {k: [] for k in OBJECTS.names}
    for r in rows:
        T = poses[r["frame_index"]]
        c = np.asarray(r["center_ego"], dtype=np.float64)
        cg = T[:3, :3] @ c + T[:3, 3]
        yaw = float(r.get("yaw", 0.0))
        vg = r.get("velocity_global", [np.nan, np.nan])
        out["scene_id"].append(scene)
        out["frame_index"].append(r["frame_index"])
        out["timestamp_us"].append(ts[r["frame_index"]])
        out["track_id"].append(r["track_id"])
        out["class_name"].append(r.get("class_name", "car"))
        out["score"].append(1.0)
        out["center_ego_m"].append(c.tolist())
        out["size_lwh_m"].append(list(r.get("size", [4.0, 2.0, 1.5])))
        out["yaw_ego_rad"].append(yaw)
        out["center_global_m"].append(cg.tolist())
        out["yaw_global_rad"].append(yaw + float(np.arctan2(T[1, 0], T[0, 0])))
        out["velocity_ego_mps"].append([np.nan, np.nan])
        out["velocity_global_mps"].append(list(vg))
        out["num_lidar_pts"].append(10)
        out["instance_token"].append(f"inst-{r['track_id']}")
        out["source"].append("gt")
        out["tracker"].append(None)  # hand-made rows: their track ids come from the test, not a tracker
    return pa.table(out, schema=OBJECTS)


def make_projections(objects: pa.Table, visible: dict | None = None, camera_of=None) -> pa.Table:
    """One PROJECTIONS row per object in ``camera_of(row) -> camera`` (default: CAM_FRONT when x >= 0 else
    CAM_BACK) with a small deterministic box and mask; ``visible[(frame_index, track_id)] = False`` hides one."""
    visible = visible or {}
    out = {k: [] for k in PROJECTIONS.names}
    for r in objects.to_pylist():
        cam = camera_of(r) if camera_of else ("CAM_FRONT" if r["center_ego_m"][0] >= 0 else "CAM_BACK")
        x1 = 100.0 + 10 * (r["track_id"] % 50)
        box = [x1, 200.0, x1 + 80.0, 300.0]
        vis = visible.get((r["frame_index"], r["track_id"]), True)
        out["scene_id"].append(r["scene_id"])
        out["frame_index"].append(r["frame_index"])
        out["track_id"].append(r["track_id"])
        out["camera"].append(cam)
        out["box2d_proj_xyxy"].append(box)
        out["depth_m"].append(abs(r["center_ego_m"][0]))
        out["mask_rle"].append({"size": [900, 1600], "counts": f"rle{r['track_id']}f{r['frame_index']}"})
        out["mask_box_xyxy"].append(box)
        out["mask_score"].append(0.9)
        out["box_iou"].append(0.8)
        out["coverage"].append(0.9)
        out["visible"].append(vis)
        out["drop_reason"].append(None if vis else "coverage")
    return pa.table(out, schema=PROJECTIONS)


def random_scene(scene_id: str, seed: int, n_tracks: int = 15, n_frames: int = 41, dt: float = 0.5,
                 anchors=(4, 8, 12, 16, 20, 24, 28), visible_prob: float = 0.85):
    """A scene of ``n_tracks`` objects on straight random paths around an ego driving a gentle curve, with
    projections in the camera the bearing points to (front within +-35 deg, back beyond +-145 deg, else a
    side camera) and random visibility. Returns (frames, objects, projections)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n_frames) * dt
    yaw = 0.02 * t
    step = 8 * dt
    ego_xy = np.stack([np.cumsum(np.r_[0, step * np.cos(yaw[:-1])]), np.cumsum(np.r_[0, step * np.sin(yaw[:-1])])], 1)
    poses = [pose(x, y, w) for (x, y), w in zip(ego_xy, yaw)]
    cams = ("CAM_FRONT", "CAM_FRONT_LEFT", "CAM_FRONT_RIGHT", "CAM_BACK")
    frames = make_frames(scene_id, t, poses, anchors=list(anchors), cameras=cams)
    classes = np.array(["car", "truck", "pedestrian", "bicycle", "bus", "traffic_cone"])
    p0 = rng.uniform([-30, -25], [80, 25], size=(n_tracks, 2))
    vel = rng.normal(0, 4, size=(n_tracks, 2))
    size = rng.uniform([0.5, 0.5, 1.0], [12, 3, 4], size=(n_tracks, 3))
    cls = classes[rng.integers(0, len(classes), n_tracks)]
    rows = []
    for k, ti in enumerate(t):
        T = poses[k]
        for j in range(n_tracks):
            if rng.random() < 0.05:  # occasional missed detection
                continue
            g = p0[j] + vel[j] * ti
            c = T[:3, :3].T @ (np.r_[g, 0.8] - T[:3, 3])
            rows.append({"frame_index": k, "track_id": 100 + j, "class_name": str(cls[j]), "center_ego": c.tolist(),
                         "size": size[j].tolist(), "yaw": float(rng.uniform(-3, 3)),
                         "velocity_global": vel[j].tolist()})
    objects = make_objects(frames, rows)

    def camera_of(r):
        b = np.degrees(np.arctan2(r["center_ego_m"][1], r["center_ego_m"][0]))
        if abs(b) <= 35:
            return "CAM_FRONT"
        if abs(b) >= 145:
            return "CAM_BACK"
        return "CAM_FRONT_LEFT" if b > 0 else "CAM_FRONT_RIGHT"

    hidden = {(r["frame_index"], r["track_id"]): False for r in objects.select(["frame_index", "track_id"]).to_pylist()
              if rng.random() > visible_prob}
    return frames, objects, make_projections(objects, hidden, camera_of)
