"""Anonymisation of published images (STRIDE-QA App. A.4: faces and licence plates blurred, timestamps removed).

The 3D boxes say where faces and plates can be; OpenCV's Haar cascades (shipped in ``cv2.data.haarcascades``)
say where they are inside those places; no cascade runs over a whole image.

1. ``candidate_regions(boxes, cam, cfg)``: vectorised over boxes, in the ego frame, then projected with the
   nuScenes 2D-box convention (``generator.projection.project_boxes``):

   * head of a box of ``cfg.face_classes``: the top ``head_share`` of its height, whole length and width;
   * plate of a box of ``cfg.plate_classes``: on its front and rear faces (only a face turned to the camera),
     a band ``plate_width_share`` of the width wide, centred, ``plate_z_m`` metres above the box bottom.

2. ``blur_rectangles`` per candidate: the cascade of its kind (``face_cascade``/``plate_cascade``) runs on the
   candidate, upscaled to ``cascade_upscale_to_px`` on its short side; each detection (plus
   ``detection_margin_share``) is blurred. When it finds nothing, ``undetected`` decides: ``'region'`` blurs the
   whole candidate (the default: a face the cascade misses is blurred anyway, at the cost of blurring around
   it), ``'none'`` leaves it. Candidates below ``cascade_min_region_px`` skip the cascade (too small for its
   window) and go straight to that policy.
3. ``anonymize_image`` blurs (Gaussian, kernel ``blur_kernel_share`` of each rectangle's longer side) and returns
   the image and the blurred rectangles; ``publish_image`` is the one call a writer or report makes for an
   image; ``ScenePublisher`` does it for a scene's frames (JPEG bytes, or arrays with ``.image``) from the run's
   FRAMES and OBJECTS tables.

``strip_timestamps`` removes ``timestamp_us`` keys (at any depth) and source image paths (nuScenes file names
hold the log's date and the capture time) from published JSON metadata; ``frame_index``/``keyframe_index`` keep
the order. Measured on generated logs whose renders paint faces and plates where the boxes say
(``generator.validate.anonymize``, ``python bench/anonymize.py``; docs/operations/anonymisation.md).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import cv2
import numpy as np
import pyarrow as pa

from generator.attributes.arrays import fixed_list_to_numpy, to_numpy
from generator.geometry import SE3
from generator.projection import project_boxes
from generator.types import Boxes3D, CameraCalib, DrivegenError
from schemas.config import AnonymizeConfig

FACE, PLATE = "face", "plate"
# keys dropped from published JSON when timestamps are stripped: capture times, and the source image paths
# whose file names carry them (nuScenes: <log date>__<camera>__<timestamp us>.jpg)
# What ``python bench/anonymize.py`` measured with the default config on generated logs (2 scenes, 60 images of
# 800x450, faces and plates painted with exact truth; docs/operations/anonymisation.md): the dataset card quotes it.
# tests/writers/test_anonymize.py re-measures a subset and holds the defaults to thresholds just below these.
MEASURED_DEFAULT = {"face_recall": 1.000, "plate_recall": 1.000, "blurred_outside_share": 0.964,
                    "image_blurred_share": 0.0083, "images": 60, "size": "800x450",
                    "command": "python bench/anonymize.py"}
TIMESTAMP_KEYS = ("timestamp_us",)
PATH_KEYS = ("source_path", "image_path")
STRIPPED_KEYS = TIMESTAMP_KEYS + PATH_KEYS  # what ``strip_timestamps`` removes


class AnonymizeError(DrivegenError):
    """An image could not be anonymised (no calibration for its camera, undecodable bytes, missing cascade)."""


@functools.lru_cache(maxsize=8)
def cascade(name: str) -> cv2.CascadeClassifier:
    """An OpenCV Haar cascade shipped with the installed cv2 package (``cv2.data.haarcascades``), loaded once."""
    path = os.path.join(cv2.data.haarcascades, name)
    clf = cv2.CascadeClassifier(path)
    if clf.empty():
        raise AnonymizeError(f"OpenCV cascade {name!r} not found or unreadable at {path}; set anonymize.face_cascade "
                             f"/ anonymize.plate_cascade to one of {sorted(os.listdir(cv2.data.haarcascades))}")
    return clf


def _window(clf: cv2.CascadeClassifier) -> tuple[int, int]:
    w, h = clf.getOriginalWindowSize()
    return int(w), int(h)


# ------------------------------------------------------------------------------------------ candidates
def candidate_regions(boxes: Boxes3D, cam: CameraCalib, cfg: AnonymizeConfig) -> tuple[np.ndarray, np.ndarray]:
    """Candidate regions of faces and plates in one camera: (xyxy (M, 4) float pixels inside the image, kind (M,)
    'face' | 'plate'). See the module docstring for their geometry; boxes are in the ego frame."""
    cls = np.asarray(boxes.class_name, dtype=object)
    parts, kinds = [], []
    if cfg.faces and len(boxes):
        sel = np.isin(cls, cfg.face_classes)
        if sel.any():
            b = boxes.subset(sel)
            h = b.size_lwh_m[:, 2]
            head_h = cfg.head_share * h
            c = b.center_m.copy()
            c[:, 2] += h / 2 - head_h / 2
            size = np.stack([b.size_lwh_m[:, 0], b.size_lwh_m[:, 1], head_h], axis=1)
            parts.append(Boxes3D(c, size, b.yaw_rad, b.class_name))
            kinds.append(np.full(len(b), FACE, dtype=object))
    if cfg.plates and len(boxes):
        sel = np.isin(cls, cfg.plate_classes)
        if sel.any():
            b = boxes.subset(sel)
            cam_xy = cam.ego_SE3_cam.translation[:2]
            n_xy = np.stack([np.cos(b.yaw_rad), np.sin(b.yaw_rad)], axis=1)
            l, w, h = b.size_lwh_m.T
            z_lo = np.minimum(cfg.plate_z_m[0], h)
            z_hi = np.minimum(cfg.plate_z_m[1], h)
            ok = z_hi > z_lo
            for sign in (1.0, -1.0):  # front face, rear face
                face_xy = b.center_m[:, :2] + sign * n_xy * (l / 2)[:, None]
                facing = ok & (np.einsum("nd,nd->n", sign * n_xy, cam_xy - face_xy) > 0)
                if not facing.any():
                    continue
                c = np.column_stack([face_xy, b.center_m[:, 2] - h / 2 + (z_lo + z_hi) / 2])[facing]
                size = np.column_stack([np.full(len(l), 0.02), cfg.plate_width_share * w, z_hi - z_lo])[facing]
                parts.append(Boxes3D(c, size, b.yaw_rad[facing], b.class_name[facing]))
                kinds.append(np.full(int(facing.sum()), PLATE, dtype=object))
    if not parts:
        return np.zeros((0, 4)), np.zeros(0, dtype=object)
    xyxy, _, in_image = project_boxes(Boxes3D.concat(parts), cam)
    kind = np.concatenate(kinds)
    return xyxy[in_image], kind[in_image]


# ------------------------------------------------------------------------------------------ detection
def _int_rects(xyxy: np.ndarray, W: int, H: int) -> np.ndarray:
    """Float rectangles -> int (x1, y1, x2, y2) covering them, clipped to the image; empty ones removed."""
    r = np.column_stack([np.floor(xyxy[:, :2]), np.ceil(xyxy[:, 2:])]).astype(np.int64).reshape(-1, 4)
    r[:, [0, 2]] = r[:, [0, 2]].clip(0, W)
    r[:, [1, 3]] = r[:, [1, 3]].clip(0, H)
    return r[(r[:, 2] > r[:, 0]) & (r[:, 3] > r[:, 1])]


def blur_rectangles(gray: np.ndarray, regions: np.ndarray, kinds: np.ndarray, cfg: AnonymizeConfig) -> np.ndarray:
    """Rectangles (K, 4) int x1, y1, x2, y2 to blur: each candidate's cascade detections (with margin), or the
    candidate itself when there is none and ``cfg.undetected == 'region'``. ``gray``: the image, uint8 (H, W)."""
    H, W = gray.shape[:2]
    out = []
    names = {FACE: cfg.face_cascade, PLATE: cfg.plate_cascade}
    for kind in (FACE, PLATE):
        sel = kinds == kind
        if not sel.any():
            continue
        rects = _int_rects(regions[sel], W, H)
        clf = cascade(names[kind]) if len(rects) else None
        win_w, win_h = _window(clf) if clf is not None else (0, 0)
        for x1, y1, x2, y2 in rects.tolist():
            w, h = x2 - x1, y2 - y1
            found = np.zeros((0, 4))
            if min(w, h) >= cfg.cascade_min_region_px:
                s = max(1.0, cfg.cascade_upscale_to_px / min(w, h), win_w / w, win_h / h)
                roi = gray[y1:y2, x1:x2]
                if s > 1.0:
                    roi = cv2.resize(roi, (int(round(w * s)), int(round(h * s))), interpolation=cv2.INTER_LINEAR)
                det = clf.detectMultiScale(roi, scaleFactor=cfg.scale_factor, minNeighbors=cfg.min_neighbors,
                                           minSize=(win_w, win_h))
                if len(det):
                    d = np.asarray(det, dtype=np.float64) / s  # x, y, w, h in the candidate
                    m = cfg.detection_margin_share * d[:, 2:]
                    found = np.column_stack([x1 + d[:, 0] - m[:, 0], y1 + d[:, 1] - m[:, 1],
                                             x1 + d[:, 0] + d[:, 2] + m[:, 0], y1 + d[:, 1] + d[:, 3] + m[:, 1]])
                    # a detection stays inside its candidate: the boxes bound where a face or plate can be
                    found = np.column_stack([np.maximum(found[:, 0], x1), np.maximum(found[:, 1], y1),
                                             np.minimum(found[:, 2], x2), np.minimum(found[:, 3], y2)])
            if len(found):
                out.append(_int_rects(found, W, H))
            elif cfg.undetected == "region":
                out.append(np.array([[x1, y1, x2, y2]]))
    return np.concatenate(out).astype(np.int64) if out else np.zeros((0, 4), dtype=np.int64)


def blur(image: np.ndarray, rects: np.ndarray, kernel_share: float) -> np.ndarray:
    """``image`` with each rectangle Gaussian-blurred in place (kernel side ``kernel_share`` x the rectangle's
    longer side, odd, at least 3); returns the same array."""
    for x1, y1, x2, y2 in np.asarray(rects, dtype=np.int64).reshape(-1, 4).tolist():
        k = max(3, int(kernel_share * max(x2 - x1, y2 - y1)) | 1)
        roi = image[y1:y2, x1:x2]
        image[y1:y2, x1:x2] = cv2.GaussianBlur(roi, (k, k), 0, borderType=cv2.BORDER_REPLICATE)
    return image


def rect_mask(rects: np.ndarray, H: int, W: int) -> np.ndarray:
    """(H, W) bool: pixels inside any of the rectangles."""
    m = np.zeros((H, W), dtype=bool)
    for x1, y1, x2, y2 in np.asarray(rects, dtype=np.int64).reshape(-1, 4).tolist():
        m[y1:y2, x1:x2] = True
    return m


def anonymize_image(image: np.ndarray, cam: CameraCalib, boxes: Boxes3D,
                    cfg: AnonymizeConfig | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(anonymised copy of ``image`` (H, W, 3) uint8, rectangles (K, 4) blurred). ``cam``: the camera that took
    it; ``boxes``: that frame's 3D boxes in the ego frame. The input array is not modified."""
    cfg = cfg or AnonymizeConfig()
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise AnonymizeError(f"camera {cam.name}: image must be (H, W, 3) uint8, got {img.shape} {img.dtype}")
    if not (cfg.faces or cfg.plates) or len(boxes) == 0:
        return img.copy(), np.zeros((0, 4), dtype=np.int64)
    regions, kinds = candidate_regions(boxes, _at_image_size(cam, img), cfg)
    if len(regions) == 0:
        return img.copy(), np.zeros((0, 4), dtype=np.int64)
    rects = blur_rectangles(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), regions, kinds, cfg)
    return blur(img.copy(), rects, cfg.blur_kernel_share), rects


