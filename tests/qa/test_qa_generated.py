"""QA on the generated nuScenes-format logs through the real pipeline (labels detector, CPU segmenter,
visibility filter): counts per family, units and values, a devkit spot check, and regeneration of the run."""
from __future__ import annotations

import math
import re

import numpy as np
import pyarrow.compute as pc
import pytest

from support.data import SYNTH_VERSION
from generator.runfolder import read_table
from generator.writers.parquet import read_qa
from schemas.config import PipelineConfig

UNIT_RE = {"m": r"(-?\d+\.\d+) m(?![/\w])", "degrees": r"(-?\d+\.\d+) degrees\b", "m/s": r"(-?\d+\.\d+) m/s\b"}


@pytest.fixture(scope="module")
def generated_run(synth_root, tmp_path_factory):
    from generator.pipeline import run

    cfg = PipelineConfig()
    cfg.writers.webdataset = cfg.writers.card = cfg.bench.export = False
    out = tmp_path_factory.mktemp("qa-generated") / "run"
    res = run(str(out), source="nuscenes", data=str(synth_root), version=SYNTH_VERSION, cfg=cfg, executor="local",
              progress=False)
    qa = read_qa(sorted((out / "qa").glob("*.parquet")))
    return out, res, qa


def test_counts_per_family(generated_run):
    out, res, qa = generated_run
    df = qa.to_pandas()
    counts = df.groupby("family").size().to_dict()
    print("QA per family on the generated logs:", counts, "per kind:", df.groupby("kind").size().to_dict())
    assert set(counts) == {"object_spatial", "ego_spatial", "ego_spatiotemporal", "ego_behaviour", "ego_intention",
                           "drama_x", "pie"}
    assert min(counts[f] for f in ("object_spatial", "ego_spatial", "ego_spatiotemporal")) >= 100
    assert df.scene_id.nunique() == 2 and df.qa_id.is_unique
    cfg = PipelineConfig()
    per_kf = df.groupby(["scene_id", "keyframe_index", "family", "question_type"]).size()
    assert per_kf.xs("ego_spatial", level="family").max() <= cfg.qa.max_objects_per_keyframe
    assert per_kf.xs("object_spatial", level="family").max() <= cfg.qa.max_pairs_per_keyframe
    st = df[df.family == "ego_spatiotemporal"]
    assert st.groupby(["scene_id", "keyframe_index", st.track_ids.map(tuple)]).size().max() <= 16
    about_target = st[st.track_ids.map(len) > 0]  # the ego's speed is a question about the ego: no out_of_view
    assert st[st.track_ids.map(len) == 0].out_of_view.isna().all()
    assert set(st.horizon_s) == {0.0, 1.0, 2.0, 3.0}
    assert about_target.out_of_view.any() and not about_target.out_of_view.all()
    t0 = about_target[about_target.horizon_s == 0]
    assert (t0.out_of_view == False).all()  # noqa: E712 - visible in the front camera at t0
    # grounding points at real image files with RLE masks in every row about objects
    g = df.grounding.map(len)
    assert (g >= 1).all()
    first = df.grounding.iloc[0][0]
    assert first["image_path"] and first["mask_rle"]["counts"] and len(first["box_xyxy"]) == 4


