"""This family's section of the config (``schemas.families``: the root config picks it up from the registry)."""
from __future__ import annotations


from pydantic import Field

from schemas.config import _Model


class ScenarioConfig(_Model):
    """Thresholds of the STRIDE-QA-Bench scenario classifier (``generator.families.stride_qa.bench_export.
    classify_scenario``, App. C.2 names the relations, not thresholds): chosen here and checked against the
    scripted scenarios of the generated logs (tests/families/test_bench_export.py)."""

    same_dir_deg: float = Field(45.0, gt=0, le=180)
    """|relative heading| below: same way as the ego"""
    opposite_dir_deg: float = Field(135.0, gt=0, le=180)
    """|relative heading| above: against the ego"""
    pass_x_m: float = 0.0
    """the target counts as passed once its centre is behind this x (ego frame)"""
    diverge_deg: float = Field(30.0, gt=0)
    """relative heading change over the window: paths diverge"""
    ahead_bearing_deg: float = Field(30.0, gt=0)
    """"ahead of the ego": |bearing| below this at t0"""
    pull_away_m: float = Field(3.0, ge=0)
    """distance gained over the future horizon: Pulling Away From Ego"""
    maintain_m: float = Field(2.5, ge=0)
    """|distance change| over the window allowed for Maintain State"""
    maintain_rel: float = Field(0.15, ge=0)
    """... or this fraction of the t0 distance, whichever is larger"""


class BenchConfig(_Model):
    """STRIDE-QA-Bench export (§5.2, App. C)."""

    export: bool = True
    """the STRIDE-QA-Bench export (bench/) at the end of a run"""

    dynamic_speed_mps: float = Field(0.5, ge=0)
    """a group is dynamic (kept) when the target's mean ground speed over its window exceeds this"""
    scenario: ScenarioConfig = Field(default_factory=ScenarioConfig)

