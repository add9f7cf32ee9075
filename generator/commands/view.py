"""``drivegen view RUN --scene S [--out FILE.rrd] [--max-frames N]``: one scene of a run as a Rerun recording.

Entities (the city frame is ``world``; a timeline ``frame`` (frame index) and ``time`` (the log's timestamp)):

    world/ego_path                      the ego's path over the whole scene (static line strip)
    world/ego                           the ego pose per frame (``frames.city_SE3_ego``)
    world/ego/lidar                     the frame's LiDAR sweep in the ego frame (``frames.lidar_path``)
    world/boxes                         tracked 3D boxes (``objects``), labelled ``<class> #<track id>``, coloured by id
    world/ego/<camera>                  the camera's pose in the ego frame and its pinhole (``frames.cameras``)
    world/ego/<camera>/image            the camera image (JPEG as stored by the logs)
    world/ego/<camera>/masks            masks of the visible objects (``projections.mask_rle``), class id = track id + 1
    world/ego/<camera>/boxes            their 2D boxes (the projected 3D box), labelled like the 3D boxes

Reads the run folder through ``generator.runfolder.RunReader`` (any filesystem it opens) and the sensor files the
``frames`` table names. ``rerun-sdk`` is the optional extra ``view`` (``pip install -e .[view]``); open the file
with ``rerun FILE.rrd``. Exit codes: 0 = written, 2 = unusable input (no such scene, rerun-sdk missing).
"""
from __future__ import annotations

import argparse
import logging
import sys

import numpy as np
import pyarrow.compute as pc

from generator.geometry import SE3
from generator.runfolder import RunReader
from generator.sources.io import read_lidar_records
from generator.sources.remote import read_log_file

