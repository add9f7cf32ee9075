"""``drivegen publish RUN --out DEST``: a finished run folder as a release in the layout the ecosystem reads
unchanged (the Hugging Face Hub's Parquet configs, WebDataset tars), written exactly once.

**Layout of DEST.**

* ``<config>/<split>-<k:05d>-of-<K:05d>.parquet``: per configuration of the run's dataset card (``qa``, the
  default, then the per-scene tables ``labels``, ``attributes``, ...: ``exports.card_configs``) and split, the
  rows of every committed scene shuffled across scenes with ``seed`` and cut into shards of about
  ``target_bytes`` (the row count per shard is calibrated on the first shard's rows, written twice in memory);
* ``wds/<split>-<k:05d>-of-<K:05d>.tar``: the run's WebDataset samples (one per keyframe, self-contained: its
  JSON and every image it references, each image once per sample), shuffled across scenes with ``seed`` and
  packed into tars of at most ``target_bytes`` (a single larger sample gets a tar of its own);
* ``README.md``: the run's dataset card with its ``configs`` pointing at the published shards, and a section on
  the release; ``SHA256SUMS``: the checksum of every file (``sha256sum -c`` reads it);
* ``publish.json``: the marker (``generator.writers.owned``: DEST is drivegen's own folder).

**Exactly once, resumable, keyed by content.** The plan (every file, its rows) follows from the run's manifests,
the bytes of the run files each shard is made of (their SHA-256), the seed and the target alone; each shard has a
key, the hash of all of that (``Plan.file_keys``). The marker is written first with ``"state": "writing"``, the
plan's files and their keys, then each file is built in memory and written atomically (``RunStore.write_bytes``),
then ``SHA256SUMS`` and the marker with ``"state": "done"``. A publish killed midway and run again keeps the shards
already in place under the same key (a file at its final name is whole) and writes the rest, which are the same
bytes: the same rows in the same order through the same writer. Any other file of an earlier publish (another
key: a changed run, another seed or target; a file the new plan lacks) is deleted and written again, and so is
a killed writer's temporary file; the files an earlier marker lists are checked to lie inside DEST first
(``RunStore.deletable``). A DEST holding anything else is refused.

**Refused before anything is written** (exit 2): a RUN still being written (its lock is held), a RUN with
failed or unfinished scenes unless ``allow_partial``, a DEST that cannot be reached, a DEST holding files that
are not an earlier publish, a DEST inside RUN.

Each shard is a pure function of the plan (``write_shard``); ``publish`` runs
them in this process or, with ``workers`` or a Ray ``address``, as Ray tasks (a local Ray or a cluster whose
nodes reach RUN and DEST).
"""
from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import logging
import tarfile
import time
import zlib
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import yaml

from generator.pipeline.exports import card_configs
from generator.pipeline.ray_connect import ensure_ray, stop_ray
from generator.runfolder import RunReader, RunStore
from generator.runfolder.lock import live_lock
from generator.writers.card import code_span
from generator.writers.owned import owned_files
from schemas import layout
from schemas.errors import RunFolderError
from schemas.tables import write_parquet

log = logging.getLogger("drivegen.publish")

FORMAT = "drivegen-publish/1"
MARKER = "publish.json"
CHECKSUMS = "SHA256SUMS"
CARD = "README.md"
WDS = "wds"
_TAR_BLOCK = 512


@dataclass
class ParquetShard:
    """One published Parquet shard: rows ``k * rows_per_shard`` ... of the seeded permutation of the rows of
    ``sources`` (run-folder paths with their row counts, in a fixed order)."""

    path: str
    config: str
    split: str
    sources: list[tuple[str, int]]
    seed: int
    k: int
    rows_per_shard: int
    rows: int
    content: str = ""  # the SHA-256 of the sources' bytes (``_content``): what the shard is made of


@dataclass
class WdsShard:
    """One published tar: the samples ``(run tar, sample key)`` in this order."""

    path: str
    split: str
    samples: list[tuple[str, str]]
    content: str = ""  # the SHA-256 of its run tars' bytes (``_content``)


