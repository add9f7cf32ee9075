"""Where one per-scene table of a run folder lives (``TableLayout``): the run folder's layout
(``schemas.layout.TABLES``) is made of them, and a paper family declares its own tables with them
(``schemas.family_contract``). A module of its own so both read it without importing each other.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class TableLayout:
    """Where a per-scene table lives: ``folder/<scene>.<ext>`` (``sharded``: ``folder/<scene>-<k:05d>.<ext>``;
    ``by_split``: ``folder/<split>-<scene>-<k:05d>.<ext>``, the scene's split first)."""

    name: str
    folder: str
    schema: pa.Schema | None  # None: not Parquet (WebDataset tars)
    sharded: bool = False
    ext: str = "parquet"
    by_split: bool = False
