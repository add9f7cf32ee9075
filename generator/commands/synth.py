"""``drivegen synth``: write generated nuScenes-format logs (scripted scenes, ray-cast LiDAR, rendered cameras)."""
from __future__ import annotations

import argparse
import logging
import time

log = logging.getLogger(__name__)


MAX_IMAGE_WIDTH_PX = 3200  # twice nuScenes' 1600 px: six rendered images per keyframe stay a few MB each


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def int_at_least(low: int):
    """argparse type: an integer >= ``low`` (argparse prints the message and exits 2)."""
    def parse(text: str) -> int:
        v = _int(text)
        if v < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return v
    return parse


def sweep_rate(text: str) -> int:
    v = _int(text)
    if v < 0 or v > 20 or v % 2:
        raise argparse.ArgumentTypeError(f"must be 0 or an even number up to 20 (the HDL-32E spins at 20 Hz), "
                                         f"got {text!r}")
    return v


def image_width(text: str) -> int:
    v = _int(text)
    if v < 16 or v > MAX_IMAGE_WIDTH_PX or v % 16:
        raise argparse.ArgumentTypeError(f"must be a multiple of 16 from 16 to {MAX_IMAGE_WIDTH_PX} (16:9 images, "
                                         f"intrinsics scaled from nuScenes' 1600x900), got {text!r}")
    return v


def version_name(text: str) -> str:
    # lazy: generator.synth.writer loads cv2, which this module needs only here
    from generator.synth.writer import version_problem

    problem = version_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem}, got {text!r}")
    return text


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("synth", help="write generated nuScenes-format logs",
                              description=__doc__)
    p.add_argument("--scenes", type=int_at_least(1), default=2, help="number of 20 s scenes (default 2)")
    p.add_argument("--seed", type=int_at_least(0), default=0,
                   help="dataset seed, >= 0; same seed -> same bytes (default 0)")
    p.add_argument("--out", required=True, help="dataroot to write (tables go to OUT/VERSION/)")
    p.add_argument("--version", type=version_name, default="v1.0-drivegen",
                   help="nuScenes version folder name (a plain folder name)")
    p.add_argument("--sweep-hz", type=sweep_rate, default=10,
                   help="LiDAR rate incl. keyframes, even, <= 20 (10 = 4 sweeps between keyframes; 0 = keyframes only)")
    p.add_argument("--image-width", type=image_width, default=800,
                   help=f"camera width in px, a multiple of 16 up to {MAX_IMAGE_WIDTH_PX} (16:9; nuScenes is 1600)")
    p.add_argument("--first-scene", type=int_at_least(0), default=0,
                   help="index of the first scene (to split work)")
    p.add_argument("--overwrite", action="store_true", help="replace a table set already in OUT/VERSION")
    p.add_argument("--small", action="store_true",
                   help="small scenes for trying a setup (a cluster, a config) in seconds: the first 7 s of each "
                        "scene (14 keyframes), keyframe-only LiDAR at 400 columns, 320x180 images; overrides "
                        "--sweep-hz and --image-width")
    return p


def main(args) -> int:
    # lazy: generator.synth loads cv2, which this module needs only here
    from generator.synth import MINIMAL_SCENES, make_dataset

    t0 = time.perf_counter()
    size = MINIMAL_SCENES if args.small else {"sweep_hz": args.sweep_hz, "image_width_px": args.image_width,
                                              "image_height_px": args.image_width * 9 // 16}
    s = make_dataset(args.out, num_scenes=args.scenes, seed=args.seed, version=args.version,
                     first_scene_index=args.first_scene, overwrite=args.overwrite, **size)
    dt = time.perf_counter() - t0
    log.info("wrote %d scenes (%d samples, %d annotations, %.1f MB) to %s in %.1f s (%.2f s/scene)",
             len(s.scene_tokens), s.num_samples, s.num_annotations, s.bytes_written / 1e6, s.root, dt,
             dt / max(1, len(s.scene_tokens)))
    return 0
