"""Speed of ``drivegen synth``: seconds and megabytes per generated 20 s scene.

Usage: python bench/synth.py [--scenes 5] [--sweep-hz 10] [--image-width 800] [--keep DIR]
Prints wall-clock and CPU seconds per scene (CPU time is what the generator itself costs on a shared
machine) and the bytes written per scene.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from generator.synth import make_dataset  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sweep-hz", type=int, default=10)
    ap.add_argument("--image-width", type=int, default=800)
    ap.add_argument("--keep", default=None, help="write here and keep the output (default: a temp dir)")
    args = ap.parse_args()
    out = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="drivegen-bench-synth-"))
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        s = make_dataset(out, num_scenes=args.scenes, seed=args.seed, sweep_hz=args.sweep_hz,
                         image_width_px=args.image_width, image_height_px=args.image_width * 9 // 16)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        n = len(s.scene_tokens)
        print(f"scenes={n} sweep_hz={args.sweep_hz} images={s.image_size_px[0]}x{s.image_size_px[1]} "
              f"samples={s.num_samples} sample_data={s.num_sample_data} annotations={s.num_annotations}")
        print(f"wall_s_per_scene={wall / n:.2f} cpu_s_per_scene={cpu / n:.2f} "
              f"MB_per_scene={s.bytes_written / n / 1e6:.1f}")
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("synth"):
        sys.exit(main())
