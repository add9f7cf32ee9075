"""The static HTML report of a run folder (``drivegen report``): summary, config, counts, distributions,
visibility drops, validation metrics, errors, bird's-eye views per scene and a sample browser of
Set-of-Mark keyframes with their QA and behaviour labels. Built from the run folder alone
(``generator.runfolder.RunReader``). See ``generator.report.site``."""
from generator.report.site import ReportResult, build_report, default_out

__all__ = ["ReportResult", "build_report", "default_out"]
