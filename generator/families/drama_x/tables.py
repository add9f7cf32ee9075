"""This family's run tables (Arrow schemas, units in column names as in ``schemas.tables``)."""
from __future__ import annotations

import pyarrow as pa

from schemas.tables import _schema, b, f32, f64, i32, i64, s


DRAMA_RISK = _schema("drama_risk", [
    pa.field("scene_id", s, False), pa.field("frame_index", i32, False), pa.field("track_id", i64, False),
    pa.field("risk", b, False),  # the object's future path enters the ego's future corridor within the horizon
    pa.field("time_to_conflict_s", f64),  # null without risk
    pa.field("suggested_action", s, False),  # schemas.vocab.DRAMA_ACTIONS
], "DRAMA-X risk and suggested ego action per tracked object and frame, from hindsight "
   "(generator.families.drama_x.attributes.risk_table, written by the attributes stage beside the labels)")


DRAMA_VIDEO = _schema("drama_video", [
    pa.field("scene_id", s, False), pa.field("ped_id", s, False), pa.field("track_label", s, False),
    pa.field("frame_index", i32, False), pa.field("t_s", f64, False),
    pa.field("box_xyxy", pa.list_(f32, 4)),  # the annotated 2D box in the video's own image
    pa.field("position", s),  # schemas.vocab.DRAMA_POSITIONS, from the box centre's x in the image
    pa.field("lateral_intent", s, False), pa.field("vertical_intent", s, False),  # schemas.vocab.INTENT_*
    pa.field("lateral_rate", f64, False), pa.field("vertical_rate", f64, False),  # box heights per second
    pa.field("compensated", b, False),  # camera displacement (Farneback) subtracted
    pa.field("risk", b), pa.field("time_to_conflict_s", f64),  # hindsight: the pedestrian's crossing event ahead
    pa.field("suggested_action", s),  # schemas.vocab.DRAMA_ACTIONS
], "DRAMA-X labels of a camera-only log per 2D track and sampled frame: image intent (generator.families.drama_x.attributes."
   "video_image_intent), position, risk and suggested action (video_risk); written by the video stage of "
   "drivegen run --source jaad")

