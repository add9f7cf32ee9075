"""Every vocabulary drivegen writes or reads, defined once and imported everywhere else.

The strings are part of the dataset: labels columns, QA answers and exports carry them verbatim, so they
follow the papers' spelling (sources beside each).
"""
from __future__ import annotations


# nuScenes detection classes (nuscenes-devkit ``eval.detection`` / ``category_to_detection_name``).
DETECTION_CLASSES = ("car", "truck", "bus", "trailer", "construction_vehicle", "pedestrian", "motorcycle",
                     "bicycle", "traffic_cone", "barrier")
VEHICLE_CLASSES = ("car", "truck", "bus", "trailer", "construction_vehicle")
# Vulnerable road users (DRAMA-X §3: pedestrians and cyclists; motorcyclists included).
VRU_CLASSES = ("pedestrian", "bicycle", "motorcycle")

# Cameras. nuScenes' ring in its own order; the forward-facing camera of each log format drivegen reads.
NUSCENES_CAMERAS = ("CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_BACK_RIGHT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_FRONT_LEFT")
FRONT_CAMERA_NAMES = ("CAM_FRONT", "ring_front_center")  # nuScenes, Argoverse 2

# Log sources without LiDAR or poses (``LogSource.camera_only``): their videos run through the camera stages
# (``generator.pipeline.video``) and their run folders hold no 3D tables.
CAMERA_ONLY_SOURCES = ("jaad",)
# The track labels of a camera-only video whose boxes are numbered ``Region [X]`` (JAAD's behaviour pedestrians
# and bystanders; groups are not one person).
VIDEO_REGION_LABELS = ("pedestrian", "ped")
VIDEO_CAMERA = "front"  # the one camera of a camera-only video, as QA groundings and issues rows name it

# Frame-level problems (``issues`` table rows: stage, reason; None = any reason) after which a frame has no
# detector output: its objects are unknown, not absent. Validation scores its objects as missed; QA asks only the
# questions about the ego there (``QuestionType.pose_only``). 'unlabelled': a frame outside its log's annotations
# under the 'labels' detection backend.
NO_DETECTION_ISSUES = (("detect", None), ("load", "lidar_unreadable"))
UNLABELLED_ISSUE = "unlabelled"

# Pipeline stages whose backend may be a model on a Ray actor (``generator.pipeline.stages.default_stages``):
# the keys ``ray.stage_actors`` accepts.
MODEL_STAGES = ("detect", "perceive")

# Where an object lies along the ego's length (``generator.attributes.compute.along_ego``): wholly behind its rear
# bumper, wholly ahead of its front bumper, or overlapping its length (beside it). ATTRIBUTES.front_back holds
# the first words, the ego_spatial front_behind answers the second (the QA value is the index: 0 behind,
# 1 in front, 2 beside).
EGO_LONGITUDINAL = ("behind", "front", "beside")
EGO_LONGITUDINAL_PHRASES = ("behind", "in front of", "beside")

# Ego behaviour (Intention-Drive §3: atomic maneuvers and speed status).
MANEUVERS = ("Straight", "Turn Left", "Turn Right", "Change Lane Left", "Change Lane Right", "Stop")
SPEED_STATUS = ("Accelerate", "Decelerate", "Maintain Speed")

# VRU intent (DRAMA-X §3.1: lateral x vertical, as seen from the ego).
INTENT_LATERAL = ("goes to the left", "goes to the right", "stationary")
INTENT_VERTICAL = ("moves towards ego vehicle", "moves away from ego vehicle", "stationary")

# QA kinds; grounding roles in QA_GROUNDING.role's dictionary order. (The QA families are the paper families'
# own: ``schemas.families``.)
QA_KINDS = ("qualitative", "quantitative")
# Dataset splits a QA row may carry (``generator.qa.scene_split`` gives 'train' and 'val'); a scene's QA
# shards are named by its split (``schemas.layout``) and the dataset card has one split per name.
QA_SPLITS = ("train", "val", "test")
GROUNDING_ROLES = ("context", "current", "future")


# Agent scripts of the generated logs (``generator.synth``): the bench relations the ego takes part in,
# plus DRAMA-X / PIE behaviours and static fillers.
SCRIPTED_SCENARIOS = ("oncoming_pass", "overtake", "path_divergence", "pulling_away", "maintain_state",
                      "ped_crossing", "cyclist_veering", "waiting_at_curb", "parked", "static")


# PIE/JAAD (JAAD 2.0 annotations; the pedestrian behaviour benchmark, seed 001 §III-A). Track labels: behaviour
# pedestrians, bystanders, groups; ego-vehicle actions in JAAD's own order (jaad_data.py codes 0-4).
JAAD_TRACK_LABELS = ("pedestrian", "ped", "people")
JAAD_OCCLUSION = ("none", "part", "full")
JAAD_VEHICLE_ACTIONS = ("stopped", "moving_slow", "moving_fast", "decelerating", "accelerating")
JAAD_SPLITS = ("train", "val", "test")
# the behaviour tags of a JAAD 'pedestrian' box (annotations/video_XXXX.xml), in the annotation's order
JAAD_BEHAVIOUR_TAGS = ("action", "look", "cross", "occlusion", "hand_gesture", "reaction", "nod")
# the values each tag takes: JAAD's coding (its data interface, jaad_data.py, maps exactly these to numbers)
JAAD_BEHAVIOUR_VALUES = {
    "action": ("standing", "walking"), "look": ("not-looking", "looking"),
    "cross": ("not-crossing", "crossing", "crossing-irrelevant"), "occlusion": JAAD_OCCLUSION,
    "hand_gesture": ("__undefined__", "greet", "yield", "rightofway", "other"),
    "reaction": ("__undefined__", "clear_path", "speed_up", "slow_down"), "nod": ("__undefined__", "nodding"),
}
