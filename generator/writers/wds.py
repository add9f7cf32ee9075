"""QA rows -> WebDataset shards named by scene (``OUT/wds/<safe scene>-<k:05d>.tar``).

One sample per keyframe. Its members (``<key>.<suffix>``, written as ``webdataset.TarWriter`` writes them,
below):

* ``json``: ``{"scene_id", "keyframe_index", "timestamp_us", "images": [...], "qas": [...]}``; ``qas`` are
  the keyframe's QA rows as ``schemas.tables.QA`` dicts (groundings with boxes and COCO RLE masks),
  ``images`` lists every image the groundings reference as ``{"member", "frame_index", "camera",
  "roles", "source_path"}`` (``member`` is the suffix of its tar member, null when the log has no image);
* ``f<frame_index:06d>.<camera lower-case>.jpeg``: each referenced frame image (current, context and
  future frames, every camera a grounding names). JPEG sources are stored byte for byte, others are
  encoded to JPEG;
* ``f<frame_index:06d>.<camera lower-case>.marked.jpeg`` (only with ``writers.wds.marked_images``): the same
  frame as a Set-of-Mark image, the ``Region [X]`` marks, masks and 2D boxes of every grounding of the
  sample on that image drawn (``generator.writers.marks.draw_marks``); its ``images`` entry names it as
  ``marked_member``.

Naming, chosen so both readers handle it with their defaults:

* the sample key ``<safe scene>_kf<keyframe:06d>`` has no dot: both the ``webdataset`` library and
  ``ray.data.read_webdataset`` split a member name at the first dot of its base name (key before,
  suffix after);
* suffixes are lower case (``webdataset`` lower-cases them by default, Ray does not);
* images end in ``.jpeg``, not ``.jpg``. Samples reference different frames and cameras, so their member
  sets differ. ``webdataset`` decodes ``.jpeg`` like ``.jpg`` (``.decode("rgb8")``). Ray's default decoder
  decodes ``.jpg`` into numpy arrays and then fails to build a block from columns that are arrays in some
  rows and missing in others; ``.jpeg`` members stay JPEG bytes in Ray (None where a sample lacks that
  image), which Arrow stores without trouble. The ``json`` member is decoded by both; its ``images``
  list names each sample's image members.

Shards hold at most ``WriterConfig.wds_max_samples`` samples and roll over before
``wds_max_bytes``; each is written under a temporary name and renamed into place, tar member times are
fixed so the same input gives the same bytes, and a rewritten scene loses its stale higher shards.

``write_sample`` adds a sample to a ``tarfile`` stream exactly as ``webdataset.TarWriter(path, mtime=0.0,
encoder=False)`` does (its members sorted by suffix, mode 0444, owner ``bigdata``, time 0.0 in a PAX
record; a stream; tests/writers/test_writers_wds.py compares the bytes). The library itself is not imported to write: its
package imports torch when torch is installed (about 1.4 CPU seconds and 180 MiB in every writing process,
measured 2026-11-28), which the default CPU pipeline never needs. Readers use the library as before.
"""
from __future__ import annotations

import io
import itertools
import json
import math
import os
import re
import tarfile
import uuid
from pathlib import Path
from typing import BinaryIO, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.sources.io import is_jpeg, jpeg_problem
from generator.sources.remote import is_remote, read_log_file
from generator.writers.parquet import numbered_files
from generator.types import DrivegenError
from schemas.config import WriterConfig
from schemas.layout import TABLES, safe_name, scene_file
from schemas.tables import QA, check_schema, plain_schema

WDS_DIR = TABLES["wds"].folder
_TAR_OVERHEAD = 1024  # tar header + padding per member (upper bound)


class WriterError(DrivegenError):
    """A writer could not produce its output (missing image, bad input table)."""


def wds_shard_path(out_dir: str | os.PathLike, scene_id: str, k: int) -> Path:
    return Path(out_dir) / scene_file("wds", scene_id, k)


