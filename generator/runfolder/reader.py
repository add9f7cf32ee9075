"""The read side of a run folder: ONE rule decides which rows belong to a run.

    A file belongs to the run exactly when the manifest of a finished scene lists it.

Every command and writer reads through ``RunReader`` (``run --resume``, ``regenerate``, ``export``,
``validate``, ``inspect``, the card, the report): a scene staged but not committed, a file a killed worker
left, or a stray file in a table folder is ignored by all of them alike. Works on any filesystem
``RunStore`` opens (local paths, ``s3://``, ``gs://``, ...).

A run folder written by ``drivegen regenerate`` is *derived*: its ``run.json`` names its parent run, its own
manifests list its QA shards, and every other table is read from the parent (``RunReader.table_owner``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa

from generator.runfolder.keys import config_key, source_key, text_key
from generator.runfolder.store import RunStore
from schemas import layout
from schemas.config import PipelineConfig, config_from_yaml
from schemas.errors import InputError, RunFolderError
from schemas.summary import RunSummary
from schemas.tables import ERRORS
from schemas.vocab import CAMERA_ONLY_SOURCES


@dataclass(frozen=True)
class SceneEntry:
    """One finished scene: its id and its manifest."""

    scene_id: str
    manifest: dict

    @property
    def files(self) -> list[dict]:
        return self.manifest.get("files", [])


class RunReader:
    """``RunReader(uri_or_store)``: the committed content of a run folder."""

    def __init__(self, run: str | RunStore, require: bool = True, scenes: list[str] | None = None,
                 keep_tables: bool = False):
        """``scenes``: read only these scenes' manifests (a task that works on a few scenes of a large run: its
        cost does not grow with the run); the reader then knows no other finished scene. ``keep_tables``: each
        table's files are read once, whole, and kept; later reads of them (other columns) are served from memory
        (the builders of one scene's parts read overlapping tables; keep such a reader only as long as its scenes
        are worked on)."""
        self.store = run if isinstance(run, RunStore) else RunStore(run)
        self._only = None if scenes is None else list(scenes)
        self._kept: dict[tuple, pa.Table] | None = {} if keep_tables else None
        if require and not self.is_run_folder():
            raise RunFolderError(f"{self.store.uri} is not a drivegen run folder (no {layout.CONFIG}, "
                                 f"{layout.RUN_STATE} or {layout.MANIFEST_DIR}/ inside); pass the --out folder of "
                                 "a `drivegen run`", file=self.store.uri)

    @property
    def uri(self) -> str:
        return self.store.uri

    def is_run_folder(self) -> bool:
        s = self.store
        return s.exists(layout.CONFIG) or s.exists(layout.RUN_STATE) or bool(s.list(layout.MANIFEST_DIR))

    # ---- the run's own files
    def _json(self, rel: str, default=None):
        # read, not asked first whether it exists: on object storage that question is one more request a file
        try:
            return self.store.read_json(rel)
        except FileNotFoundError:  # only a missing file (a network error is another OSError)
            return default
        except (ValueError, OSError) as err:
            raise RunFolderError(f"{self.store.uri_of(rel)} is unreadable: {err}",
                                 file=self.store.uri_of(rel)) from None

    @cached_property
    def run_state(self) -> dict:
        return self._json(layout.RUN_STATE, {}) or {}

    def config_text(self) -> bytes | None:
        try:
            return self.store.read_bytes(layout.CONFIG)
        except FileNotFoundError:
            return None

    def config(self) -> PipelineConfig:
        """The run's PipelineConfig (``config.yaml``); the defaults when the folder has none."""
        text = self.config_text()
        return config_from_yaml(text, self.store.full(layout.CONFIG)) if text is not None else PipelineConfig()

    def source(self) -> dict | None:
        """``source.json`` (of the parent run for a derived folder), or None."""
        own = self._json(layout.SOURCE)
        if own is None and self.parent is not None:
            return self.parent.source()
        return own

    @property
    def camera_only(self) -> bool:
        """True for a run over camera-only logs (``schemas.vocab.CAMERA_ONLY_SOURCES``: JAAD videos): no 3D
        tables, its outputs are its families' tables and extracted frames."""
        return (self.source() or {}).get("kind") in CAMERA_ONLY_SOURCES

    def require_3d(self, command: str) -> "RunReader":
        """``self`` when the run holds 3D tables; an InputError naming ``command`` for a camera-only run."""
        if self.camera_only:
            raise InputError(f"{self.uri} is a camera-only run (source {self.source().get('kind')}): {command} needs "
                             "the 3D tables of a nuScenes-format or AV2 run (a camera-only run's families export "
                             "with their own commands: drivegen -h)", file=self.uri)
        return self

    @cached_property
    def _plan(self) -> dict:
        return self._json(layout.SCENES, {}) or {}

    def planned_scenes(self) -> list[str]:
        return list(self._plan.get("scene_ids", []))

    def planned_work(self) -> dict[str, float]:
        """The source's work estimates recorded when the run was planned (``LogSource.work_estimates``), which
        order a resumed run's scenes as they ordered the first; {} for a run folder without them."""
        return dict(self._plan.get("work_estimate", {}))

    def summary(self) -> RunSummary | None:
        """The run's ``summary.json`` (``schemas.summary.RunSummary``); None before a run has finished."""
        data = self._json(layout.SUMMARY)
        return RunSummary.from_json(data) if isinstance(data, dict) else None

    @cached_property
    def parent(self) -> "RunReader | None":
        uri = self.run_state.get("parent")
        return RunReader(uri, scenes=self._only) if uri else None

    # ---- finished scenes
    def _manifest_paths(self) -> list[str]:
        if self._only is not None:  # a scene without a manifest is skipped when it is read (_read_manifest)
            return list(map(layout.manifest_file, self._only))
        return [rel for rel in self.store.list(layout.MANIFEST_DIR)
                if rel.endswith(".json") and not layout.is_tmp_name(rel)]

    def _read_manifest(self, rel: str) -> dict | None:
        """The manifest at ``rel``; None when there is none (a scene not finished)."""
        m = self._json(rel)
        if m is None:
            return None
        if not isinstance(m, dict) or "scene_id" not in m:
            raise RunFolderError(f"{self.store.uri_of(rel)}: not a drivegen manifest", file=self.store.uri_of(rel))
        return m

    @cached_property
    def _scenes(self) -> dict[str, SceneEntry]:
        out: dict[str, SceneEntry] = {}
        for rel in self._manifest_paths():
            m = self._read_manifest(rel)
            if m is not None:
                out[m["scene_id"]] = SceneEntry(m["scene_id"], m)
        return dict(sorted(out.items()))

    def iter_manifests(self):
        """Every finished scene's manifest, read one at a time and not kept (the cached ``manifests()`` holds all
        of them: a driver that sums a large run's figures streams them instead)."""
        if "_scenes" in self.__dict__:
            yield from self.manifests()
            return
        for rel in sorted(self._manifest_paths()):
            m = self._read_manifest(rel)
            if m is not None:
                yield m

    def refresh(self) -> "RunReader":
        """Forget cached manifests (after more scenes were committed)."""
        for name in ("_scenes", "run_state", "parent"):
            self.__dict__.pop(name, None)
        return self

    def scene_ids(self) -> list[str]:
        """The finished scenes, sorted."""
        return list(self._scenes)

    def manifest(self, scene_id: str) -> dict | None:
        e = self._scenes.get(scene_id)
        return e.manifest if e else None

    def manifests(self) -> list[dict]:
        return [e.manifest for e in self._scenes.values()]

    # ---- tables
    def table_owner(self, table_name: str) -> "RunReader":
        """The run folder whose manifests hold ``table_name``: this one, or the parent of a derived folder
        that does not produce that table itself."""
        produced = set(self.run_state.get("tables", [])) if self.run_state.get("parent") else None
        if produced is not None and table_name not in produced and self.parent is not None:
            return self.parent.table_owner(table_name)
        return self

    def files(self, table_name: str, scenes: list[str] | None = None) -> list[str]:
        """Manifest-listed files of a table ('qa', 'objects', 'perception/objects', ...), sorted by scene
        then name; only ``scenes`` when given."""
        owner = self.table_owner(layout.table(table_name).name)
        if owner is not self:
            return owner.files(table_name, scenes)
        t = layout.table(table_name)
        prefix = t.folder + "/"
        entries = self._scenes.values() if scenes is None else \
            [self._scenes[s] for s in sorted(set(scenes)) if s in self._scenes]  # a lookup, not a scan of the run
        out = []
        for entry in entries:
            out += sorted(f["path"] for f in entry.files
                          if f["path"].startswith(prefix) and "/" not in f["path"][len(prefix):]
                          and f["path"].endswith("." + t.ext))
        return out

    def scenes_with(self, table_name: str, scenes: list[str]) -> list[str]:
        """Those of ``scenes`` whose manifest lists a file of the table, in the order given (whatever the
        files' names: a folder written before a table was stored by split names them otherwise)."""
        return [s for s in scenes if self.files(table_name, [s])]

    def read_table(self, table_name: str, scenes: list[str] | None = None, columns: list[str] | None = None,
                   schema: pa.Schema | None = None) -> pa.Table | None:
        """The committed rows of a table with their declared types (``schema``, default: the schema each
        file's metadata names, ``schemas.tables.read_parquet``); None when no finished scene has such a file."""
        owner = self.table_owner(layout.table(table_name).name)
        files = self.files(table_name, scenes)
        if not files:
            return None
        t = layout.table(table_name)
        try:
            if self._kept is None or schema is not None:
                return owner.store.read_parquet(files, schema, columns)
            key = (owner.store.uri, tuple(files))
            if key not in self._kept:
                self._kept[key] = owner.store.read_parquet(files)
            whole = self._kept[key]
            return whole if columns is None else whole.select(list(columns))
        except (OSError, ValueError, KeyError, pa.ArrowException) as err:  # KeyError: a column it lacks
            raise RunFolderError(f"cannot read {t.folder} of {owner.uri}: {err}", file=owner.store.uri_of(t.folder)) from None

    def read_scene(self, table_name: str, scene_id: str, columns: list[str] | None = None) -> pa.Table | None:
        return self.read_table(table_name, [scene_id], columns)

    def errors(self) -> list[dict]:
        """Rows of ``errors/`` (failed scenes and stages of this folder)."""
        files = [rel for rel in self.store.list(layout.ERRORS_DIR)
                 if rel.endswith(".parquet") and not layout.is_tmp_name(rel)]
        if not files:
            return []
        try:
            return self.store.read_parquet(files, ERRORS).to_pylist()
        except (OSError, ValueError, pa.ArrowException) as err:
            raise RunFolderError(f"cannot read {self.store.uri_of(layout.ERRORS_DIR)}: {err}") from None

    # ---- consistency
    def check(self) -> list[str]:
        """Problems that break exactly-once output or a run's description (empty list = none):
        leftovers of a killed writer (temporary files, staging, half-committed scenes), a listed file
        missing or with another row count, a scene file no manifest lists (a partial scene some readers
        would see), a file name pyarrow/pandas/datasets would skip, an unreadable file, and scenes made with
        another config or source than the run describes (a mixed dataset), a run's config.yaml or run.json
        gone."""
        store = self.store
        problems: list[str] = []
        every = store.list("", recursive=True)
        present = set(every)
        described = [name for name in (layout.CONFIG, layout.RUN_STATE) if name in present]
        if described and any(p.startswith(layout.MANIFEST_DIR + "/") for p in every):  # drivegen run writes both
            problems += [f"{name} is missing: the folder no longer says how its rows were made (restore it; a run "
                         f"folder drivegen run made always has it)" for name in (layout.CONFIG, layout.RUN_STATE)
                         if name not in present]
        problems += [f"temporary file left by a killed writer: {p}" for p in every if layout.is_leftover_tmp_name(p)]
        problems += [f"leftover of a killed writer: {p}" for p in every
                     if p.startswith((layout.STAGING_DIR + "/", layout.ATTEMPTS_DIR + "/", layout.PENDING_DIR + "/"))]
        listed: dict[str, int | None] = {}
        for m in self.manifests():
            for f in m.get("files", []):
                listed[f["path"]] = f.get("rows")
        for path, rows in sorted(listed.items()):
            name = path.rsplit("/", 1)[-1]
            if name.startswith((".", "_")):
                problems.append(f"listed file that pyarrow, pandas and datasets skip (name starts with '{name[0]}'): "
                                f"{path}")
            if path not in present:
                problems.append(f"manifest lists a missing file: {path}")
            elif path.endswith(".parquet"):
                try:
                    n = store.read_parquet(path).num_rows
                except Exception as err:  # noqa: BLE001 - reported, not raised
                    problems.append(f"unreadable parquet {path}: {err}")
                    continue
                if rows is not None and n != rows:
                    problems.append(f"{path}: {n} rows, manifest says {rows}")
        folders = "|".join(re.escape(t.folder) for t in layout.TABLES.values())
        scene_file = re.compile(rf"^({folders})/[^/]+$")
        for p in sorted(present):
            if scene_file.match(p) and not layout.is_tmp_name(p) and p not in listed:
                problems.append(f"scene file no manifest lists (readers that glob the folder would see it): {p}")
        problems += self._mixed()
        return problems

    def _mixed(self) -> list[str]:
        """Scenes whose manifest records another config than the run's config.yaml (a hand edit before
        ``--resume --force``, or a mixed copy)."""
        text = self.config_text()
        if text is None:
            return []
        try:
            want = config_key(config_from_yaml(text, layout.CONFIG))
        except Exception:  # noqa: BLE001
            want = text_key(text)
        out = []
        by_key: dict[str, list[str]] = {}
        for m in self.manifests():
            if m.get("config") and m["config"] != want:
                by_key.setdefault(m["config"], []).append(m["scene_id"])
        for key, scenes in sorted(by_key.items()):
            out.append(f"mixed config: {len(scenes)} scene(s) were made with config {key}, not the run's {want} "
                       f"(config.yaml changed during the run): {scenes[:5]}{' ...' if len(scenes) > 5 else ''}")
        recorded = self.run_state.get("source_key")
        src = self._json(layout.SOURCE)
        if recorded and src is not None:
            if source_key(src) != recorded:
                out.append(f"source.json changed since the run started (recorded {recorded}, now {source_key(src)})")
        return out


def read_table(run: str | RunStore | RunReader, table_name: str = "qa", schema: pa.Schema | None = None,
               scenes: list[str] | None = None, columns: list[str] | None = None) -> pa.Table | None:
    """The committed rows of ``table_name`` of a run folder (``RunReader.read_table``)."""
    reader = run if isinstance(run, RunReader) else RunReader(run)
    return reader.read_table(table_name, scenes, columns, schema)
