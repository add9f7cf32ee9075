"""This family's section of the config (``schemas.families``: the root config picks it up from the registry)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from schemas.config import MAX_IMAGE_PX, MAX_RATE_HZ, MAX_SPAN_S, _Model, check_time_steps


class DramaRiskConfig(_Model):
    """DRAMA-X risk and suggested action from hindsight (``generator.families.drama_x.attributes.risk_table``). DRAMA-X
    keeps DRAMA's human Risk / suggestion labels (App. A.2) and gives no rule: every threshold here is chosen
    here and checked against the generated logs' scripts (tests/families/test_drama.py)."""

    horizon_s: float = Field(4.0, gt=0, le=MAX_SPAN_S)
    """look this far ahead for a conflict"""
    step_s: float = Field(0.25, gt=0)
    """future poses are sampled this far apart"""
    lateral_margin_m: float = Field(0.5, ge=0)
    """corridor = ego width + this on each side (+ object half width)"""
    front_buffer_m: float = Field(5.0, ge=0)
    """the corridor reaches this far beyond the front bumper"""
    encroachment_s: float = Field(1.0, ge=0)
    """object at p(tau) conflicts when the ego's buffered footprint covers p(tau) at some tau' in [tau, tau +
    encroachment_s]: the ego arrives where the object is within this (post-encroachment time)"""
    min_track_s: float = Field(0.5, ge=0)
    """objects seen for less than this of the future get no risk"""
    stop_ttc_s: float = Field(1.0, ge=0)
    """risk with time-to-conflict at most this: stop"""
    yield_ttc_s: float = Field(3.0, ge=0)
    """VRU risk within this: yield"""
    slow_ttc_s: float = Field(3.0, ge=0)
    """other risk within this while the ego moves: slow down"""
    moving_speed_mps: float = Field(0.5, ge=0)
    """the ego counts as moving above this"""

    @model_validator(mode="after")
    def _steps(self):
        check_time_steps(self.horizon_s, self.step_s, "horizon_s / step_s")
        return self


class DramaImageIntentConfig(_Model):
    """DRAMA-X §3.2 image-based intent: 2D track displacement minus the camera displacement, which is the
    Farneback flow (OpenCV ``calcOpticalFlowFarneback``) in a ring around the object (its box excluded),
    over several windows. DRAMA-X gives no numbers; the windows fit 2 Hz keyframes, the thresholds are
    chosen here and measured against the 3D-track intent on generated logs (tests/families/test_drama.py)."""

    windows_s: list[float] = Field(default_factory=lambda: [0.5, 1.0], min_length=1)
    """displacement windows"""
    compensate: bool = True
    """subtract the camera displacement (False: raw image motion, for comparison)"""
    region_scale: float = Field(2.0, gt=1)
    """ring = the box grown to this many times its width/height ..."""
    region_min_px: int = Field(24, ge=1, le=MAX_IMAGE_PX)
    """... and at least this many pixels on each side"""
    statistic: Literal["median", "mean"] = "median"
    """§3.2 text says median, Eq. 3.2 a mean"""
    lateral_rate: float = Field(0.4, gt=0)
    """|dx| / box height per second at least this: left / right"""
    vertical_rate: float = Field(0.15, gt=0)
    """|dy of the box bottom| / box height per second: towards / away"""
    flow_pyr_scale: float = Field(0.5, gt=0, lt=1)
    """cv2.calcOpticalFlowFarneback(pyr_scale, levels, winsize, iterations, poly_n, poly_sigma)"""
    flow_levels: int = Field(5, ge=1, le=16)
    flow_winsize: int = Field(21, ge=3, le=255)
    flow_iterations: int = Field(3, ge=1, le=100)
    flow_poly_n: int = Field(7, ge=5, le=15)
    flow_poly_sigma: float = Field(1.5, gt=0)
    video_fps: float = Field(10.0, gt=0, le=MAX_RATE_HZ)
    """camera-only videos (``drivegen run --source jaad``, 30 fps, 1920x1080): the flow runs on frames taken at
    this rate and scaled down to at most this width (not from the paper: DRAMA-X's own clips are 2 s at 1 Hz
    keyframes; these keep Farneback at about 0.1 s a frame pair on one core)"""
    video_max_width_px: int = Field(960, ge=64, le=MAX_IMAGE_PX)


class DramaXConfig(_Model):
    """DRAMA-X family (``generator.families.drama_x.attributes``, ``generator.families.drama_x.export``, scorer
    ``drama-x``)."""

    match_iou: float = Field(0.3, ge=0, le=1)
    """App. A.3: Hungarian on 1 - IoU, theta_iou = 0.3"""
    od_iou: float = Field(0.5, ge=0, le=1)
    """App. A.4.1: OD counts a GT box localized at IoU >= 0.5"""
    position_rule: Literal["image_thirds", "bearing"] = "image_thirds"
    """How the export's Position is found: 'image_thirds' (default), the box centre's x in the front image, its
    middle ``image_front_share`` being Front, as the authors annotate ("Left/Right/Front of ego vehicle" by image
    thirds); 'bearing': the object's bearing from the ego within ``front_position_deg`` is Front (3D logs)"""
    front_position_deg: float = Field(15.0, gt=0, le=90)
    """|bearing| below this: Position 'Front' (``position_rule: bearing``)"""
    image_front_share: float = Field(1 / 3, gt=0, lt=1)
    """camera-only logs: DRAMA-X §3.2 takes the position from the box's x in the final image; a box centre in the
    middle image_front_share of the width is "Front" (chosen here: the middle third)"""
    min_box_inside_share: float = Field(0.5, ge=0, le=1)
    """App. A.2 filter (i): an exported object's box has at least this share of its area inside the image"""
    min_box_height_share: float = Field(0.08, ge=0, le=1)
    """App. A.2 filter (ii): box height at least this share of the image height ..."""
    min_box_width_share: float = Field(0.01, ge=0, le=1)
    """... and width at least this share of the image width"""
    max_objects_per_class: int = Field(3, ge=1, le=1000)
    """App. A.2 filter (iii): at most this many objects per class (Pedestrians, Cyclists) in a frame; the export
    keeps the largest boxes (the nearest; the paper's detector kept its own, not said which)"""
    risk: DramaRiskConfig = Field(default_factory=DramaRiskConfig)
    image_intent: DramaImageIntentConfig = Field(default_factory=DramaImageIntentConfig)

