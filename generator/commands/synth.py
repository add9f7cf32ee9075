"""``drivegen synth``: write generated nuScenes-format logs (scripted scenes, ray-cast LiDAR, rendered cameras)."""
from __future__ import annotations

import argparse
import logging
import time

log = logging.getLogger(__name__)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("synth", help="write generated nuScenes-format logs",
                              description=__doc__)
    p.add_argument("--scenes", type=int, default=2, help="number of 20 s scenes (default 2)")
    p.add_argument("--seed", type=int, default=0, help="dataset seed; same seed -> same bytes (default 0)")
    p.add_argument("--out", required=True, help="dataroot to write (tables go to OUT/VERSION/)")
    p.add_argument("--version", default="v1.0-drivegen", help="nuScenes version folder name")
    p.add_argument("--sweep-hz", type=int, default=10,
                   help="LiDAR rate incl. keyframes, even (10 = 4 sweeps between keyframes; 0 = keyframes only)")
    p.add_argument("--image-width", type=int, default=800, help="camera width in px (16:9; nuScenes is 1600)")
    p.add_argument("--first-scene", type=int, default=0, help="index of the first scene (to split work)")
    p.add_argument("--overwrite", action="store_true", help="replace a table set already in OUT/VERSION")
    return p


def main(args) -> int:
    from generator.synth import make_dataset

    t0 = time.perf_counter()
    s = make_dataset(args.out, num_scenes=args.scenes, seed=args.seed, version=args.version, sweep_hz=args.sweep_hz,
                     image_width_px=args.image_width, image_height_px=args.image_width * 9 // 16,
                     first_scene_index=args.first_scene, overwrite=args.overwrite)
    dt = time.perf_counter() - t0
    log.info("wrote %d scenes (%d samples, %d annotations, %.1f MB) to %s in %.1f s (%.2f s/scene)",
             len(s.scene_tokens), s.num_samples, s.num_annotations, s.bytes_written / 1e6, s.root, dt,
             dt / max(1, len(s.scene_tokens)))
    return 0
