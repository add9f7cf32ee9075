"""Explicit mapping of every Argoverse 2 sensor-dataset category to a nuScenes detection class or ``None``.

``None`` means "ignored": the object is not one of the 10 nuScenes detection classes. The choices follow the
nuScenes category definitions and the devkit's ``category_to_detection_name`` (which itself leaves out
personal mobility, strollers, wheelchairs and animals):

- cars, vans, SUVs -> car; every truck-like vehicle (box truck, truck, truck cab, large vehicle such as
  RVs and fire trucks) -> truck; all buses -> bus; towed trailers (incl. message-board and traffic-light
  trailers) -> trailer.
- pedestrians and official signalers (nuScenes: police officer / construction worker) -> pedestrian.
- bicycles and motorcycles -> bicycle / motorcycle. AV2 boxes a ridden cycle and its rider separately;
  nuScenes has one box for a ridden cycle, so the rider boxes (BICYCLIST, MOTORCYCLIST, WHEELED_RIDER) are
  ignored rather than becoming pedestrians that nuScenes would never label.
- construction cones and barrels (channelising devices) -> traffic_cone.
- bollards, signs, stop signs, pedestrian crossing signs: permanent or sign-like street furniture, not a
  nuScenes barrier (a temporary traffic divider) -> None.
- wheeled devices (skateboards, scooters), strollers, wheelchairs (nuScenes 'human.pedestrian.*' classes
  the devkit maps to None), dogs, animals, railed vehicles -> None.

A category that is not listed here is an error (``SourceError`` naming it and the annotation file), so a
new AV2 release cannot silently lose or mislabel objects.
"""
from __future__ import annotations

AV2_TO_NUSCENES: dict[str, str | None] = {
    "REGULAR_VEHICLE": "car",
    "LARGE_VEHICLE": "truck",
    "BOX_TRUCK": "truck",
    "TRUCK": "truck",
    "TRUCK_CAB": "truck",
    "BUS": "bus",
    "SCHOOL_BUS": "bus",
    "ARTICULATED_BUS": "bus",
    "VEHICULAR_TRAILER": "trailer",
    "MESSAGE_BOARD_TRAILER": "trailer",
    "TRAFFIC_LIGHT_TRAILER": "trailer",
    "PEDESTRIAN": "pedestrian",
    "OFFICIAL_SIGNALER": "pedestrian",
    "BICYCLE": "bicycle",
    "MOTORCYCLE": "motorcycle",
    "BICYCLIST": None,
    "MOTORCYCLIST": None,
    "WHEELED_RIDER": None,
    "CONSTRUCTION_CONE": "traffic_cone",
    "CONSTRUCTION_BARREL": "traffic_cone",
    "BOLLARD": None,
    "SIGN": None,
    "STOP_SIGN": None,
    "MOBILE_PEDESTRIAN_CROSSING_SIGN": None,
    "MOBILE_PEDESTRIAN_SIGN": None,  # the name of MOBILE_PEDESTRIAN_CROSSING_SIGN in early AV2 releases
    "WHEELED_DEVICE": None,
    "STROLLER": None,
    "WHEELCHAIR": None,
    "DOG": None,
    "ANIMAL": None,
    "RAILED_VEHICLE": None,
}
