"""Ego lane keeping: an example paper family that lives outside drivegen (registered by the entry point in
``pyproject.toml``). Per keyframe it derives the ego's lateral offset ``horizon_s`` later from the line of
its heading at the keyframe (the logged path; positive = left), asks one quantitative question about it,
exports the offsets as one Parquet file and scores a model's predicted offsets (mean absolute error).

    config section  lane_keeping   (``LaneKeepingConfig``: horizon_s, keep_within_m, export)
    run table       lane_offsets   (``derive.LANE_OFFSETS``, one row per keyframe)
    QA family       ego_lane_keeping (``qa``; templates in ``templates/``)
    export          lane_keeping/  (``export.write``) when ``lane_keeping.export``
    scorer          drivegen score lane-keeping (``score``)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from drivegen_lane_keeping.derive import LANE_OFFSETS, lane_offsets
from drivegen_lane_keeping.qa import EGO_LANE_KEEPING
from generator.families import api

HERE = Path(__file__).parent


class LaneKeepingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    horizon_s: float = Field(2.0, gt=0, description="seconds after the keyframe the offset is taken at")
    keep_within_m: float = Field(0.5, gt=0, description="an offset within this keeps the lane (summary, card)")
    export: bool = True


@dataclass
class LaneKeepingSummary:
    keyframes: int  # keyframes with an offset (the log continues horizon_s past them)
    kept: int  # of which |offset| <= keep_within_m
    folder: str | None = None  # the export's folder, when written

    def to_json(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        where = f" ({self.folder}/)" if self.folder else ""
        return [f"Ego lane keeping: {self.keyframes} keyframes, {self.kept} within the lane{where}"]


class LaneKeeping(api.PaperFamily[LaneKeepingConfig]):
    name = "lane_keeping"
    title = "Ego lane keeping"
    order = 90
    config_section = "lane_keeping"
    qa_names = ("ego_lane_keeping",)

    def config_model(self) -> type[LaneKeepingConfig]:
        return LaneKeepingConfig

    def tables(self) -> list[api.TableLayout]:
        return [api.TableLayout("lane_offsets", "lane_offsets", LANE_OFFSETS)]

    def derive(self, scene: api.Tables, cfg: BaseModel) -> api.Tables:
        return {"lane_offsets": lane_offsets(scene["frames"], self.settings(cfg).horizon_s)}

    def qa_families(self) -> list[api.Family]:
        return [EGO_LANE_KEEPING]

    def template_dirs(self) -> list[Path]:
        return [HERE / "templates"]

    def exports(self) -> list[api.Export]:
        return [api.Export("lane_keeping", "lane_keeping", "drivegen_lane_keeping.export:write",
                           enabled=lambda cfg: self.settings(cfg).export)]

    def scorer(self) -> str:
        return "drivegen_lane_keeping.score"

    def summary(self, counts: dict[str, int], exports: dict[str, dict], camera_only: bool) -> LaneKeepingSummary | None:
        if camera_only:
            return None
        exp = exports.get("lane_keeping")
        return LaneKeepingSummary(int(counts.get("lane_keyframes", 0)), int(counts.get("lane_kept", 0)),
                                  exp["folder"] if exp else None)

    def counts(self, tables: api.Tables, cfg: BaseModel) -> dict[str, int]:
        t = tables.get("lane_offsets")
        if t is None:
            return {}
        off = t.column("lateral_offset_m").to_numpy(zero_copy_only=False)
        within = self.settings(cfg).keep_within_m
        return {"lane_keyframes": int(len(off)), "lane_kept": int(np.sum(np.abs(off) <= within))}

    def summary_entry(self, data: dict) -> LaneKeepingSummary:
        return LaneKeepingSummary(**data)

    def card_section(self, reader: api.RunReader, cfg: BaseModel) -> str:
        n = kept = 0
        for m in reader.manifests():
            c = api.family_counts(m.get("counts") or {}, self.name)
            n, kept = n + c.get("lane_keyframes", 0), kept + c.get("lane_kept", 0)
        own = self.settings(cfg)
        return (f"## Ego lane keeping\n\nThe ego's lateral offset {own.horizon_s:g} s after each keyframe, from the "
                f"line of its heading at the keyframe (positive: left): {n} keyframes, {kept} within "
                f"{own.keep_within_m:g} m (table `lane_offsets/`, QA family `ego_lane_keeping`).\n")


FAMILY = LaneKeeping()
