"""The pipeline config: YAML -> typed, validated model. The single source of every tunable: each threshold
is a field whose default is the paper's value (STRIDE-QA §4.2 and App. C, CenterPoint, DRAMA-X §3.2/App. A.3,
Intention-Drive §3) or, where no paper gives one, the value chosen here with the test that checks it.
``OUT/config.yaml`` is this model dumped, so it describes a run completely.

``load_config(path)`` refuses a bad file with a message naming the file and the field.
"""
from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import pyarrow as pa
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from schemas.errors import ConfigError, InputError
from schemas.families import broken_named, config_sections, moved_settings, qa_family_names
from schemas.files import check_regular_file
from schemas.tables import QA
from schemas.vocab import DETECTION_CLASSES, MODEL_STAGES, NUSCENES_CAMERAS

__all__ = ["PipelineConfig", "ConfigError", "load_config", "parse_config", "config_from_yaml", "DETECTION_CLASSES"]


# Bounds on size-like settings, checked when the config is read (before any work or write, before --out exists):
# a value past one would make a stage allocate what no machine holds or loop for days (a 1e9-step horizon is a
# MemoryError naming no field; 1e9 GrabCut iterations never end). Every whole-number setting has an upper bound
# (tests/schemas/test_config.py checks it of every section, the families' included), and so has every rate.
MAX_TIME_STEPS = 10_000  # samples of one time span (horizon / step); a 20 s log at 20 Hz has 400 frames
MAX_SPAN_S = 60.0  # a look-ahead or look-back horizon; nuScenes scenes last 20 s, AV2 logs 15 s
MAX_RATE_HZ = 1_000.0  # a sampling rate (keyframes, video frames): cameras run at 10-60 Hz, LiDARs at 10-20
MAX_COUNT = 1_000_000  # a count threshold (points, hits, frames) that allocates nothing: far past any real one
MAX_POOL = 1_024  # actors, workers, scenes at once
MAX_IMAGE_PX = 16_384  # a side of an image drivegen makes (JAAD's reader refuses larger annotated images too)
Seed = Annotated[int, Field(ge=0, le=2 ** 63 - 1)]
"""a seed: numpy's generators take a non-negative one (-1 was a crash after --out existed)"""


def check_time_steps(horizon_s: float, step_s: float, names: str) -> None:
    """Refuse a horizon sampled in more than MAX_TIME_STEPS steps (``names``: the two fields, for the message)."""
    steps = horizon_s / step_s
    if steps > MAX_TIME_STEPS:
        raise ValueError(f"{names}: {horizon_s:g} s every {step_s:g} s is {steps:,.0f} steps, more than "
                         f"{MAX_TIME_STEPS:,} (a longer step or a shorter horizon)")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, use_attribute_docstrings=True)


class KeyframeConfig(_Model):
    """STRIDE-QA §4.2: anchors at 1 Hz from 2-17 s of each clip, context from -2 s to +3 s."""

    rate_hz: float = Field(1.0, gt=0, le=MAX_RATE_HZ)
    window_start_s: float = Field(2.0, ge=0)
    window_end_s: float = Field(17.0, gt=0)
    context_before_s: float = Field(2.0, ge=0)
    context_after_s: float = Field(3.0, ge=0)
    context_rate_hz: float = Field(2.0, gt=0, le=MAX_RATE_HZ)
    """the context frames are sampled at 2 Hz"""
    context_frames: int = Field(4, ge=1, le=64)
    """frames shown for a keyframe, the keyframe last: STRIDE-QA-Bench's four images at -1.5, -1, -0.5, 0 s"""
    match_tolerance_s: float = Field(0.06, gt=0)
    """max |t_frame - t_wanted| when picking context frames"""

    @model_validator(mode="after")
    def _window(self):
        if self.window_end_s <= self.window_start_s:
            raise ValueError("window_end_s must be greater than window_start_s")
        check_time_steps(self.window_end_s - self.window_start_s, 1 / self.rate_hz,
                         "window_end_s - window_start_s / (1 / rate_hz)")
        return self

    def context_offsets_s(self) -> tuple[float, ...]:
        """Times of a keyframe's context frames relative to it, oldest first, the keyframe itself (0.0)
        last: ``context_frames`` frames ``1 / context_rate_hz`` apart. The one rule QA grounding and the
        STRIDE-QA-Bench export both use."""
        n = self.context_frames
        return tuple(-(n - 1 - k) / self.context_rate_hz for k in range(n))


class SourceLimitsConfig(_Model):
    """Sanity bounds on what a log source reads. A value beyond one is corrupt input,
    not a driving scene: the scene fails with a ``SourceError`` naming the scene, the file, the field, the row
    and the value (raise the bound if your logs really hold such values). Chosen here with a wide margin over
    what real logs hold: the real AV2 log and the generated logs load with the defaults and fail with bounds
    just below what they hold (tests/sources/test_source_bounds.py)."""

    max_box_distance_m: float = Field(500.0, gt=0)
    """|box centre| from the ego (m). The AV2 log's farthest annotation is at 221 m; the longest-range automotive
    LiDARs see about 250 m."""
    max_box_size_m: float = Field(60.0, gt=0)
    """box length, width and height (m). The longest road vehicles (road trains) are about 53 m; nuScenes and AV2
    boxes stay below 20 m."""
    max_object_speed_mps: float = Field(100.0, gt=0)
    """object speed from the annotations (m/s): 100 m/s = 360 km/h is above any vehicle in traffic (the real and
    generated logs stay below 20 m/s)"""
    max_ego_speed_mps: float = Field(100.0, gt=0)
    """ego speed between consecutive frames (m/s), the same bound"""
    max_ego_position_m: float = Field(1e7, gt=0)
    """|ego position| in the log's map frame (m): city frames span a few km, UTM coordinates stay below 1e7 m"""
    max_lidar_file_bytes: int = Field(32 * 1024 * 1024, ge=1, le=4 << 30)
    """LiDAR file size (bytes), checked before a sweep is read: reading costs about 40x the file in memory
    through perception (a 200 MB file took 7.8 GB). 32 MiB is 6x the densest automotive sweep (128 beams x
    2048 columns x 20 B = 5.2 MB); nuScenes sweeps are 0.7 MB, AV2 sweeps 1.5 MB."""
    min_lidar_azimuth_coverage: float = Field(0.99, ge=0, le=1)
    """A complete sweep has points in at least this fraction of the 360 one-degree azimuth bins around the sensor
    (real nuScenes, AV2 and generated sweeps: all 360). A sweep stored in firing order (real nuScenes: every
    ring at one azimuth, then the next) and cut loses a sector. The real nuScenes sweep spans ~5 % more than a
    revolution, so cutting its last 5 % loses nothing; 0.99 (357 bins) catches a cut of 10 % (354)."""
    lidar_rings: int = Field(32, ge=0, le=1024)
    """Rings of a nuScenes-format sweep (its ring-index column); each ring 0..n-1 must hold points. A sweep
    stored ring by ring (the generated logs) and cut loses its upper rings. nuScenes' LIDAR_TOP (HDL-32E) has
    32; 0 turns the check off (nuScenes-format logs of another LiDAR: set its ring count; the densest have 128,
    at most 1024)."""
    cache_dir: str = ""
    """Logs on object storage (``--data s3://...``, ``generator.sources.remote``): this node's cache of their
    files. The folder ('' = $DRIVEGEN_LOG_CACHE, else ~/.cache/drivegen/logs; a local disk of each node), its
    size bound (least recently used files go first) and how long a used file is never evicted (a scene in
    flight keeps its files: the bound is exceeded instead)."""
    cache_max_bytes: int = Field(50 * 1024 ** 3, ge=0, le=1 << 50)
    cache_keep_s: float = Field(600.0, ge=0)
    fetch_attempts: int = Field(4, ge=1, le=20)
    """Object storage that cannot be reached (endpoint down, connection broken mid-download) is tried this many
    times, waiting fetch_backoff_s, then twice as long each time (2 + 4 + 8 s by default); then the scene fails
    naming the network error, and ``drivegen run --resume`` redoes it. A missing object is not retried: it is
    the frame's problem, as a missing local file is."""
    fetch_backoff_s: float = Field(2.0, ge=0, le=60)


