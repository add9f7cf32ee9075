"""The run folder's layout, declared once: every path a run writes or reads, and the names of its files.

    OUT/config.yaml                     the PipelineConfig of the run (a complete description of it)
    OUT/source.json                     how to rebuild the log source on any node
    OUT/scenes.json                     {"scene_ids": [...]}: the scenes the run covers
    OUT/run.json                        run state: epoch (one per driver), config and source hashes, parent
    OUT/_lock.json                      the writer's lock: owner, epoch, heartbeat (while a run is going)
    OUT/<table folder>/<split>-<scene>.parquet  the per-scene tables the dataset card publishes (frames,
                                        objects, projections, attributes, labels), the scene's split first
                                        (``perception/objects/val-*.parquet`` is the val split: the card names
                                        one glob per split, never the scenes' files)
    OUT/<table folder>/<scene>.parquet  the other per-scene tables, see TABLES (issues/: frames a stage skipped)
    OUT/qa/<split>-<scene>-<k:05d>.parquet  QA shards (the scene's split first: ``qa/train-*.parquet`` is the
                                        train split, the glob the dataset card's ``data_files`` use);
    OUT/wds/<scene>-<k:05d>.tar         WebDataset shards
    OUT/images/<video>/<frame:05d>.png  camera-only runs (--source jaad): the frames the videos' samples observe
    OUT/errors/<scene>-<stage>.parquet  one row per failed scene and stage
    OUT/manifest/<scene>.json           written last for a finished scene: its files with row counts
    OUT/README.md                       the dataset card (Hugging Face front matter; its stats and plots in card/)
    OUT/summary.json, card/, validate/, report/   run summary and by-products; each paper family's
                                        exports in their folders (``schemas.families``)

A file belongs to the run exactly when a manifest lists it (``generator.runfolder.RunReader``). While a
run is going: ``_pending/<scene>.json`` (files a scene is committing), ``_attempts/`` (stage attempt
markers), ``.staging/`` (per-scene folders workers build files in), temporary files
``.<name>.<32 hex>.tmp`` beside their final names. Scene file names never start with '.' or '_'
(``safe_name``): pyarrow, pandas and ``datasets`` skip such files, so a shard named so would be invisible.
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from pathlib import PurePosixPath

from schemas import tables
from schemas.table_layout import TableLayout

CONFIG = "config.yaml"
SOURCE = "source.json"
SCENES = "scenes.json"
RUN_STATE = "run.json"
LOCK = "_lock.json"
SUMMARY = "summary.json"
MANIFEST_DIR = "manifest"
ERRORS_DIR = "errors"
PENDING_DIR = "_pending"
ATTEMPTS_DIR = "_attempts"
STAGING_DIR = ".staging"
CARD_DIR = "card"  # the card's stats.json and histogram PNGs
CARD = "README.md"  # the dataset card itself, at the run folder's root: the dataset as published
VALIDATE_DIR = "validate"
PARTS_DIR = "parts"  # per-scene parts of the end-of-run work: parts/<name>/<scene>.json (generator.runfolder.parts)
REPORT_DIR = "report"  # the static HTML report (``drivegen report``; its marker: report/report.json)
VALIDATE_REPORT = f"{VALIDATE_DIR}/report.json"  # what ``drivegen validate`` writes (without --out)
# Folders and files a command may create inside a run folder (anything else there is the user's).
IMAGES_DIR = "images"  # extracted video frames of camera-only runs: images/<video>/<frame:05d>.<ext>
RUN_FILES = (CONFIG, SOURCE, SCENES, RUN_STATE, LOCK, SUMMARY, CARD)

# A release (`drivegen publish`, generator.pipeline.publish): about this many MB per shard unless told otherwise.
RELEASE_SHARD_MB = 256.0


CORE_TABLES: tuple[TableLayout, ...] = (
    # by_split: the tables the dataset card publishes as configs (generator.writers.card.CONFIG_TABLES)
    TableLayout("frames", "perception/frames", tables.FRAMES, by_split=True),
    TableLayout("objects", "perception/objects", tables.OBJECTS, by_split=True),
    TableLayout("projections", "perception/projections", tables.PROJECTIONS, by_split=True),
    TableLayout("attributes", "attributes", tables.ATTRIBUTES, by_split=True),
    TableLayout("labels", "labels", tables.LABELS, by_split=True),
    TableLayout("issues", "issues", tables.ISSUES),
    # camera-only runs (drivegen run --source jaad): the videos' own 2D boxes
    TableLayout("video_boxes", "video_boxes", tables.VIDEO_BOXES),
    TableLayout("qa", "qa", tables.QA, sharded=True, by_split=True),
    TableLayout("wds", "wds", None, sharded=True, ext="tar"),
)


class _Tables(Mapping):
    """Every per-scene table by name: the core's (``CORE_TABLES``), then each registered paper family's
    (``schemas.families.family_tables``), gathered on first use. A family table whose name or folder is
    already taken is refused (ValueError naming both)."""

    def __init__(self):
        self._all: dict[str, TableLayout] | None = None

    def _tables(self) -> dict[str, TableLayout]:
        if self._all is None:
            from schemas.families import family_tables  # the registry's families declare TableLayouts (this module)

            out = {t.name: t for t in CORE_TABLES}
            folders = {t.folder: t.name for t in CORE_TABLES}
            for t in family_tables():
                if t.name in out or t.folder in folders:
                    raise ValueError(f"run-folder table {t.name!r} ({t.folder}/) of a paper family clashes with "
                                     f"{out.get(t.name, t).name!r} ({folders.get(t.folder, t.folder)})")
                out[t.name] = t
                folders[t.folder] = t.name
            self._all = out
        return self._all

    def __getitem__(self, name: str) -> TableLayout:
        # a core table without the registry: a module reading one at import (``TABLES["qa"]``) loads no family,
        # so a family may import the core that does (a family named like a core table is refused anyway)
        core = _CORE_BY_NAME.get(name)
        return core if core is not None else self._tables()[name]

    def __iter__(self):
        return iter(self._tables())

    def __len__(self) -> int:
        return len(self._tables())


_CORE_BY_NAME = {t.name: t for t in CORE_TABLES}
TABLES: Mapping[str, TableLayout] = _Tables()


def table(name_or_folder: str) -> TableLayout:
    """A table's layout by name ('objects') or folder ('perception/objects')."""
    if name_or_folder in TABLES:
        return TABLES[name_or_folder]
    for t in TABLES.values():
        if t.folder == name_or_folder.rstrip("/"):
            return t
    raise KeyError(f"unknown run-folder table {name_or_folder!r}; known: {sorted(TABLES)}")


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


