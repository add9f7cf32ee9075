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