class LidarDetectorConfig(_Model):
    max_range_m: float = Field(60.0, gt=0)
    voxel_size_m: float = Field(0.15, ge=0)
    ground_distance_m: float = Field(0.25, gt=0)
    """RANSAC plane inlier distance"""
    ground_ransac_iterations: int = Field(200, ge=10, le=100_000)
    """plane hypotheses (seeded numpy RANSAC)"""
    ground_ransac_points: int = Field(4096, ge=3, le=MAX_COUNT)
    """candidate points each hypothesis is scored on"""
    ground_max_tilt_deg: float = Field(20.0, gt=0, lt=90)
    """steeper plane hypotheses (walls) are rejected"""
    ransac_seed: Seed = 0
    """with a hash of the sweep, seeds the RANSAC: same sweep, same plane"""
    cluster_eps_m: float = Field(0.7, gt=0)
    cluster_min_points: int = Field(5, ge=1, le=MAX_COUNT)
    min_box_points: int = Field(8, ge=1, le=MAX_COUNT)
    ground_cell_m: float = Field(2.0, gt=0)
    """BEV cell of the per-cell ground refinement"""
    ground_cell_tolerance_m: float = Field(0.4, ge=0)
    """a cell's lowest point is ground within this of the plane"""
    max_height_m: float = Field(4.5, gt=0)
    """points higher above the ground are ignored (trees, signs)"""
    ego_half_length_m: float = Field(3.0, ge=0)
    """the ego vehicle's own returns are cropped"""
    ego_half_width_m: float = Field(1.3, ge=0)
    beam_spacing_deg: float = Field(1.33, ge=0)
    """vertical beam spacing (nuScenes 32-beam: 1.33): height tolerance"""
    structure_height_m: float = Field(4.2, gt=0)
    """Structure, not a road user: a cluster taller than this (nuScenes trucks and buses stay below ~4 m), or one
    that reaches within structure_gap_m of the max_height_m crop (beam gaps allowed) with at least
    structure_min_points_above points above the crop over its footprint (a wall, a building edge, a pole, a
    sign or canopy right above it); low objects under a tree keep their class."""
    height_quantile: float = Field(0.97, gt=0, le=1)
    """A cluster's height is this quantile of its points' heights above the ground (its highest point decides
    only the structure test): a thin pole or branch merged into a car's cluster does not make it a truck."""
    structure_gap_m: float = Field(1.5, ge=0)
    structure_min_points_above: int = Field(1, ge=1, le=MAX_COUNT)
    floating_m: float = Field(0.5, ge=0)
    """A pedestrian, two-wheeler, cone or barrier whose lowest point is more than this above ground_distance_m
    plus the beam gap at its range stands on nothing (a sign, a branch, a hedge top): dropped. Measured: 3 of
    123 pedestrians on the generated logs (partly hidden behind cars), 44 of 211 non-object clusters on AV2."""
    shape_rules: list[tuple[str, tuple[float, float], tuple[float, float], tuple[float, float],
                            Literal["side", "face", "any"]]] = [
        ("bus", (8.0, 14.0), (0.0, 3.8), (2.6, 4.2), "side"),
        ("truck", (4.5, 12.0), (0.0, 3.8), (2.2, 4.2), "side"),
        ("bus", (2.7, 3.3), (0.0, 1.2), (3.1, 4.2), "face"),
        ("truck", (2.0, 3.3), (0.0, 1.2), (2.2, 4.2), "face"),
        ("car", (2.6, 6.2), (0.0, 2.6), (1.3, 2.3), "side"),
        ("car", (1.4, 2.6), (0.0, 1.2), (1.3, 2.3), "face"),
        ("bicycle", (1.1, 1.85), (0.2, 0.65), (0.8, 1.7), "side"),
        ("motorcycle", (1.6, 2.6), (0.45, 1.1), (1.1, 1.9), "side"),
        ("car", (1.4, 2.6), (1.2, 2.6), (1.3, 2.3), "any"),  # a corner of both sides, partly seen
        ("barrier", (0.6, 3.0), (0.0, 0.6), (0.4, 1.05), "face"),
        ("traffic_cone", (0.0, 0.55), (0.0, 0.55), (0.3, 1.25), "any"),
        ("pedestrian", (0.3, 1.1), (0.0, 1.0), (1.0, 2.2), "any"),
    ]
    """Shape rules, first match wins: (class, long side, short side, height ranges in m, view). View 'face': the
    long side runs across the heading (a vehicle seen from its front or back; a barrier, whose nuScenes length
    is its thin side), 'side': along it, 'any': either. Ranges: nuScenes mean sizes (actors/detect/priors.py)
    widened to the extents clusters show on the generated logs and the AV2 log (5th-95th percentiles per
    class, python bench/detection.py --features); a vehicle's rows come before the two-wheelers' (cars are far
    more frequent), a car's face needs 1.3 m of height (beam gaps allowed) so low barriers are not cars."""
    motion: bool = True
    """Motion from an earlier sweep (actors/detect/motion.py): the frame's listed sweep nearest motion_lag_s
    before it (nuScenes: ~10 sweeps back at 20 Hz, the previous keyframe of a 2 Hz log), none older than
    motion_max_lag_s. Matching on motion_cell_m x motion_z_cell_m cells of motion_points points per cluster,
    coarse then fine steps; clusters shorter than motion_small_m (pedestrians, cones) search every direction
    up to motion_max_speed_small_mps, longer ones along and across their long side up to motion_max_speed_mps
    (urban traffic) with motion_lateral_speed_mps sideways. A cluster moves when its best displacement matches
    motion_min_gain more of its points than none and at least motion_min_match of them, and is at least
    motion_min_speed_mps."""
    motion_lag_s: float = Field(0.5, gt=0)
    motion_max_lag_s: float = Field(0.6, gt=0)
    motion_cell_m: float = Field(0.1, gt=0)
    motion_z_cell_m: float = Field(0.5, gt=0)
    """height cells: rings hit a face at heights that change with range"""
    motion_coarse_m: float = Field(0.2, gt=0)
    motion_fine_m: float = Field(0.05, gt=0)
    motion_points: int = Field(48, ge=3, le=100_000)
    motion_small_m: float = Field(1.1, gt=0)
    motion_max_speed_mps: float = Field(20.0, ge=0)
    motion_max_speed_small_mps: float = Field(3.0, ge=0)
    motion_lateral_speed_mps: float = Field(1.5, ge=0)
    motion_min_speed_mps: float = Field(0.5, ge=0)
    motion_min_gain: float = Field(0.1, ge=0, le=1)
    motion_min_match: float = Field(0.5, ge=0, le=1)
    motion_skip_top_m: float = Field(0.25, ge=0)
    """points this close to a cluster's top (roofs) are not matched"""
    motion_max_taken: float = Field(0.5, ge=0, le=1)
    """a displacement that puts more than this much of a cluster onto another object still there now is no motion
    (a parked car hidden in the earlier sweep matches its neighbour in the row); 1 turns the check off"""
    traffic_side: Literal["right", "left", "none"] = "right"
    """Heading of still vehicles whose axis is within prior_max_angle_deg of the ego's: the direction of traffic
    on their side of the ego's road ('right'-hand traffic: the ego's direction right of prior_lane_split_m to
    the ego's left (half a 3.5 m lane), the opposite beyond it; 'left' mirrors; 'none': the fitted axis)."""
    prior_max_angle_deg: float = Field(25.0, ge=0, le=90)
    prior_lane_split_m: float = Field(1.75)

    @model_validator(mode="after")
    def _rules(self):
        bad = [r[0] for r in self.shape_rules if r[0] not in DETECTION_CLASSES]
        if bad:
            raise ValueError(f"shape_rules: unknown classes {bad}; known: {list(DETECTION_CLASSES)}")
        return self


