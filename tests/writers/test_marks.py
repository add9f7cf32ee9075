"""Set-of-Mark drawing (generator.writers.marks.draw_marks): masks tinted, boxes outlined, labels drawn,
in the region's colour, and nothing else touched."""
from __future__ import annotations

import numpy as np
import pytest

from support.writers import rle_of_box
from generator.writers.marks import MASK_ALPHA, draw_marks, region_colour


def test_draw_marks_tints_mask_outlines_box_and_labels():
    img = np.full((90, 160, 3), 100, np.uint8)
    box = [40.0, 40.0, 100.0, 80.0]
    out = draw_marks(img, [box], [rle_of_box(box)], [3])
    assert out is not img and (img == 100).all(), "the input image is left as it is"
    colour = np.array(region_colour(3))
    inside = out[55:65, 50:90].reshape(-1, 3).astype(float)  # mask interior, away from the outline
    np.testing.assert_allclose(inside, np.tile(100 * (1 - MASK_ALPHA) + colour * MASK_ALPHA, (len(inside), 1)), atol=1)
    assert (np.abs(out[40, 45:95].astype(int) - colour).sum(axis=1) < 40).mean() > 0.8  # the box's top edge
    label = out[20:39, 40:120]  # "Region [3]" above the box: white text on the region's colour
    assert (label.reshape(-1, 3) > 190).all(axis=1).sum() > 10
    far = np.ones(out.shape[:2], bool)
    far[15:85, 35:160] = False
    assert (out[far] == 100).all(), "nothing drawn away from the region"


def test_draw_marks_no_mask_and_duplicates():
    img = np.zeros((50, 50, 3), np.uint8)
    out = draw_marks(img, [[5, 20, 30, 45], [5, 20, 30, 45], None], [None, None, None], [1, 1, 2])
    assert out.any()
    assert (draw_marks(img, [], [], []) == img).all()
    with pytest.raises(ValueError, match="region ids"):
        draw_marks(img, [[0, 0, 1, 1]], None, [1, 2])


def test_tags_of_nearby_boxes_do_not_cover_each_other():
    """Two boxes whose top-left corners are 4 px apart (a pair question about two parked cars): both tags
    are drawn where no other tag lies, so each region can be told (once the second tag hid the first)."""
    img = np.zeros((200, 300, 3), np.uint8)
    tags: list = []
    out = draw_marks(img, [[50, 60, 150, 120], [54, 62, 160, 130], [52, 58, 140, 110]], None, [10, 11, 12],
                     tags=tags)
    assert [t[0] for t in tags] == [10, 11, 12]
    for i, a in enumerate(tags):
        for b in tags[i + 1:]:
            assert a[3] <= b[1] or b[3] <= a[1] or a[4] <= b[2] or b[4] <= a[2], (a, b)
        x1, y1, x2, y2 = a[1:]
        assert 0 <= x1 < x2 <= 300 and 0 <= y1 < y2 <= 200
        assert (out[y1:y2, x1:x2].reshape(-1, 3) > 190).all(axis=1).sum() > 10  # white text drawn in it