def _at_image_size(cam: CameraCalib, img: np.ndarray) -> CameraCalib:
    """``cam`` with intrinsics scaled to the image actually given (a resized copy of the camera's image)."""
    H, W = img.shape[:2]
    if (W, H) == (cam.width_px, cam.height_px):
        return cam
    K = cam.K.copy()
    K[0] *= W / cam.width_px
    K[1] *= H / cam.height_px
    return CameraCalib(cam.name, K, cam.ego_SE3_cam, W, H)


def publish_image(image: np.ndarray, cam: CameraCalib, boxes: Boxes3D,
                  cfg: AnonymizeConfig | None = None) -> np.ndarray:
    """The image as it may leave the pipeline: faces and plates blurred per ``cfg`` (``anonymize_image``).
    BGR or RGB (H, W, 3) uint8 alike; the one call every writer and the HTML report make for an image."""
    return anonymize_image(image, cam, boxes, cfg)[0]


# ------------------------------------------------------------------------------------------ run tables
def _calib(cam: dict) -> CameraCalib:
    return CameraCalib(cam["name"], np.asarray(cam["K"], dtype=np.float64).reshape(3, 3),
                       SE3.from_matrix(np.asarray(cam["ego_SE3_cam"], dtype=np.float64).reshape(4, 4)),
                       int(cam["width_px"]), int(cam["height_px"]))