class LabelNoiseConfig(_Model):
    """Seeded noise on ground-truth boxes (robustness studies, validation tests)."""

    center_m: float = Field(0.0, ge=0)
    """std of centre noise per axis"""
    size_frac: float = Field(0.0, ge=0)
    """std of relative size noise"""
    yaw_rad: float = Field(0.0, ge=0)
    velocity_mps: float = Field(0.0, ge=0)
    drop_prob: float = Field(0.0, ge=0, le=1)
    false_positives_per_frame: float = Field(0.0, ge=0)
    score_min: float = Field(0.5, ge=0, le=1)
    """noisy boxes get scores in [score_min, 1]"""
    fp_score: tuple[float, float] | None = None
    """false positives' (random ones and ghosts) scores: uniform in [lo, hi]; None: as the true boxes'. A real
    detector's false positives score lower than its true boxes, with overlap (e.g. [0.3, 0.8] against [0.5, 1])"""
    ghosts_per_ha: float = Field(0.0, ge=0, le=100)
    """recurring false positives: sites per hectare of the city, each at a fixed place (a seeded Poisson process per
    50 m cell of the city frame), of a random class, seen within 50 m of the ego in each frame with probability
    ``ghost_presence``, centre jittered by ``center_m``: a real detector's ghosts (a pole read as a pedestrian)"""
    ghost_presence: float = Field(0.6, gt=0, le=1)
    miss_runs_per_min: float = Field(0.0, ge=0, le=60)
    """missed detections in runs (occlusion): per object, runs start at this rate (a seeded Poisson process in
    time) and last Exp(``miss_run_s``) seconds, during which the object is not detected"""
    miss_run_s: float = Field(1.0, gt=0, le=30)
    coincident_frac: float = Field(0.0, ge=0, le=1)
    """with any noise on: annotations of one class whose centres (bird's-eye view) lie closer than this fraction
    of the narrower box's width are one object to a detector (a log annotating one parked car twice), which
    reports it once, with the smallest ``instance_token`` (the same one in every frame); 0 (default: noise
    alone, nothing dropped) detects every annotation; 0.5 as a real detector's non-maximum suppression would.
    Noise-free labels always pass through whole"""
    seed: Seed = 0

    # the fields whose non-zero value adds noise; the others (scores, ghost_presence, miss_run_s, ...) only shape it
    RATES: ClassVar[tuple[str, ...]] = ("center_m", "size_frac", "yaw_rad", "velocity_mps", "drop_prob",
                                        "false_positives_per_frame", "ghosts_per_ha", "miss_runs_per_min")

    @classmethod
    def rates_on(cls, noise: dict) -> dict[str, float]:
        """The noise rates that are on in ``noise`` (this model's fields, as ``model_dump`` or a run's
        ``config.yaml`` give them): empty for noise-free labels."""
        return {k: noise[k] for k in cls.RATES if noise.get(k)}

    @field_validator("fp_score")
    @classmethod
    def _score_range(cls, v):
        if v is not None and not 0 <= v[0] <= v[1] <= 1:
            raise ValueError(f"fp_score must be [lo, hi] with 0 <= lo <= hi <= 1, got {list(v)}")
        return v


Precision = Literal["auto", "bf16", "fp16", "fp32"]
"""A model's arithmetic (``actors.device.autocast_args``): 'auto' = bfloat16 autocast on CUDA, float32 on
the CPU; 'bf16' / 'fp16' = autocast to that type on any device; 'fp32' = full precision.
``tests/schemas/test_precision.py`` bounds how far bfloat16 moves boxes and masks from float32."""


class Mmdet3dConfig(_Model):
    config: str | None = None
    """mmdet3d config file (e.g. a CenterPoint or projects/BEVFusion config)"""
    checkpoint: str | None = None
    """.pth path; None builds random weights (tests only)"""
    device: str = "auto"
    """'auto' = cuda when available, else cpu"""
    batch_size: int = Field(4, ge=1, le=MAX_POOL)
    model_classes: list[str] = Field(default_factory=lambda: list(DETECTION_CLASSES))
    sweep_alignment: Literal["mmdet3d", "rigid"] = "mmdet3d"
    """How earlier sweeps are moved into the keyframe's LiDAR frame: 'mmdet3d' = as mmdet3d 1.4's
    LoadPointsFromMultiSweeps does (its translation is rotated once more, mmdetection3d PR #3007), what models
    trained with mmdet3d 1.x pipelines saw; 'rigid' = the rigid motion (mmdet3d 0.x, nuscenes-devkit)."""
    precision: Precision = "auto"
    """arithmetic of the network (``Precision``): 'auto' = bfloat16 autocast on a GPU, float32 on the CPU; the
    head's decoding and NMS always run in float32"""
    sweep_seed: Seed = 0
    """Configs without test_mode pick sweeps_num of the listed sweeps at random (CenterPoint nuScenes: 9 of 10),
    at test time too; drivegen seeds that draw per frame with this and the frame token."""


class DetectionConfig(_Model):
    backend: Literal["lidar", "labels", "mmdet3d"] = "labels"
    score_threshold: float = Field(0.3, ge=0, le=1)
    classes: list[str] = Field(default_factory=lambda: list(DETECTION_CLASSES))
    lidar: LidarDetectorConfig = Field(default_factory=LidarDetectorConfig)
    labels: LabelNoiseConfig = Field(default_factory=LabelNoiseConfig)
    mmdet3d: Mmdet3dConfig = Field(default_factory=Mmdet3dConfig)

    @model_validator(mode="after")
    def _classes(self):
        bad = [c for c in self.classes if c not in DETECTION_CLASSES]
        if bad:
            raise ValueError(f"unknown detection classes {bad}; known: {list(DETECTION_CLASSES)}")
        return self


def _default_gates() -> dict[str, float]:
    # CenterPoint's per-class matching distances (m per 0.5 s nuScenes frame), expressed per second.
    return {"car": 8.0, "truck": 8.0, "bus": 11.0, "trailer": 6.0, "construction_vehicle": 2.0,
            "pedestrian": 2.0, "motorcycle": 26.0, "bicycle": 6.0, "traffic_cone": 1.0, "barrier": 1.0}


class LinkingConfig(_Model):
    """DRAMA-X §3.2 / App. A.3 fragment linking: S = (1 - d/Dmax) ws + (1 - dt/Tmax) wt, S_hat = S (0.5 + 0.5 alpha)."""

    enabled: bool = True
    d_max_m: float = Field(10.0, gt=0)
    t_max_s: float = Field(3.0, gt=0)
    w_spatial: float = Field(0.6, ge=0)
    w_temporal: float = Field(0.4, ge=0)
    short_gap_frames: int = Field(3, ge=0, le=MAX_COUNT)
    threshold_short_gap: float = Field(0.2, ge=0)
    threshold_long_gap: float = Field(0.3, ge=0)


def _default_max_speeds() -> dict[str, float]:
    # Plausible top speeds in traffic (m/s): the gate of a track whose velocity is not known yet (a newborn
    # track from a detector without velocity output: lidar backend, AV2 labels).
    return {"car": 25.0, "truck": 25.0, "bus": 20.0, "trailer": 20.0, "construction_vehicle": 10.0,
            "pedestrian": 3.0, "motorcycle": 30.0, "bicycle": 10.0, "traffic_cone": 1.0, "barrier": 1.0}


def _default_process_noise() -> dict[str, float]:
    # how this value was chosen, measured: docs/reference/tracker-settings.md
    return {"car": 8.0, "truck": 8.0, "bus": 8.0, "trailer": 8.0, "construction_vehicle": 8.0,
            "pedestrian": 8.0, "motorcycle": 8.0, "bicycle": 8.0, "traffic_cone": 8.0, "barrier": 8.0}


class KalmanTrackerConfig(_Model):
    """The online tracker (``actors.track.kalman``; ``tracking.mode: kalman``, and both passes of the offline
    tracker): a constant-velocity Kalman filter per track in the global frame, two-stage association by a
    size-aware Mahalanobis cost, confirmation, coasting. Every time in seconds and every noise per second, so
    2 Hz and 10 Hz logs behave alike. How each default was chosen, with the figures ``bench/tracking.py``
    measures for other values: docs/reference/tracker-settings.md."""

    process_noise: dict[str, float] = Field(default_factory=_default_process_noise)
    """Process noise per class (m^2/s^3): the power spectral density of the white-noise acceleration of the
    constant-velocity model (the velocity variance grows by it per second); unknown classes take the largest."""
    position_std_m: float = Field(0.3, gt=0)
    """Centre measurement noise std (m): position_std_m and position_std_size_frac x the box's BEV diagonal,
    added in quadrature (a detected centre errs more on larger boxes)."""
    position_std_size_frac: float = Field(0.1, ge=0)
    velocity_std_mps: float = Field(0.5, gt=0)
    """Detector velocity measurement noise std (m/s), where the detector gives velocities."""
    birth_velocity_std_mps: float = Field(15.0, gt=0)
    """Velocity std of a newborn track without detector velocity (m/s), which gates its second detection, where
    the tracker's frame moves with the ego (no poses); in the ground frame the std whose gate holds the class's
    plausible speed (``max_speed_mps`` / sqrt(gate_chi2)), at most this."""
    size_std_frac: float = Field(0.1, gt=0)
    """Size (log l, w, h) and yaw filters: measurement noise std and random-walk process noise per second (a
    box's fitted extent changes as the object turns its side). They shape only coasted boxes."""
    size_process_frac_per_s: float = Field(0.05, ge=0)
    yaw_std_rad: float = Field(0.1, gt=0)
    yaw_process_rad_per_s: float = Field(0.5, ge=0)
    gate_chi2: float = Field(13.82, gt=0)
    """Gate on the squared Mahalanobis distance of the centre innovation: 13.82 = 99.9 % of a 2-dof chi-square."""
    high_score: float = Field(0.3, ge=0, le=1)
    """Two-stage association (ByteTrack): detections with score >= high_score are matched to every live track and
    start tracks; lower-scored ones only extend confirmed tracks left unmatched, and never start one. The
    default equals detection.score_threshold, so the second stage only takes detections when the detector's
    threshold is set lower."""
    confirm_hits: int = Field(3, ge=1, le=MAX_COUNT)
    """A track is output once it has confirm_hits matched detections (its earlier boxes are written back); a
    tentative track unmatched for longer than tentative_max_age_s in a frame with detections of its class, or for
    longer than tentative_max_miss_s in any frame the detector saw, is deleted with its boxes. Tentative tracks
    still alive when the scene ends are kept (nothing contradicted them; a one-frame scene keeps its boxes)."""
    tentative_max_age_s: float = Field(0.0, ge=0)
    tentative_max_miss_s: float = Field(0.3, ge=0)
    """Per-class management: a frame without detections of a tentative track's class is evidence against it only
    once it has missed this long (a shorter gap: the detector may just not have seen the class)."""
    coast_output_s: float = Field(1.5, ge=0)
    """A confirmed track unmatched for up to coast_output_s gets boxes in the frames it missed: on the smoothed
    path when a later match bridges the gap, its prediction after its last match for up to coast_trailing_s;
    their score is the last matched score halved every coast_score_half_life_s."""
    coast_trailing_s: float = Field(0.0, ge=0)
    coast_score_half_life_s: float = Field(0.5, gt=0)
    coast_min_hit_ratio: float = Field(0.0, ge=0, le=1)
    """Track quality: a confirmed track coasts (gets boxes in the frames it missed) only while its matched
    detections are at least this share of the frames it has lived through (0: off)."""


