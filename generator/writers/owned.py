"""Folders drivegen writes by-products into (exports, the dataset card) and may later replace: the one rule
that decides whether a folder is one drivegen made and which files it may remove there.

A by-product folder carries a marker JSON (``marker``) written last, with ``"format": fmt`` and the list of its
``files``. A later write replaces only those files; a non-empty folder without such a marker is a user's and is
refused, so drivegen never overwrites or deletes a user's files. ``store`` is any object with the
``generator.runfolder.RunStore`` reading methods (``exists``, ``list``, ``read_json``, ``full``) and its deletion
rule (``deletable``: inside the folder, through no link), so writers use it without importing the run-folder layer
above them. Every listed file is checked by that rule before any is removed.
"""
from __future__ import annotations

from schemas.errors import RunFolderError


def owned_files(store, rel_dir: str, marker: str, fmt: str, what: str | None = None,
                in_run_folder: bool = False) -> list[str]:
    """The files an earlier drivegen folder at ``rel_dir`` of ``store`` lists in its ``marker`` JSON (with
    ``"format": fmt``), [] for a new or empty folder; RunFolderError naming the folder for a non-empty folder
    that is not one (``what``: how the message names the format). ``in_run_folder``: ``rel_dir`` is a run
    folder's own by-product folder, which older drivegen versions wrote without a format: accepted."""
    marker_rel = f"{rel_dir}/{marker}" if rel_dir else marker
    existing = store.list(rel_dir, recursive=True) if store.exists(rel_dir) else []
    if not existing:
        return []
    try:
        old = store.read_json(marker_rel) if store.exists(marker_rel) else None
    except (ValueError, OSError):
        old = None
    if not (isinstance(old, dict) and (old.get("format") == fmt or in_run_folder)):
        raise RunFolderError(f"{store.uri_of(rel_dir)} already exists and is not {what or 'a ' + fmt + ' folder'} made "
                             f"by drivegen ({len(existing)} file(s) in it, e.g. {existing[0]}); choose an empty or "
                             "new --out folder", file=store.uri_of(rel_dir))
    files = [f for f in old.get("files", []) if isinstance(f, str)] if isinstance(old, dict) else []
    for f in files:  # a listed path that leaves the folder (or passes a link) is refused, naming the marker
        store.deletable(f"{rel_dir}/{f}" if rel_dir else f, marker_rel)
    return files