def test_ego_behaviour_answers_are_the_labels_table(generated_run):
    """The ego_behaviour family reads the behaviour-labels table: one question per keyframe and type, its
    value the label's index in the vocabulary, no region, grounded in the keyframe's front-camera image."""
    from schemas.vocab import MANEUVERS, SPEED_STATUS

    out, _, qa = generated_run
    df = qa.to_pandas()
    eb = df[df.family == "ego_behaviour"]
    labels = read_table(out, "labels").to_pandas()
    ego = labels[labels.subject == "ego"].set_index(["scene_id", "frame_index"])
    anchors = read_table(out, "frames").to_pandas().query("is_anchor")
    assert len(eb) == 2 * len(anchors)  # every keyframe of the generated logs has both labels
    for r in eb.itertuples():
        lab = ego.loc[(r.scene_id, r.keyframe_index)]
        vocab, col = (MANEUVERS, "maneuver") if r.question_type == "maneuver" else (SPEED_STATUS, "speed_status")
        assert vocab[int(r.value)] == lab[col]
        assert r.qa_id.endswith(f":{r.question_type}:ego") and len(r.region_ids) == 0 and len(r.track_ids) == 0
        [g] = r.grounding
        assert g["camera"] == "CAM_FRONT" and g["frame_index"] == r.keyframe_index and g["image_path"]
        assert g["box_xyxy"] is None and g["mask_rle"] is None and g["region_id"] is None
    phrase = eb[eb.template_id == "ego_behaviour.maneuver.doing"]
    assert len(phrase) and phrase.answer.str.match(r"^The ego vehicle is (going straight|turning|changing|stopped)").all()


def test_every_quantitative_answer_parses_back(generated_run):
    _, _, qa = generated_run
    quant = qa.filter(pc.equal(qa.column("kind"), "quantitative")).to_pandas()
    assert set(quant.unit) == {"m", "degrees", "m/s"}
    for r in quant.itertuples():
        nums = [float(x) for x in re.findall(UNIT_RE[r.unit], r.answer)]
        assert len(nums) == 1 and abs(nums[0] - r.value) <= 0.005 + 1e-9, (r.answer, r.value)


def test_spatiotemporal_values_match_the_devkit(generated_run, synth_root):
    """Recompute distance/bearing at +1..+3 s from the devkit's ego poses and sample annotations."""
    from nuscenes.nuscenes import NuScenes

    from generator.geometry import SE3

    out, _, qa = generated_run

    nusc = NuScenes(version=SYNTH_VERSION, dataroot=str(synth_root), verbose=False)
    st = qa.filter(pc.equal(qa.column("family"), "ego_spatiotemporal")).to_pandas()
    checked = 0
    for scene_id, sub in st.groupby("scene_id"):
        frames = read_table(out, "frames", scenes=[scene_id]).to_pandas()
        objs = read_table(out, "objects", scenes=[scene_id]).to_pandas()
        token_of = dict(zip(frames.frame_index, frames.token))
        inst_of = dict(zip(objs.track_id, objs.instance_token))
        rows = sub[sub.question_type.isin(["distance", "bearing"]) & (sub.horizon_s > 0)].head(40)
        for r in rows.itertuples():
            kf_ts = r.timestamp_us + int(r.horizon_s * 1e6)
            fi = int(frames.iloc[int(np.argmin(np.abs(frames.timestamp_us - kf_ts)))].frame_index)
            sample = nusc.get("sample", token_of[fi])
            ann = [a for a in (nusc.get("sample_annotation", t) for t in sample["anns"])
                   if a["instance_token"] == inst_of[r.track_ids[0]]]
            if not ann:
                continue
            pose = nusc.get("ego_pose", nusc.get("sample_data", sample["data"]["LIDAR_TOP"])["ego_pose_token"])
            c = SE3.from_quat(pose["rotation"], pose["translation"]).inverse().transform_points(
                np.array([ann[0]["translation"]]))[0]
            want = math.sqrt(c @ c) if r.question_type == "distance" else math.degrees(math.atan2(c[1], c[0]))
            assert r.value == pytest.approx(want, abs=0.02), (r.qa_id, r.value, want)
            checked += 1
    assert checked >= 20


def test_regenerate_reproduces_the_run(generated_run, tmp_path):
    from generator.cli import main as cli

    out, _, qa = generated_run
    assert cli(["regenerate", str(out), "--out", str(tmp_path / "regen")]) == 0
    again = read_qa(sorted((tmp_path / "regen" / "qa").glob("*.parquet")))
    assert again.sort_by("qa_id").equals(qa.sort_by("qa_id"))