class OfflineTrackerConfig(_Model):
    """The offline tracker (``actors.track.offline``, ``tracking.mode: offline``, the default): the online tracker
    run forwards and backwards, the tracklets both agree on linked over the whole log, each track smoothed (RTS),
    sized and scored as a whole. It reads the motion and noise model of ``tracking.kalman`` (``process_noise``,
    ``position_std_m``, ``position_std_size_frac``, ``size_std_frac``) and the class speeds of
    ``tracking.max_speed_mps``. Figures quoted are ``python bench/tracking.py``: KITTI sAMOTA / MOTA at 3D IoU
    0.25 (PointRCNN, five shared val sequences) and the AV2 cases."""

    both_directions: bool = True
    """Link two boxes only where the online tracker makes them consecutive in a track both forwards and backwards
    (False: the forward pass alone)."""
    link_max_gap_s: float = Field(2.0, ge=0, le=MAX_SPAN_S)
    """The longest gap between two tracklets that a link may bridge."""
    link_gate_prob: float = Field(0.99, gt=0, lt=1)
    """The chi-square quantile of a link's gate: the squared Mahalanobis distance between the first tracklet's end
    state predicted over the gap and the second's start state (position and velocity, 4 degrees of freedom) plus
    the log-size difference (3)."""
    link_velocity_std_mps: float = Field(4.0, gt=0)
    link_min_boxes: int = Field(3, ge=1, le=10_000)
    """Only tracklets of link_min_boxes boxes or more, whose smoothed velocity at the end is known to
    link_velocity_std_mps, are linked (a tracklet of one or two boxes, whose velocity is a guess, matches anything
    within metres: it stays apart and is scored as a short track). A gap the two passes bridged is kept only with
    link_min_boxes boxes of the tracklet on each side."""
    static_speed_mps: float = Field(0.5, ge=0)
    """A tracklet end whose smoothed speed is under this is static: between two static ends a link (or a gap the
    online passes bridged) stands only where the two places agree within their own uncertainty, where the log's
    poses move (issue #53: a track switched between two parked bicycles 0.75 m apart)."""
    rigid_classes: list[str] = Field(default_factory=lambda: [c for c in DETECTION_CLASSES if c != "pedestrian"])
    """Classes whose tracks take one size, the median of their detections' (a pedestrian's box changes as they
    walk)."""
    length_hits: float = Field(2.0, ge=0)
    """Whole-track score = mean detection score x n / (n + length_hits) x (n / frames spanned) ^ hit_ratio_power,
    n the track's detections."""
    hit_ratio_power: float = Field(0.5, ge=0)
    min_track_score: float = Field(0.3, ge=0, le=1)
    min_track_hits: int = Field(3, ge=1, le=10_000)
    """Tracks scoring under min_track_score, or with fewer detections than min_track_hits and not reaching the log's
    first or last frame, are dropped (a detector's one-off false positives have no track to support them, whatever
    their score; an object at the log's edge may go on outside it)."""
    smooth_centres: bool = True
    """Detected boxes take the smoothed centre (False: the detector's)."""
    fill_max_gap_s: float = Field(2.0, ge=0, le=MAX_SPAN_S)
    """Missed frames inside a track get boxes on its smoothed path for gaps up to this long."""

    @field_validator("rigid_classes")
    @classmethod
    def _known(cls, v):
        bad = [c for c in v if c not in DETECTION_CLASSES]
        if bad:
            raise ValueError(f"unknown classes {bad}; known: {list(DETECTION_CLASSES)}")
        return v


class TrackingConfig(_Model):
    mode: Literal["offline", "kalman", "greedy"] = "offline"
    """'offline': actors.track.offline, the whole log in both directions (default: a dataset is made after the
    fact); 'kalman': actors.track.kalman, the online tracker (each frame sees only the past: for streaming, and the
    offline tracker's passes); 'greedy': CenterPoint's closest-point tracker (actors.track.pubtracker), fields
    marked "greedy" below."""
    offline: OfflineTrackerConfig = Field(default_factory=OfflineTrackerConfig)
    kalman: KalmanTrackerConfig = Field(default_factory=KalmanTrackerConfig)
    score_map: list[tuple[float, float]] | None = None
    """Score calibration, for every tracker. A tracker reads a detection's score as the chance that the box is a
    real object: the online tracker starts tracks from ``kalman.high_score`` up and lets lower ones only extend a
    confirmed track, coasted boxes take the last matched score decayed, and the offline tracker's whole-track
    score is a mean of them. The labels backend and mmdet3d's CenterPoint give such scores in [0, 1]. For a
    detector whose scores mean something else (logits, another range, over-confident), give knots ``[[detector
    score, tracker score], ...]``, the detector scores increasing, the tracker scores non-decreasing in [0, 1]; in
    between it is linear, outside it the end knots hold (PointRCNN's scores are logits: the logistic function at
    knots, bench/tracking.py). The online tracker's detected boxes keep their own scores; the offline tracker's
    boxes take their track's score. None: scores as given."""
    gates_mps: dict[str, float] = Field(default_factory=_default_gates)
    """Greedy: max centre distance per second; both modes: the linking distance limit (LinkingConfig)."""
    max_speed_mps: dict[str, float] = Field(default_factory=_default_max_speeds)
    """Both modes, the gate of a track whose velocity is not known yet (greedy: its distance; kalman: its newborn
    velocity std, in the ground frame)"""
    max_age_s: float = Field(1.5, gt=0)
    """Both modes: a track unseen for longer is deleted (coast up to 3 nuScenes keyframes)."""
    min_hits: int = Field(1, ge=1, le=MAX_COUNT)
    """both modes: tracks with fewer boxes are dropped after linking"""
    velocity_from_track: Literal["missing", "always", "never"] = "missing"
    linking: LinkingConfig = Field(default_factory=LinkingConfig)
    min_gate_m: float = Field(1.0, ge=0)
    """Greedy: floor of the per-frame gate (m): box-centre noise does not shrink with the frame interval. At 2 Hz
    it only raises the cone/barrier gates (0.5 -> 1 m); at 10 Hz it keeps every class matchable (pedestrian 2
    m/s -> 0.2 m per frame otherwise). Measured on the AV2 log with 0.2 m centre noise: 1301 ID switches at
    0.5 m, 17 at 1.0 m. Both modes: the floor of the linking distance limit."""
    velocity_window_s: float = Field(0.5, gt=0)
    """Track velocity = least-squares slope of the global centre over the track's boxes within +-window (0.5 s: a
    central difference at 2 Hz, +-5 frames at 10 Hz)."""
    filter_position_gain: float = Field(0.5, gt=0, le=1)
    """Greedy, detectors without velocity output: each track runs an alpha-beta filter (position gain, velocity
    gain) so noisy centres at 10 Hz do not turn into noisy predicted positions."""
    filter_positions: bool = True
    """Greedy: also filter track positions when the detector gives velocities (CenterPoint keeps the raw last
    detection)."""
    filter_velocity_gain: float = Field(0.1, gt=0, le=2)
    heading_from_motion: bool = True
    """Boxes whose detector gives no velocity (the lidar L-shape fit: yaw known modulo pi only) take the heading
    their track moves in once its speed reaches the threshold; tracks that never do keep one orientation
    throughout (actors.track.heading). Annotations (instance_token set) are never changed."""
    heading_from_motion_min_speed_mps: float = Field(1.0, gt=0)
    heading_from_motion_min_duration_s: float = Field(1.0, ge=0)
    """... held without reversing over boxes spanning this long; keep it >= 2 * velocity_window_s (one jump of a
    fitted box centre fakes a speed over less than two windows)."""

    @field_validator("score_map")
    @classmethod
    def _monotone_map(cls, v):
        if v is None:
            return v
        x, y = [k[0] for k in v], [k[1] for k in v]
        if (len(v) < 2 or any(b <= a for a, b in zip(x, x[1:])) or any(b < a for a, b in zip(y, y[1:]))
                or min(y) < 0 or max(y) > 1):
            raise ValueError(f"score_map: at least two knots [detector score, tracker score], the detector scores "
                             f"strictly increasing, the tracker scores non-decreasing in [0, 1]; got {v}")
        return v


