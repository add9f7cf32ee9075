"""This family's vocabularies (the strings are part of the dataset: they follow the paper's spelling)."""
from __future__ import annotations


# Instruction kinds (Intention-Drive §3.2: low-level atomic, high-level intentions grounded in the scene).
INSTRUCTION_KINDS = ("atomic", "turn", "change_lane", "stop", "stop_behind", "follow", "overtake", "yield",
                     "pull_over")


INSTRUCTION_LEVELS = ("low", "high")  # atomic is the low level, every other kind a high-level intention

