"""The family API: the one module a paper family's author imports (``from generator.families import api``).

It holds the contract (``schemas.family_contract``: ``PaperFamily`` and its hook groups, ``Export``) and the parts
of drivegen's core a family's hooks call, under the names listed in ``__all__``; nothing else of drivegen is
public to a family. ``docs/reference/family-hooks.md`` lists every hook with its signature, generated from the
contract (``tests/project/test_docs.py`` fails when it is stale), and the example family
``tests/plugins/lane_keeping`` imports nothing of drivegen but this module (``tests/families/test_family_api.py``).
A type checker reads it (``tests/project/test_types.py`` runs mypy on it and on the example):
``PaperFamily[MySettings]`` makes ``FAMILY.settings(cfg)`` a ``MySettings``.

    the contract     PaperFamily, the hook groups (Configured, WritesTables, Derives, DerivesVideo,
                     AsksQuestions, ExportsFiles, Scores, Summarises, Reports, AddsCommands), Export, Tables,
                     TableLayout (a run table it declares), family_counts (its counts in a manifest)
    errors           InputError (unusable input: exit 2), FamilyError (a family broke its contract)
    tables           KeyIndex, codes, column, to_numpy (Arrow/NumPy helpers), read_parquet
    the ego          ego_states, interp_grouped (the ego's pose and motion per frame, interpolated by group)
    QA               Family, Field, QuestionType (a QA family's declaration), Batch, Plan, keyframe_batch,
                     words (generating its rows)
    run folders      RunReader, RunStore, and an export's folder: check_owned_folder, staging,
                     replace_owned_folder, release_staging
    scoring          read_predictions (a model's predictions: Parquet, JSON or JSON Lines)
"""
from __future__ import annotations

from generator.attributes.arrays import KeyIndex, codes, column, to_numpy
from generator.attributes.ego import ego_states, interp_grouped
from generator.qa.fields import Family, Field, QuestionType
from generator.qa.generate import Batch, Plan, keyframe_batch, words
from generator.runfolder import (RunReader, RunStore, check_owned_folder, release_staging, replace_owned_folder,
                                 staging)
from generator.validate.score import read_predictions
from schemas.errors import FamilyError, InputError
from schemas.family_contract import (HOOK_GROUPS, AddsCommands, AsksQuestions, Configured, Derives, DerivesVideo,
                                     Export, ExportsFiles, PaperFamily, Reports, Scores, Summarises, Tables,
                                     WritesTables, family_counts)
from schemas.layout import TableLayout
from schemas.tables import read_parquet

__all__ = [
    # the contract
    "PaperFamily", "HOOK_GROUPS", "Configured", "WritesTables", "Derives", "DerivesVideo", "AsksQuestions",
    "ExportsFiles", "Scores", "Summarises", "Reports", "AddsCommands", "Export", "Tables", "TableLayout",
    "family_counts",
    # errors
    "InputError", "FamilyError",
    # tables
    "KeyIndex", "codes", "column", "to_numpy", "read_parquet",
    # the ego
    "ego_states", "interp_grouped",
    # QA
    "Family", "Field", "QuestionType", "Batch", "Plan", "keyframe_batch", "words",
    # run folders
    "RunReader", "RunStore", "check_owned_folder", "staging", "replace_owned_folder", "release_staging",
    # scoring
    "read_predictions",
]
