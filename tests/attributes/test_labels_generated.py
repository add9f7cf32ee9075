"""Behaviour labels on the generated nuScenes-format logs, checked against their scripted
``drivegen_scenarios.json`` (ego maneuver and speed status per keyframe; pedestrian scenarios)."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from support.data import SYNTH_VERSION
from generator.attributes import compute_labels
from schemas.vocab import MANEUVERS


@pytest.fixture(scope="module")
def generated(synth_root):
    from generator.perception import objects_table
    from generator.sources import frames_table, open_source
    from schemas.config import PipelineConfig

    src = open_source("nuscenes", str(synth_root), PipelineConfig(), version=SYNTH_VERSION)
    side = json.loads((synth_root / SYNTH_VERSION / "drivegen_scenarios.json").read_text())
    by_name = {v["name"]: v for v in side["scenes"].values()}
    out = []
    for sid in src.scene_ids():
        scene = src.load_scene(sid)
        boxes = [f.labels for f in scene.frames]
        tokens = sorted({t for b in boxes for t in b.instance_token})
        tid = {t: i for i, t in enumerate(tokens)}
        for b in boxes:  # ground-truth identities as track ids
            b.track_id = np.array([tid[t] for t in b.instance_token], dtype=np.int64)
        frames = frames_table(scene)
        objects = objects_table(scene, boxes, "gt")
        out.append((sid, frames, objects, compute_labels(objects, frames).to_pandas(), by_name[sid], tid))
    return out


def test_ego_maneuver_and_speed_status_agree_with_the_script(generated):
    n = man = spd = 0
    confusion = Counter()
    for sid, frames, objects, lab, script, _ in generated:
        truth = {k["timestamp"]: k for k in script["ego"]["keyframes"]}
        ego = lab[lab.subject == "ego"]
        assert len(ego) == frames.num_rows
        for r in ego.itertuples():
            k = truth[r.timestamp_us]
            if r.maneuver is None:
                continue
            n += 1
            man += r.maneuver == k["maneuver"]
            spd += r.speed_status == k["speed_status"]
            confusion[(k["maneuver"], r.maneuver)] += 1
    scripted = {m for _, _, _, _, s, _ in generated for m in (seg["maneuver"] for seg in s["ego"]["segments"])}
    assert len(scripted) >= 3 and n >= 70  # the script exercises several maneuvers; nearly every frame is labelled
    assert man / n >= 0.9, confusion
    assert spd / n >= 0.9
    # every scripted maneuver is recognised on most of its keyframes
    for m in scripted:
        hit = confusion[(m, m)] / max(1, sum(v for (t, _), v in confusion.items() if t == m))
        assert hit >= 0.6, (m, confusion)


def test_pedestrian_intent_follows_the_script(generated):
    crossing, waiting = Counter(), Counter()
    for sid, frames, objects, lab, script, tid in generated:
        agents = lab[lab.subject == "agent"]
        for inst, d in script["instances"].items():
            if d["scenario"] not in ("ped_crossing", "waiting_at_curb") or inst not in tid:
                continue
            rows = agents[(agents.track_id == tid[inst]) & agents.intent_lateral.notna()]
            ts = np.array(frames.column("timestamp_us").to_pylist())
            first = ts[frames.column("token").to_pylist().index(d["first_sample_token"])]
            speeds = dict(zip(ts[ts >= first], d["speed_mps"]))  # scripted speed per sample of the instance
            for r in rows.itertuples():
                v = speeds.get(r.timestamp_us)
                if d["scenario"] == "waiting_at_curb":
                    waiting[(r.intent_lateral, r.intent_vertical)] += 1
                elif v is not None and v > 1.0:
                    crossing[r.intent_lateral != "stationary" or r.intent_vertical != "stationary"] += 1
    assert sum(waiting.values()) > 10 and sum(crossing.values()) > 10
    assert waiting[("stationary", "stationary")] / sum(waiting.values()) >= 0.9, waiting
    assert crossing[True] / sum(crossing.values()) >= 0.8, crossing


def test_maneuver_labeller_agrees_with_the_script_on_95_percent_of_frames(tmp_path_factory):
    """Intention-Drive's atomic maneuvers (issue #15): six scenes of another seed, every frame (2 Hz) read
    through the nuScenes loader (scene 2 of each is a pull-over scene). Measured: 97.1 % (seed 1), 98.3 %
    (seed 0), 95.8 % (seed 2); the misses are the edges of lane changes, whose scripted boundaries carry almost
    no lateral motion."""
    from generator.attributes.ego import ego_states
    from generator.attributes.labels import ego_labels
    from generator.sources import frames_table, open_source
    from generator.synth import make_dataset
    from schemas.config import PipelineConfig

    root = tmp_path_factory.mktemp("maneuvers")
    make_dataset(root, num_scenes=6, seed=1, version=SYNTH_VERSION, sweep_hz=0, image_width_px=160,
                 image_height_px=90, num_azimuth=64)  # only the ego poses matter here
    src = open_source("nuscenes", str(root), PipelineConfig(), version=SYNTH_VERSION)
    side = json.loads((root / SYNTH_VERSION / "drivegen_scenarios.json").read_text())
    truth = {k["timestamp"]: k["maneuver"] for v in side["scenes"].values() for k in v["ego"]["keyframes"]}
    n = ok = 0
    confusion = Counter()
    for sid in src.scene_ids():
        ego = ego_states(frames_table(src.load_scene(sid)))
        man = ego_labels(ego, PipelineConfig().labels)["maneuver"]
        for ts, m in zip(ego.timestamp_us, man):
            if m >= 0:
                n += 1
                ok += MANEUVERS[m] == truth[int(ts)]
                confusion[(truth[int(ts)], MANEUVERS[m])] += 1
    print(f"maneuver agreement with the script: {ok}/{n} = {ok / n:.3f}")
    assert n == 240 and len({t for t, _ in confusion}) >= 5  # straight, turns, lane changes both ways, stop
    assert ok / n >= 0.95, {k: v for k, v in confusion.items() if k[0] != k[1]}