def scene_wds_shards(out_dir: str | os.PathLike, scene_id: str) -> list[Path]:
    """The scene's existing shards, probed from 0 up to the first missing number (numbers are contiguous)."""
    return numbered_files(lambda k: wds_shard_path(out_dir, scene_id, k))


def sample_key(scene_id: str, keyframe_index: int) -> str:
    """Dot-free sample key (readers split member names at the first dot)."""
    return f"{safe_name(scene_id).replace('.', '_')}_kf{int(keyframe_index):06d}"


def image_member(frame_index: int, camera: str) -> str:
    """Suffix of an image member: ``f<frame:06d>.<camera>.jpeg``, camera lower-cased and made dot-free
    (see the module docstring for why)."""
    cam = re.sub(r"[^a-z0-9_-]+", "_", camera.lower())
    return f"f{int(frame_index):06d}.{cam}.jpeg"


def shard_members(shards: Iterable[BinaryIO], wanted: set[str]) -> dict[str, bytes]:
    """The image members named in ``wanted`` (``image_member`` names) found in a scene's shards (each a seekable
    binary file: only the headers and the wanted members are read), as written: published (blurred, re-encoded)
    as the run's ``anonymize`` said. An image that several samples share is the same bytes in each; the first is
    taken."""
    found: dict[str, bytes] = {}
    for fh in shards:
        with tarfile.open(fileobj=fh) as tf:
            for info in tf:
                name = info.name.split(".", 1)[-1]  # the sample key holds no dot
                if name in wanted and name not in found and info.isfile():
                    found[name] = tf.extractfile(info).read()
    return found


def _json_safe(x):
    """NaN/inf -> None so the JSON is strict (readers such as ``json.loads`` in other languages choke). For the
    few Python values around the rows; the rows themselves go through ``json_ready``."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def _json_ready_array(arr: pa.Array, drop: frozenset) -> pa.Array:
    t = arr.type
    if pa.types.is_floating(t):
        return pc.if_else(pc.is_finite(arr), arr, pa.scalar(None, t))
    if pa.types.is_struct(t):
        keep = [i for i in range(t.num_fields) if t.field(i).name not in drop]
        children = arr.flatten()  # the struct's offset and nulls applied
        return pa.StructArray.from_arrays([_json_ready_array(children[i], drop) for i in keep],
                                          fields=[t.field(i) for i in keep], mask=arr.is_null())
    if pa.types.is_fixed_size_list(t):
        n = t.list_size
        values = _json_ready_array(arr.values.slice(arr.offset * n, len(arr) * n), drop)
        return pa.FixedSizeListArray.from_arrays(values, n, mask=arr.is_null())
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        offsets = arr.offsets.to_numpy()  # of a sliced array: into the whole child, from offsets[0]
        values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        return cls.from_arrays(pa.array(offsets - offsets[0], arr.offsets.type), _json_ready_array(values, drop),
                               mask=arr.is_null())
    return arr


def json_ready(table: pa.Table, drop=()) -> pa.Table:
    """``table`` as its rows go into JSON, column by column in Arrow (not value by value in Python): NaN/inf
    floats null at any depth (as ``_json_safe``), and the columns and struct fields named in ``drop`` removed at
    any depth (as ``generator.writers.anonymize.strip_timestamps``), and dictionary columns decoded to their
    values (the same Python values, built several times faster by ``to_pylist``: a scene's groundings took 52 ms
    as dictionaries, 10 ms as plain strings)."""
    drop = frozenset(drop)
    names = [n for n in table.column_names if n not in drop]
    cols = [pa.chunked_array([_json_ready_array(c, drop)
                              for c in table.column(n).chunks or [pa.array([], table.column(n).type)]])
            for n in names]
    out = pa.Table.from_arrays(cols, names=names)
    return out.cast(plain_schema(out.schema))


def _resolve(path: str, image_root: str | os.PathLike | None) -> str:
    """A grounding's image: its path or URI as stored, or relative to ``image_root``."""
    if is_remote(path) or os.path.isabs(path) or image_root is None:
        return path
    return str(Path(image_root) / path)


