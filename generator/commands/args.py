"""argparse types the commands share."""
from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``--scenes 0`` would mean every scene, ``-1`` all but the last)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def port_number(text: str) -> int:
    """argparse type: a TCP port, 1-65535."""
    v = positive_int(text)
    if v > 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is at most 65535, got {v}")
    return v


MAX_SEED = 2 ** 63 - 1  # schemas.config.Seed's bound


def seed(text: str) -> int:
    """argparse type: a seed, a whole number in [0, 2**63 - 1] (numpy's generators refuse a negative one: -1 was a
    crash after the output folder existed)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= v <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"a seed is a whole number from 0 to 2**63 - 1, got {v}")
    return v
