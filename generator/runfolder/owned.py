"""A by-product folder a command writes into a run folder or beside one (an export, the dataset card): built in
a local staging folder, then committed file by file, its marker JSON last, replacing only what an earlier
folder drivegen made there lists (``generator.writers.owned``: the one rule). Used by every family's export and
by the card; ``generator.families.api`` offers it to a family's author.
"""
from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

from generator.runfolder.store import RunStore
from generator.writers.owned import owned_files


def check_owned_folder(store: RunStore, rel_dir: str, marker: str, fmt: str, in_run_folder: bool = False) -> list[str]:
    """The files an earlier drivegen folder at ``rel_dir`` lists; RunFolderError for a user's folder
    (``generator.writers.owned.owned_files``, the one rule)."""
    return owned_files(store, rel_dir, marker, fmt, in_run_folder=in_run_folder)


def replace_owned_folder(store: RunStore, rel_dir: str, built: Path, marker: str, fmt: str,
                         in_run_folder: bool = False, placed=(), old_files: list[str] | None = None) -> list[str]:
    """Commit the files under the local folder ``built`` to ``rel_dir`` of ``store``, replacing an earlier
    folder drivegen made there (its ``marker`` JSON has ``"format": fmt`` and lists its ``files``): files of
    the earlier one that the new one lacks are removed, nothing else. A non-empty folder that is not
    drivegen's is refused (RunFolderError): a user's files are never overwritten or deleted.
    ``in_run_folder``: ``rel_dir`` is a run folder's own by-product folder (bench/), which older drivegen
    versions wrote without a format: accepted, only listed files are removed. ``placed``: files (relative to
    ``rel_dir``) the caller already put in place there, after ``check_owned_folder``; they are the new folder's
    too; then ``old_files`` is what ``check_owned_folder`` returned before they were placed."""
    marker_rel = f"{rel_dir}/{marker}" if rel_dir else marker
    if old_files is None:
        old_files = check_owned_folder(store, rel_dir, marker, fmt, in_run_folder)
    new_files = []
    for p in sorted(built.rglob("*")):
        if p.is_file() and p.name != marker:
            rel = p.relative_to(built).as_posix()
            store.commit_file(p, f"{rel_dir}/{rel}" if rel_dir else rel)
            new_files.append(rel)
    new_files += list(placed)
    store.commit_file(built / marker, marker_rel)  # last: the marker lists what is there
    for rel in sorted(set(old_files) - set(new_files) - {marker}):
        store.delete(f"{rel_dir}/{rel}" if rel_dir else rel)
    return new_files


def release_staging(store: RunStore, built: Path) -> None:
    if store.is_local:
        store.release_staging(built)
    else:
        shutil.rmtree(built, ignore_errors=True)


def staging(store: RunStore, name: str, beside: bool = False) -> Path:
    """A local folder to build ``name`` in on the target's filesystem: the run folder's ``.staging/``, or
    (``beside``: a folder that is not a run folder, where nothing but the export may appear) a temporary
    folder next to it; the temp dir for object stores."""
    if not store.is_local:
        return Path(tempfile.mkdtemp(prefix=f"drivegen-{name}-"))
    if not beside:
        return store.staging_dir(name)
    root = Path(store.base)
    d = root.parent / f".{root.name}.{uuid.uuid4().hex}.tmp"
    d.mkdir(parents=True)
    return d
