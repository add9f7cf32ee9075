"""This family's run tables (Arrow schemas, units in column names as in ``schemas.tables``)."""
from __future__ import annotations

import pyarrow as pa

from schemas.tables import _plist, _schema, b, f32, i8, i32, s


PIE_SAMPLES = _schema("pie_samples", [
    pa.field("sample_id", s), pa.field("task", s), pa.field("split", s), pa.field("video_id", s),
    pa.field("ped_id", s), pa.field("track_label", s),
    pa.field("start_frame", i32), pa.field("end_frame", i32),
    pa.field("frames", _plist(i32)), pa.field("boxes_px", _plist(_plist(f32))),
    pa.field("occlusion", _plist(s)), pa.field("ego_action", _plist(s)),
    pa.field("image_paths", _plist(s)), pa.field("video_path", s),
    pa.field("image_width_px", i32), pa.field("image_height_px", i32),
    pa.field("crossing", i8), pa.field("intention", i8),
    pa.field("event_frame", i32), pa.field("tte_frames", i32), pa.field("tte_s", f32),
    pa.field("risk_horizon_frame", i32), pa.field("risk_box_visible", b), pa.field("risk_x_center_px", f32),
    pa.field("risk_region", i8), pa.field("risk_class", i8),
], "PIE/JAAD action-prediction and event-risk samples (observation boxes, labels, time to event)")

