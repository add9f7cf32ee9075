"""The paper family contract: what a family declares and what drivegen calls, in small typed hook groups.

A *paper family* (STRIDE-QA, DRAMA-X, PIE/JAAD, Intention-Drive, or a user's own) is one package that
declares a ``PaperFamily`` object (``FAMILY``). Its hooks come in groups (``HOOK_GROUPS``; every hook's signature
and docstring is listed in ``docs/reference/family-hooks.md``, generated from this module):

    Configured      config_section, config_model(), moved_settings(), settings(cfg): its section of the config
    WritesTables    tables(), schemas(): the per-scene run tables it writes (``schemas.layout.TableLayout``)
    Derives         derive(scene, cfg), counts(tables, cfg): per 3D scene, in the attributes stage
    DerivesVideo    video_settings(cfg), derive_video(video, cfg), frames_to_extract(tables): per camera-only video
    AsksQuestions   qa_names, qa_families(), template_dirs(), video_qa(tables, cfg): its QA families and templates
    ExportsFiles    exports(), export_command(): its exports (``Export``), written by ``drivegen run`` and by
                    ``drivegen export <name>`` (with the options of its own command, when it has one)
    Scores          score_name, scorer(), score_arguments(parser), score_options(args): ``drivegen score``
    Summarises      summary(counts, exports, camera_only), summary_entry(data): its typed run summary entry
                    (``SummaryEntry``)
    Reports         card_section(...), report_video_cells(...), report_sample_note(...): card and HTML report
    AddsCommands    commands(): extra ``drivegen`` subcommands (module paths)

Every hook is optional; the defaults do nothing. A family's author imports one module,
``generator.families.api`` (this contract and the core's functions a family calls). The registry that finds
the families is ``schemas.families``; this module imports nothing of drivegen but its errors and, for
annotations, the layout of a run table, so any layer may read the contract without loading a family.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, Protocol, TypeVar

from schemas.errors import FamilyError

if TYPE_CHECKING:  # annotations only: the contract names these types without importing them at run time
    import argparse

    import pyarrow as pa
    from pydantic import BaseModel

    from schemas.table_layout import TableLayout


class SummaryEntry(Protocol):
    """A paper family's entry of the run summary."""

    def to_json(self) -> dict: ...

    def lines(self) -> list[str]: ...


@dataclass
class FamilyEntry:
    """The entry of a family that declares no type for it (or is not installed where the summary is read)."""

    title: str
    data: dict

    def to_json(self) -> dict:
        return dict(self.data)

    def lines(self) -> list[str]:
        return [f"{self.title}: " + ", ".join(f"{k}={v}" for k, v in self.data.items())]



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


__all__ = ["FAMILY_COUNTS", "HOOK_GROUPS", "AddsCommands", "AsksQuestions", "Configured", "Derives", "DerivesVideo",
           "Export", "ExportsFiles", "FamilyEntry", "PaperFamily", "Reports", "Scores", "SummaryEntry", "Summarises", "Tables",
           "WritesTables", "add_family_counts", "declared_output", "family_counts", "resolve"]