def boxes_by_frame(objects: pa.Table | None) -> dict[int, Boxes3D]:
    """OBJECTS rows (one scene) as ego-frame ``Boxes3D`` per frame index."""
    if objects is None or objects.num_rows == 0:
        return {}
    fi = to_numpy(objects.column("frame_index"), np.int64)
    center = fixed_list_to_numpy(objects.column("center_ego_m"), 3)  # a null box: NaN, dropped below
    size = fixed_list_to_numpy(objects.column("size_lwh_m"), 3)
    yaw = to_numpy(objects.column("yaw_ego_rad"), np.float64, fill=np.nan)
    cls = np.asarray(objects.column("class_name").to_pylist(), dtype=object)
    ok = np.isfinite(center).all(1) & np.isfinite(size).all(1) & np.isfinite(yaw)
    order = np.argsort(fi, kind="stable")  # each frame's rows in table order, as a mask per frame would give
    frames, starts = np.unique(fi[order], return_index=True)
    bounds = np.r_[starts, len(fi)]
    out = {}
    for k, f in enumerate(frames.tolist()):
        s = order[bounds[k]:bounds[k + 1]]
        s = s[ok[s]]
        out[f] = Boxes3D(center[s], size[s], yaw[s], cls[s])
    return out


@dataclass
class ScenePublisher:
    """Anonymises one scene's JPEG images as they are written: ``publisher(data, frame_index, camera) -> bytes``.
    Built from the scene's FRAMES (calibration) and OBJECTS (boxes) tables. Bytes come back unchanged when
    nothing is blurred (no candidate, or anonymisation off), re-encoded at ``cfg.jpeg_quality`` otherwise."""

    scene_id: str
    cams: dict[tuple[int, str], CameraCalib]
    boxes: dict[int, Boxes3D]
    cfg: AnonymizeConfig

    @classmethod
    def from_tables(cls, scene_id: str, frames: pa.Table, objects: pa.Table | None,
                    cfg: AnonymizeConfig | None = None) -> "ScenePublisher":
        cams = {}
        for f, cl in zip(frames.column("frame_index").to_pylist(), frames.column("cameras").to_pylist()):
            for c in cl or []:
                cams[(int(f), c["name"])] = c
        return cls(scene_id, cams, boxes_by_frame(objects), cfg or AnonymizeConfig())

    @property
    def dropped_keys(self) -> tuple[str, ...]:
        """The keys ``metadata`` removes at any depth (none when ``cfg.strip_timestamps`` is off)."""
        return STRIPPED_KEYS if self.cfg.strip_timestamps else ()

    def metadata(self, meta):
        """Published JSON metadata: timestamps stripped when ``cfg.strip_timestamps`` (``strip_timestamps``)."""
        return strip_timestamps(meta, bool(self.dropped_keys))

    def calib(self, frame_index: int, camera: str) -> CameraCalib:
        """The calibration of ``camera`` in frame ``frame_index`` (from the frames table)."""
        cam = self.cams.get((int(frame_index), camera))
        if cam is None:
            raise AnonymizeError(f"no calibration for camera {camera} in frame {frame_index}: cannot place faces "
                                 "and plates; the run's frames table must list every camera whose images are "
                                 "published", scene=self.scene_id, stage="anonymize")
        if isinstance(cam, dict):
            cam = self.cams[(int(frame_index), camera)] = _calib(cam)
        return cam

    def image(self, image: np.ndarray, frame_index: int, camera: str) -> np.ndarray:
        """``publish_image`` of an image array of this scene (e.g. a report's thumbnail; any size, the
        intrinsics are scaled to it)."""
        boxes = self.boxes.get(int(frame_index))
        if boxes is None or len(boxes) == 0 or not (self.cfg.faces or self.cfg.plates):
            return np.asarray(image).copy()
        return publish_image(image, self.calib(frame_index, camera), boxes, self.cfg)

    def __call__(self, data: bytes, frame_index: int, camera: str) -> bytes:
        """JPEG bytes of this scene's image as published: unchanged when nothing is blurred."""
        cfg = self.cfg
        if not (cfg.faces or cfg.plates):
            return data
        boxes = self.boxes.get(int(frame_index))
        if boxes is None or len(boxes) == 0:
            return data
        cam = self.calib(frame_index, camera)
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            raise AnonymizeError(f"image of camera {camera} in frame {frame_index} is not decodable",
                                 scene=self.scene_id, stage="anonymize")
        out, rects = anonymize_image(img, cam, boxes, cfg)
        if len(rects) == 0:
            return data
        ok, buf = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, cfg.jpeg_quality])
        if not ok:
            raise AnonymizeError(f"JPEG encoding of camera {camera} in frame {frame_index} failed",
                                 scene=self.scene_id, stage="anonymize")
        return buf.tobytes()


def strip_timestamps(meta, enabled: bool = True):
    """Published JSON metadata without capture times: ``TIMESTAMP_KEYS`` and ``PATH_KEYS`` removed at any depth
    of dicts and lists (order stays in frame_index / keyframe_index). Returns a new object; ``enabled=False``
    returns ``meta`` as is."""
    if not enabled:
        return meta
    drop = STRIPPED_KEYS
    if isinstance(meta, dict):
        return {k: strip_timestamps(v) for k, v in meta.items() if k not in drop}
    if isinstance(meta, (list, tuple)):
        return [strip_timestamps(v) for v in meta]
    return meta
