"""``drivegen validate``: detection/tracking quality of a run against labelled logs (STRIDE-QA App. A.3, Table 6).

- ``run.validate_run(run_dir, ValidateOptions)`` -> report dict; ``report.to_markdown``/``to_json``.
- ``metrics``: nuscenes-devkit ``DetectionEval``/``TrackingEval`` over ready boxes (no NuScenes split).
- ``groundtruth``: GT from nuScenes-format tables (devkit loaders) or Argoverse 2 feather files.
- ``boxes``: OBJECTS rows / annotation arrays -> ``DetectionBox``/``TrackingBox``.
- ``agreement``: label-noise rate, QA re-run on the labels compared with STRIDE-QA's tolerances.
"""
