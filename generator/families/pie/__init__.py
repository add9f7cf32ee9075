"""PIE/JAAD (seed 001): pedestrian crossing action by time to event and event-risk regions. On camera-only
videos (``drivegen run --source jaad``) the video stage derives ``pie_samples`` (``attributes.build_samples``);
3D logs are exported by ``drivegen export pie`` (``attributes.path_entry``). QA family ``pie`` (``qa``,
templates in ``templates/``), the benchmark export (``export``) and the scorer (``drivegen score pie``).
Its config section also holds how camera-only videos are read (``video_settings``: JAAD's split variant,
track gaps, fps, frame extraction).
"""
from __future__ import annotations

from pathlib import Path

from schemas.families import PaperFamily

HERE = Path(__file__).parent


class Pie(PaperFamily):
    name = "pie"
    title = "PIE/JAAD"
    order = 40
    config_section = "pie"
    qa_names = ("pie",)

    def config_model(self):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.pie.config import PieConfig

        return PieConfig

    def tables(self):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.pie.tables import PIE_SAMPLES
        from schemas.layout import TableLayout

        return [TableLayout("pie_samples", "pie_samples", PIE_SAMPLES)]

    def video_settings(self, cfg):
        return cfg.pie

    def derive_video(self, video, cfg):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.pie.attributes import video_samples

        return {"pie_samples": video_samples(video, cfg)}

    def frames_to_extract(self, tables):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.pie.attributes import sample_frames

        return sample_frames(tables.get("pie_samples"))

    def counts(self, tables, cfg):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.pie.attributes import video_sample_counts

        return video_sample_counts(tables.get("pie_samples"))

    def qa_families(self):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.pie.qa import PIE

        return [PIE]

    def template_dirs(self):
        return [HERE / "templates"]

    def video_qa(self, tables, cfg):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.pie.qa import video_batches

        t = tables.get("pie_samples")
        return video_batches(t, cfg) if t is not None and t.num_rows else []

    def summary_entry(self, data):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.pie.qa import PieSummary

        return PieSummary(**data)

    def summary(self, counts, exports, camera_only):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.pie.qa import PieSummary

        return PieSummary.of(counts) if camera_only else None

    def report_video_cells(self, reader, video_id, counts):
        return {"action samples (crossing)": f"{counts.get('pie_action_samples', 0)} "
                                             f"({counts.get('pie_crossing_samples', 0)})",
                "risk samples": str(counts.get("pie_risk_samples", 0))}

    def scorer(self):
        return "generator.families.pie.score"

    def export_command(self):
        return "generator.families.pie.export_pie"


FAMILY = Pie()