# segmentation.sam2.decode_prompts 'auto' on a GPU: the cap measured fastest on an H100 (bench/gpu.py part 0).
SAM2_GPU_DECODE_PROMPTS = 32
MAX_DECODE_PROMPTS = 4096


class Sam2Config(_Model):
    model_config_name: str = "configs/sam2.1/sam2.1_hiera_l.yaml"
    checkpoint: str | None = None
    """None = random weights (tests only)"""
    device: str = "auto"
    batch_images: int = Field(6, ge=1, le=MAX_POOL)
    decode_prompts: int | Literal["auto"] = "auto"
    """0 = one mask-decoder call per image, as SAM2ImagePredictor makes it. N > 0 = the box prompts of an encoder
    batch's images decoded together, at most N per call: one kernel chain per batch instead of one per image.
    Each prompt carries its image's features (~12 MB at fp32). 'auto' = SAM2_GPU_DECODE_PROMPTS on a GPU, 0 on
    the CPU, as measured by bench/gpu.py part 0 (hiera-t, 21 prompts per frame): on an H100 30.1 ms of
    decoding per frame with 0, 14.1 ms with 32 (+0.55 GiB peak); on the 2-core CPU 1,429 ms with 0, 2,041 ms
    with 32."""
    precision: Precision = "auto"
    """arithmetic of the encoder and decoder (``Precision``): 'auto' = bfloat16 autocast on a GPU, as SAM 2's
    README and notebooks run it on CUDA, float32 on the CPU"""

    @field_validator("decode_prompts", mode="before")
    @classmethod
    def _decode_prompts_auto_or_cap(cls, v):
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_DECODE_PROMPTS):
            return v
        raise ValueError(f"must be 'auto', 0 (one decoder call per image) or a positive prompt cap of at most "
                         f"{MAX_DECODE_PROMPTS} (each prompt carries its image's features, ~12 MB)")

    def decode_prompts_on(self, device_type: str) -> int:
        """The prompt cap of one mask-decoder call on a torch device type ('cuda', 'cpu'); 0 = one call per image."""
        if self.decode_prompts != "auto":
            return int(self.decode_prompts)
        return SAM2_GPU_DECODE_PROMPTS if device_type == "cuda" else 0


class CpuSegmenterConfig(_Model):
    dilate_px: int = Field(3, ge=0, le=256)
    """margin grown around the hull of the object's projected LiDAR points (a kernel of 2n + 1 px a side)"""
    close_px: int = Field(15, ge=0, le=256)
    """closing kernel applied to a GrabCut-refined mask"""
    grabcut_iterations: int = Field(0, ge=0, le=50)
    """0 = LiDAR hull + margin only (see actors/segment/cpu.py); OpenCV's examples run 1-5 iterations, each a
    graph cut of the object's box: 50 at most"""


class SegmentationConfig(_Model):
    backend: Literal["cpu", "sam2"] = "cpu"
    cameras: list[str] = Field(default_factory=lambda: list(NUSCENES_CAMERAS))
    sam2: Sam2Config = Field(default_factory=Sam2Config)
    cpu: CpuSegmenterConfig = Field(default_factory=CpuSegmenterConfig)


class VisibilityConfig(_Model):
    """STRIDE-QA §4.2: keep when box IoU > 0.3, coverage > 0.8 and mask IoU score > 0.8."""

    box_iou_min: float = Field(0.3, ge=0, le=1)
    coverage_min: float = Field(0.8, ge=0, le=1)
    mask_score_min: float = Field(0.8, ge=0, le=1)
    min_lidar_points: int = Field(1, ge=0, le=MAX_COUNT)
    min_box_area_px: float = Field(16.0, ge=0)
    min_depth_m: float = Field(0.1, ge=0)
    """a box is "in front of" a camera when one of its corners is at least this far along the optical axis
    (points closer than 0.1 m project unstably; chosen here, boundary-tested in tests/perception/test_visibility.py)"""


class ToleranceConfig(_Model):
    """STRIDE-QA App. C.3 success tolerances."""

    distance_rel: float = Field(0.25, gt=0)
    bearing_deg: float = Field(10.0, gt=0)
    speed_rel: float = Field(0.2, gt=0)
    speed_abs_mps: float = Field(0.5, gt=0)
    speed_abs_below_mps: float = Field(1.0, ge=0)


class RelationMargins(_Model):
    """Qualitative relations are not asked when the margin is below these: the answer would be a coin flip of
    detection noise (e.g. two objects 0.2 m apart laterally for left/right). Chosen here: about the centre
    noise of a good 3D detector (mATE ~0.3 m on nuScenes) and of box sizes (~0.1 m); volume as a ratio."""

    lateral_m: float = Field(0.5, ge=0)
    """object_spatial left_of: |y_A - y_B|"""
    longitudinal_m: float = Field(0.5, ge=0)
    """object_spatial in_front_of: |x_A - x_B|"""
    volume_ratio: float = Field(1.1, ge=1)
    """object_spatial bigger: max(V_A/V_B, V_B/V_A)"""
    height_m: float = Field(0.1, ge=0)
    """object_spatial taller"""
    width_m: float = Field(0.1, ge=0)
    """object_spatial wider"""
    vertical_m: float = Field(0.3, ge=0)
    """object_spatial above: |z_A - z_B| of the box centres"""
    range_m: float = Field(0.5, ge=0)
    """object_spatial closer: | |A| - |B| |, distances from the ego origin"""
    ego_lateral_m: float = Field(0.5, ge=0)
    """ego_spatial left_right: |y|"""
    ego_longitudinal_m: float = Field(0.5, ge=0)
    """ego_spatial front_behind: how far the box's ends are from the ego's bumpers along x (in front / beside /
    behind, ``generator.attributes.compute.along_ego``)"""


class QAConfig(_Model):
    families: list[str] = Field(default_factory=lambda: list(qa_family_names()), min_length=1)
    """the QA families to generate (default: every registered paper family's, ``schemas.families``; checked
    against the registry before a run)"""
    template_dirs: list[str] = Field(default_factory=list)
    """extra/override YAML template folders"""
    seed: Seed = 42
    horizons_s: list[float] = Field(default_factory=lambda: [0.0, 1.0, 2.0, 3.0], min_length=1)
    front_camera: str = "CAM_FRONT"
    """preferred; see generator.types.front_camera for the fallback rule"""
    max_objects_per_keyframe: int = Field(12, ge=1, le=1000)
    """(pair questions consider every pair of them: 1000 objects are half a million pairs)"""
    max_pairs_per_keyframe: int = Field(20, ge=0, le=100_000)
    decimals: int = Field(2, ge=0, le=6)
    relation_margins: RelationMargins = Field(default_factory=RelationMargins)
    val_fraction: float = Field(0.1, ge=0, le=1)

    @field_validator("families")
    @classmethod
    def _unique_families(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"families repeat: {v}")
        return v

    @field_validator("horizons_s")
    @classmethod
    def _horizons(cls, v: list[float]) -> list[float]:
        bad = [h for h in v if not (h == h and 0 <= h <= 60)]
        if bad:
            raise ValueError(f"horizons must be seconds in [0, 60] after the keyframe, got {bad}")
        if list(v) != sorted(set(v)):
            raise ValueError(f"horizons must be increasing without repeats, got {v}")
        return v