@dataclass
class Plan:
    run: str
    seed: int
    target_bytes: int
    parquet: list[ParquetShard] = field(default_factory=list)
    wds: list[WdsShard] = field(default_factory=list)
    rows: dict = field(default_factory=dict)  # {config: {split: rows}}
    scenes: int = 0

    @property
    def files(self) -> list[str]:
        return [s.path for s in self.parquet] + [s.path for s in self.wds] + [CARD, CHECKSUMS]

    def key(self) -> str:
        """What makes two plans the same release: every shard's key (``file_keys``), seed and target."""
        body = json.dumps({"format": FORMAT, "seed": self.seed, "target": self.target_bytes,
                           "files": self.file_keys()}, sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:24]

    def file_keys(self) -> dict[str, str]:
        """{shard path: its key}: the hash of everything its bytes follow from (sources, their content, rows,
        seed): a shard already in DEST under the same key is the same bytes and is kept; any other is written
        again."""
        return {s.path: hashlib.sha256(json.dumps([FORMAT, asdict(s)], sort_keys=True).encode()).hexdigest()[:24]
                for s in self.parquet + self.wds}


# ------------------------------------------------------------------------------------------ checks
def check_run(reader: RunReader, allow_partial: bool) -> None:
    """RunFolderError when RUN is still being written, or has failed or unfinished scenes (unless
    ``allow_partial``), naming them."""
    held = live_lock(reader.store)  # the lock rule of every writer: a live pid here, or a recent heartbeat
    if held is not None:
        raise RunFolderError(f"{reader.uri} is still being written by {held.describe()}: publish it once that run "
                             "has ended", file=reader.store.uri_of(layout.LOCK))
    if allow_partial:
        return
    errs = {e.get("scene_id") or "(run)": e for e in reader.errors()}
    failed = sorted(errs)
    done = set(reader.scene_ids())
    unfinished = [s for s in reader.planned_scenes() if s not in done and s not in errs]
    if failed or unfinished:
        named = "; ".join(f"{s}: stage {errs[s].get('stage')}: {str(errs[s].get('message'))[:120]}"
                          for s in failed[:5] if s in errs)
        raise RunFolderError(f"{reader.uri} has {len(failed)} failed and {len(unfinished)} unfinished scene(s)"
                             + (f" ({named})" if named else "")
                             + (f"; unfinished: {', '.join(unfinished[:5])}" if unfinished else "")
                             + ": publish refuses a partial dataset; finish it with drivegen run --resume "
                             f"{reader.uri}, or pass --allow-partial to publish the finished scenes alone",
                             file=reader.uri)


def open_dest(dest: str, reader: RunReader) -> RunStore:
    """DEST as a store: refused when unreachable or inside RUN."""
    store = RunStore(dest)
    if store.is_local and reader.store.is_local:
        d, r = Path(store.base).resolve(), Path(reader.store.base).resolve()
        if d == r or r in d.parents:
            raise RunFolderError(f"{store.uri} is inside the run folder {reader.uri}: publish to a folder of its "
                                 "own", file=store.uri)
    try:
        if store.exists(""):
            store.list("", recursive=False)
    except OSError as err:
        raise RunFolderError(f"cannot reach {store.uri}: {err}", file=store.uri) from None
    return store


# ------------------------------------------------------------------------------------------ the plan
def _sources(reader: RunReader) -> tuple[dict, dict]:
    """({config: {split: [(path, rows)]}}, {split: [wds tar paths]}) from the manifests and the card's configs
    (one rule for the split of a scene and the files of a config)."""
    rows_of, scene_of = {}, {}
    for m in reader.manifests():
        for f in m.get("files", []):
            rows_of[f["path"]] = f.get("rows") or 0
            scene_of[f["path"]] = m["scene_id"]
    configs: dict = {}
    split_of_scene: dict[str, str] = {}
    for c in card_configs(reader, reader.config()):
        per = {}
        for split, files in c["data_files"].items():
            paths = sorted(p for p in rows_of if fnmatch.fnmatch(p, files)) if isinstance(files, str) \
                else sorted(files)
            per[split] = [(p, rows_of[p]) for p in paths if rows_of.get(p)]
            if c["name"] == "qa":
                split_of_scene.update({scene_of[p]: split for p in paths})
        configs[c["name"]] = {s: v for s, v in per.items() if v}
    wds_dir = layout.TABLES["wds"].folder + "/"
    tars: dict[str, list[str]] = defaultdict(list)
    for p in sorted(scene_of):
        if p.startswith(wds_dir) and p.endswith(".tar") and scene_of[p] in split_of_scene:
            tars[split_of_scene[scene_of[p]]].append(p)
    return configs, dict(tars)


