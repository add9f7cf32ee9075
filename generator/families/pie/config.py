"""This family's section of the config (``schemas.families``: the root config picks it up from the registry)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from schemas.config import MAX_COUNT, MAX_RATE_HZ, MAX_SPAN_S, _Model, check_time_steps


BENCHMARK_ACTION = {"observation_frames": 16, "tte_min_frames": 30, "tte_max_frames": 60, "overlap": 0.8}
"""``pie.profile: benchmark``: the action-sample settings of the public PedestrianActionBenchmark for JAAD
(``config_files/configs_default.yaml``: ``obs_length`` 16, ``time_to_event`` [30, 60]; its ``train_test.py``
sets ``overlap`` 0.8 for JAAD and the minimum track length to ``obs_length + time_to_event[1]`` = 76)"""


class PieConfig(_Model):
    """The PIE/JAAD pedestrian behaviour family (``generator.sources.jaad``, ``generator.families.pie.attributes``,
    ``generator.families.pie.score``). Defaults are the benchmark paper's (seed 001, "Pedestrian behaviour
    prediction: intention, action, event risk", §III-A data and §III-D metrics) unless the comment says
    otherwise."""

    fps: float = Field(30.0, gt=0, le=MAX_RATE_HZ)
    """JAAD/PIE videos are 30 fps (JAAD annotations README)"""
    observation_frames: int = Field(15, ge=1, le=MAX_COUNT)
    """§III-A: observation length 0.5 s = 15 frames"""
    overlap: float = Field(0.3, ge=0, lt=1)
    """§III-A: samples extracted with a 30 % overlap"""
    tte_min_frames: int = Field(30, ge=0, le=MAX_COUNT)
    """§III-A 2): observations end 1-3 s (30-90 frames) before the event"""
    tte_max_frames: int = Field(90, ge=1, le=MAX_COUNT)
    risk_horizon_frames: int = Field(90, ge=1, le=MAX_COUNT)
    """§III-A 3): risk class from the box centre 3 s ahead"""
    risk_region_width_px: float = Field(160.0, gt=0)
    """§III-A 3): vertical regions 160 px wide ..."""
    risk_reference_width_px: float = Field(1920.0, gt=0)
    """... in a 1920 px wide image (12 regions, 6 classes)"""
    tte_sigma: float = Field(0.3, gt=0)
    """§III-D 1): TTE weights, sigma 0.3"""
    risk_sigma: float = Field(0.5, gt=0)
    """§III-D 2): risk-region weights, sigma 0.5"""
    include_bystanders: bool | None = None
    """Whether the bystanders ('ped' tracks, never crossing; JAAD's 'people' groups never are) give samples.
    Unset: the profile's own choice. 'paper': yes, for both tasks (JAAD Table I counts 1872 pedestrians for action
    prediction: more than the 686 with behaviour tags). 'benchmark': its JAAD_beh set for action samples
    (``sample_type: beh``, its default) and the paper's choice, yes, for risk samples. True: also the
    benchmark's JAAD_all action set (``sample_type: all``: a bystander's event is its third-to-last box, label
    0). False: behaviour pedestrians only, for both tasks and both profiles."""
    split_variant: Literal["default", "all_videos", "high_visibility"] = "default"
    """JAAD split_ids/<variant>"""
    box_outside_tolerance_px: float = Field(1.0, ge=0)
    """Not from the paper: JAAD's annotation tool rounds boxes; measured on videos 0001-0250 one box ends 1 px
    outside its 1280 px image (video_0069). A box further outside is a SourceError."""
    track_gap: Literal["error", "keep"] = "keep"
    """Not from the paper: a track with missing frames (16 tracks in JAAD 0001-0250, occlusions the annotators
    left out: gaps of 27-242 frames). 'keep' (default): the pedestrian stays one pedestrian with one event, as
    its annotation says, and only the windows that would span the gap are not sampled; the other tracks of its
    video are untouched. Splitting the track at the gap instead would make the part after it a pedestrian of its
    own, whose event (the last visible frame, for one that does not cross) would be invented. 'error': the
    video fails, naming the gap (the rule before; one gapped track then cost 319 samples of 13 videos)"""
    profile: Literal["paper", "benchmark"] = "paper"
    """How action samples are cut. 'paper' (default): the paper's text (the fields above). 'benchmark': as the
    public PedestrianActionBenchmark cuts them for JAAD (``BENCHMARK_ACTION``: observation 16 boxes, TTE
    30-60, overlap 0.8, behaviour pedestrians only unless ``include_bystanders`` is true (JAAD_all), the track
    cut at its event box, tracks shorter than 76 boxes up to it dropped, windows over box positions; a
    pedestrian without a crossing point has its event at its third-to-last box), sample for sample, so that
    results compare with published JAAD figures. Risk
    samples keep the paper's rules in either profile (the benchmark has no risk task). A setting a profile would
    not use is refused by name (``ignored_by_profile``); 3D logs always use the paper's profile (``log_config``),
    and ``export pie --run`` says so when the config asks for 'benchmark'."""
    require_clips: bool = False
    """``drivegen run --source jaad`` (not from the paper): a video without clips/<video>.mp4 is an error for
    that video (True) or runs from its annotations alone, without frames or image intent (False: the JAAD
    annotations are public, the videos often not at hand)"""
    extract_frames: bool = True
    """... and the frames its samples observe are extracted into the run folder (images/<video>/<frame>.<fmt>,
    the layout of JAAD's own split_clips_to_frames.sh, png) when the clip is there"""
    frame_format: Literal["png", "jpg"] = "png"
    path_margin_m: float = Field(0.5, ge=0)
    """The same tasks from 3D logs (generator.families.pie.attributes.path_entry; not from the paper, which has
    JAAD's crossing_point): a tracked pedestrian's crossing event is the first time it stands where the ego is
    going to drive: inside the ego's body widened by path_margin_m a side, at one of its logged poses of the
    next path_horizon_s (every path_step_s) no farther than path_ahead_m from where it is now"""
    path_horizon_s: float = Field(10.0, gt=0, le=MAX_SPAN_S)
    path_step_s: float = Field(0.25, gt=0)
    path_ahead_m: float = Field(50.0, gt=0)

    @model_validator(mode="after")
    def _check(self):
        check_time_steps(self.path_horizon_s, self.path_step_s, "path_horizon_s / path_step_s")
        ignored = self.ignored_by_profile()
        if ignored:
            raise ValueError(
                f"pie.profile: {self.profile} does not use {', '.join(f'pie.{k}: {v}' for k, v in ignored.items())}"
                f": its action samples take the benchmark's observation of {BENCHMARK_ACTION['observation_frames']}"
                f" boxes, overlap {BENCHMARK_ACTION['overlap']} and TTE {BENCHMARK_ACTION['tte_min_frames']}-"
                f"{BENCHMARK_ACTION['tte_max_frames']} boxes, and its risk samples the paper's defaults; remove "
                f"{'them' if len(ignored) > 1 else 'it'}, or use pie.profile: paper")
        if self.tte_min_frames > self.tte_max_frames:
            raise ValueError(f"tte_min_frames {self.tte_min_frames} > tte_max_frames {self.tte_max_frames}")
        n = self.risk_reference_width_px / self.risk_region_width_px
        if abs(n - round(n)) > 1e-6 or round(n) < 2:
            raise ValueError(f"risk_reference_width_px / risk_region_width_px must be a whole number >= 2, got {n}")
        return self

    def ignored_by_profile(self) -> dict:
        """{setting: value} of the settings the chosen profile would not use, each changed from its default
        (a refused config, ``_check``): under 'benchmark' the action windows are ``BENCHMARK_ACTION``'s and the
        risk windows keep the paper's defaults (observation_frames, overlap; TTE does not cut risk samples)."""
        if self.profile != "benchmark":
            return {}
        fields = type(self).model_fields
        return {k: getattr(self, k) for k in ("observation_frames", "overlap", "tte_min_frames", "tte_max_frames")
                if getattr(self, k) != fields[k].default}

    def bystanders(self, task: str) -> bool:
        """Whether the bystanders give ``task`` samples (``include_bystanders``, unset: the profile's choice)."""
        if self.include_bystanders is not None:
            return self.include_bystanders
        return not (task == "action" and self.profile == "benchmark")

    @property
    def risk_regions(self) -> int:
        return int(round(self.risk_reference_width_px / self.risk_region_width_px))

    @property
    def sample_step_frames(self) -> int:
        """Frames between the starts of consecutive samples (PCPA's ``int((1 - overlap) * obs_length)``)."""
        return max(1, int((1.0 - self.overlap) * self.observation_frames))

