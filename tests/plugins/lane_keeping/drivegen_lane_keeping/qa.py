"""QA family ``ego_lane_keeping``: one question per keyframe with an offset, about the ego (no region)."""
from __future__ import annotations

import numpy as np

from generator.families.api import (Batch, Family, Field, KeyIndex, Plan, QuestionType, codes, column, keyframe_batch,
                                    to_numpy, words)

NAME = "ego_lane_keeping"
OFFSET = QuestionType(NAME, "lateral_offset", "quantitative", (
    Field("horizon_s", "quantity", "s", doc="seconds after the keyframe"),
    Field("offset_m", "quantity", "m", answer=True, doc="the lateral offset's size"),
    Field("side", "text", answer=True, doc="'left' | 'right'")), "offset_m", "m",
    doc="value = |lateral offset| in metres; the side is in the answer")


def build(plan: Plan) -> list[Batch]:
    t = plan.tables.get("lane_offsets")
    if t is None or t.num_rows == 0:
        return []
    sc = codes(column(t, "scene_id"), plan.scenes)
    fi = to_numpy(column(t, "frame_index"), np.int64)
    off = to_numpy(column(t, "lateral_offset_m"), np.float64)
    hz = to_numpy(column(t, "horizon_s"), np.float64)
    keys = (plan.frames_sc[plan.anchors] << 32) | plan.frames_fi[plan.anchors]
    row = KeyIndex((sc << 32) | fi).find(keys)  # per keyframe group, its offset row (-1: none)
    groups = np.flatnonzero(row >= 0)
    r = row[groups]
    return [keyframe_batch(plan, OFFSET, groups, np.abs(off[r]), text={"side": words(off[r] >= 0, "left", "right")},
                           quantities={"offset_m": np.abs(off[r]), "horizon_s": hz[r]})]


EGO_LANE_KEEPING = Family(NAME, "Ego lane keeping QA (lateral offset from the logged path)", (OFFSET,), build,
                          reads={"lane_offsets": ["scene_id", "frame_index", "horizon_s", "lateral_offset_m"]})
