"""Every image the report embeds goes through ``report_image`` (camera frames and figures alike): the one place
to apply what must happen to an image before it is published. Camera frames are anonymised first (faces and
plates blurred by the run's ``anonymize`` config through the scene's ``ScenePublisher``, as in the shards and
the bench export), then drawn with the same Set-of-Mark function as the WebDataset writer
(``generator.writers.marks.draw_marks``)."""
from __future__ import annotations

import hashlib
import io
from functools import lru_cache
from pathlib import Path

import cv2
import numpy as np

from generator.sources.remote import is_remote, read_log_file
from generator.writers.marks import draw_marks, grounding_marks

IMG_DIR = "img"


class ReportImages:
    """Writes images into ``root/img/`` and returns their paths relative to the report root."""

    def __init__(self, root: Path, jpeg_quality: int = 80, image_root: str | None = None, publisher=None):
        """``publisher(scene_id)``: that scene's ``generator.writers.anonymize.ScenePublisher`` (None: images
        are shown as read)."""
        self.root = Path(root)
        self.publisher = publisher
        (self.root / IMG_DIR).mkdir(parents=True, exist_ok=True)
        self.quality = jpeg_quality
        self.image_root = image_root
        self.written: dict[str, str] = {}  # content key -> relative path (an image drawn twice is written once)
        self.missing: list[str] = []  # source frames that could not be read (shown as text, never a broken image)
        self.tags: dict[str, list] = {}  # relative path -> its Region tags (region_id, x1, y1, x2, y2) in pixels

    def report_image(self, rgb: np.ndarray, name: str, kind: str = "camera", width: int | None = None) -> str:
        """Write ``rgb`` (H, W, 3 uint8) as ``img/<name>`` (``.jpg`` for camera frames, ``.png`` for figures),
        scaled down to at most ``width`` pixels wide; returns its path relative to the report root.
        ``kind``: ``"camera"`` (a frame of the logs: what anonymisation must see) or ``"figure"``."""
        if width and rgb.shape[1] > width:
            h = max(1, round(rgb.shape[0] * width / rgb.shape[1]))
            rgb = cv2.resize(rgb, (width, h), interpolation=cv2.INTER_AREA)
        bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
        ext = ".jpg" if kind == "camera" else ".png"
        params = [cv2.IMWRITE_JPEG_QUALITY, self.quality] if ext == ".jpg" else [cv2.IMWRITE_PNG_COMPRESSION, 6]
        ok, buf = cv2.imencode(ext, bgr, params)
        if not ok:
            raise ValueError(f"report: cannot encode image {name}")
        rel = f"{IMG_DIR}/{name}{ext}"
        (self.root / rel).write_bytes(buf.tobytes())
        return rel

    def frame(self, path: str, width: int | None = None) -> tuple[np.ndarray, int] | None:
        """The RGB frame at ``path`` (relative paths resolved against the logs' root) scaled down to at most
        ``width`` pixels wide, and the frame's full width; None when unreadable."""
        return _read_rgb(path if self.image_root is None or is_remote(path) or Path(path).is_absolute()
                         else str(Path(self.image_root) / path), width)

    def marked(self, path: str, groundings: list[dict], frame_index: int, camera: str, width: int,
               scene_id: str | None = None) -> str | None:
        """The frame, anonymised (``scene_id``'s publisher), with the marks of ``groundings`` on it
        (Set-of-Mark), written once per content; its relative path, or None (and the path noted in
        ``missing``) when the frame cannot be read."""
        boxes, masks, regions = grounding_marks(groundings, frame_index, camera)
        key = hashlib.sha1(repr((path, width, sorted(zip(regions, map(str, boxes))))).encode()).hexdigest()[:16]
        if key in self.written:
            return self.written[key]
        got = self.frame(path, width)
        if got is None:
            self.missing.append(path)
            return None
        rgb, full_width = got  # marks drawn at the size shown: boxes scaled here, masks resized by draw_marks
        pub = self.publisher(scene_id) if (self.publisher is not None and scene_id is not None) else None
        if pub is not None:
            rgb = pub.image(rgb, frame_index, camera)  # faces and plates blurred before anything is drawn
        f = rgb.shape[1] / full_width
        boxes = [None if b is None else [v * f for v in b] for b in boxes]
        tags: list = []
        rel = self.report_image(draw_marks(rgb, boxes, masks, regions, tags=tags), f"f{frame_index:06d}-{key}",
                                "camera")
        self.written[key] = rel
        self.tags[rel] = [list(t) for t in tags]
        return rel


@lru_cache(maxsize=256)
def _read_rgb(path: str, width: int | None = None) -> tuple[np.ndarray, int] | None:
    """Decoded at a reduced size when that is enough (PIL's JPEG draft mode scales in the DCT: a 1600 px
    frame shown 200 px wide decodes about 8x faster), then resized to ``width`` exactly."""
    from PIL import Image, UnidentifiedImageError  # PIL: only where images are decoded or encoded

    if not path:
        return None
    try:
        with Image.open(io.BytesIO(read_log_file(path))) as im:  # a path, or an object's URI (remote logs)
            full_w, full_h = im.size
            if width and full_w > width:
                im.draft("RGB", (width, max(1, full_h * width // full_w)))
            rgb = np.asarray(im.convert("RGB"))
    except (OSError, UnidentifiedImageError, ValueError):  # missing (FileNotFoundError) or undecodable
        return None
    if width and rgb.shape[1] > width:
        h = max(1, round(rgb.shape[0] * width / rgb.shape[1]))
        rgb = cv2.resize(rgb, (width, h), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(rgb), full_w
