"""The pipeline config: YAML -> typed, validated model. Every threshold the papers name lives here,
with the paper's value as default (STRIDE-QA §4.2 and App. C, CenterPoint, DRAMA-X §3.2/App. A.3).

``load_config(path)`` refuses a bad file with a message naming the file and the field.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

DETECTION_CLASSES = ("car", "truck", "bus", "trailer", "construction_vehicle", "pedestrian", "motorcycle",
                     "bicycle", "traffic_cone", "barrier")


class ConfigError(ValueError):
    """A config file or value is invalid; the message names the file and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class KeyframeConfig(_Model):
    """STRIDE-QA §4.2: anchors at 1 Hz from 2-17 s of each clip, context from -2 s to +3 s."""

    rate_hz: float = Field(1.0, gt=0)
    window_start_s: float = Field(2.0, ge=0)
    window_end_s: float = Field(17.0, gt=0)
    context_before_s: float = Field(2.0, ge=0)
    context_after_s: float = Field(3.0, ge=0)
    context_rate_hz: float = Field(2.0, gt=0)  # the four context frames are sampled at 2 Hz
    match_tolerance_s: float = Field(0.06, gt=0)  # max |t_frame - t_wanted| when picking context frames

    @model_validator(mode="after")
    def _window(self):
        if self.window_end_s <= self.window_start_s:
            raise ValueError("window_end_s must be greater than window_start_s")
        return self


class LidarDetectorConfig(_Model):
    max_range_m: float = Field(60.0, gt=0)
    voxel_size_m: float = Field(0.15, ge=0)
    ground_distance_m: float = Field(0.25, gt=0)  # RANSAC plane inlier distance
    ground_ransac_iterations: int = Field(200, ge=10)  # plane hypotheses (seeded numpy RANSAC)
    ground_ransac_points: int = Field(4096, ge=3)  # candidate points each hypothesis is scored on
    ground_max_tilt_deg: float = Field(20.0, gt=0, lt=90)  # steeper plane hypotheses (walls) are rejected
    ransac_seed: int = Field(0, ge=0)  # with a hash of the sweep, seeds the RANSAC: same sweep, same plane
    cluster_eps_m: float = Field(0.7, gt=0)
    cluster_min_points: int = Field(5, ge=1)
    min_box_points: int = Field(8, ge=1)
    ground_cell_m: float = Field(2.0, gt=0)  # BEV cell of the per-cell ground refinement
    ground_cell_tolerance_m: float = Field(0.4, ge=0)  # a cell's lowest point is ground within this of the plane
    max_height_m: float = Field(4.5, gt=0)  # points higher above the ground are ignored (trees, signs)
    ego_half_length_m: float = Field(3.0, ge=0)  # the ego vehicle's own returns are cropped
    ego_half_width_m: float = Field(1.3, ge=0)
    beam_spacing_deg: float = Field(1.33, ge=0)  # vertical beam spacing (nuScenes 32-beam: 1.33): height tolerance


class LabelNoiseConfig(_Model):
    """Seeded noise on ground-truth boxes (robustness studies, validation tests)."""

    center_m: float = Field(0.0, ge=0)  # std of centre noise per axis
    size_frac: float = Field(0.0, ge=0)  # std of relative size noise
    yaw_rad: float = Field(0.0, ge=0)
    velocity_mps: float = Field(0.0, ge=0)
    drop_prob: float = Field(0.0, ge=0, le=1)
    false_positives_per_frame: float = Field(0.0, ge=0)
    score_min: float = Field(0.5, ge=0, le=1)  # noisy boxes get scores in [score_min, 1]
    seed: int = 0


class Mmdet3dConfig(_Model):
    config: str | None = None  # mmdet3d config file (e.g. a CenterPoint or projects/BEVFusion config)
    checkpoint: str | None = None  # .pth path; None builds random weights (tests only)
    device: str = "auto"  # 'auto' = cuda when available, else cpu
    batch_size: int = Field(4, ge=1)
    model_classes: list[str] = Field(default_factory=lambda: list(DETECTION_CLASSES))


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
    short_gap_frames: int = Field(3, ge=0)
    threshold_short_gap: float = Field(0.2, ge=0)
    threshold_long_gap: float = Field(0.3, ge=0)


def _default_max_speeds() -> dict[str, float]:
    # Plausible top speeds in traffic (m/s): the gate of a track whose velocity is not known yet (a newborn
    # track from a detector without velocity output: lidar backend, AV2 labels).
    return {"car": 25.0, "truck": 25.0, "bus": 20.0, "trailer": 20.0, "construction_vehicle": 10.0,
            "pedestrian": 3.0, "motorcycle": 30.0, "bicycle": 10.0, "traffic_cone": 1.0, "barrier": 1.0}


