"""This family's section of the config (``schemas.families``: the root config picks it up from the registry)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from schemas.config import _Model


class IntentionConfig(_Model):
    """Intention-Drive planning samples and instructions (``generator.families.intention_drive.attributes``; Intention-Drive
    §3: K BEV waypoints from a history of observations and a language instruction; §3.4: ADE, collision
    rate, ISR). The waypoints themselves are ``labels.num_waypoints`` x ``labels.waypoint_step_s`` (6 at
    0.5 s, the paper's setting). The paper annotates instructions with a VLM; drivegen derives them from what
    the log shows the ego does next, so every threshold below is chosen here and checked on the generated
    logs (tests/families/test_intention.py: the ground truth satisfies every instruction it is given)."""

    export: bool = True
    """Intention-Drive planning samples (intention/) at the end of a run"""

    history_steps: int = Field(4, ge=0, le=200)
    """past ego states given to a model, labels.waypoint_step_s apart (2 s)"""
    classify_at_s: float = Field(1.5, gt=0)
    """The instruction's maneuver is the labeller's (generator.attributes.labels.ego_labels) on the trajectory
    past + future, at this time after the sample (the middle of the 3 s horizon)."""
    collision_substeps: int = Field(5, ge=1, le=100)
    """the ego body (swept for collisions) is the config's ``ego`` section boxes checked at this many points per
    waypoint interval"""
    lane_half_width_m: float = Field(1.75, gt=0)
    """"in the ego's lane": |lateral| below this (3.5 m lanes)"""
    follow_gap_m: tuple[float, float] = (2.0, 40.0)
    """follow Region [X]: a vehicle ahead in the lane now and at the end, the ego ends this far behind it"""
    stop_gap_m: tuple[float, float] = (2.0, 8.0)
    """stop behind Region [X]: the ego stops (maneuver Stop) this far behind the vehicle ahead in its lane"""
    overtake_max_ahead_m: float = Field(40.0, gt=0)
    """overtake Region [X]: a vehicle ahead now (within this distance, same direction, within this lateral
    offset), behind the ego (centre behind the ego's centre by at least overtake_clear_m) at the end"""
    overtake_max_lateral_m: float = Field(6.0, gt=0)
    overtake_clear_m: float = Field(0.0, ge=0)
    moving_speed_mps: float = Field(1.0, ge=0)
    """overtake: the target's mean speed over the horizon at least this"""
    same_direction_deg: float = Field(45.0, gt=0, le=180)
    """|relative heading| below: same way as the ego"""
    yield_max_ahead_m: float = Field(30.0, gt=0)
    """yield to Region [X]: a VRU crossing (DRAMA-X lateral intent) ahead within these limits while the ego slows
    or stops, keeping at least yield_clearance_m from it over the horizon"""
    yield_max_lateral_m: float = Field(8.0, gt=0)
    yield_clearance_m: float = Field(3.0, ge=0)
    pull_over_min_lateral_m: float = Field(1.0, gt=0)
    """pull over on a side: the ego, not turning and slowing (speed status Decelerate or maneuver Stop), ends at
    least pull_over_min_lateral_m to that side of where it is now, at most pull_over_end_speed_ratio of its
    current speed (a lane change while braking lightly is not a pull-over; a pull-over ends at the kerb)"""
    pull_over_end_speed_ratio: float = Field(0.8, gt=0, le=1)
    kerb_side: Literal["left", "right"] = "right"
    """the side a vehicle pulls over to: right in right-hand traffic (the US logs of nuScenes Boston and AV2,
    generated logs), left in left-hand traffic (nuScenes Singapore: run those scenes with 'left')"""
    move_step_m: float = Field(0.2, ge=0)
    """an object moving less per waypoint step keeps its last heading"""
    road_edges: bool = True
    """Road edges (Intention-Drive §3.4 counts leaving the road as a collision): where the log has a map of its
    paved surface (nuScenes' semantic prior mask, which generated logs carry too), a trajectory whose swept
    ego body puts a corner off the mask collides; the mask may be grown by this margin (devkit MapMask
    dilation) against map misalignment. A sample whose current body is already off the mask is not checked."""
    road_dilation_m: float = Field(0.0, ge=0)

    @field_validator("follow_gap_m", "stop_gap_m")
    @classmethod
    def _range(cls, v):
        if not (0 <= v[0] < v[1]):
            raise ValueError(f"needs 0 <= min < max, got {list(v)}")
        return v