def read_jpeg(path: str | os.PathLike, scene_id: str) -> bytes:
    """The image at ``path`` (a local path or, for logs on object storage, the object's URI) as JPEG bytes: a
    JPEG (by content) verbatim once its structure is whole (``generator.sources.io.jpeg_problem``: a truncated
    JPEG is refused, not packed), others re-encoded with OpenCV."""
    path = str(path)
    try:
        data = read_log_file(path)
    except FileNotFoundError:
        raise WriterError("image referenced by a QA grounding is missing", scene=scene_id, file=path,
                          stage="write_wds") from None
    except OSError as err:
        raise WriterError(f"image referenced by a QA grounding is unreadable: {err}", scene=scene_id, file=path,
                          stage="write_wds") from None
    if is_jpeg(data) or path.lower().endswith((".jpg", ".jpeg")):
        problem = jpeg_problem(data)
        if problem:
            raise WriterError(f"image referenced by a QA grounding is {problem}; restore it from the log and "
                              f"write the scene again", scene=scene_id, file=str(path), stage="write_wds")
        return data
    import cv2  # cv2: about a second to import; only where images are read or drawn

    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        raise WriterError("image is not decodable", scene=scene_id, file=path, stage="write_wds")
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])
    if not ok:
        raise WriterError("JPEG encoding failed", scene=scene_id, file=path, stage="write_wds")
    return buf.tobytes()


def marked_member(frame_index: int, camera: str) -> str:
    """Suffix of a Set-of-Mark image member: ``f<frame:06d>.<camera>.marked.jpeg``."""
    return image_member(frame_index, camera)[: -len(".jpeg")] + ".marked.jpeg"


def marked_jpeg(data: bytes, groundings: list[dict], frame_index: int, camera: str, scene_id: str,
                quality: int = 90) -> bytes:
    """The JPEG ``data`` with the marks of ``groundings`` on (``frame_index``, ``camera``) drawn, as JPEG."""
    import cv2  # cv2: about a second to import; only where images are read or drawn

    # lazy: generator.writers.marks loads cv2, pycocotools, which this module needs only here
    from generator.writers.marks import draw_marks, grounding_marks

    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise WriterError("image is not decodable", scene=scene_id, stage="write_wds")
    boxes, masks, regions = grounding_marks(groundings, frame_index, camera)
    rgb = draw_marks(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), boxes, masks, regions)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise WriterError("JPEG encoding failed", scene=scene_id, stage="write_wds")
    return buf.tobytes()


