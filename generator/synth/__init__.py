"""Generated nuScenes-format driving logs (``drivegen synth``).

``make_dataset(root, num_scenes=2, seed=0, version="v1.0-drivegen")`` scripts seeded 20 s scenes around a
four-way intersection (ego manoeuvres; STRIDE-QA / DRAMA-X / PIE agent scenarios), ray-casts a 32-beam
LiDAR, renders the six nuScenes cameras and writes tables that ``nuscenes.NuScenes(version, dataroot=root)``
loads unmodified. Same (seed, scene index) -> same bytes.

What is written (defaults): 40 keyframes per scene at 2 Hz; LiDAR at 10 Hz (4 sweeps between keyframes
plus 4 before the first, in ``sweeps/LIDAR_TOP``); six 800x450 JPEGs per keyframe (intrinsics = nuScenes'
1600x900 ones scaled by 0.5, stored in calibrated_sensor); one log and one 0.1 m/pixel map mask per scene.
Camera and LiDAR keyframes share the sample timestamp. Ego poses are at the rear axle with z = 0.

Side file ``<root>/<version>/drivegen_scenarios.json`` (the scripted ground truth)::

    {"format": "drivegen-scenarios/1", "seed": 0, "version": "...", "maneuvers": [...], "speed_statuses": [...],
     "scenes": {<scene_token>: {
        "name": "scene-0000", "t0_timestamp": <us of the first sample; all *_s values count from it>,
        "ego": {"plan": {"turn": "left"|"right"|null, "stop": bool, "cruise_mps": .., "lane_changes": [..]},
                "keyframes": [{"sample_token", "timestamp", "maneuver", "speed_status", "speed_mps",
                               "accel_mps2"} x 40],
                "segments": [{"maneuver", "start_timestamp", "end_timestamp"}, ...]},   # 20 Hz run-lengths
        "instances": {<instance_token>: {"scenario": one of world.SCENARIOS, "category": nuScenes name,
                                         "details": {...scenario timing, e.g. pass_time_s},
                                         "first_sample_token", "last_sample_token",
                                         "speed_mps": [scripted speed at each of its annotations]}}}}}

Manoeuvres: Straight, Turn Left, Turn Right, Change Lane Left, Change Lane Right, Stop; speed status:
Accelerate, Decelerate, Maintain Speed. Scenarios: oncoming_pass, overtake (the ego passes it),
path_divergence, pulling_away, maintain_state, ped_crossing, cyclist_veering, waiting_at_curb, parked, static.
Every instance in ``instance.json`` has an entry. ``render.CLASS_COLORS_RGB`` gives each class's image colour.
"""
from generator.synth.writer import MINIMAL_SCENES, SCENARIO_FILE, SynthSummary, make_dataset

__all__ = ["make_dataset", "SynthSummary", "SCENARIO_FILE", "MINIMAL_SCENES"]