MAX_SCENE_NAME_CHARS = 200  # a scene's file names add at most ~50 characters to its safe name; a name holds 255


def safe_name(scene_id: str) -> str:
    """A scene id as a file-name stem: stable, filesystem-safe, and never hidden from readers (a leading
    '.' or '_' becomes 'x.' / 'x_'). Distinct ids that map to one name are refused when a run starts."""
    name = _UNSAFE.sub("_", scene_id) or "x"
    return f"x{name}" if name[0] in "._" else name


# A split name as file names carry it (and as Hugging Face ``datasets`` accepts split names): a word, no '-',
# so ``<split>-<scene>`` parses one way and the glob ``train-*`` never matches another split's files.
SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def check_split(split, where: str) -> str:
    """``split`` when it can lead a file name (``SPLIT_NAME``); ValueError naming ``where`` otherwise."""
    if not isinstance(split, str) or not SPLIT_NAME.match(split):
        raise ValueError(f"{where}: split {split!r} cannot name a file; a split is letters, digits and '_' "
                         "(e.g. 'train', 'val')")
    return split


def scene_file(table_name: str, scene_id: str, k: int | None = None, split: str | None = None) -> str:
    """Relative path of a scene's file of ``table_name`` (shard ``k`` for sharded tables, the scene's
    ``split`` for tables stored by split)."""
    t = TABLES[table_name]
    stem = safe_name(scene_id)
    if t.by_split:
        stem = f"{check_split(split, f'{table_name} file of scene {scene_id!r}')}-{stem}"
    if t.sharded:
        if k is None:
            raise ValueError(f"table {table_name!r} is sharded: give the shard number")
        return f"{t.folder}/{stem}-{k:05d}.{t.ext}"
    return f"{t.folder}/{stem}.{t.ext}"


def split_glob(table_name: str, split: str) -> str:
    """The glob of one split's files of a table stored by split (``qa/train-*.parquet``), relative to the
    run folder: what the dataset card's ``data_files`` name."""
    t = TABLES[table_name]
    if not t.by_split:
        raise ValueError(f"table {table_name!r} is not stored by split")
    return f"{t.folder}/{check_split(split, table_name)}-*.{t.ext}"


def manifest_file(scene_id: str) -> str:
    return f"{MANIFEST_DIR}/{safe_name(scene_id)}.json"


def error_file(scene_id: str | None, stage: str) -> str:
    return f"{ERRORS_DIR}/{safe_name(scene_id or 'run')}-{stage}.parquet"


_TMP = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")


def tmp_name(rel: str) -> str:
    """The temporary name a file is written under before it is moved to ``rel``: ``.<name>.<uuid>.tmp``."""
    p = PurePosixPath(rel)
    return str(p.with_name(f".{p.name}.{uuid.uuid4().hex}.tmp"))


def is_tmp_name(rel: str) -> bool:
    """True for names ``tmp_name`` makes (and nothing else: a user's ``notes.tmp`` is not ours)."""
    return bool(_TMP.match(PurePosixPath(rel).name))


def is_lock_tmp_name(rel: str) -> bool:
    """True for the temporary names of the lock file, which the holder's heartbeat writes while it runs."""
    p = PurePosixPath(rel)
    return str(p.parent) == "." and is_tmp_name(rel) and p.name.startswith(f".{LOCK}.")


def is_leftover_tmp_name(rel: str) -> bool:
    """A temporary file only a killed writer leaves: ``tmp_name``'s, except the lock's (the live holder's
    heartbeat writes those; ``RunLock.acquire`` clears stale ones)."""
    return is_tmp_name(rel) and not is_lock_tmp_name(rel)
