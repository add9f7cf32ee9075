"""How ``drivegen validate`` scales: times the devkit's detection and tracking evaluation on a run folder,
with its scenes replicated, its scenes cut to fewer frames, fewer recall thresholds and more workers.

    python bench/validate.py RUN [--copies 1 2 4] [--frames 40 0] [--thresholds 10 40] [--workers 1 2]

``--frames 0`` = every frame. Prints one line per setting: wall and CPU seconds (this process and its
worker processes) and AMOTA (which depends on the thresholds: fewer thresholds weigh an unreached recall
level more). A speed target belongs here, not in the tests.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import copy
import resource
import time

from nuscenes.eval.common.data_classes import EvalBoxes


def _cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def replicate_tracks(tracks: dict, copies: int, frames: int = 0) -> dict:
    """Scenes repeated ``copies`` times (keys ``<scene>#<k>``), each cut to its first ``frames`` timestamps."""
    out = {}
    for k in range(copies):
        for scene, by_t in tracks.items():
            keep = sorted(by_t)[:frames] if frames else sorted(by_t)
            out[f"{scene}#{k}"] = {t: by_t[t] for t in keep}
    return out


def replicate_boxes(boxes: EvalBoxes, copies: int) -> EvalBoxes:
    out = EvalBoxes()
    for k in range(copies):
        for tok in boxes.sample_tokens:
            new = []
            for b in boxes[tok]:
                b2 = copy.copy(b)
                b2.sample_token = f"{tok}#{k}"
                new.append(b2)
            out.add_boxes(f"{tok}#{k}", new)
    return out


def main(argv=None) -> None:
    from generator.validate.metrics import evaluate_detection, tracking_config
    from generator.validate.run import ValidateOptions, prepare
    from generator.validate.tracking import evaluate_tracking

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--copies", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--frames", type=int, nargs="+", default=[0])
    ap.add_argument("--thresholds", type=int, nargs="+", default=[10, 40])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args(argv)
    p = prepare(args.run, ValidateOptions(label_agreement=False))
    print(f"run {args.run}: {len(p.tracks_gt)} scene(s), {len(p.es.tokens)} samples, "
          f"{len(p.gt_det.all)} GT / {len(p.pr_det.all)} predicted boxes after filtering; load {p.load_s:.1f} s")
    for k in args.copies:
        g, d = replicate_boxes(p.gt_det, k), replicate_boxes(p.pr_det, k)
        t0, c0 = time.perf_counter(), _cpu()
        r = evaluate_detection(g, d, has_attributes=p.gt.has_attributes)
        print(f"detection  copies={k:<3} samples={r['num_samples']:<6} wall {time.perf_counter() - t0:6.1f} s  "
              f"cpu {_cpu() - c0:6.1f} s  mAP {r['mAP']:.3f}")
    for k in args.copies:
        for f in args.frames:
            tg, tp = replicate_tracks(p.tracks_gt, k, f), replicate_tracks(p.tracks_pr, k, f)
            nframes = sum(len(s) for s in tg.values())
            for n in args.thresholds:
                for w in args.workers:
                    t0, c0 = time.perf_counter(), _cpu()
                    r = evaluate_tracking(tg, tp, tracking_config(n), workers=w)
                    print(f"tracking   copies={k:<3} frames={nframes:<6} thresholds={n:<3} workers={w}  wall "
                          f"{time.perf_counter() - t0:6.1f} s  cpu {_cpu() - c0:6.1f} s  AMOTA {r['AMOTA']:.3f}",
                          flush=True)


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("validate"):
        sys.exit(main())