class TrackingConfig(_Model):
    gates_mps: dict[str, float] = Field(default_factory=_default_gates)  # max centre distance per second
    max_speed_mps: dict[str, float] = Field(default_factory=_default_max_speeds)  # gate while velocity unknown
    max_age_s: float = Field(1.5, gt=0)  # coast up to 3 nuScenes keyframes
    min_hits: int = Field(1, ge=1)
    velocity_from_track: Literal["missing", "always", "never"] = "missing"
    linking: LinkingConfig = Field(default_factory=LinkingConfig)
    # Floor of the per-frame gate (m): box-centre noise does not shrink with the frame interval. At 2 Hz it
    # only raises the cone/barrier gates (0.5 -> 1 m); at 10 Hz it keeps every class matchable (pedestrian
    # 2 m/s -> 0.2 m per frame otherwise). Measured on the AV2 log with 0.2 m centre noise: 1301 ID switches
    # at 0.5 m, 17 at 1.0 m.
    min_gate_m: float = Field(1.0, ge=0)
    # Track velocity = least-squares slope of the global centre over the track's boxes within +-window
    # (0.5 s: a central difference at 2 Hz, +-5 frames at 10 Hz).
    velocity_window_s: float = Field(0.5, gt=0)
    # Detectors without velocity output: each track runs an alpha-beta filter (position gain, velocity gain)
    # so noisy centres at 10 Hz do not turn into noisy predicted positions.
    filter_position_gain: float = Field(0.5, gt=0, le=1)
    # Also filter track positions when the detector gives velocities (CenterPoint keeps the raw last detection).
    filter_positions: bool = True
    filter_velocity_gain: float = Field(0.1, gt=0, le=2)
    # Boxes whose detector gives no velocity (the lidar L-shape fit: yaw known modulo pi only) take the
    # heading their track moves in once its speed reaches the threshold; tracks that never do keep one
    # orientation throughout (actors.track.heading). Annotations (instance_token set) are never changed.
    heading_from_motion: bool = True
    heading_from_motion_min_speed_mps: float = Field(1.0, gt=0)
    # ... held without reversing over boxes spanning this long; keep it >= 2 * velocity_window_s (one jump of
    # a fitted box centre fakes a speed over less than two windows).
    heading_from_motion_min_duration_s: float = Field(1.0, ge=0)


class Sam2Config(_Model):
    model_config_name: str = "configs/sam2.1/sam2.1_hiera_l.yaml"
    checkpoint: str | None = None  # None = random weights (tests only)
    device: str = "auto"
    batch_images: int = Field(6, ge=1)


class CpuSegmenterConfig(_Model):
    dilate_px: int = Field(3, ge=0)  # margin grown around the hull of the object's projected LiDAR points
    close_px: int = Field(15, ge=0)  # closing kernel applied to a GrabCut-refined mask
    grabcut_iterations: int = Field(0, ge=0)  # 0 = LiDAR hull + margin only (see actors/segment/cpu.py)


class SegmentationConfig(_Model):
    backend: Literal["cpu", "sam2"] = "cpu"
    cameras: list[str] = Field(default_factory=lambda: ["CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_BACK_RIGHT",
                                                        "CAM_BACK", "CAM_BACK_LEFT", "CAM_FRONT_LEFT"])
    sam2: Sam2Config = Field(default_factory=Sam2Config)
    cpu: CpuSegmenterConfig = Field(default_factory=CpuSegmenterConfig)


class VisibilityConfig(_Model):
    """STRIDE-QA §4.2: keep when box IoU > 0.3, coverage > 0.8 and mask IoU score > 0.8."""

    box_iou_min: float = Field(0.3, ge=0, le=1)
    coverage_min: float = Field(0.8, ge=0, le=1)
    mask_score_min: float = Field(0.8, ge=0, le=1)
    min_lidar_points: int = Field(1, ge=0)
    min_box_area_px: float = Field(16.0, ge=0)


class ToleranceConfig(_Model):
    """STRIDE-QA App. C.3 success tolerances."""

    distance_rel: float = Field(0.25, gt=0)
    bearing_deg: float = Field(10.0, gt=0)
    speed_rel: float = Field(0.2, gt=0)
    speed_abs_mps: float = Field(0.5, gt=0)
    speed_abs_below_mps: float = Field(1.0, ge=0)


