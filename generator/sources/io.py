"""Sensor file readers: LiDAR sweeps into the ego frame, camera images as BGR arrays.

Every failure is a ``SourceError`` naming the scene, the file and what is wrong, so a run records it
for that scene and goes on with the others. A LiDAR file is checked against the frame's sanity bounds
(``Frame.limits``, the config's ``sources`` section) before it is used: its size before it is read (empty,
larger than ``max_lidar_file_bytes``), then its points (finite coordinates, a complete revolution:
``min_lidar_azimuth_coverage``, every ring of a nuScenes-format sweep: ``lidar_rings``). ``check_lidar``
runs the same checks without keeping the points, for sources that check their files when a scene loads, and
records a sound file's size on its frame (``Frame.lidar_checked``): ``load_lidar_ego`` then reads its points
without checking them a second time, unless the file's size has changed since.
"""
from __future__ import annotations

import os
from io import BytesIO

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather

from generator.geometry import SE3
from generator.types import Frame, SourceError
from schemas.config import SourceLimitsConfig
from schemas.files import file_problem

NUSCENES_RECORD_FLOATS = 5  # x, y, z, intensity, ring index (float32 each)
AV2_LIDAR_COLUMNS = ("x", "y", "z", "intensity")
AZIMUTH_BINS = 360  # one-degree bins for the azimuth coverage of a sweep
MAX_IMAGE_FILE_BYTES = 256 << 20  # read whole before decoding: an uncompressed 8K frame is 100 MB, nuScenes' 0.2 MB


def _not_a_file(what: str, path: str) -> str | None:
    """'<what> is missing' / '<what> is a FIFO (named pipe): ...' when ``path`` is no regular file, else None
    (a FIFO would block the read forever; a symlink loop is not a missing file)."""
    problem = file_problem(path) if path else "missing"
    if problem is None:
        return None
    return f"{what} is missing" if problem == "missing" else f"{what} is {problem}: drivegen reads a regular file"


def _err(frame: Frame, path: str, what: str) -> SourceError:
    return SourceError(f"frame {frame.frame_index} (t={frame.timestamp_us} us): {what}",
                       scene=frame.scene_id, file=path, stage="read")


def _limits(frame: Frame) -> SourceLimitsConfig:
    return frame.limits if frame.limits is not None else SourceLimitsConfig()


def _check_size(frame: Frame, path: str) -> int:
    """The file's size in bytes, refused when empty or over ``max_lidar_file_bytes`` (nothing is read)."""
    size = os.path.getsize(path)
    if size == 0:
        raise _err(frame, path, "LiDAR file is empty (0 bytes): the sweep was not written or was cut; restore it "
                                "from the original log")
    limit = _limits(frame).max_lidar_file_bytes
    if size > limit:
        raise _err(frame, path, f"LiDAR file is {size} bytes, larger than sources.max_lidar_file_bytes = {limit}; "
                                f"not read (a sweep costs about 40x its file size in memory downstream): check the "
                                f"file, or raise the limit if your LiDAR really writes such sweeps")
    return size


_SAMPLE_POINTS = 4096  # sweep_gaps looks at every n-th point first


