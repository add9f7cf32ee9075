"""Paper families: the one registry the rest of drivegen iterates (the contract a family fulfils is
``schemas.family_contract``, whose names this module also offers).

The registry is the families built into drivegen (``BUILTIN``, module paths) followed by the entry points of the
group ``drivegen.families`` (a user's package declares ``[project.entry-points."drivegen.families"] name =
"pkg.module:FAMILY"``, so ``pip install`` adds a family without touching drivegen). This module is the one place
that loads family code by name: nothing in drivegen's core imports a family package (``tests/project/test_layers.py``),
and a family package imports the core, never another family. A family's module that only declares its object
stays cheap to import; its hooks import the heavy work they call when they are called (start-up cost).

Families are ordered by ``order`` then name: the order of QA families in the QA rows, of the summary's
lines, of the card's sections and the report's pages.

A family that cannot be loaded (its module fails to import, raises or calls ``sys.exit`` at import, its object
is no ``PaperFamily``, its declarations raise, or it clashes with another family's name or config section)
breaks only itself: it is left out of the registry and listed, with its error, by ``broken_families()``
(``drivegen families``, ``drivegen --help``, a warning of every command); its config section, scorer, exports
and commands are refused naming it and that error; every other family and command works.
"""
from __future__ import annotations

import functools
import importlib
import logging
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING

from schemas.errors import ConfigError
from schemas.family_contract import (FAMILY_COUNTS, HOOK_GROUPS, AddsCommands, AsksQuestions, Configured, Derives,
                                     DerivesVideo, Export, ExportsFiles, PaperFamily, Reports, Scores, Summarises,
                                     Tables, WritesTables, add_family_counts, declared_output, family_counts, resolve)

if TYPE_CHECKING:  # annotations only
    from pydantic import BaseModel

    from schemas.table_layout import TableLayout

ENTRY_POINT_GROUP = "drivegen.families"
log = logging.getLogger("drivegen.families")

# The families that ship with drivegen, as module paths holding ``FAMILY`` (the registry lines).
BUILTIN: tuple[str, ...] = (
    "generator.families.stride_qa",
    "generator.families.intention_drive",
    "generator.families.drama_x",
    "generator.families.pie",
)


@dataclass(frozen=True)
class BrokenFamily:
    """A registered family that could not be loaded: ``name`` (its entry point's name, or the module path of a
    built-in), ``where`` it is registered, and what went wrong (``error``, one line)."""

    name: str
    where: str
    error: str

    def line(self) -> str:
        return f"{self.name} ({self.where}): {self.error}"

    def names(self) -> set[str]:
        """The names a user may give for it (family, scorer or export name): its name with '_' or '-'."""
        return {self.name, self.name.replace("_", "-"), self.name.replace("-", "_")}


_MAX_ERROR_CHARS = 300


def _error_line(err: BaseException) -> str:
    text = " ".join(f"{type(err).__name__}: {err}".split())
    if isinstance(err, SystemExit):
        text = f"SystemExit({err.code!r}) at import (the module calls sys.exit)"
    return text if len(text) <= _MAX_ERROR_CHARS else text[:_MAX_ERROR_CHARS] + "..."


def _load(ref: str, where: str) -> PaperFamily:
    """The family ``ref`` names ("module" holding ``FAMILY``, or "module:attribute"), its declarations checked
    (config model, tables, commands, moved settings, scorer, exports: cheap by contract); ConfigError saying
    what failed."""
    mod_name, _, attr = ref.partition(":")
    try:
        obj = getattr(importlib.import_module(mod_name), attr or "FAMILY")
    except (Exception, SystemExit) as err:  # noqa: BLE001 - a plugin's import may raise anything, or exit
        raise ConfigError(f"cannot be loaded: {_error_line(err)}") from None
    if not isinstance(obj, PaperFamily) or not obj.name:
        raise ConfigError(f"is not a named schemas.families.PaperFamily: {str(obj)[:80]!r}")
    try:
        for declared in (obj.config_model, obj.tables, obj.commands, obj.moved_settings, obj.scorer, obj.exports,
                         obj.export_command):
            declared()
    except (Exception, SystemExit) as err:  # noqa: BLE001
        raise ConfigError(f"its declarations fail: {_error_line(err)}") from None
    return obj