class QAConfig(_Model):
    families: list[Literal["object_spatial", "ego_spatial", "ego_spatiotemporal"]] = Field(
        default_factory=lambda: ["object_spatial", "ego_spatial", "ego_spatiotemporal"])
    template_dirs: list[str] = Field(default_factory=list)  # extra/override YAML template folders
    seed: int = 42
    horizons_s: list[float] = Field(default_factory=lambda: [0.0, 1.0, 2.0, 3.0])
    front_camera: str = "CAM_FRONT"
    max_objects_per_keyframe: int = Field(12, ge=1)
    max_pairs_per_keyframe: int = Field(20, ge=0)
    decimals: int = Field(2, ge=0, le=6)
    dynamic_speed_mps: float = Field(0.5, ge=0)  # bench: a group is dynamic when relative motion exceeds this
    val_fraction: float = Field(0.1, ge=0, le=1)


class WriterConfig(_Model):
    parquet_max_rows: int = Field(200_000, ge=1)
    parquet_max_bytes: int = Field(256 * 1024 * 1024, ge=1024)
    wds_max_samples: int = Field(1000, ge=1)  # WebDataset: keyframe samples per tar shard
    wds_max_bytes: int = Field(1024 * 1024 * 1024, ge=1024)  # and bytes per tar shard
    webdataset: bool = True
    bench_export: bool = True
    card: bool = True
    compression: str = "zstd"  # QA shards (the dataset)
    # the run folder's perception, attribute and label tables: caches that regenerate, export_bench and
    # validate read back, so decode speed matters more than size (snappy decodes ~35 % faster than zstd)
    cache_compression: str = "snappy"
    # Parquet min/max statistics on these QA columns only (what readers filter on); statistics of long texts
    # and groundings cost write time and no reader uses them
    qa_statistics_columns: list[str] = ["scene_id", "split", "keyframe_index", "timestamp_us", "family", "kind",
                                        "question_type", "template_id", "value", "unit", "horizon_s",
                                        "out_of_view"]

    @model_validator(mode="after")
    def _qa_columns(self):
        from schemas.tables import QA
        unknown = [c for c in self.qa_statistics_columns if c not in QA.names]
        if unknown:
            raise ValueError(f"qa_statistics_columns: {unknown} are not QA columns; known: {QA.names}")
        return self


class RayConfig(_Model):
    address: str | None = None  # None = embedded local Ray; 'auto' or host:port joins a cluster
    num_cpus: int | None = None
    cpu_stage_num_cpus: float = Field(1.0, gt=0)
    actor_num_cpus: float = Field(0.5, gt=0)  # fractional: whole-CPU actors starve the read stage on 2 CPUs
    actor_num_gpus: float = Field(1.0, ge=0)  # used only when the cluster has GPUs
    actor_pool_size: int = Field(1, ge=1)
    max_retries: int = Field(2, ge=0)
    scenes_in_flight: int = Field(4, ge=1)
    # Where the model stages (detection, segmentation) run: 'auto' = actor pools for the model backends
    # (mmdet3d, sam2) and tasks for the CPU ones; 'actors' / 'tasks' force one way for every backend.
    model_stages: Literal["auto", "actors", "tasks"] = "auto"


class PipelineConfig(_Model):
    version: Literal[1] = 1
    keyframes: KeyframeConfig = Field(default_factory=KeyframeConfig)
    detection: DetectionConfig = Field(default_factory=DetectionConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    segmentation: SegmentationConfig = Field(default_factory=SegmentationConfig)
    visibility: VisibilityConfig = Field(default_factory=VisibilityConfig)
    qa: QAConfig = Field(default_factory=QAConfig)
    tolerances: ToleranceConfig = Field(default_factory=ToleranceConfig)
    writers: WriterConfig = Field(default_factory=WriterConfig)
    ray: RayConfig = Field(default_factory=RayConfig)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def _format_errors(err: ValidationError, where: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        lines.append(f"{where}: field '{loc}': {e['msg']}" + (f" (got {e['input']!r})" if e["type"] != "missing"
                                                                and not isinstance(e.get("input"), dict) else ""))
    return "invalid config\n  " + "\n  ".join(lines)


def parse_config(data: dict | None, where: str = "<config>") -> PipelineConfig:
    try:
        return PipelineConfig.model_validate(data or {})
    except ValidationError as err:
        raise ConfigError(_format_errors(err, where)) from None


def load_config(path: str | Path | None = None, overrides: dict | None = None) -> PipelineConfig:
    """Load a YAML config (None = defaults) and apply nested ``overrides``."""
    data: dict = {}
    where = "<defaults>"
    if path is not None:
        p = Path(path)
        where = str(p)
        if not p.exists():
            raise ConfigError(f"{where}: config file not found")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{where}: not valid YAML: {err}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: top level must be a mapping, got {type(data).__name__}")
    if overrides:
        data = _merge(data, overrides)
    return parse_config(data, where)


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
