"""Paper families: the contract a family fulfils and the one registry the rest of drivegen iterates.

A *paper family* (STRIDE-QA, DRAMA-X, PIE/JAAD, Intention-Drive, or a user's own) is one package that
declares a ``PaperFamily`` object. Everything drivegen does for a family it finds through that object, whose
hooks come in small groups (``HOOK_GROUPS``; each hook's signature and docstring below, listed in
``docs/families/adding.md`` from this code):

    Configured      config_section, config_model(), moved_settings(), settings(cfg): its section of the config
    WritesTables    tables(), schemas(): the per-scene run tables it writes (``schemas.layout.TableLayout``)
    Derives         derive(scene, cfg), counts(tables, cfg): per 3D scene, in the attributes stage
    DerivesVideo    video_settings(cfg), derive_video(video, cfg), frames_to_extract(tables): per camera-only video
    AsksQuestions   qa_names, qa_families(), template_dirs(), video_qa(tables, cfg): its QA families and templates
    ExportsFiles    exports(), export_command(): its exports (``Export``), written by ``drivegen run`` and by
                    ``drivegen export <name>`` (with the options of its own command, when it has one)
    Scores          score_name, scorer(), score_arguments(parser), score_options(args): ``drivegen score``
    Summarises      summary(counts, exports, camera_only), summary_entry(data): its typed run summary entry
    Reports         card_section(...), report_video_cells(...), report_sample_note(...): card and HTML report
    AddsCommands    commands(): extra ``drivegen`` subcommands (module paths)

A family's author imports one module, ``generator.families.api`` (this contract, the registry's helpers and
the core's functions a family calls). Every hook is optional; the defaults do nothing.

The registry is the families built into drivegen (``BUILTIN``, module paths) followed by the entry points of the
group ``drivegen.families`` (a user's package declares ``[project.entry-points."drivegen.families"] name =
"pkg.module:FAMILY"``, so ``pip install`` adds a family without touching drivegen). This module is the one place
that loads family code by name: nothing in drivegen's core imports a family package (``tests/test_layers.py``),
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
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar

from schemas.errors import ConfigError, FamilyError
from schemas.summary import FamilyEntry

if TYPE_CHECKING:  # annotations only: the contract names the core's types without importing them
    import argparse

    import pyarrow as pa
    from pydantic import BaseModel

    from schemas.layout import TableLayout
    from schemas.summary import SummaryEntry

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
class Export:
    """One export of a family (e.g. the STRIDE-QA-Bench files).

    ``folder``: its folder inside a run folder (``RUN/<folder>``) when written at the end of ``drivegen run``;
    ``enabled(cfg) -> bool``: whether the end of a run writes it; ``write(reader, cfg, out=None, **options)
    -> dict``: writes it (into ``out`` or ``RUN/<folder>``) and returns its summary (``export_summary.json``);
    ``options``: what else the end of a run hands ``write``.
    ``part``: "module:function" building one committed scene's part of the export (``generator.runfolder.parts``:
    ``build(part, cfg) -> dict | None``); then the end of a run builds every scene's part on the cluster and calls
    ``write(reader, cfg, parts=True)``, which merges them (reads the parts one at a time, not the run's rows)."""

    name: str
    folder: str
    write: str  # "module:function", imported when the export is written (start-up cost)
    enabled: Callable[[Any], bool] = lambda cfg: True
    options: tuple[str, ...] = ()  # what else the end of a run hands ``write`` ("source": the opened logs)
    part: str | None = None  # "module:function": one scene's part (see above)

    def run(self, reader, cfg, **options) -> dict:
        return resolve(self.write)(reader, cfg=cfg, **options)


# The contract, as small hook groups: a family implements the groups it has (each hook's default does
# nothing), and the core's code that calls one group names only that group. ``PaperFamily`` is their union.
# Types a hook hands over that live above this module are named in words: ``cfg`` is the run's config
# (``schemas.config.PipelineConfig``, a pydantic model), ``reader`` a ``generator.runfolder.RunReader``,
# ``video`` a ``generator.pipeline.video.VideoInputs``.
Tables = dict[str, "pa.Table"]  # run tables by name
S = TypeVar("S", bound="BaseModel")  # a family's settings model


class Configured(Generic[S]):
    """Its settings: a section of the root config, validated by its own pydantic model."""

    name: str = ""
    config_section: str | None = None  # its top-level key in the config (None: no settings)

    def config_model(self) -> type[S] | None:
        """The pydantic model of ``cfg.<config_section>`` (defaults = the paper's values)."""
        return None

    def moved_settings(self) -> dict[str, str]:
        """Settings an earlier drivegen kept elsewhere: {old dotted key: new dotted key in its section}
        (e.g. ``{"writers.bench_export": "bench.export"}``), so run folders written before the move still
        load; the old key's value is taken where the new key is not given."""
        return {}

    def settings(self, cfg: BaseModel) -> S:
        """Its section of the run's config ``cfg`` (an instance of ``config_model()``): how a family reads its
        own settings, typed. FamilyError for a family without settings."""
        if not self.config_section:
            raise FamilyError(f"paper family {self.name!r} has no settings (its config_section is None)")
        return getattr(cfg, self.config_section)


class WritesTables:
    """The per-scene run tables it writes."""

    def tables(self) -> list[TableLayout]:
        """The per-scene run tables this family writes (their names are global: unique across families)."""
        return []

    def schemas(self) -> list[pa.Schema]:
        """Every Arrow schema it declares (its run tables' and its export files'), for ``schemas.tables``."""
        return [t.schema for t in self.tables() if t.schema is not None]


class Derives:
    """Its work on a 3D scene, in the attributes stage."""

    def derive(self, scene: Tables, cfg: BaseModel) -> Tables:
        """Per 3D scene: ``scene`` holds ``frames``, ``objects``, ``attributes``, ``labels``; returns tables named
        in ``tables()`` (any other name fails the scene with a FamilyError: a family never replaces a core table
        or another family's). A pure function of its inputs."""
        return {}

    def counts(self, tables: Tables, cfg: BaseModel) -> dict[str, int]:
        """Counts of the tables its ``derive`` (a 3D scene) or ``derive_video`` (a video) just made, for the
        scene's manifest, where they are kept in the family's own namespace (``family_counts``: no key of the
        core's or another family's is overwritten); the run summary sums them and hands the family's sums to
        ``summary``."""
        return {}


class DerivesVideo:
    """Its work on a camera-only video, in the video stage."""

    def video_settings(self, cfg: BaseModel) -> Any:
        """How camera-only videos are read (an object with the attributes ``generator.sources.base.VideoSource``
        reads, plus ``fps``, ``extract_frames``, ``frame_format``), when this family declares it; else None."""
        return None

    def derive_video(self, video: Any, cfg: BaseModel) -> Tables:
        """Per camera-only video (``video``: ``generator.pipeline.video.VideoInputs``); tables named in
        ``tables()``, as ``derive``."""
        return {}

    def frames_to_extract(self, tables: Tables) -> Any:
        """The frames of a video its derived ``tables`` name an extracted image for (an int array); None."""
        return None


class AsksQuestions:
    """Its QA families and templates."""

    qa_names: tuple[str, ...] = ()  # the names of its QA families (``qa_families()``), generated by default

    def qa_families(self) -> list[Any]:
        """Its QA families (``generator.qa.fields.Family``), in the order their rows are laid out."""
        return []

    def template_dirs(self) -> list[Path]:
        """Folders of its YAML templates (read after the core's, before ``qa.template_dirs``)."""
        return []

    def video_qa(self, tables: Tables, cfg: BaseModel) -> list[Any]:
        """Its QA batches (``generator.qa.video.VideoBatch``) of a camera-only video from the tables its
        ``derive_video`` made (``tables``: every family's); [] for none."""
        return []


class ExportsFiles:
    """Its exports: files in the paper's own format, written by ``drivegen run`` and by a command."""

    def exports(self) -> list[Export]:
        """Its exports (``Export``), in the order they are written."""
        return []

    def export_command(self) -> str | None:
        """The module path of its ``drivegen export <name>`` command (``<name>``: the family's ``name``) when it has
        options of its own: the module's docstring is its help, ``HELP`` its one line, ``add_arguments(parser)``
        adds its arguments, ``main(args) -> int`` runs it. None: ``drivegen export <name> RUN [--out] [--config]``
        writes its ``exports()`` (a family with neither has no export)."""
        return None


class Scores:
    """``drivegen score <name>``: its scorer."""

    score_name: str | None = None  # the name ``drivegen score`` takes (default: ``name`` with '-' for '_')

    def scorer(self) -> str | None:
        """The module path of its scorer (``HELP``, ``score(pred, target, **options) -> dict``, ``to_text``);
        None for none. Imported only when ``drivegen score`` uses it."""
        return None

    def score_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add its scorer's own options to ``drivegen score``'s argparse parser."""

    def score_options(self, args: argparse.Namespace) -> dict[str, Any]:
        """The keyword options its scorer takes from the parsed ``args`` ({} when none was given); InputError
        for an unusable combination."""
        return {}


class Summarises:
    """Its entry of the run summary (``summary.json``, the lines ``drivegen run`` prints)."""

    title: str = ""

    def summary(self, counts: dict[str, int], exports: dict[str, dict], camera_only: bool) -> SummaryEntry | None:
        """Its typed entry of the run summary (``schemas.summary.SummaryEntry``: ``to_json()`` and ``lines()``),
        from its own counts (what its ``counts`` returned) summed over the run's scenes and its exports'
        summaries; None for none."""
        return None

    def summary_entry(self, data: dict[str, Any]) -> SummaryEntry:
        """Its entry read back from ``summary.json`` (``data``: the entry's ``to_json()``)."""
        return FamilyEntry(self.title, dict(data))


class Reports:
    """Its parts of the dataset card and of the HTML report."""

    def card_section(self, reader: Any, cfg: BaseModel) -> str | None:
        """Markdown for the dataset card (a ``## `` section); None for none."""
        return None

    def report_video_cells(self, reader: Any, video_id: str, counts: dict[str, int]) -> dict[str, str]:
        """Its columns of the report's table of a camera-only run's videos: {header: cell} for one video
        (``counts``: its own counts of the video, what its ``counts`` returned)."""
        return {}

    def report_sample_note(self, row: dict[str, Any], cfg: BaseModel) -> str | None:
        """A sentence the report's sample browser shows under a QA row of one of its QA families (``row``: the
        QA row; ``cfg``: the run's config), for what a reader needs to read the row right; None for none."""
        return None


class AddsCommands:
    """Extra ``drivegen`` subcommands."""

    def commands(self) -> list[str]:
        """Module paths of extra ``drivegen`` subcommands (``add_parser(subparsers)``, ``main(args)``)."""
        return []


HOOK_GROUPS: tuple[type, ...] = (Configured, WritesTables, Derives, DerivesVideo, AsksQuestions, ExportsFiles, Scores,
                                 Summarises, Reports, AddsCommands)


class PaperFamily(Configured[S], WritesTables, Derives, DerivesVideo, AsksQuestions, ExportsFiles, Scores, Summarises,
                  Reports, AddsCommands):
    """A paper family: every hook group (``HOOK_GROUPS``). Subclass it (``PaperFamily[MySettings]`` types
    ``settings(cfg)``), override what the family has and declare one instance (``FAMILY``) in the family's
    package. ``name`` is the registry key; ``title`` the paper's name as people write it; ``order`` places it
    among the families."""

    order: int = 100

    def __repr__(self) -> str:
        return f"<paper family {self.name!r}>"


FAMILY_COUNTS = "families"  # the key of a scene's manifest counts that holds each family's own counts, by name


def family_counts(counts: dict, name: str) -> dict:
    """The counts of family ``name`` in a scene's manifest counts, or in a run's summed ones: its own namespace
    (``counts["families"][name]``, what its ``counts()`` returned). A manifest written before the namespace holds
    every family's counts among the core's: those are returned whole."""
    if FAMILY_COUNTS not in counts:
        return counts
    return counts[FAMILY_COUNTS].get(name, {})


def add_family_counts(counts: dict, name: str, own: dict) -> None:
    """Put what family ``name``'s ``counts()`` returned (``own``) into a scene's manifest counts, in its own
    namespace: never over a key of the core's or of another family's."""
    if own:
        counts.setdefault(FAMILY_COUNTS, {})[name] = dict(own)


def declared_output(fam: PaperFamily, tables: dict, hook: str) -> dict:
    """``tables`` as ``fam.<hook>()`` (``derive`` or ``derive_video``) returned them, each name checked against
    the tables the family declares (``tables()``); FamilyError naming the family, the hook and the tables
    otherwise. A family writes only its own tables: a core table or another family's is never replaced."""
    declared = {t.name for t in fam.tables()}
    undeclared = sorted(set(tables) - declared)
    if undeclared:
        raise FamilyError(f"paper family {fam.name!r}: {hook}() returned {', '.join(map(repr, undeclared))}, which its "
                          f"tables() does not declare (it declares {sorted(declared) or 'none'}); a family returns "
                          f"only its own tables, never a core table or another family's", stage=hook)
    return tables


def resolve(ref: str):
    """The object a ``"module:attribute"`` reference names (imported now)."""
    mod_name, _, attr = ref.partition(":")
    obj = importlib.import_module(mod_name)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


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