_BROKEN: dict[str, BrokenFamily] = {}


def _broken(name: str, where: str, error: str) -> None:
    if name not in _BROKEN:
        _BROKEN[name] = BrokenFamily(name, where, error)
        log.warning("paper family %s is left out: %s (drivegen families lists the families)", name, error)


@functools.lru_cache(maxsize=1)
def families() -> dict[str, PaperFamily]:
    """Every registered paper family that loads, by name, in order (``order``, then name). One that cannot be
    loaded or clashes with another (a name, a config section) is left out and listed by ``broken_families``."""
    _BROKEN.clear()
    found = []
    regs = [(ref, ref, "built in") for ref in BUILTIN] + [
        (ep.value, ep.name, f"entry point {ep.name!r} of {ep.group}")
        for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)]
    for ref, name, where in regs:
        try:
            found.append((_load(ref, where), name, where))
        except ConfigError as err:
            _broken(name, where, f"{ref!r} {err.message}")
    out: dict[str, PaperFamily] = {}
    sections: dict[str, str] = {}
    for fam, name, where in sorted(found, key=lambda fw: (fw[0].order, fw[0].name)):
        if fam.name in out:
            if out[fam.name] is not fam:  # (the same object twice: an installed copy of a built-in)
                _broken(name, where, f"another paper family is already named {fam.name!r}")
            continue
        if fam.config_section and fam.config_section in sections:
            _broken(name, where, f"paper family {sections[fam.config_section]!r} already declares the config section "
                                 f"{fam.config_section!r}")
            continue
        if fam.config_section:
            sections[fam.config_section] = fam.name
        out[fam.name] = fam
    return out


def broken_families() -> list[BrokenFamily]:
    """The registered families that could not be loaded (``families``), in registry order."""
    families()
    return list(_BROKEN.values())


def command_broken(name: str, where: str, err: BaseException) -> None:
    """Record that a command module of a family (``PaperFamily.commands``) failed to import: listed with the
    broken families; the family itself keeps working."""
    _broken(name, where, _error_line(err))


def broken_named(name: str) -> BrokenFamily | None:
    """The broken family a user means by ``name`` (a family, scorer, export or config-section name), if any."""
    return next((b for b in broken_families() if name in b.names()), None)


def config_sections() -> dict[str, type[BaseModel]]:
    """{section: pydantic model} of every family with settings, in family order (a section without a model is
    no section: its key is refused as unknown)."""
    return {f.config_section: model for f in families().values()
            if f.config_section and (model := f.config_model()) is not None}


def moved_settings() -> dict[str, str]:
    """Every family's moved settings ({old dotted key: new dotted key}), in family order."""
    return {old: new for f in families().values() for old, new in f.moved_settings().items()}


def qa_family_names() -> list[str]:
    """The QA families of every registered paper family, in order: ``qa.families``'s default."""
    return [q for f in families().values() for q in f.qa_names]


def family_tables() -> list[TableLayout]:
    """Every family's per-scene run tables, in family order."""
    return [t for f in families().values() for t in f.tables()]


def scorers() -> dict[str, PaperFamily]:
    """The families ``drivegen score`` knows, by the name it takes (a family's ``name`` with '_' as '-')."""
    return {f.score_name or f.name.replace("_", "-"): f for f in families().values() if f.scorer() is not None}


def exports() -> list[tuple[PaperFamily, Export]]:
    """Every family's exports, in family order."""
    return [(f, e) for f in families().values() for e in f.exports()]


__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "FAMILY_COUNTS", "HOOK_GROUPS", "AddsCommands", "AsksQuestions", "BrokenFamily",
           "Configured", "Derives", "DerivesVideo", "Export", "ExportsFiles", "PaperFamily", "Reports", "Scores",
           "Summarises", "Tables", "WritesTables", "families",
           "broken_families", "broken_named", "command_broken", "config_sections", "moved_settings",
           "qa_family_names", "family_tables", "scorers", "exports", "resolve", "family_counts", "add_family_counts",
           "declared_output"]
