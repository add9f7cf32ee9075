"""This family's vocabularies (the strings are part of the dataset: they follow the paper's spelling)."""
from __future__ import annotations


PIE_TASKS = ("action", "risk")  # action prediction (crossing in 1-3 s) and event risk assessment (6 classes)

