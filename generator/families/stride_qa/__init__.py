"""STRIDE-QA (seed 000): object-centric, ego-centric and ego-centric spatiotemporal QA with ``Region [X]``
grounding, and the STRIDE-QA-Bench export (``bench/``, ``drivegen export stride_qa``).

    config section  bench          (``config.BenchConfig``: the bench's scene-group rules, ``export``)
    QA families     object_spatial, ego_spatial, ego_spatiotemporal (``qa``; templates in ``templates/``)
    export          bench/         (``export.export_bench``), at the end of a run when ``bench.export``
    scorer          ``drivegen score stride`` (``score``: the bench toolkit's metrics)
"""
from __future__ import annotations

from pathlib import Path

from schemas.families import Export, PaperFamily

HERE = Path(__file__).parent


class StrideQA(PaperFamily):
    name = "stride_qa"
    title = "STRIDE-QA"
    order = 10
    config_section = "bench"
    score_name = "stride"
    qa_names = ("object_spatial", "ego_spatial", "ego_spatiotemporal")

    def config_model(self):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.stride_qa.config import BenchConfig

        return BenchConfig

    def qa_families(self):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.stride_qa.qa import EGO_SPATIAL, EGO_SPATIOTEMPORAL, OBJECT_SPATIAL

        return [OBJECT_SPATIAL, EGO_SPATIAL, EGO_SPATIOTEMPORAL]

    def template_dirs(self):
        return [HERE / "templates"]

    def moved_settings(self):
        return {"writers.bench_export": "bench.export"}  # before the family had its own section

    def exports(self):
        return [Export("bench", "bench", "generator.families.stride_qa.export:export_bench",
                       enabled=lambda cfg: cfg.bench.export, part="generator.families.stride_qa.export:bench_part")]

    def summary_entry(self, data):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.stride_qa.export import BenchSummary

        return BenchSummary(**data)

    def summary(self, counts, exports, camera_only):
        # lazy: the registry imports every family's package for its declarations alone
        from generator.families.stride_qa.export import BenchSummary

        return BenchSummary.of(exports.get("bench"))

    def export_command(self):
        return "generator.families.stride_qa.export_bench"

    def scorer(self):
        return "generator.families.stride_qa.score"


FAMILY = StrideQA()
