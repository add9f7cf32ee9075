"""Anonymisation on generated logs: share of the true face and plate pixels blurred, false blurring, cost.

Renders keyframes of scripted scenes with the faces and plates the generated logs paint (exact truth per
pixel), anonymises each camera image with the scene's ground-truth boxes (``generator.validate.anonymize``)
under both policies for candidates where the cascade finds nothing (``anonymize.undetected``: 'region', the
default, and 'none': cascade detections only), and prints recall per kind, false blurring and time per image.

    python bench/anonymize.py [--scenes 0 1] [--times 2 6 10 14 18] [--width 800]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from generator.validate.anonymize import measure_scenes  # noqa: E402
from schemas.config import AnonymizeConfig  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--times", type=float, nargs="+", default=[2.0, 6.0, 10.0, 14.0, 18.0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--width", type=int, default=800, help="image width (16:9); the generated logs' default 800")
    args = ap.parse_args(argv)
    print(f"{'undetected':<10} {'images':>6} {'face px':>8} {'face rec':>8} {'plate px':>8} {'plate rec':>9} "
          f"{'blurred px':>10} {'false':>6} {'img share':>9} {'ms/img':>6}")
    for policy in ("region", "none"):
        r = measure_scenes(AnonymizeConfig(undetected=policy), seed=args.seed, scenes=tuple(args.scenes),
                           times_s=tuple(args.times), width_px=args.width)
        print(f"{policy:<10} {r['images']:>6} {r['face']['truth_px']:>8} {r['face']['recall']:>8.3f} "
              f"{r['plate']['truth_px']:>8} {r['plate']['recall']:>9.3f} {r['blurred_px']:>10} "
              f"{r['false_share']:>6.3f} {r['blurred_image_share']:>9.4f} {r['seconds_per_image'] * 1e3:>6.1f}")
    print("anonymize bench: recall = true face/plate pixels blurred; false = blurred pixels outside them; "
          "ms/img = anonymize_image alone")
    return 0


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("anonymize"):
        sys.exit(main())
