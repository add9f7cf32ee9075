"""The one interface every log source implements: list scenes, load a scene of synchronized frames."""
from __future__ import annotations

from abc import ABC, abstractmethod

import pyarrow as pa

from generator.types import Scene
from schemas.config import EgoBodyConfig
from schemas.errors import SourceError


class LogSource(ABC):
    """A set of driving logs. Implementations: ``NuScenesSource`` (devkit), ``AV2Source`` (feather)."""

    name: str = "base"
    # camera-only logs (JAAD: videos and 2D boxes, no LiDAR or poses) run through the camera stages
    # (``generator.pipeline.video``) and load videos, not scenes
    camera_only: bool = False

    @abstractmethod
    def scene_ids(self) -> list[str]:
        """Scene identifiers in a stable order (nuScenes scene tokens/names, AV2 log ids)."""

    @abstractmethod
    def load_scene(self, scene_id: str) -> Scene:
        """All frames of one scene in time order, with calibration, poses, file paths and labels.

        Raises ``SourceError`` naming the scene and the file when the scene cannot be read; anchors
        (1 Hz keyframes) are marked according to the source's ``KeyframeConfig``.
        """

    def work_estimates(self) -> dict[str, float]:
        """Each scene's relative work, from what the source already read when it opened (no sensor file is
        touched): the run streams the heaviest scenes first (``generator.pipeline.driver.longest_first``), so
        that the run does not end on one long scene while the other workers sit idle. Only the order matters;
        {} (the default) keeps ``scene_ids()``'s order."""
        return {}

    def describe(self) -> dict:
        """A JSON-able description sufficient to rebuild the source on another node."""
        return {"kind": self.name}

    def ego_body(self) -> EgoBodyConfig | None:
        """The body of the logs' own ego vehicle (``generator.sources.vehicles``), which a run takes unless its
        config sets ``ego``; None (the default) when the logs have none (camera-only videos)."""
        return None

    def drivable_map(self, scene_id: str) -> dict | None:
        """The map of the scene's paved surface, when the logs have one: ``{"path": absolute PNG path or,
        for logs on object storage, its URI (never the node cache's copy),
        "resolution_m": metres per pixel, "kind": ...}`` (a binary mask, 255 = paved, in the poses' global frame,
        origin at the image's bottom-left: nuScenes' semantic prior). None when the logs carry no such map."""
        return None


class VideoSource(LogSource):
    """Camera-only logs: videos with 2D annotations, no LiDAR, no poses (``JaadSource``). Their scenes are videos;
    they run through the camera stages (``generator.pipeline.video``), which read them through these methods
    alone, and whose frames ``generator.sources.clips`` decodes from the local clip file ``clip`` gives.
    ``reading`` is the settings object of the family that says how videos are read
    (``PaperFamily.video_settings``)."""

    camera_only = True

    def load_scene(self, scene_id: str) -> Scene:
        raise SourceError(f"{scene_id}: the {self.name} logs are camera-only (no LiDAR, no poses); its videos run "
                          "through the camera stages (generator.pipeline.video)", scene=scene_id, stage="load")

    @abstractmethod
    def load_video(self, video_id: str, reading) -> dict[str, pa.Table]:
        """The video's annotation tables (``videos``: one row with ``num_frames``, ``width_px``, ``split``, ...;
        ``boxes``; and what else the source has), SourceError naming the file and the video."""

    @abstractmethod
    def annotation_files(self, video_id: str, reading) -> dict[str, str]:
        """Where the video's annotation files are, as the run's tables name them ({role: path or URI}), for the
        issue rows that point a reader at them."""

    @abstractmethod
    def clip_location(self, video_id: str) -> str:
        """Where the video's clip is expected (path or URI), whether or not it is there."""

    @abstractmethod
    def clip(self, video_id: str) -> str | None:
        """The video's clip as a local file, or None when the logs have none."""

    def shown(self, path: str) -> str:
        """A path as the run's tables name it (a source on object storage names the object, not its cached copy)."""
        return str(path)
