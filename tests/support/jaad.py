"""JAAD for the tests: the shared excerpt's place (``../shared/data/jaad``, skipped when absent) and synthetic JAAD
folders written in JAAD's own XML layout (``write_video``), for the PIE/JAAD family's tests and the camera-only
run's."""
from __future__ import annotations

from pathlib import Path

import pytest

JAAD = Path(__file__).parents[2].parent / "shared" / "data" / "jaad"
needs_jaad = pytest.mark.skipif(not (JAAD / "annotations").is_dir(),
                                reason=f"JAAD annotations not found at {JAAD} (../shared/data/jaad)")


# ------------------------------------------------------------------------------------------ synthetic JAAD
def _box(frame, x1, y1, x2, y2, pid, label, cross="not-crossing"):
    tags = ""
    if label == "pedestrian":
        tags = (f'<attribute name="action">walking</attribute><attribute name="look">not-looking</attribute>'
                f'<attribute name="cross">{cross}</attribute><attribute name="hand_gesture">__undefined__</attribute>'
                f'<attribute name="reaction">__undefined__</attribute><attribute name="nod">__undefined__</attribute>')
    return (f'<box frame="{frame}" keyframe="1" occluded="0" outside="0" xtl="{x1}" ytl="{y1}" xbr="{x2}" ybr="{y2}">'
            f'<attribute name="id">{pid}</attribute><attribute name="old_id">p</attribute>{tags}'
            f'<attribute name="occlusion">none</attribute></box>')


def write_video(root: Path, vid: str, tracks: list[dict], peds: list[dict], n_frames: int = 200,
                width: int = 1920, height: int = 1080, split: str | None = "train", box_y=(500, 600),
                half_width: float = 20) -> None:
    """One JAAD video's XMLs. ``tracks``: {pid, label, frames, x (frame -> centre x), cross_from (frame)};
    every box spans ``box_y`` rows and ``half_width`` px either side of its centre."""
    for d in ("annotations", "annotations_attributes", "annotations_vehicle", "annotations_traffic"):
        (root / d).mkdir(parents=True, exist_ok=True)
    body = []
    for t in tracks:
        boxes = []
        for f in t["frames"]:
            xc = t["x"](f)
            cross = "crossing" if t.get("cross_from") is not None and f >= t["cross_from"] else "not-crossing"
            boxes.append(_box(f, xc - half_width, box_y[0], xc + half_width, box_y[1], t["pid"], t["label"], cross))
        body.append(f'<track label="{t["label"]}">{"".join(boxes)}</track>')
    (root / "annotations" / f"{vid}.xml").write_text(
        f"<annotations><version>1.1</version><meta><task><name>{vid}</name><size>{n_frames}</size>"
        f"<original_size><width>{width}</width><height>{height}</height></original_size>"
        f"<video_attributes><time_of_day>daytime</time_of_day><weather>clear</weather><location>street"
        f"</location></video_attributes></task></meta>{''.join(body)}</annotations>")
    attrs = "".join(
        f'<pedestrian age="adult" crossing="{p["crossing"]}" crossing_point="{p["crossing_point"]}" '
        f'decision_point="-1" designated="ND" gender="male" group_size="1" id="{p["pid"]}" intersection="no" '
        f'motion_direction="LAT" num_lanes="2" old_id="p" signalized="n/a" traffic_direction="TW" />' for p in peds)
    (root / "annotations_attributes" / f"{vid}_attributes.xml").write_text(f"<ped_attributes>{attrs}</ped_attributes>")
    (root / "annotations_vehicle" / f"{vid}_vehicle.xml").write_text(
        "<vehicle_info>" + "".join(f'<frame action="{"moving_slow" if f < 100 else "decelerating"}" id="{f}" />'
                                   for f in range(n_frames)) + "</vehicle_info>")
    (root / "annotations_traffic" / f"{vid}_traffic.xml").write_text(
        "<traffic_scene><road_type>street</road_type>" + "".join(
            f'<frame id="{f}" ped_crossing="0" ped_sign="0" stop_sign="0" traffic_light="n/a" />'
            for f in range(n_frames)) + "</traffic_scene>")
    if split:
        d = root / "split_ids" / "default"
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{split}.txt"
        p.write_text((p.read_text() if p.exists() else "") + vid + "\n")
