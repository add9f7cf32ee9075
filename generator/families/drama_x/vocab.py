"""This family's vocabularies (the strings are part of the dataset: they follow the paper's spelling)."""
from __future__ import annotations


# DRAMA-X (App. A.2): suggested ego actions, most severe last (a frame takes its objects' most severe one);
# the object groups of a sample and the relative position of an object (§3.2: Left / Right / Front).
DRAMA_ACTIONS = ("continue", "be aware or cautious", "slow down", "yield", "stop")
# ... as App. A.2's samples write them (the original DRAMA label in full): what the export writes; the scorer takes
# either form of an action as the same answer
DRAMA_ACTION_A2_TEXT = {**{a: a for a in DRAMA_ACTIONS}, "be aware or cautious": (
    "be aware or cautious (of the important object, in case it might effect in future but no direct influence)")}


DRAMA_POSITIONS = ("Left", "Front", "Right")


DRAMA_GROUPS = {"pedestrian": "Pedestrians", "bicycle": "Cyclists", "motorcycle": "Cyclists"}

