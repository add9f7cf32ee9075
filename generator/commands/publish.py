"""``drivegen publish RUN --out DEST``: a finished run folder as a release: Parquet shards per configuration
and split (``<config>/<split>-00000-of-000NN.parquet``) and WebDataset tars (``wds/<split>-...tar``) of about
``--target-shard-mb``, rows and samples shuffled across scenes with ``--seed`` (the same seed, the same bytes),
the dataset card pointing at them, and ``SHA256SUMS``. ``datasets.load_dataset(DEST)`` reads it.

DEST is a local path or URI (``s3://...``). It must be new, empty or an earlier publish: only that publish's
files are replaced. A publish that was killed is finished by running the same command again (the files
already in place are kept; the rest are the same bytes). Refused, with nothing written: a RUN still being
written, a RUN with failed or unfinished scenes (unless ``--allow-partial``), a DEST that cannot be reached or
holds other files. Exit codes: 0 = published, 2 = unusable input.
"""
from __future__ import annotations

import argparse

from generator.commands.args import positive_int, seed
from schemas.layout import RELEASE_SHARD_MB


MIN_SHARD_MB, MAX_SHARD_MB = 0.01, 16_384.0  # 10 kB (a few rows a file) to 16 GB (more than any reader wants)


def _shard_mb(text: str) -> float:
    """argparse type of --target-shard-mb: MB in [MIN_SHARD_MB, MAX_SHARD_MB] (1e-9 planned a file per row)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not MIN_SHARD_MB <= value <= MAX_SHARD_MB:
        raise argparse.ArgumentTypeError(f"must be from {MIN_SHARD_MB:g} to {MAX_SHARD_MB:g} MB, got {text!r}")
    return value


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("publish", help="publish a run folder as sized, shuffled Parquet and WebDataset shards",
                              description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("run", help="the run folder (path or URI)")
    p.add_argument("--out", required=True, help="the release folder (path or URI)")
    p.add_argument("--target-shard-mb", type=_shard_mb, default=RELEASE_SHARD_MB,
                   help=f"about this many MB per Parquet shard and tar (default {RELEASE_SHARD_MB:g})")
    p.add_argument("--seed", type=seed, default=0, help="the shuffle's seed (default 0)")
    p.add_argument("--allow-partial", action="store_true",
                   help="publish the finished scenes of a run with failed or unfinished ones")
    p.add_argument("--workers", type=positive_int, default=0,
                   help="build the shards as Ray tasks on an embedded Ray with this many CPUs")
    p.add_argument("--address", default=None, help="build the shards as Ray tasks on this Ray cluster")
    return p


def main(args) -> int:
    # lazy: generator.pipeline.publish loads pycocotools, scipy, which this module needs only here
    from generator.pipeline.publish import publish

    res = publish(args.run, args.out, seed=args.seed, target_mb=args.target_shard_mb,
                  allow_partial=args.allow_partial, workers=args.workers, address=args.address)
    print(res.line())
    return 0
