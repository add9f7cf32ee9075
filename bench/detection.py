"""Detection quality of the weight-free ``lidar`` backend, scored like ``drivegen validate`` (nuscenes-devkit).

    python bench/detection.py [--scenes 2] [--seed 0] [--no-av2] [--ablations] [--features]

* Generated logs (``--scenes`` 20 s scenes of dataset ``--seed``; the tests use 2 scenes of seed 0): mAP,
  mAOE, NDS and per class AP / AOE / false positives, through the whole perception (detect, track, as
  ``drivegen run`` + ``drivegen validate``) and of the detector alone (no tracker). ``--ablations`` adds
  the detector without motion (``lidar.motion: false``) and without the traffic-side heading prior.
* Real data: the Argoverse 2 excerpt's frames that have a LiDAR sweep (2 of 156; the second lists the
  first as its earlier sweep), per class AP and false positives, and the phantom large vehicles (truck, bus
  boxes matching no GT box within 2 m) within 50 m.
* ``--features``: per ground-truth class, percentiles of the clusters' extents (long side, short side,
  height, points) on both: the measurements ``LidarDetectorConfig.shape_rules`` is set from.

Figures, not timings; a quality goal belongs in the tests (tests/actors/test_detect.py asserts the generated-log goals).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
AV2_LOG = REPO.parent / "shared" / "data" / "av2" / "7fab2350-7eaf-3b7e-a39d-6937a4c1bede"


def _table(d: dict, title: str) -> None:
    fp = d["false_positives"]
    print(f"\n{title}: mAP {d['mAP']:.3f}  mAOE {d['mAOE']:.3f}  mATE {d['mATE']:.3f}  mASE {d['mASE']:.3f}  "
          f"NDS {d['NDS']:.3f}  ({d['num_samples']} samples; false positives {fp['num_fp']}, "
          f"{fp['num_fp_classes_without_gt']} of classes without GT)")
    print(f"  {'class':14s} {'GT':>5s} {'pred':>5s} {'FP':>5s} {'AP':>6s} {'AOE':>6s}")
    for c, m in d["per_class"].items():
        if m["has_gt"] or m["num_pred"]:
            aoe = "n/a" if m["AOE"] is None else f"{m['AOE']:.2f}"
            print(f"  {c:14s} {m['num_gt']:5d} {m['num_pred']:5d} {m['num_fp']:5d} {m['AP']:6.3f} {aoe:>6s}")


def generated(args, work: Path) -> None:
    from generator.validate.detection_quality import detection_metrics, write_run_folder
    from generator.sources import open_source
    from generator.synth import make_dataset
    from schemas.config import parse_config

    root = work / "synth"
    make_dataset(root, num_scenes=args.scenes, seed=args.seed, version="v1.0-drivegen")
    src = open_source("nuscenes", root, version="v1.0-drivegen")
    scenes = [src.load_scene(s) for s in src.scene_ids()]
    runs = [("lidar backend, detect + track (as drivegen run + validate)", {}, True),
            ("lidar backend, detector alone", {}, False)]
    if args.ablations:
        runs += [("... without motion (lidar.motion: false), detect + track", {"motion": False}, True),
                 ("... without the traffic-side prior (lidar.traffic_side: none), detect + track",
                  {"traffic_side": "none"}, True)]
    for k, (title, lidar, tracked) in enumerate(runs):
        cfg = parse_config({"detection": {"backend": "lidar", "lidar": lidar},
                            "segmentation": {"cameras": ["CAM_FRONT"]}})
        run = write_run_folder(work / f"run{k}", src, cfg, scenes, tracked=tracked)
        _table(detection_metrics(run), f"Generated logs ({args.scenes} scenes, seed {args.seed}), {title}")


def av2(work: Path) -> None:
    from generator.validate.detection_quality import detection_metrics, frames_with_lidar, write_run_folder
    from generator.sources.av2 import AV2Source
    from schemas.config import parse_config

    if not AV2_LOG.is_dir():
        print(f"\nAV2: skipped, {AV2_LOG} is absent")
        return
    src = AV2Source(AV2_LOG.parent)
    scene = frames_with_lidar(src.load_scene(AV2_LOG.name))
    cfg = parse_config({"detection": {"backend": "lidar"}})
    for k, tracked in enumerate((True, False)):
        run = write_run_folder(work / f"av2_{k}", src, cfg, [scene], tracked=tracked)
        _table(detection_metrics(run), f"AV2 frames with a sweep ({len(scene.frames)}), lidar backend, "
                                       f"{'detect + track' if tracked else 'detector alone'}")
    from actors.detect import build_detector

    boxes = build_detector(cfg.detection)(scene.frames)
    for fr, b in zip(scene.frames, boxes):
        big = np.isin(b.class_name.astype(str), ["truck", "bus"]) & (np.linalg.norm(b.center_m[:, :2], axis=1) <= 50)
        gt = fr.labels
        d = np.linalg.norm(b.center_m[big, None, :2] - gt.center_m[None, :, :2], axis=-1) if len(gt) else None
        phantom = int((d.min(axis=1) > 2.0).sum()) if d is not None and d.size else int(big.sum())
        print(f"  frame {fr.token}: {int(big.sum())} truck/bus boxes within 50 m, {phantom} with no GT box "
              f"(any class) within 2 m; {len(fr.lidar_sweeps)} earlier sweep(s)")


def features(args, work: Path) -> None:
    """Cluster extents per GT class (the GT box, grown by 0.3 m, holding most of the cluster's points)."""
    from actors.detect.lidar import _grid_key, _obstacles, cluster_geometry, cluster_points
    from generator.geometry import points_in_boxes
    from generator.sources import io, open_source
    from generator.sources.av2 import AV2Source
    from generator.synth import make_dataset
    from schemas.config import LidarDetectorConfig
    from generator.validate.detection_quality import frames_with_lidar

    cfg = LidarDetectorConfig()
    sets = []
    root = work / "synth_f"
    make_dataset(root, num_scenes=args.scenes, seed=args.seed, version="v1.0-drivegen")
    src = open_source("nuscenes", root, version="v1.0-drivegen")
    sets.append(("generated", [f for s in src.scene_ids() for f in src.load_scene(s).frames]))
    if AV2_LOG.is_dir():
        sets.append(("AV2", frames_with_lidar(AV2Source(AV2_LOG.parent).load_scene(AV2_LOG.name)).frames))
    for name, frames in sets:
        rows: dict[str, list] = {}
        for fr in frames:
            p, gz, high = _obstacles(io.load_lidar_ego(fr), cfg)
            vox = np.floor(p / cfg.voxel_size_m).astype(np.int64)
            _, first, inv = np.unique(_grid_key(vox), return_index=True, return_inverse=True)
            cl = cluster_geometry(p, cluster_points(p[first, :2], cfg)[inv], gz, high, cfg)
            gt = fr.labels
            for i in range(len(cl.start)):
                pts = cl.points[cl.start[i]:cl.start[i] + cl.count[i]]
                inside = points_in_boxes(pts, gt.center_m, gt.size_lwh_m + 0.3, gt.yaw_rad).sum(axis=1) \
                    if len(gt) else np.zeros(1)
                j = int(np.argmax(inside))
                c = str(gt.class_name[j]) if len(gt) and inside[j] > 0.5 * len(pts) else "(none)"
                rows.setdefault(c, []).append((cl.long_m[i], cl.short_m[i], cl.top_q[i] - cl.bottom[i], cl.count[i]))
        print(f"\nCluster extents on the {name} frames, per GT class: 5th / 50th / 95th percentiles")
        for c, r in sorted(rows.items()):
            q = np.percentile(np.array(r), [5, 50, 95], axis=0)
            print(f"  {c:14s} {len(r):5d}  long {q[:, 0].round(2)}  short {q[:, 1].round(2)}  height {q[:, 2].round(2)}"
                  f"  points {q[:, 3].round(0)}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-av2", action="store_true")
    ap.add_argument("--ablations", action="store_true")
    ap.add_argument("--features", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.features:
            features(args, work)
            return
        generated(args, work)
        if not args.no_av2:
            av2(work)


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("detection"):
        sys.exit(main())