def build_samples(table: pa.Table, scene_id: str, image_root: str | os.PathLike | None = None, publish=None,
                  marked: bool = False):
    """Yield one WebDataset sample dict per keyframe of ``table`` (one scene's QA rows), keyframes in
    ascending order. See the module docstring for the members. ``publish``: a
    ``generator.writers.anonymize.ScenePublisher`` (faces and plates blurred, timestamps stripped) or None;
    ``marked``: with Set-of-Mark copies of the (published) images."""
    if table.num_rows == 0:
        return
    kf = table.column("keyframe_index").to_numpy(zero_copy_only=False)
    stamps = table.column("timestamp_us").to_pylist()
    order = np.argsort(kf, kind="stable")
    kf_sorted = kf[order]
    cuts = np.flatnonzero(np.diff(kf_sorted)) + 1
    # the rows as they go into JSON (cleaned once, in Arrow, in sample order: each sample's rows are a slice), and
    # the few grounding fields the images need
    published = json_ready(table, publish.dropped_keys if publish is not None else ()).take(pa.array(order))
    bounds = np.r_[0, cuts, len(order)]
    groups = np.split(order, cuts)
    group_images = _sample_images(table, order, cuts)
    last_use: dict[tuple[int, str], int] = {}  # an image's last sample: neighbouring keyframes share context frames
    for n, images in enumerate(group_images):
        last_use.update(dict.fromkeys(images, n))
    done: dict[tuple[int, str], bytes] = {}  # published image bytes, kept until their last sample
    for n, (idx, images) in enumerate(zip(groups, group_images)):
        rows = published.slice(bounds[n], bounds[n + 1] - bounds[n]).to_pylist()
        keyframe = int(kf[idx[0]])
        sample = {"__key__": sample_key(scene_id, keyframe)}
        listing = []
        groundings = table.take(pa.array(idx)).column("grounding").to_pylist() if marked else []
        groundings = [x for gs in groundings for x in gs or []]
        for (fi, cam), entry in sorted(images.items()):
            member = None
            extra = {}
            if entry["source_path"]:
                member = image_member(fi, cam)
                if (fi, cam) not in done:
                    data = read_jpeg(_resolve(entry["source_path"], image_root), scene_id)
                    done[fi, cam] = publish(data, fi, cam) if publish is not None else data
                sample[member] = done.pop((fi, cam)) if last_use[fi, cam] == n else done[fi, cam]
                if marked:
                    extra["marked_member"] = marked_member(fi, cam)
                    sample[extra["marked_member"]] = marked_jpeg(sample[member], groundings, fi, cam, scene_id)
            listing.append({**entry, "roles": sorted(entry["roles"]), "member": member, **extra})
        meta = {"scene_id": scene_id, "keyframe_index": keyframe, "timestamp_us": stamps[idx[0]], "images": listing}
        meta = _json_safe(publish.metadata(meta) if publish is not None else meta)
        meta["qas"] = rows  # already published and JSON-safe
        sample["json"] = json.dumps(meta, allow_nan=False, ensure_ascii=False).encode("utf-8")
        yield sample


def _sample_images(table: pa.Table, order: np.ndarray, cuts: np.ndarray) -> list[dict[tuple[int, str], dict]]:
    """Per sample (the keyframe groups ``np.split(order, cuts)``), its images: (frame, camera) -> {frame_index,
    camera, roles (a set), source_path (the first grounding's)}, from every grounding of the group's rows, in
    arrays: a scene has tens of thousands of groundings and a few hundred images."""
    out: list[dict[tuple[int, str], dict]] = [{} for _ in range(len(cuts) + 1)]
    col = table.column("grounding").combine_chunks()
    g = pc.list_flatten(col)
    if len(g) == 0:
        return out
    g_row = pc.list_parent_indices(col).to_numpy()
    group_of_row = np.empty(table.num_rows, np.int64)
    group_of_row[order] = np.repeat(np.arange(len(cuts) + 1), np.diff(np.r_[0, cuts, table.num_rows]))
    fi = pc.struct_field(g, "frame_index").to_numpy(zero_copy_only=False).astype(np.int64)

    def codes(name: str) -> pa.DictionaryArray:  # one dictionary for the whole column, null a value of its own
        return pc.dictionary_encode(pc.cast(pc.struct_field(g, name), pa.string()), null_encoding="encode")

    cam, role = codes("camera"), codes("role")
    cam_code, role_code = cam.indices.to_numpy(), role.indices.to_numpy()
    # an image of a sample: (group, frame, camera) as one sortable key; its first grounding (rows ascend within
    # a group, groundings within a row) gives its source path
    grp = group_of_row[g_row]
    key = np.stack([grp, fi, cam_code])
    uniq, first, inverse = np.unique(key, axis=1, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    pairs = np.unique(np.stack([inverse, role_code]), axis=1)
    paths = pc.struct_field(g, "image_path").take(pa.array(first)).to_pylist()
    cams, roles = cam.dictionary.to_pylist(), role.dictionary.to_pylist()
    role_sets: list[set] = [set() for _ in range(uniq.shape[1])]
    for u, r in zip(*pairs.tolist()):
        role_sets[u].add(roles[r])
    for u, (n, f, c) in enumerate(uniq.T.tolist()):
        out[n][f, cams[c]] = {"frame_index": f, "camera": cams[c], "roles": role_sets[u], "source_path": paths[u] or ""}
    return out


def write_sample(tar: tarfile.TarFile, sample: dict) -> None:
    """Add a sample (``{"__key__": key, suffix: bytes, ...}``) to ``tar`` (opened ``"w|"``), member by member as
    ``webdataset.TarWriter(path, mtime=0.0, encoder=False)`` writes them (module docstring)."""
    key = sample["__key__"]
    for suffix in sorted(sample):
        if suffix.startswith("_"):
            continue
        data = sample[suffix]
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"WebDataset member {key}.{suffix} must be bytes, got {type(data).__name__}")
        info = tarfile.TarInfo(f"{key}.{suffix}")
        # mtime a float, as the library passes it: tarfile then adds a PAX record "mtime=0.0" to each member
        info.size, info.mtime, info.mode, info.uname, info.gname = len(data), 0.0, 0o444, "bigdata", "bigdata"
        tar.addfile(info, io.BytesIO(data))