def _permutation(seed: int, config: str, split: str, n: int) -> np.ndarray:
    """The order of a (config, split)'s rows in the release: a permutation drawn from the seed and the names
    (so two configs or splits are shuffled independently)."""
    rng = np.random.default_rng([int(seed), zlib.crc32(f"{config}/{split}".encode())])
    return rng.permutation(n)


def plan(reader: RunReader, seed: int, target_bytes: int) -> Plan:
    configs, tars = _sources(reader)
    p = Plan(run=reader.uri, seed=seed, target_bytes=int(target_bytes), scenes=len(reader.scene_ids()))
    for config, splits in configs.items():
        for split, sources in splits.items():
            n = sum(r for _, r in sources)
            per = _rows_per_shard(reader.store, config, split, sources, seed, n, target_bytes)
            k_total = -(-n // per)
            p.rows.setdefault(config, {})[split] = n
            content = _content(reader.store, [path for path, _ in sources])
            for k in range(k_total):
                p.parquet.append(ParquetShard(f"{config}/{split}-{k:05d}-of-{k_total:05d}.parquet", config, split,
                                              sources, seed, k, per, min(per, n - k * per), content))
    for split, paths in sorted(tars.items()):
        p.wds += _plan_tars(reader.store, split, paths, seed, target_bytes)
    return p


def _content(store: RunStore, paths: list[str]) -> str:
    """The SHA-256 of the bytes of the run files ``paths``, in this order: the content a shard is made of (a run
    changed since an earlier publish, even with the same files and row counts, gives other keys)."""
    h = hashlib.sha256()
    for path in paths:
        with store.fs.open_input_stream(store.full(path)) as fh:
            while chunk := fh.read(8 << 20):
                h.update(chunk)
        h.update(b"\0" + path.encode() + b"\0")
    return h.hexdigest()


def _rows_per_shard(store: RunStore, config, split, sources, seed, n, target_bytes) -> int:
    """Rows per shard for about ``target_bytes`` a shard: first from the run files' bytes per row, then twice
    from the bytes of the first shard written with that many rows (shuffled rows compress differently from a
    scene's own)."""
    on_disk = sum(store.size(path) or 0 for path, _ in sources)
    per = max(1, min(n, int(target_bytes / max(1.0, on_disk / max(1, n)))))
    for _ in range(2):
        size = len(_parquet_bytes(store, ParquetShard("", config, split, sources, seed, 0, per, per)))
        new = max(1, min(n, int(per * target_bytes / max(1, size))))
        if new == per:
            break
        per = new
    return per


# ------------------------------------------------------------------------------------------ Parquet shards
def shard_rows(shard: ParquetShard) -> tuple[np.ndarray, np.ndarray]:
    """(source index, row within that source) of the shard's rows, in release order."""
    n = sum(r for _, r in shard.sources)
    g = _permutation(shard.seed, shard.config, shard.split, n)[shard.k * shard.rows_per_shard:
                                                                (shard.k + 1) * shard.rows_per_shard]
    starts = np.cumsum([0] + [r for _, r in shard.sources])
    src = np.searchsorted(starts, g, side="right") - 1
    return src, g - starts[src]


def _parquet_bytes(store: RunStore, shard: ParquetShard) -> bytes:
    src, local = shard_rows(shard)
    order = np.lexsort((local, src))  # read each source once, its rows in file order
    pieces = []
    for s in np.unique(src):
        rows = local[order][src[order] == s]
        t = store.read_parquet(shard.sources[int(s)][0])
        pieces.append(t.take(pa.array(rows)))
    table = pa.concat_tables(pieces, promote_options="default").unify_dictionaries().combine_chunks()
    table = table.take(pa.array(np.argsort(order, kind="stable")))  # back to release order
    buf = io.BytesIO()
    write_parquet(buf, table, compression="zstd")
    return buf.getvalue()


# ------------------------------------------------------------------------------------------ WebDataset tars
def _tar_samples(store: RunStore, path: str) -> list[tuple[str, int]]:
    """(sample key, bytes it takes in a tar) of a run tar, in its order (keys: the member name before the
    first dot of its base name, as webdataset reads it)."""
    sizes: dict[str, int] = {}
    with tarfile.open(fileobj=io.BytesIO(store.read_bytes(path))) as tf:
        for m in tf.getmembers():
            if m.isfile():
                key = m.name.split(".", 1)[0]
                sizes[key] = sizes.get(key, 0) + _TAR_BLOCK + -(-m.size // _TAR_BLOCK) * _TAR_BLOCK
    return list(sizes.items())


def _plan_tars(store: RunStore, split: str, paths: list[str], seed: int, target_bytes: int) -> list[WdsShard]:
    samples = [(p, key, size) for p in paths for key, size in _tar_samples(store, p)]
    order = _permutation(seed, WDS, split, len(samples))
    groups: list[list[tuple[str, str]]] = []
    size = 0
    for i in order:
        p, key, s = samples[int(i)]
        if groups and size + s <= target_bytes:
            groups[-1].append((p, key))
            size += s
        else:
            groups.append([(p, key)])
            size = s
    k_total = len(groups)
    content = _content(store, paths)
    return [WdsShard(f"{WDS}/{split}-{k:05d}-of-{k_total:05d}.tar", split, g, content) for k, g in enumerate(groups)]


def _wds_bytes(store: RunStore, shard: WdsShard) -> bytes:
    members: dict[str, dict[str, list[tuple[tarfile.TarInfo, bytes]]]] = {}
    for path in sorted({p for p, _ in shard.samples}):
        by_key: dict[str, list] = defaultdict(list)
        with tarfile.open(fileobj=io.BytesIO(store.read_bytes(path))) as tf:
            for m in tf.getmembers():
                if m.isfile():
                    by_key[m.name.split(".", 1)[0]].append((m.name, tf.extractfile(m).read()))
        members[path] = by_key
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as out:
        for path, key in shard.samples:
            for name, data in members[path][key]:
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                out.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_shard(run: str, dest: str, shard: ParquetShard | WdsShard) -> str:
    """Build one shard (Parquet or tar) from the run folder and put it in DEST (atomically: a task retried writes
    the same bytes again); returns its path. A pure function of the plan: a Ray task."""
    build = _parquet_bytes if isinstance(shard, ParquetShard) else _wds_bytes
    RunStore(dest).write_bytes(shard.path, build(RunReader(run).store, shard))
    return shard.path


# ------------------------------------------------------------------------------------------ card, checksums
def card_text(reader: RunReader, p: Plan) -> str:
    """The run's dataset card with its configs pointing at the published shards, and a section on the release
    (what it quotes, the run's URI included, as literal text: ``code_span``)."""
    text = reader.store.read_bytes(CARD).decode("utf-8") if reader.store.exists(CARD) else ""
    meta, body = {}, text
    if text.startswith("---\n") and "\n---" in text[4:]:
        head, body = text[4:].split("\n---", 1)
        meta = yaml.safe_load(head) or {}
        body = body.lstrip("\n")
    meta["configs"] = [{"config_name": c, **({"default": True} if c == "qa" else {}),
                        "data_files": [{"split": s, "path": f"{c}/{s}-*.parquet"} for s in splits]}
                       for c, splits in p.rows.items()]
    meta.setdefault("pretty_name", "drivegen dataset")
    shards = defaultdict(int)
    for s in p.parquet:
        shards[(s.config, s.split)] += 1
    lines = ["", "## This release", "",
             f"Published by `drivegen publish` from {code_span(reader.uri)} ({p.scenes} scenes): rows shuffled across "
             f"scenes with seed {p.seed}, Parquet shards and WebDataset tars of about "
             f"{p.target_bytes / 2**20:.1f} MiB. "
             f"`{CHECKSUMS}` holds the SHA-256 of every file (`sha256sum -c {CHECKSUMS}`).", "",
             "| config | split | rows | shards |", "|---|---|---|---|"]
    lines += [f"| {c} | {s} | {n} | {shards[(c, s)]} |" for c, per in p.rows.items() for s, n in per.items()]
    tars = defaultdict(int)
    for w in p.wds:
        tars[w.split] += 1
    if tars:
        lines += ["", "WebDataset: " + ", ".join(f"{n} tar(s) of split {s} (`{WDS}/{s}-*.tar`)"
                                                 for s, n in tars.items())
                  + "; each sample is one keyframe with its JSON and the images it references."]
    front = "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000) + "---\n"
    return front + (body.rstrip("\n") + "\n" if body else "") + "\n".join(lines) + "\n"


def _sha256(store: RunStore, rel: str) -> str:
    return hashlib.sha256(store.read_bytes(rel)).hexdigest()


# ------------------------------------------------------------------------------------------ the command
@dataclass
class PublishResult:
    dest: str
    files: int
    rows: dict
    written: int  # files this call wrote, the marker included (the rest were in place from a killed publish)
    seconds: float
    bytes: int

    def line(self) -> str:
        rows = ", ".join(f"{c} {sum(v.values())}" for c, v in self.rows.items())
        kept = self.files - self.written
        note = f", {kept} in place from an interrupted publish" if kept else ""
        return (f"published {self.files} files ({self.bytes / 2**20:.1f} MiB; {self.written} written now{note}) "
                f"to {self.dest} in {self.seconds:.1f} s: rows {rows}")


def publish(run: str, dest: str, *, seed: int = 0, target_mb: float = layout.RELEASE_SHARD_MB,
            allow_partial: bool = False, workers: int = 0, address: str | None = None,
            stop_after: int | None = None) -> PublishResult:
    """Publish RUN into DEST (module docstring). ``workers``/``address``: shards as Ray tasks. ``stop_after``
    (tests): stop after writing that many shards, as a killed publish would."""
    t0 = time.perf_counter()
    reader = RunReader(run)
    check_run(reader, allow_partial)
    out = open_dest(dest, reader)
    p = plan(reader, seed, int(target_mb * 2**20))
    old = owned_files(out, "", MARKER, FORMAT, what="an earlier drivegen publish")  # checked: inside DEST, no link
    earlier = out.read_json(MARKER) if out.exists(MARKER) else {}
    keys = p.file_keys()
    before = earlier.get("keys") if isinstance(earlier.get("keys"), dict) else {}
    # an earlier publish's shard stays only when it is the same bytes (the same key: sources, their content, rows,
    # seed); every other file it wrote goes, and nothing else
    kept = {rel for rel in old if rel in keys and before.get(rel) == keys[rel] and out.exists(rel)}
    stale = [rel for rel in old if rel not in kept and rel != MARKER]
    for rel in stale:
        out.delete(rel)
    if earlier.get("plan") not in (None, p.key()) and stale:
        log.info("replaced %d file(s) of an earlier publish in %s (%d kept: the same bytes)", len(stale), out.uri,
                 len(kept))
    for rel in out.list("", recursive=True):  # a killed writer's temporary files (never a user's name)
        if layout.is_leftover_tmp_name(rel):
            out.delete(rel)
    marker = {"format": FORMAT, "state": "writing", "plan": p.key(), "run": reader.uri, "seed": seed,
              "target_shard_bytes": p.target_bytes, "files": p.files + [MARKER], "keys": keys, "rows": p.rows}
    out.write_json(MARKER, marker)
    todo = [s for s in p.parquet + p.wds if s.path not in kept]
    if stop_after is not None:
        todo = todo[:stop_after]
    _write_shards(reader.uri, out.uri, todo, workers, address)
    if stop_after is not None:
        raise RunFolderError(f"stopped after {len(todo)} shard(s) (stop_after)", file=out.uri)
    out.write_bytes(CARD, card_text(reader, p).encode("utf-8"))
    sums = {rel: _sha256(out, rel) for rel in p.files if rel != CHECKSUMS}
    out.write_bytes(CHECKSUMS, "".join(f"{h}  {rel}\n" for rel, h in sums.items()).encode())
    marker.update(state="done", sha256={**sums, CHECKSUMS: _sha256(out, CHECKSUMS)})
    out.write_json(MARKER, marker)
    total = sum(out.size(rel) or 0 for rel in p.files)
    files = len(p.files) + 1  # and the marker
    kept = len(p.parquet) + len(p.wds) - len(todo)  # shards a killed publish left; the card, sums and marker are new
    return PublishResult(out.uri, files, p.rows, files - kept, time.perf_counter() - t0, total)


def _write_shards(run: str, dest: str, shards: list, workers: int, address: str | None) -> None:
    if not shards:
        return
    if not workers and not address:
        for k, s in enumerate(shards, 1):
            write_shard(run, dest, s)
            log.info("publish: %d/%d %s", k, len(shards), s.path)
        return
    from generator.pipeline.ray_tasks import run_tasks  # ray: only where Ray runs (in-process publishing never)

    cfg = RunReader(run).config()
    cfg.ray.num_cpus = workers or None
    started = ensure_ray(cfg, address)  # the run's Ray rules: a cluster, or an embedded Ray with authentication
    written = iter(range(1, len(shards) + 1))
    try:
        run_tasks(write_shard, shards, cfg.ray, shared=(run, dest),
                  done=lambda path: log.info("publish: %d/%d %s", next(written), len(shards), path))
    finally:
        stop_ray(started)
