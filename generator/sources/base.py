"""The one interface every log source implements: list scenes, load a scene of synchronized frames."""
from __future__ import annotations

from abc import ABC, abstractmethod

from generator.types import Scene
from schemas.config import EgoBodyConfig


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
