"""Generated nuScenes-format driving logs (``drivegen synth``).

``make_dataset(root, num_scenes, seed, version)`` scripts seeded 20 s scenes around a four-way
intersection (ego manoeuvres, STRIDE-QA / DRAMA-X / PIE agent scenarios), ray-casts a 32-beam LiDAR,
renders the six nuScenes cameras and writes tables the nuScenes devkit loads unmodified, plus
``<version>/drivegen_scenarios.json`` with the scripted ground truth (see ``writer``).
"""
from generator.synth.writer import SCENARIO_FILE, SynthSummary, make_dataset

__all__ = ["make_dataset", "SynthSummary", "SCENARIO_FILE"]
