"""The ego vehicles of the logs drivegen reads, in one place: what each one's body extends over from the ego origin
(both datasets put it at the centre of the rear axle, x forward).

Lengths and widths (without mirrors) are the makers' figures; where the body's centre lies ahead of the rear axle
(``center_offset_m``) is py123d's estimate for each dataset's car (autonomousvision/py123d, its ego metadata),
consistent with the cars' wheelbases and overhangs:

- nuScenes: both of its cars (logs ``n008-*``, ``n015-*``) are Renault Zoes, 4.084 x 1.730 m, the rear axle 0.657 m
  ahead of the rear bumper;
- Argoverse 2: a second-generation Ford Fusion Hybrid, 4.869 x 1.852 m, the rear axle 1.096 m ahead of the rear
  bumper;
- logs drivegen generated (their nuScenes ``log.vehicle`` is ``GENERATED_EGO_VEHICLE``): their own ego
  (``generator.synth.rig``), which is ``EgoBodyConfig``'s default.

A source names its logs' body (``LogSource.ego_body``); a run takes it unless its config sets ``ego``
(``generator.pipeline.with_logs_ego``). Camera-only logs (JAAD) have no 3D ego body.
"""
from __future__ import annotations

from schemas.config import EgoBodyConfig

GENERATED_EGO_VEHICLE = "drivegen-ego"  # the nuScenes log table's ``vehicle`` of generated logs (generator.synth)

EGO_BODIES = {
    "nuscenes": EgoBodyConfig(length_m=4.084, width_m=1.730, center_offset_m=1.385),
    "av2": EgoBodyConfig(length_m=4.869, width_m=1.852, center_offset_m=1.339),
    "generated": EgoBodyConfig(),
}


def ego_body(kind: str) -> EgoBodyConfig:
    """A copy of ``EGO_BODIES[kind]``."""
    return EGO_BODIES[kind].model_copy()
