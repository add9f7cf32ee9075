"""Generated nuScenes-format logs: the devkit loads them, geometry, LiDAR, images and the scenario file agree."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from generator.types import CAMERA_NAMES

VERSION = "v1.0-drivegen"


@pytest.fixture(scope="module")
def nusc(synth_root):
    from nuscenes.nuscenes import NuScenes

    return NuScenes(version=VERSION, dataroot=str(synth_root), verbose=False)


def test_devkit_loads_and_counts(nusc):
    assert len(nusc.scene) == 2
    for scene in nusc.scene:
        assert scene["nbr_samples"] == 40
        tok, n = scene["first_sample_token"], 0
        while tok:
            s = nusc.get("sample", tok)
            assert set(s["data"]) == set(CAMERA_NAMES) | {"LIDAR_TOP"}
            n += 1
            tok = s["next"]
        assert n == 40
    cats = {nusc.get("category", i["category_token"])["name"] for i in nusc.instance}
    assert {"vehicle.car", "human.pedestrian.adult"} <= cats
    assert 10 <= len(nusc.instance) / len(nusc.scene) <= 40