class LabelsConfig(_Model):
    """Behaviour labels (``generator.attributes.labels``): ego maneuver and speed status (Intention-Drive's
    atomic vocabulary), VRU intent (DRAMA-X's lateral x vertical), future waypoints. No paper fixes the
    maneuver thresholds: these are chosen here and checked against the scripted maneuvers of the
    generated logs (tests/attributes/test_labels_generated.py)."""

    maneuver_window_s: float = Field(7.0, gt=0)
    """Chosen on 18 generated scenes of seeds 0-2 (720 frames): 96.8 % agree with the scripted maneuver (93.5 %
    with W 6 s, 8 deg/s and no heading bound); tests/attributes/test_labels_generated.py asserts >= 95 % on seed 1. W:
    poses in [t - W/2, t + W/2] decide the maneuver at t"""
    min_window_s: float = Field(1.0, gt=0)
    """no label with less of the window inside the log"""
    stop_speed_mps: float = Field(0.5, ge=0)
    """Stop below this planar speed"""
    turn_window_s: float = Field(1.0, gt=0)
    """the yaw rate "now" is taken over this"""
    turn_rate_deg_s: float = Field(15.0, gt=0)
    """Turn: at least this yaw rate now ..."""
    turn_min_heading_deg: float = Field(20.0, gt=0)
    """... and this heading change over W"""
    lane_change_m: float = Field(0.9, gt=0)
    """Change Lane: end point this far beside the chord and start heading"""
    lane_change_max_heading_deg: float = Field(8.0, gt=0)
    """... with a net heading change over W of at most this (a lane change turns out and back; a window with more
    reaches into a turn: without it, windows at a turn's ends read as lane changes)"""
    accel_half_window_s: float = Field(0.5, gt=0)
    """speed status: a = (v(t+h) - v(t-h)) / 2h"""
    accel_mps2: float = Field(0.5, gt=0)
    """|a| at least this: Accelerate / Decelerate"""
    intent_horizon_s: float = Field(1.0, gt=0, le=MAX_SPAN_S)
    """VRU intent from the displacement over this"""
    intent_speed_mps: float = Field(0.3, gt=0)
    """a component faster than this is a direction, else stationary"""
    num_waypoints: int = Field(6, ge=1, le=200)
    """Intention-Drive §4: 6 future waypoints ..."""
    waypoint_step_s: float = Field(0.5, gt=0, le=MAX_SPAN_S)
    """... 0.5 s apart (3 s)"""


class EgoBodyConfig(_Model):
    """The ego vehicle's body in its own frame (nuScenes and AV2: origin at the rear axle, x forward): what the
    Intention-Drive collision check sweeps, DRAMA-X's corridor is made of and ego_spatial's in front / beside /
    behind is measured against. A run whose config leaves this section out takes its logs' vehicle
    (``generator.sources.vehicles``: nuScenes' Renault Zoe 4.084 x 1.730 m, centre 1.385 m ahead of the rear
    axle; Argoverse 2's Ford Fusion Hybrid 4.869 x 1.852 m, 1.339 m) and writes it into its config.yaml.
    Defaults: the generated logs' ego (``generator.synth.rig`` EGO_SIZE_LWH_M, EGO_CENTER_OFFSET_X_M), a
    mid-size car."""

    length_m: float = Field(4.9, gt=0)
    width_m: float = Field(2.0, gt=0)
    center_offset_m: float = 1.4
    """the box centre is this far ahead of the origin"""

    @property
    def front_m(self) -> float:
        """Origin -> front bumper."""
        return self.center_offset_m + self.length_m / 2

    @property
    def rear_m(self) -> float:
        """Origin -> rear bumper."""
        return self.length_m / 2 - self.center_offset_m


class WdsConfig(_Model):
    """WebDataset samples (``generator.writers.wds``)."""

    marked_images: bool = False
    """beside each raw frame, a Set-of-Mark copy (``<frame>.<camera>.marked.jpeg``) with the ``Region [X]``
    marks, masks and 2D boxes of the keyframe's groundings drawn (``generator.writers.marks.draw_marks``)"""


class WriterConfig(_Model):
    wds: WdsConfig = Field(default_factory=WdsConfig)
    parquet_max_rows: int = Field(200_000, ge=1, le=100_000_000)
    parquet_max_bytes: int = Field(256 * 1024 * 1024, ge=1024, le=64 << 30)
    wds_max_samples: int = Field(1000, ge=1, le=MAX_COUNT)
    """WebDataset: keyframe samples per tar shard"""
    wds_max_bytes: int = Field(1024 * 1024 * 1024, ge=1024, le=64 << 30)
    """and bytes per tar shard"""
    webdataset: bool = True
    card: bool = True
    compression: str = "zstd"
    """QA shards (the dataset): a Parquet codec pyarrow has"""
    cache_compression: str = "snappy"
    """the run folder's perception, attribute and label tables: caches that regenerate, export and validate
    read back, so decode speed matters more than size (snappy decodes ~35 % faster than zstd)"""
    qa_statistics_columns: list[str] = ["scene_id", "split", "keyframe_index", "timestamp_us", "family", "kind",
                                        "question_type", "template_id", "value", "unit", "horizon_s",
                                        "out_of_view"]
    """Parquet min/max statistics on these QA columns only (what readers filter on); statistics of long texts and
    groundings cost write time and no reader uses them"""

    @model_validator(mode="after")
    def _qa_columns(self):
        unknown = [c for c in self.qa_statistics_columns if c not in QA.names]
        if unknown:
            raise ValueError(f"qa_statistics_columns: {unknown} are not QA columns; known: {QA.names}")
        return self

    @field_validator("compression", "cache_compression")
    @classmethod
    def _codec(cls, v: str) -> str:
        known = ("none", "snappy", "gzip", "brotli", "lz4", "zstd")
        if v not in known or (v != "none" and not pa.Codec.is_available(v)):
            raise ValueError(f"unknown or unavailable Parquet compression {v!r}; use one of "
                             f"{[c for c in known if c == 'none' or pa.Codec.is_available(c)]}")
        return v


class AnonymizeConfig(_Model):
    """Privacy before release (STRIDE-QA App. A.4: faces and licence plates blurred, "all identifiable timestamp
    metadata" removed while the frame order is kept). Applied to every image that leaves the pipeline (WebDataset
    shards, the STRIDE-QA-Bench export, ``generator.writers.anonymize.publish_image`` for reports) and to the
    metadata written beside them. The paper uses Dashcam Anonymizer (a YOLO model); drivegen uses detectors
    that ship with OpenCV (Haar cascades in ``cv2.data.haarcascades``), run only inside candidate regions
    that the 3D boxes give: heads at the top of pedestrian boxes, plates on the front and rear faces of
    vehicle boxes. Values below were chosen here and measured on generated logs (docs/operations/anonymisation.md,
    ``python bench/anonymize.py``; tests/writers/test_anonymize.py)."""

    faces: bool = True
    plates: bool = True
    strip_timestamps: bool = True
    """timestamps in published metadata: WebDataset JSON ``timestamp_us`` keys are removed, and the source image
    paths (nuScenes file names carry the log's date and the capture time in microseconds) with them; frame
    order stays in ``frame_index`` / ``keyframe_index``"""
    face_classes: list[str] = Field(default_factory=lambda: ["pedestrian", "bicycle", "motorcycle"])
    """classes whose boxes give candidate regions (nuScenes detection classes); cyclists and motorcyclists are
    inside their vehicle's box (nuScenes annotates the rider with the cycle), so their heads are candidates
    too"""
    plate_classes: list[str] = Field(default_factory=lambda: ["car", "truck", "bus", "trailer",
                                                                "construction_vehicle", "motorcycle"])
    head_share: float = Field(0.25, gt=0, le=1)
    """head: the top ``head_share`` of a pedestrian box's height (an adult's head is ~0.23 m of 1.75 m = 0.13;
    doubled for box and pose error), projected with the whole box width"""
    plate_width_share: float = Field(0.6, gt=0, le=1)
    """plate: a band on the front and rear faces, centred across, ``plate_width_share`` of the box width wide
    (EU/US plates are 0.52/0.30 m of a 1.8 m wide car: 0.29/0.17; wider for position error) and between these
    heights above the box bottom (plates sit 0.3-1.2 m above the road on cars, trucks and buses)"""
    plate_z_m: tuple[float, float] = (0.15, 1.3)
    cascade_min_region_px: int = Field(8, ge=1, le=MAX_IMAGE_PX)
    """a candidate smaller than this many pixels on its short side is too small for a cascade (the face cascade's
    window is 24x24, the plate cascade's 60x20 after upscaling): the undetected policy applies directly"""
    cascade_upscale_to_px: int = Field(64, ge=16, le=1024)
    """candidates are upscaled to at least this many pixels on their short side before the cascade runs (the
    cascades' windows are 24-60 px; a region upscaled past 1024 px costs time and finds nothing more)"""
    face_cascade: str = "haarcascade_frontalface_default.xml"
    plate_cascade: str = "haarcascade_russian_plate_number.xml"
    scale_factor: float = Field(1.1, gt=1.0)
    """cv2.CascadeClassifier.detectMultiScale parameters (OpenCV's documented defaults 1.1 and 3)"""
    min_neighbors: int = Field(3, ge=0, le=1000)
    undetected: Literal["region", "none"] = "region"
    """what to blur when the cascade finds nothing inside a candidate: 'region' blurs the whole candidate (safety
    first: a face the cascade misses is still blurred; the cost is blur outside faces and plates), 'none'
    blurs only detections"""
    blur_kernel_share: float = Field(0.5, gt=0, le=2)
    """Gaussian blur kernel side as a share of the blurred rectangle's longer side (odd, at least 3 px), and the
    margin added around each detection as a share of its size (0.15 left 0.5-2.6 % of the painted face pixels
    unblurred where the cascade boxed part of a face; 0.3 leaves none: bench/anonymize.py)"""
    detection_margin_share: float = Field(0.3, ge=0, le=1)
    jpeg_quality: int = Field(95, ge=1, le=100)
    """JPEG quality of re-encoded (blurred) images; images without a blurred region are passed on byte for byte"""

    @field_validator("plate_z_m")
    @classmethod
    def _band(cls, v):
        if not (0 <= v[0] < v[1]):
            raise ValueError("plate_z_m must be (low, high) metres with 0 <= low < high")
        return v

    @field_validator("face_classes", "plate_classes")
    @classmethod
    def _classes(cls, v):
        unknown = sorted(set(v) - set(DETECTION_CLASSES))
        if unknown:
            raise ValueError(f"unknown detection classes {unknown}; known: {list(DETECTION_CLASSES)}")
        return v