def _sample_bytes(sample: dict) -> int:
    return sum(len(v) + _TAR_OVERHEAD for k, v in sample.items() if not k.startswith("__"))


def write_wds_shards(table: pa.Table, out_dir: str | os.PathLike, scene_id: str,
                     cfg: WriterConfig | None = None, image_root: str | os.PathLike | None = None,
                     publish=None) -> list[Path]:
    """Write one scene's QA rows as WebDataset shards ``out_dir/wds/<safe scene>-<k:05d>.tar``.

    ``out_dir`` is the run folder root; ``table`` follows ``schemas.tables.QA`` with rows of ``scene_id``
    only; relative grounding ``image_path`` values are resolved against ``image_root``. A referenced
    image that is missing raises ``WriterError`` naming the scene and the file. ``publish``: see
    ``build_samples``. Returns the shard paths.
    """
    cfg = cfg or WriterConfig()
    table = check_schema(table, QA, where=f"QA rows of scene '{scene_id}'")
    if table.num_rows and pc.unique(table.column("scene_id")).to_pylist() != [scene_id]:
        raise ValueError(f"write_wds_shards(scene '{scene_id}'): table holds rows of scenes "
                         f"{pc.unique(table.column('scene_id')).to_pylist()}; write one scene at a time")
    wds_dir = Path(out_dir) / WDS_DIR
    wds_dir.mkdir(parents=True, exist_ok=True)
    old = scene_wds_shards(out_dir, scene_id)
    written: list[Path] = []
    paths = (wds_shard_path(out_dir, scene_id, k) for k in itertools.count())
    writer = tmp = None
    n = size = 0

    def finish():
        nonlocal writer, tmp
        writer.close()
        path = next(paths)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        written.append(path)
        writer = tmp = None

    try:
        for sample in build_samples(table, scene_id, image_root, publish, marked=cfg.wds.marked_images):
            b = _sample_bytes(sample)
            if writer is not None and (n >= cfg.wds_max_samples or size + b > cfg.wds_max_bytes):
                finish()
            if writer is None:
                tmp = wds_dir / f".{safe_name(scene_id)}.{uuid.uuid4().hex}.tar.tmp"
                writer = tarfile.open(tmp, mode="w|")  # opens and closes the file itself
                n = size = 0
            write_sample(writer, sample)
            n += 1
            size += b
        if writer is not None:
            finish()
    finally:
        if writer is not None:
            writer.close()
        if tmp is not None and Path(tmp).exists():
            Path(tmp).unlink()
    for p in reversed(old[len(written):]):  # highest first: numbers stay contiguous if interrupted
        p.unlink(missing_ok=True)
    return written