def sweep_gaps(xy: np.ndarray, ring: np.ndarray | None, limits: SourceLimitsConfig) -> str | None:
    """What is missing from a sweep, or None when it is complete. ``xy`` (N, 2) point coordinates around the
    sensor (LiDAR frame; AV2: ego frame, the sensors sit on its roof), ``ring`` (N,) ring indices or None.

    Complete: points in at least ``min_lidar_azimuth_coverage`` of the 360 one-degree azimuth bins (a sweep
    stored in firing order and cut loses a sector), and, with ``ring`` and ``lidar_rings`` > 0, points on
    every ring 0..lidar_rings-1 (a sweep stored ring by ring and cut loses its upper rings)."""
    if len(xy) == 0:
        return "incomplete sweep: no points"
    step = max(1, len(xy) // _SAMPLE_POINTS)
    if step > 1 and not sweep_gaps(xy[::step], None if ring is None else ring[::step], limits):
        return None  # every n-th point is complete: so are all of them (the same answer at a fraction of the cost)
    az = np.arctan2(xy[:, 1], xy[:, 0])
    bins = np.minimum(((az + np.pi) * (AZIMUTH_BINS / (2 * np.pi))).astype(np.int64), AZIMUTH_BINS - 1)
    covered = int(np.count_nonzero(np.bincount(bins, minlength=AZIMUTH_BINS)))
    if covered < limits.min_lidar_azimuth_coverage * AZIMUTH_BINS:
        return (f"incomplete sweep: points in {covered} of the {AZIMUTH_BINS} one-degree azimuth bins around the "
                f"sensor ({covered / AZIMUTH_BINS:.0%}), below sources.min_lidar_azimuth_coverage = "
                f"{limits.min_lidar_azimuth_coverage:g}: the file was cut or the sweep is partial")
    n_rings = limits.lidar_rings
    if ring is not None and n_rings:
        r = np.asarray(ring, dtype=np.float64)
        r = r[np.isfinite(r) & (r >= 0) & (r < n_rings)].astype(np.int64)
        missing = np.flatnonzero(np.bincount(r, minlength=n_rings)[:n_rings] == 0)
        if len(missing):
            return (f"incomplete sweep: rings {_ranges(missing)} of sources.lidar_rings = {n_rings} hold no points: "
                    f"the file was cut (a sweep stored ring by ring loses its upper rings), or the LiDAR has fewer "
                    f"rings (then set sources.lidar_rings to its ring count, 0 = no check)")
    return None


def _ranges(idx: np.ndarray) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    cuts = np.flatnonzero(np.diff(idx) != 1) + 1
    return ", ".join(f"{g[0]}-{g[-1]}" if len(g) > 1 else f"{g[0]}" for g in np.split(idx, cuts))


def _check_points(frame: Frame, path: str, xyz: np.ndarray, ring: np.ndarray | None = None) -> None:
    if not np.isfinite(xyz).all():  # (the whole array first: a third of the time of a test per point)
        bad = ~np.isfinite(xyz).all(axis=1)
        raise _err(frame, path, f"LiDAR sweep has {int(bad.sum())} points with NaN/inf coordinates (of {len(xyz)}; "
                                f"the first is point {int(np.argmax(bad))}): the file is corrupt")
    gap = sweep_gaps(xyz[:, :2], ring, _limits(frame))
    if gap:
        raise _err(frame, path, gap)


def _bin_records(path: str, size: int, record_dim: int, err) -> np.ndarray:
    """(N, record_dim) float32 records of a nuScenes-layout LiDAR file of ``size`` bytes; ``err(what)``: the error
    to raise when the size is not whole records."""
    if size % (4 * record_dim):
        raise err(f"LiDAR file is truncated or corrupt: {size} bytes is not a multiple of the {4 * record_dim}-byte "
                  f"point record ({record_dim} float32 values"
                  + ("; nuScenes: x, y, z, intensity, ring)" if record_dim == NUSCENES_RECORD_FLOATS else ")"))
    return np.fromfile(path, dtype=np.float32, count=size // 4).reshape(-1, record_dim)


def _feather_points(path: str, dtype, err) -> np.ndarray:
    """(N, 4) x, y, z, intensity as ``dtype`` of an AV2 LiDAR feather file (ego frame); ``err(what)``: the error
    to raise when it cannot be read."""
    try:
        table = feather.read_table(path, columns=list(AV2_LIDAR_COLUMNS))
    except (pa.ArrowInvalid, pa.ArrowKeyError, KeyError, OSError) as e:
        raise err(f"unreadable AV2 LiDAR feather (needs columns {list(AV2_LIDAR_COLUMNS)}): {e}") from None
    if not table.num_rows:
        return np.zeros((0, 4), dtype)
    return np.stack([table.column(c).to_numpy(zero_copy_only=False).astype(dtype) for c in AV2_LIDAR_COLUMNS], axis=1)


def _read_nuscenes_bin(frame: Frame, path: str, checked_bytes: int = 0) -> tuple[np.ndarray, int]:
    """((N, 4) float32 x, y, z, intensity in the LiDAR frame, the file's size), checked. The nuScenes layout
    (what the devkit's ``LidarPointCloud.from_file`` reads): float32 records of x, y, z, intensity, ring index."""
    size = _check_size(frame, path)
    if not path.endswith(".bin"):
        raise _err(frame, path, "nuScenes LiDAR files must end in .bin")
    rec = _bin_records(path, size, NUSCENES_RECORD_FLOATS, lambda what: _err(frame, path, what))
    if size != checked_bytes:
        _check_points(frame, path, rec[:, :3], rec[:, 4])
    return rec[:, :4], size


def _read_av2_feather(frame: Frame, path: str, checked_bytes: int = 0) -> tuple[np.ndarray, int]:
    """((N, 4) float32 x, y, z, intensity in the ego frame, the file's size), checked."""
    size = _check_size(frame, path)
    pts = _feather_points(path, np.float32, lambda what: _err(frame, path, what))
    if size != checked_bytes:
        _check_points(frame, path, pts[:, :3])
    return pts, size


_READERS = {"nuscenes_bin": _read_nuscenes_bin, "av2_feather": _read_av2_feather}


def _read_checked(frame: Frame, checked_bytes: int = 0) -> tuple[np.ndarray, int]:
    """(points, file size) of the frame's LiDAR file; its points checked unless the file has ``checked_bytes``."""
    path = frame.lidar_path
    reader = _READERS.get(frame.lidar_format)
    if reader is None:
        raise _err(frame, path, f"unknown lidar_format {frame.lidar_format!r}; known: {sorted(_READERS)}")
    problem = _not_a_file("LiDAR file", path)
    if problem:
        raise _err(frame, path, problem)
    return reader(frame, path, checked_bytes)


def check_lidar(frame: Frame) -> None:
    """Raise ``SourceError`` when the frame's LiDAR file would not load (see the module docstring); record its
    size as sound (``frame.lidar_checked``) otherwise."""
    frame.lidar_checked = 0
    frame.lidar_checked = _read_checked(frame)[1]  # the size of the file whose points were checked


def load_lidar_ego(frame: Frame) -> np.ndarray:
    """The frame's LiDAR sweep as (N, 4) float32 [x, y, z, intensity] in the frame's ego frame.

    'nuscenes_bin': float32 x5 records in the LiDAR frame (the devkit's layout), moved by
    ``frame.ego_SE3_lidar``; 'av2_feather': AV2 sweep (x, y, z float16, intensity uint8), already in the ego
    frame. The file is checked first (module docstring), its points unless ``check_lidar`` found the file, at its
    present size, sound when the scene loaded.
    """
    pts = _read_checked(frame, frame.lidar_checked)[0]
    if frame.lidar_format == "nuscenes_bin":
        pts = pts.copy()
        pts[:, :3] = frame.ego_SE3_lidar.transform_points(pts[:, :3]).astype(np.float32)
    return pts


JPEG_SOI = b"\xff\xd8"
JPEG_EOI = b"\xff\xd9"
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # frame headers (not DHT, JPG, DAC)
_JPEG_NO_LENGTH = frozenset(range(0xD0, 0xD8)) | {0x01}  # RSTn, TEM: markers without a length field


def is_jpeg(data: bytes) -> bool:
    """The bytes start like a JPEG (SOI marker), whatever the file is called."""
    return data[:2] == JPEG_SOI


def jpeg_problem(data: bytes) -> str | None:
    """What is wrong with the structure of JPEG ``data``, or None when it is whole: SOI first, header
    segments whose lengths fit in the file up to the scan (SOS) with a frame header (SOFn) before it, EOI
    last (zero padding after it allowed). OpenCV decodes a truncated JPEG without an error (grey below the
    cut), so this is the check that catches one; it reads the header segments only (microseconds; decoding
    an 800x450 image takes milliseconds). Corruption inside the compressed scan is not detected."""
    if not is_jpeg(data):
        return "not a JPEG (it does not start with the SOI marker FF D8)"
    pos, n, frame_header = 2, len(data), False
    while True:
        if pos + 2 > n:
            return f"a truncated JPEG: the headers stop at byte {pos} of {n}, before the scan"
        if data[pos] != 0xFF:
            return f"a corrupt JPEG: byte {pos} should start a marker (FF), found {data[pos]:02X}"
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _JPEG_NO_LENGTH:
            pos += 2
            continue
        if marker == 0xD9:
            return f"a corrupt JPEG: it ends (EOI at byte {pos}) before any scan"
        if pos + 4 > n:
            return f"a truncated JPEG: the segment at byte {pos} has no length"
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if length < 2 or pos + 2 + length > n:
            return f"a truncated JPEG: the segment at byte {pos} claims {length} bytes, the file ends at {n}"
        frame_header |= marker in _JPEG_SOF
        if marker == 0xDA:  # SOS: the compressed scan follows, up to EOI
            break
        pos += 2 + length
    if not frame_header:
        return "a corrupt JPEG: no frame header (SOFn) before the scan"
    if not data.rstrip(b"\x00").endswith(JPEG_EOI):
        return f"a truncated JPEG: its {n} bytes do not end with the EOI marker (FF D9)"
    return None


def image_file_problem(path: str) -> str | None:
    """What is wrong with the image file at ``path``: 'missing', not a regular file (a FIFO...), larger than any
    image (``MAX_IMAGE_FILE_BYTES``), or ``jpeg_problem`` when it is a JPEG (by content or by name); else None."""
    problem = file_problem(path)
    if problem is None and os.path.getsize(path) > MAX_IMAGE_FILE_BYTES:
        problem = f"{os.path.getsize(path):,} bytes, larger than any image ({MAX_IMAGE_FILE_BYTES:,} at most)"
    if problem:
        return problem
    with open(path, "rb") as fh:
        return image_problem(fh.read(), path)


def image_problem(data: bytes, path: str) -> str | None:
    """``jpeg_problem`` of an image file's bytes when it is a JPEG (by content or by its ``path``), else None."""
    return jpeg_problem(data) if is_jpeg(data) or path.lower().endswith((".jpg", ".jpeg")) else None


def read_lidar_records(path: str, lidar_format: str, ego_SE3_lidar: SE3, record_dim: int = NUSCENES_RECORD_FLOATS,
                       scene: str | None = None) -> np.ndarray:
    """A LiDAR file (a frame's sweep or one of its ``lidar_sweeps``) as (N, record_dim) float32 records in its
    LiDAR (sensor) frame, the way mmdet3d's ``LoadPointsFromFile`` / ``LoadPointsFromMultiSweeps`` read them.

    'nuscenes_bin': the file's float32 values as they are, ``record_dim`` per point (nuScenes: 5 = x, y, z,
    intensity, ring index); 'av2_feather': (x, y, z) moved from the ego frame into the LiDAR frame by
    ``inv(ego_SE3_lidar)``, intensity in column 3, any further columns 0 (AV2 has no ring index here).
    A missing, truncated or non-finite file is a ``SourceError`` naming it."""
    def err(what: str) -> SourceError:
        return SourceError(what, scene=scene, file=path, stage="read")

    if lidar_format not in _READERS:
        raise err(f"unknown lidar_format {lidar_format!r}; known: {sorted(_READERS)}")
    problem = _not_a_file("LiDAR file", path)
    if problem:
        raise err(problem)
    if lidar_format == "nuscenes_bin":
        pts = _bin_records(path, os.path.getsize(path), record_dim, err)
    else:
        ego = _feather_points(path, np.float64, err)
        pts = np.zeros((len(ego), record_dim), dtype=np.float32)
        pts[:, :3] = ego_SE3_lidar.inverse().transform_points(ego[:, :3])
        pts[:, 3] = ego[:, 3]
    if not np.isfinite(pts[:, :3]).all():
        bad = int((~np.isfinite(pts[:, :3]).all(axis=1)).sum())
        raise err(f"LiDAR sweep has {bad} points with NaN/inf coordinates")
    return pts


def _image_file(frame: Frame, camera: str) -> tuple[str, bytes]:
    """(path, bytes) of a frame's image of ``camera``, read once, after the checks that need no decoding:
    calibrated, present, and whole when it is a JPEG (``jpeg_problem``: OpenCV would decode a truncated one as
    grey)."""
    if camera not in frame.cameras:
        raise _err(frame, "", f"no calibration for camera {camera!r}; cameras: {sorted(frame.cameras)}")
    path = frame.image_paths.get(camera, "")
    if not path:
        raise _err(frame, path, f"the log has no image for camera {camera!r}")
    problem = _not_a_file(f"image of camera {camera!r}", path)
    if not problem and os.path.getsize(path) > MAX_IMAGE_FILE_BYTES:
        problem = (f"image of camera {camera!r} is {os.path.getsize(path):,} bytes, larger than any image "
                   f"({MAX_IMAGE_FILE_BYTES:,} at most)")
    if problem:
        raise _err(frame, path, problem)
    with open(path, "rb") as fh:
        data = fh.read()
    problem = image_problem(data, path)
    if problem:
        raise _err(frame, path, f"image of camera {camera!r} is unreadable: {problem}; restore it from the log")
    return path, data


def _check_image_size(frame: Frame, camera: str, path: str, height: int, width: int) -> None:
    cal = frame.cameras[camera]
    if (height, width) != (cal.height_px, cal.width_px):
        raise _err(frame, path, f"image of camera {camera!r} is {width}x{height} px but its "
                                f"calibration says {cal.width_px}x{cal.height_px}")


def load_image(frame: Frame, camera: str) -> np.ndarray:
    """Camera image as (H, W, 3) uint8 BGR (OpenCV order); its size must equal the calibration's. A JPEG
    (by content) must be whole (``jpeg_problem``)."""
    import cv2  # cv2: about a second to import; only where images are read or drawn

    path, data = _image_file(frame, camera)
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)  # turned by EXIF as cv2.imread does
    if img is None:
        raise _err(frame, path, f"image of camera {camera!r} is unreadable (not a decodable image)")
    _check_image_size(frame, camera, path, *img.shape[:2])
    return img


_EXIF_ORIENTATION, _TRANSPOSED = 0x0112, (5, 6, 7, 8)  # orientations that swap width and height


def image_shape(frame: Frame, camera: str) -> tuple[int, int]:
    """(height, width) of the image ``load_image`` would return, read from the file's header without decoding
    its pixels, after the same checks (a whole JPEG, the calibration's size). As OpenCV's ``imread`` turns an
    image by its EXIF orientation, so are height and width here."""
    from PIL import Image, UnidentifiedImageError  # here: only perception without pixels needs Pillow

    path, data = _image_file(frame, camera)
    try:
        with Image.open(BytesIO(data)) as im:
            width, height = im.size
            if im.getexif().get(_EXIF_ORIENTATION) in _TRANSPOSED:
                width, height = height, width
    except (UnidentifiedImageError, OSError) as err:
        raise _err(frame, path, f"image of camera {camera!r} is unreadable (not a decodable image: {err})") from None
    _check_image_size(frame, camera, path, height, width)
    return height, width