class ReportConfig(_Model):
    """The static HTML report (``drivegen report``, ``generator.report``). Chosen here to keep a report
    quick to build and to open on a large run: every page has a bounded size, whatever the run's."""

    seed: Seed = 0
    """the sample browser's rows are drawn per family with this seed"""
    samples_per_family: int = Field(12, ge=1, le=10_000)
    """QA rows shown per family (drawn without replacement)"""
    rows_per_page: int = Field(6, ge=1, le=1000)
    """QA rows per sample-browser page"""
    max_table_rows: int = Field(200, ge=1, le=100_000)
    """rows of the errors table and of the per-type counts shown"""
    max_scenes: int = Field(50, ge=1, le=10_000)
    """scenes with a bird's-eye plot (the first ones, sorted by id)"""
    image_width_px: int = Field(640, ge=64, le=MAX_IMAGE_PX)
    """keyframe images are scaled down to at most this width"""
    thumb_width_px: int = Field(200, ge=32, le=MAX_IMAGE_PX)
    """context and future frames"""
    jpeg_quality: int = Field(80, ge=10, le=100)
    on_run: bool = True
    """``drivegen run`` ends by writing the report"""


def _whole_gpus_above_one(v: float | None) -> float | None:
    """Ray places a fractional GPU request on one device and a larger one on whole devices only."""
    if v is not None and v > 1 and v != int(v):
        raise ValueError("num_gpus above 1 must be a whole number of GPUs (Ray's rule)")
    return v


class StageActorsConfig(_Model):
    """One model stage's actor pool (``ray.stage_actors.<stage>``), over the defaults of ``ray``. A stage slower
    than the others gets more actors, e.g. ``perceive: {pool_size: 2}`` beside ``detect: {pool_size: 1}``, each
    actor on a GPU of its own. Fractional ``num_gpus`` put several actors on one device (Ray places a fractional
    request on one GPU); on an H100, CenterPoint and SAM sharing one GPU gained nothing over running in turn,
    while two SAM actors sharing one carried 9-20 % more than one (docs/changelog.md)."""

    pool_size: int | None = Field(None, ge=1, le=MAX_POOL)
    """a fixed pool of this many actors (min_size = max_size); None: ray.actor_pool_size, or the bounds below"""
    min_size: int | None = Field(None, ge=1, le=MAX_POOL)
    """an elastic pool: Ray Data adds actors while scenes queue for the stage and resources are free, up to
    max_size, and removes idle ones down to min_size. None: pool_size (or ray.actor_pool_size)"""
    max_size: int | None = Field(None, ge=1, le=MAX_POOL)
    """None: derived from the cluster: for a stage on GPUs as many actors as the GPUs the other model stages'
    minimum pools leave can hold at its GPU share (never below min_size); for a CPU actor stage, min_size"""
    num_gpus: float | None = Field(None, ge=0)
    """None: ray.actor_num_gpus; above 1 a whole number (Ray's rule)"""
    num_cpus: float | None = Field(None, gt=0)
    """None: ray.actor_num_cpus"""

    @field_validator("num_gpus")
    @classmethod
    def _whole_gpus(cls, v):
        return _whole_gpus_above_one(v)

    @model_validator(mode="after")
    def _bounds(self):
        if self.pool_size is not None and (self.min_size is not None or self.max_size is not None):
            raise ValueError("give pool_size (a fixed pool) or min_size/max_size (an elastic one), not both")
        if self.min_size is not None and self.max_size is not None and self.max_size < self.min_size:
            raise ValueError(f"max_size ({self.max_size}) is below min_size ({self.min_size})")
        return self


class RayConfig(_Model):
    address: str | None = None
    """None = embedded local Ray; 'auto' or host:port joins a cluster"""
    num_cpus: int | None = Field(None, ge=1, le=100_000)
    cpu_stage_num_cpus: float = Field(1.0, gt=0)
    actor_num_cpus: float = Field(0.5, gt=0)
    """fractional: whole-CPU actors starve the read stage on 2 CPUs; one thread (Ray's cap at floor(CPUs), at
    least 1) ran SAM on an H100 as fast as seven (docs/changelog.md)"""
    actor_num_gpus: float = Field(1.0, ge=0)
    """used only when the cluster has GPUs"""
    actor_pool_size: int = Field(1, ge=1, le=MAX_POOL)
    stage_actors: dict[str, StageActorsConfig] = Field(default_factory=dict)
    """per model stage (schemas.vocab.MODEL_STAGES): its pool size and shares, over the three defaults above"""
    max_retries: int = Field(2, ge=0, le=100)
    scenes_in_flight: int = Field(4, ge=1, le=MAX_POOL)
    allow_unauthenticated: bool = False
    """The opt-out of authentication: start the embedded Ray although ``RAY_AUTH_MODE=disabled`` in the environment
    turns its token authentication off, with a warning on every run. Anyone who reaches its ports (every user of
    this machine; every host, with ``--metrics-host 0.0.0.0``) can then run code as you. Without it such a run is
    refused before anything is written, as is any ``RAY_AUTH_MODE`` but ``token`` or ``disabled``
    (``generator.pipeline.ray_connect``)."""
    model_stages: Literal["auto", "actors", "tasks"] = "auto"
    """Where the model stages (detection, segmentation) run: 'auto' = actor pools for the model backends
    (mmdet3d, sam2) and tasks for the CPU ones; 'actors' / 'tasks' force one way for every backend."""

    @field_validator("actor_num_gpus")
    @classmethod
    def _whole_gpus(cls, v):
        return _whole_gpus_above_one(v)

    @field_validator("stage_actors")
    @classmethod
    def _model_stages_only(cls, v):
        unknown = sorted(set(v) - set(MODEL_STAGES))
        if unknown:  # a typo would otherwise be ignored silently
            raise ValueError(f"unknown stage(s) {unknown}; model stages are {list(MODEL_STAGES)}")
        return v


class FailureConfig(_Model):
    """When a scene is failed rather than finished with gaps (no silent partial scenes)."""

    max_failed_frame_share: float = Field(0.1, ge=0, le=1)
    """frames a stage could not read or run (detector input, LiDAR for visibility, a camera image), as a share of
    the scene's frames per stage: above it the scene fails with an errors row naming a file; at or below it
    the scene finishes and its skipped frames are listed in issues/<scene>.parquet"""


