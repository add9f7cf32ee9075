"""Intention-Drive (seed 004): ego behaviour (atomic maneuvers, speed status) and ego intention QA
(instructions, waypoints), the planning-sample export (``intention/``, ``drivegen export intention_drive``) and
its scorer (``drivegen score intention``).

    config section  intention      (``config.IntentionConfig``, ``export``)
    QA families     ego_behaviour (``behaviour_qa``), ego_intention (``qa``); templates in ``templates/``
    export          intention/     (``export_run.export_intention``) when ``intention.export``
"""
from __future__ import annotations

from pathlib import Path

from schemas.families import Export, PaperFamily

HERE = Path(__file__).parent


class IntentionDrive(PaperFamily):
    name = "intention_drive"
    title = "Intention-Drive"
    order = 20
    config_section = "intention"
    qa_names = ("ego_behaviour", "ego_intention")
    score_name = "intention"

    def config_model(self):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.intention_drive.config import IntentionConfig

        return IntentionConfig

    def schemas(self):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.intention_drive.tables import INTENTION_OBJECTS, INTENTION_SAMPLES

        return [INTENTION_SAMPLES, INTENTION_OBJECTS]

    def report_sample_note(self, row, cfg):
        if row.get("family") != "ego_intention":
            return None
        at = cfg.intention.classify_at_s
        return (f"The instruction is what the ego does next: its maneuver and speed status are classified "
                f"{at:g} s after this keyframe (intention.classify_at_s) on the logged trajectory, so they may "
                f"differ from the ego's behaviour label at the keyframe itself, shown below. The answer is that "
                f"trajectory: {cfg.labels.num_waypoints} waypoints {cfg.labels.waypoint_step_s:g} s apart, x ahead "
                f"and y to the left of the ego at the keyframe, in metres.")

    def qa_families(self):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.intention_drive.behaviour_qa import EGO_BEHAVIOUR
        from generator.families.intention_drive.qa import EGO_INTENTION

        return [EGO_BEHAVIOUR, EGO_INTENTION]

    def template_dirs(self):
        return [HERE / "templates"]

    def moved_settings(self):
        return {"writers.intention_export": "intention.export"}  # before the family had its own section

    def exports(self):
        return [Export("intention", "intention", "generator.families.intention_drive.export_run:export_intention",
                       enabled=lambda cfg: cfg.intention.export and "ego_intention" in cfg.qa.families,
                       part="generator.families.intention_drive.export_run:intention_part")]

    def summary_entry(self, data):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.intention_drive.export_run import IntentionSummary

        return IntentionSummary(**data)

    def summary(self, counts, exports, camera_only):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.intention_drive.export_run import IntentionSummary

        return IntentionSummary.of(exports.get("intention"))

    def scorer(self):
        return "generator.families.intention_drive.score"

    def export_command(self):
        return "generator.families.intention_drive.export_intention"


FAMILY = IntentionDrive()
