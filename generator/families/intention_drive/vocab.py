"""This family's vocabularies (the strings are part of the dataset: they follow the paper's spelling)."""
from __future__ import annotations


# Instruction kinds (Intention-Drive §3.2: low-level atomic, high-level intentions grounded in the scene).
# ``stop`` / ``stop_behind`` are for an ego that is moving at the keyframe; an ego already stopped there (the
# labeller's Stop) that is still stopped at the classified time gets ``wait`` / ``wait_behind`` (stay stopped):
# "come to a stop" would ask for what it has already done.
INSTRUCTION_KINDS = ("atomic", "turn", "change_lane", "stop", "stop_behind", "follow", "overtake", "yield",
                     "pull_over", "wait", "wait_behind")


INSTRUCTION_LEVELS = ("low", "high")  # atomic is the low level, every other kind a high-level intention