class PipelineConfig(_Model):
    """The root config: the core's sections below, then one section per registered paper family
    (``schemas.families.config_sections``: ``cfg.drama_x``, ``cfg.pie``, ...), each validated by the family's
    model and written after the core's in ``config.yaml``. An unknown top-level key is refused as any
    misspelt field is."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, frozen=False)

    version: Literal[1] = 1
    keyframes: KeyframeConfig = Field(default_factory=KeyframeConfig)
    sources: SourceLimitsConfig = Field(default_factory=SourceLimitsConfig)
    detection: DetectionConfig = Field(default_factory=DetectionConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    segmentation: SegmentationConfig = Field(default_factory=SegmentationConfig)
    visibility: VisibilityConfig = Field(default_factory=VisibilityConfig)
    ego: EgoBodyConfig = Field(default_factory=EgoBodyConfig)
    labels: LabelsConfig = Field(default_factory=LabelsConfig)
    qa: QAConfig = Field(default_factory=QAConfig)
    tolerances: ToleranceConfig = Field(default_factory=ToleranceConfig)
    writers: WriterConfig = Field(default_factory=WriterConfig)
    anonymize: AnonymizeConfig = Field(default_factory=AnonymizeConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)
    failures: FailureConfig = Field(default_factory=FailureConfig)
    ray: RayConfig = Field(default_factory=RayConfig)

    @model_validator(mode="wrap")
    @classmethod
    def _family_sections(cls, data, handler):
        """Validate the registered families' sections with their models (defaults where absent) beside the
        core's fields; every error (core, family, unknown key) is reported with its full location."""
        if not isinstance(data, dict):
            return handler(data)
        data = _move_settings(data, moved_settings())
        sections = config_sections()
        errors: list[Any] = []  # pydantic's InitErrorDetails dicts
        values: dict[str, BaseModel] = {}
        for key in data:
            if key not in cls.model_fields and key not in sections:
                errors.append({"type": "extra_forbidden", "loc": (key,), "input": data[key]})
        for name, model in sections.items():
            raw = data.get(name)
            if isinstance(raw, model):
                values[name] = raw
                continue
            try:
                values[name] = model.model_validate({} if raw is None else raw)
            except ValidationError as err:
                errors += [{k: v for k, v in {"type": e["type"], "loc": (name, *e["loc"]), "input": e.get("input"),
                                               "ctx": e.get("ctx")}.items() if v is not None or k == "input"}
                           for e in err.errors()]
        out = None
        try:
            out = handler({k: v for k, v in data.items() if k in cls.model_fields})
        except ValidationError as err:
            errors = [dict(e) for e in err.errors()] + errors
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        for name, value in values.items():
            setattr(out, name, value)
        return out

    def to_yaml(self) -> str:
        # libyaml's emitter when PyYAML has it: the same text (checked by tests/schemas/test_config.py) in a quarter of
        # the time (30 ms of a regeneration's fixed cost otherwise)
        return yaml.dump(self.model_dump(mode="json"), Dumper=_YAML_DUMPER, sort_keys=False)


def _section(data: dict, dotted: str, create: bool = False) -> tuple[dict | None, str]:
    """(the mapping that holds ``dotted``'s last key, that key); None when a section on the way is not a
    mapping (or absent and not ``create``d)."""
    *head, last = dotted.split(".")
    node: Any = data
    for part in head:
        if create and node.get(part) is None:
            node[part] = {}
        node = node.get(part)
        if not isinstance(node, dict):
            return None, last
    return node, last


def _move_settings(data: dict, moved: dict[str, str]) -> dict:
    """``data`` with each setting an earlier drivegen kept at an old dotted key moved to its new key (the
    new key wins when both are given; nothing is copied when no old key is there)."""
    def given(dotted: str) -> bool:
        node, key = _section(data, dotted)
        return node is not None and key in node

    found = [(old, new) for old, new in moved.items() if given(old)]
    if not found:
        return data
    data = copy.deepcopy(data)
    for old, new in found:
        node, key = _section(data, old)
        assert node is not None  # (given(old) found it)
        value = node.pop(key)
        target, key = _section(data, new, create=True)
        if target is not None:  # (a malformed section: its own validation reports it)
            target.setdefault(key, value)
    return data


_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
MAX_CONFIG_BYTES = 1 << 20  # a config is a few kB; refuse anything that could not be one
_SHOWN_INPUT_CHARS = 120  # an error quotes at most this much of the offending value


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_INPUT_CHARS else f"{text[:_SHOWN_INPUT_CHARS]}... ({len(text)} chars)"


def _known_keys(loc: tuple) -> list[str]:
    """The keys the config accepts beside the one at ``loc`` (its parent section's fields)."""
    model = PipelineConfig
    fields = {**model.model_fields, **config_sections()}
    for part in loc[:-1]:
        sub = fields.get(part)
        ann = sub if isinstance(sub, type) else getattr(sub, "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        fields = dict(ann.model_fields)
    return list(fields)


def _did_you_mean(loc: tuple) -> str:
    """' (did you mean 'x'?)' for a misspelt key with a close known one, else ''."""
    if not loc or not isinstance(loc[-1], str):
        return ""
    close = difflib.get_close_matches(loc[-1], _known_keys(loc), n=1, cutoff=0.75)
    return f"; did you mean '{'.'.join(map(str, (*loc[:-1], close[0])))}'?" if close else ""


def _format_errors(err: ValidationError, where: str) -> str:
    lines = []
    for e in err.errors()[:20]:
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        got = "" if e["type"] == "missing" or isinstance(e.get("input"), dict) else f" (got {_shown(e.get('input'))})"
        hint = _did_you_mean(tuple(e["loc"])) if e["type"] == "extra_forbidden" else ""
        broken = broken_named(str(e["loc"][0])) if e["type"] == "extra_forbidden" and len(e["loc"]) == 1 else None
        if broken is not None:
            hint = f"; it is the section of the paper family {broken.line()}, which could not be loaded"
        lines.append(f"{where}: field '{loc}': {e['msg']}{got}{hint}")
    more = err.error_count() - 20
    return "invalid config\n  " + "\n  ".join(lines) + (f"\n  ... and {more} more" if more > 0 else "")


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML was built with it (a config parses in milliseconds, the pure-Python parser
takes a tenth of a second: the run's config is read again by every scene's part builder)"""


def _at_line(event) -> str:
    """" (line N)" where the parser marked ``event``, else nothing."""
    mark = event.start_mark
    return f" (line {mark.line + 1})" if mark is not None else ""


def _refuse_aliases(text: str | bytes) -> None:
    """Anchors and aliases refused from the parser's events, before any node is built: a config needs none,
    and nested aliases ("billion laughs") let a kilobyte of YAML stand for gigabytes once validated or
    printed."""
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.YAMLError(f"aliases (*name) are not allowed in a drivegen config{_at_line(event)}")
        if getattr(event, "anchor", None):
            raise yaml.YAMLError(f"anchors (&name) are not allowed in a drivegen config{_at_line(event)}")


_PARSED: dict[str | bytes, PipelineConfig] = {}


def config_from_yaml(text: str | bytes, where: str = "<config>") -> PipelineConfig:
    """A config from YAML text (a file's or a run folder's ``config.yaml``); errors name ``where``. A text parsed
    before in this process gives a deep copy of its config (0.7 ms instead of 12: a run's workers read its
    ``config.yaml`` once per scene part); each call's config is its own to change."""
    hit = _PARSED.get(text)
    if hit is not None:
        return hit.model_copy(deep=True)
    cfg = _parse_yaml(text, where)
    if len(_PARSED) >= 8:
        _PARSED.clear()
    _PARSED[text] = cfg.model_copy(deep=True)
    return cfg


def _parse_yaml(text: str | bytes, where: str) -> PipelineConfig:
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{where}: {len(text)} bytes, larger than any config ({MAX_CONFIG_BYTES} bytes at most)")
    try:
        _refuse_aliases(text)
        data = yaml.load(text, Loader=_LOADER) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: not valid YAML: {_shown(str(err))[1:-1]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: top level must be a mapping, got {type(data).__name__}")
    return parse_config(data, where)


def parse_config(data: dict | None, where: str = "<config>") -> PipelineConfig:
    try:
        return PipelineConfig.model_validate(data or {})
    except ValidationError as err:
        raise ConfigError(_format_errors(err, where)) from None


def load_config(path: str | Path | None = None, overrides: dict | None = None) -> PipelineConfig:
    """Load a YAML config file (None = defaults) and apply nested ``overrides``."""
    if path is None:
        return parse_config(_merge({}, overrides or {}), "<defaults>")
    p = Path(path)
    where = str(p)
    if p.exists() or p.is_symlink():  # a FIFO would block the read, a symlink loop is not a missing file
        try:
            check_regular_file(p, "config file")
        except InputError as err:
            raise ConfigError(err.message, file=where) from None
    try:
        if p.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{where}: {p.stat().st_size} bytes, larger than any config "
                              f"({MAX_CONFIG_BYTES} bytes at most)")
        text = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{where}: config file not found") from None
    except OSError as err:
        raise ConfigError(f"{where}: cannot read the config file: {err.strerror or err}") from None
    if not overrides:
        return config_from_yaml(text, where)
    cfg = config_from_yaml(text, where)
    return parse_config(_merge(cfg.model_dump(mode="json", exclude_unset=True), overrides), where)


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
