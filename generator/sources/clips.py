"""Frames of a video clip, decoded with OpenCV: only the frames asked for, one at a time. No dataset's layout:
a camera-only source (``generator.sources.base.VideoSource``) hands the camera stages a local clip file, and
these read it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from schemas.errors import SourceError


def read_frames(path: str | os.PathLike, frames: Sequence[int], video_id: str | None = None) -> dict[int, np.ndarray]:
    """Decode only ``frames`` (0-based) of a video, as BGR uint8 arrays (``iter_frames``, all at once)."""
    return dict(iter_frames(path, frames, video_id))


def iter_frames(path: str | os.PathLike, frames: Sequence[int], video_id: str | None = None):
    """Decode only ``frames`` (0-based) of a video, yielding (frame, BGR uint8 array) in frame order, so that a
    caller reducing or writing each frame never holds them all: one seek to the first wanted frame, then
    ``grab()`` over short stretches between wanted frames (a seek again past 60 frames). Raises ``SourceError``
    (file and video named) when the file is missing or unreadable or a frame is past its end."""
    import cv2  # cv2: about a second to import; only where images are read or drawn

    p = str(path)
    vid = video_id or Path(p).stem
    if not os.path.isfile(p):
        raise SourceError(f"{vid}: missing video", scene=vid, file=p)
    wanted = sorted({int(f) for f in frames})
    if not wanted:
        return
    if wanted[0] < 0:
        raise SourceError(f"{vid}: negative frame {wanted[0]} requested", scene=vid, file=p)
    cap = cv2.VideoCapture(p)
    try:
        if not cap.isOpened():
            raise SourceError(f"{vid}: OpenCV cannot open the video", scene=vid, file=p)
        count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
        if count > 0 and wanted[-1] >= count:
            raise SourceError(f"{vid}: frame {wanted[-1]} past the video's {count} frames", scene=vid, file=p)
        pos = None  # index of the next frame read() would return
        for f in wanted:
            if pos is None or f < pos or f - pos > 60:
                cap.set(cv2.CAP_PROP_POS_FRAMES, f)
                pos = f
            while pos < f:
                if not cap.grab():
                    raise SourceError(f"{vid}: cannot decode frame {pos}", scene=vid, file=p)
                pos += 1
            ok, img = cap.read()
            if not ok or img is None:
                raise SourceError(f"{vid}: cannot decode frame {f}", scene=vid, file=p)
            pos = f + 1
            yield f, img
    finally:
        cap.release()