log = logging.getLogger(__name__)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("view", help="one scene as a Rerun recording (LiDAR, tracked boxes, cameras, masks)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("run", metavar="RUN", help="a finished run folder (path or URI)")
    p.add_argument("--scene", required=True, help="the scene id to record (one of the run's finished scenes)")
    p.add_argument("--out", default=None, help="the .rrd file to write (default: ./<scene>.rrd)")
    p.add_argument("--max-frames", type=int, default=None, help="only the scene's first N frames")
    return p


def _mat(v, n: int) -> np.ndarray:
    return np.asarray(v, dtype=np.float64).reshape(n, n)


def _yaw_quaternions(yaw: np.ndarray) -> np.ndarray:
    """(N, 4) xyzw quaternions of rotations by ``yaw`` about z."""
    q = np.zeros((len(yaw), 4))
    q[:, 2], q[:, 3] = np.sin(yaw / 2), np.cos(yaw / 2)
    return q


def record_scene(reader, scene_id: str, out: str, max_frames: int | None = None) -> dict:
    """Write scene ``scene_id`` of the run ``reader`` (a ``RunReader``) as a Rerun recording at ``out``; return
    what was logged: frames, points, boxes, images, masks (counts). ValueError naming the scene when the run
    has no such finished scene."""
    import rerun as rr  # rerun: optional (extra 'view'), only for drivegen view
    from pycocotools import mask as mask_utils  # pycocotools: only where masks are RLE-encoded

    if scene_id not in reader.scene_ids():
        known = reader.scene_ids()
        raise ValueError(f"{reader.uri}: no finished scene {scene_id!r}; the run has {len(known)}: "
                         f"{known[:10]}{' ...' if len(known) > 10 else ''}")
    every = reader.read_scene("frames", scene_id).sort_by("frame_index")
    frames = every if max_frames is None else every.slice(0, max_frames)
    objects = reader.read_scene("objects", scene_id)
    projections = reader.read_scene("projections", scene_id)
    segmented = set() if projections is None else set(pc.unique(projections.column("camera")).to_pylist())
    counts = {"frames": 0, "points": 0, "boxes": 0, "images": 0, "masks": 0}
    rec = rr.RecordingStream("drivegen_view", recording_id=f"{reader.uri}#{scene_id}")
    rec.save(out)
    rows = frames.to_pylist()
    ego_xyz = np.array([_mat(m, 4)[:3, 3] for m in every.column("city_SE3_ego").to_pylist()]).reshape(-1, 3)
    rec.log("world/ego_path", rr.LineStrips3D([ego_xyz], colors=[[255, 200, 0]]), static=True)
    for f in rows:
        fi = int(f["frame_index"])
        rec.set_time("frame", sequence=fi)
        rec.set_time("time", timestamp=f["timestamp_us"] * 1e-6)
        pose = _mat(f["city_SE3_ego"], 4)
        rec.log("world/ego", rr.Transform3D(translation=pose[:3, 3], mat3x3=pose[:3, :3]))
        if f.get("lidar_path"):
            ego_SE3_lidar = SE3.from_matrix(_mat(f["ego_SE3_lidar"], 4))
            pts = read_lidar_records(f["lidar_path"], f["lidar_format"], ego_SE3_lidar, scene=scene_id)
            xyz = ego_SE3_lidar.transform_points(pts[:, :3].astype(np.float64))
            rec.log("world/ego/lidar", rr.Points3D(xyz, radii=0.03))
            counts["points"] += len(xyz)
        if objects is not None:
            o = objects.filter(pc.equal(objects.column("frame_index"), fi))
            if o.num_rows:
                centers = np.array(o.column("center_global_m").to_pylist(), dtype=np.float64)
                sizes = np.array(o.column("size_lwh_m").to_pylist(), dtype=np.float64)
                yaw = o.column("yaw_global_rad").to_numpy(zero_copy_only=False).astype(np.float64)
                tids = o.column("track_id").to_numpy(zero_copy_only=False)
                labels = [f"{c} #{t}" for c, t in zip(o.column("class_name").to_pylist(), tids)]
                rec.log("world/boxes", rr.Boxes3D(centers=centers, half_sizes=sizes / 2, quaternions=_yaw_quaternions(yaw),
                                                  labels=labels, class_ids=(tids + 1).astype(np.uint16)))
                counts["boxes"] += o.num_rows
            else:
                rec.log("world/boxes", rr.Clear(recursive=False))
        for cam in f["cameras"] or []:
            base = f"world/ego/{cam['name']}"
            e_c = _mat(cam["ego_SE3_cam"], 4)
            rec.log(base, rr.Transform3D(translation=e_c[:3, 3], mat3x3=e_c[:3, :3]))
            rec.log(base, rr.Pinhole(image_from_camera=_mat(cam["K"], 3), width=cam["width_px"],
                                     height=cam["height_px"]))
            if cam.get("image_path"):
                rec.log(f"{base}/image", rr.EncodedImage(contents=read_log_file(cam["image_path"]),
                                                         media_type="image/jpeg"))
                counts["images"] += 1
            if cam["name"] not in segmented:  # a camera the run did not segment: no masks, no 2D boxes
                continue
            p = projections.filter(pc.and_(pc.and_(pc.equal(projections.column("frame_index"), fi),
                                                   pc.equal(projections.column("camera"), cam["name"])),
                                           projections.column("visible")))
            seg = np.zeros((cam["height_px"], cam["width_px"]), dtype=np.uint16)
            boxes, box_ids = [], []
            for r in p.to_pylist():
                if r["mask_rle"] is not None:
                    m = mask_utils.decode({"size": list(r["mask_rle"]["size"]), "counts": r["mask_rle"]["counts"].encode()})
                    seg[m.astype(bool)] = r["track_id"] + 1
                    counts["masks"] += 1
                if r["box2d_proj_xyxy"] is not None:
                    boxes.append(r["box2d_proj_xyxy"])
                    box_ids.append(r["track_id"] + 1)
            rec.log(f"{base}/masks", rr.SegmentationImage(seg))
            if boxes:
                rec.log(f"{base}/boxes", rr.Boxes2D(array=np.asarray(boxes), array_format=rr.Box2DFormat.XYXY,
                                                    class_ids=np.asarray(box_ids, dtype=np.uint16),
                                                    labels=[f"#{t - 1}" for t in box_ids]))
            else:
                rec.log(f"{base}/boxes", rr.Clear(recursive=False))
        counts["frames"] += 1
    rec.flush()
    rec.disconnect()
    return counts


def main(args) -> int:
    try:
        import rerun  # noqa: F401
    except ImportError:
        print("drivegen view: error: rerun-sdk is not installed; it is the optional extra 'view': "
              "pip install -e '.[view]' (rerun-sdk 0.23 is the last release that works with numpy 1.26)",
              file=sys.stderr)
        return 2
    if args.max_frames is not None and args.max_frames < 1:
        print("drivegen view: error: --max-frames must be at least 1", file=sys.stderr)
        return 2
    reader = RunReader(args.run).require_3d("drivegen view")
    out = args.out or f"{args.scene.replace('/', '_')}.rrd"
    try:
        counts = record_scene(reader, args.scene, out, args.max_frames)
    except ValueError as err:
        print(f"drivegen view: error: {err}", file=sys.stderr)
        return 2
    print(f"drivegen view: wrote {out}: scene {args.scene}, {counts['frames']} frames, {counts['points']} LiDAR points, "
          f"{counts['boxes']} boxes, {counts['images']} images, {counts['masks']} masks (open it with: rerun {out})")
    return 0
