"""QA generation on hand-built scenes: values, units, regions, visibility, grounding, determinism, splits."""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from support.attributes import make_frames, make_objects, make_projections, pose, random_scene
from generator.attributes import compute_attributes
from generator.qa import generate_qa, load_templates
from schemas.config import PipelineConfig
from schemas.tables import ISSUES, QA, plain_schema

UNIT_RE = {"m": r"(-?\d+(?:\.\d+)?) m(?![/\w])", "degrees": r"(-?\d+(?:\.\d+)?) degrees\b",
           "m/s": r"(-?\d+(?:\.\d+)?) m/s\b"}


def hand_scene():
    """Ego at 5 m/s along +x, 2 Hz, anchors at frames 4, 6, 10.
    track 1 car: ego (20 - 2t, 3, 0.8), moving 3 m/s;  track 2 pedestrian: standing still, ego (15 - 5t, -4, 0.9);
    track 3 truck: (-8, -3, 1.5) keeping pace behind; track 4: never visible."""
    t = np.arange(0, 10.01, 0.5)
    frames = make_frames("hand", t, [pose(5 * ti, 0, 0) for ti in t], anchors=[4, 6, 10])
    rows = []
    for k, ti in enumerate(t):
        rows += [
            {"frame_index": k, "track_id": 1, "center_ego": [20 - 2 * ti, 3, 0.8], "velocity_global": [3, 0],
             "size": [4.5, 1.9, 1.6]},
            {"frame_index": k, "track_id": 2, "class_name": "pedestrian", "center_ego": [15 - 5 * ti, -4, 0.9],
             "size": [0.6, 0.6, 1.8]},
            {"frame_index": k, "track_id": 3, "class_name": "truck", "center_ego": [-8, -3, 1.5],
             "size": [8, 2.5, 3.5], "velocity_global": [5, 0]},
            {"frame_index": k, "track_id": 4, "center_ego": [30, 0, 0.8]},
        ]
    objects = make_objects(frames, rows)
    hidden = {(k, 4): False for k in range(len(t))}
    return frames, objects, make_projections(objects, hidden)


def run(frames, objects, projections, cfg=None, templates=None):
    cfg = cfg or PipelineConfig()
    attrs = compute_attributes(objects, frames)
    return generate_qa(frames, attrs, projections, cfg, templates or load_templates(cfg))


@pytest.fixture(scope="module")
def hand_qa():
    return run(*hand_scene()).to_pandas().set_index("qa_id", drop=False)


def test_schema_and_families(hand_qa):
    # the default families that need no table beyond frames, attributes and projections (the label families
    # read the labels table; pie its pedestrians from the attributes)
    assert set(hand_qa.family) == {"object_spatial", "ego_spatial", "ego_spatiotemporal", "pie"}
    assert hand_qa.qa_id.is_unique
    assert set(hand_qa.keyframe_index) == {4, 6, 10}
    assert (hand_qa[hand_qa.family == "ego_spatiotemporal"].kind == "quantitative").all()


def test_hand_computed_values(hand_qa):
    q = hand_qa
    # keyframe 6 (t = 3 s): pedestrian (0, -4, 0.9) -> Region [0]; truck (-8, -3, 1.5) -> [1]; car (14, 3, 0.8) -> [2]
    r = q.loc["hand:6:ego_spatial:distance:1"]
    assert r.value == pytest.approx(math.sqrt(14 ** 2 + 9 + 0.64)) and r.unit == "m"
    assert list(r.region_ids) == [2] and list(r.track_ids) == [1] and list(r.class_names) == ["car"]
    assert "Region [2]" in r.question and f"{r.value:.2f} m" in r.answer
    r = q.loc["hand:6:ego_spatial:bearing:2"]
    assert r.value == pytest.approx(-90.0) and "-90.00 degrees" in r.answer
    assert q.loc["hand:6:ego_spatial:clock:2"].value == 3 and "3 o'clock" in q.loc["hand:6:ego_spatial:clock:2"].answer
    assert q.loc["hand:6:ego_spatial:clock:3"].value == 5  # (-8, -3): bearing -159.4 -> 5 o'clock
    assert q.loc["hand:6:ego_spatial:front_behind:3"].value == 0.0
    # the pedestrian (0, -4) is level with the ego's body: beside it (value 2, unit front_behind), not "in front" of
    # the rear axle nor left out as too close to it (issue #53 finding 3); 5 m ahead at keyframe 4 it is in front
    r = q.loc["hand:6:ego_spatial:front_behind:2"]
    assert r.value == 2.0 and r.unit == "front_behind" and "beside the ego vehicle" in r.answer.lower()
    assert q.loc["hand:4:ego_spatial:front_behind:2"].value == 1.0
    assert q.loc["hand:6:ego_spatial:left_right:1"].value == 1.0
    assert q.loc["hand:6:ego_spatial:height:3"].value == pytest.approx(3.5)
    # object pair: the pair order is drawn by the hash; find the car/truck pair either way
    pair = q[(q.keyframe_index == 6) & (q.question_type == "distance") & (q.family == "object_spatial")
             & q.track_ids.map(lambda t: set(t) == {1, 3})].iloc[0]
    assert pair.value == pytest.approx(math.sqrt(22 ** 2 + 36 + 0.49))
    # spatiotemporal, car at keyframe 6: distances at +0..+3 s, ego speed 5 m/s, own speed 3 m/s
    for h, x in ((0, 14), (1, 12), (2, 10), (3, 8)):
        r = q.loc[f"hand:6:ego_spatiotemporal:distance:1:+{h}s"]
        assert r.value == pytest.approx(math.sqrt(x * x + 9 + 0.64)) and r.horizon_s == h
        bearing = q.loc[f"hand:6:ego_spatiotemporal:bearing:1:+{h}s"].value
        assert bearing == pytest.approx(math.degrees(math.atan2(3, x)))
        ego = q.loc[f"hand:6:ego_spatiotemporal:ego_speed:ego:+{h}s"]  # about the ego: one per keyframe
        assert ego.value == pytest.approx(5.0) and len(ego.track_ids) == 0 and pd.isna(ego.out_of_view)
        assert q.loc[f"hand:6:ego_spatiotemporal:target_speed:1:+{h}s"].value == pytest.approx(3.0)
        assert not q.loc[f"hand:6:ego_spatiotemporal:distance:1:+{h}s"].out_of_view
    # the pedestrian leaves the front camera after the keyframe (it is passed by the ego)
    oov = [q.loc[f"hand:6:ego_spatiotemporal:distance:2:+{h}s"].out_of_view for h in range(4)]
    assert oov == [False, True, True, True]
    assert q.loc["hand:6:ego_spatiotemporal:target_speed:2:+2s"].value == pytest.approx(0.0, abs=1e-9)


def test_where_objects_are_unknown_only_the_egos_questions_are_asked():
    """A keyframe whose frame the detector never saw (an ``issues`` row: a frame outside the log's annotations
    under the labels backend, an unreadable sweep) gets only the pose-only questions (issue #53 finding 1): its
    objects are unknown, not absent. The other keyframes are unchanged."""
    frames, objects, projections = hand_scene()
    cfg = PipelineConfig()
    attrs = compute_attributes(objects, frames)
    issues = pa.Table.from_pylist([
        {"scene_id": "hand", "frame_index": 6, "stage": "detect", "reason": "unlabelled", "camera": None,
         "file": None, "message": "outside the annotations"},
        {"scene_id": "hand", "frame_index": 6, "stage": "load", "reason": "lidar_unreadable", "camera": None,
         "file": "x.bin", "message": "a second issue of the same frame"},
        {"scene_id": "hand", "frame_index": 10, "stage": "segment", "reason": "image_unavailable",
         "camera": "CAM_FRONT", "file": "x.jpg", "message": "masks only: the boxes stand"}], schema=ISSUES)
    full = generate_qa(frames, attrs, projections, cfg, load_templates(cfg)).to_pandas()
    got = generate_qa(frames, attrs, projections, cfg, load_templates(cfg), issues=issues).to_pandas()
    at6 = got[got.keyframe_index == 6]
    assert len(at6) == 4 and set(at6.question_type) == {"ego_speed"}  # one per horizon, from the poses
    assert len(full[full.keyframe_index == 6]) > 4
    rest = lambda t: t[t.keyframe_index != 6].reset_index(drop=True)  # noqa: E731
    pd.testing.assert_frame_equal(rest(got), rest(full))


def test_visibility_filter_and_region_numbering(hand_qa):
    q = hand_qa
    assert not q.track_ids.map(lambda t: 4 in t).any()  # never visible -> never asked about
    st = q[q.family == "ego_spatiotemporal"]
    assert not st.track_ids.map(lambda t: 3 in t).any()  # only in CAM_BACK -> no spatiotemporal question
    assert q[q.family == "ego_spatial"].track_ids.map(lambda t: 3 in t).any()
    # region ids follow distance at each keyframe and are consistent between families
    for kf, order in ((4, [2, 3, 1]), (6, [2, 3, 1]), (10, [3, 1, 2])):
        sub = q[(q.keyframe_index == kf)]
        mapping = {}
        for regs, trs in zip(sub.region_ids, sub.track_ids):
            for r_, t_ in zip(regs, trs):
                assert mapping.setdefault(t_, r_) == r_
        assert [tr for tr, _ in sorted(mapping.items(), key=lambda kv: kv[1])] == order


def test_grounding(hand_qa):
    q = hand_qa
    g = list(q.loc["hand:6:ego_spatiotemporal:distance:1:+2s"].grounding)
    assert [e["role"] for e in g] == ["context"] * 3 + ["current"] + ["future"] * 3
    assert [e["frame_index"] for e in g] == [3, 4, 5, 6, 8, 10, 12]
    assert all(e["camera"] == "CAM_FRONT" and e["track_id"] == 1 and e["region_id"] == 2 for e in g)
    assert g[3]["image_path"] == "hand/CAM_FRONT/0006.jpg" and g[3]["mask_rle"]["counts"] == "rle1f6"
    g = list(q.loc["hand:6:ego_spatiotemporal:distance:2:+1s"].grounding)  # pedestrian: front camera until t = 0
    assert [e["frame_index"] for e in g] == [3, 4, 5, 6]
    g = list(q.loc["hand:6:ego_spatial:width:3"].grounding)
    assert len(g) == 1 and g[0]["camera"] == "CAM_BACK" and g[0]["role"] == "current" and g[0]["frame_index"] == 6
    pair = q[(q.family == "object_spatial") & (q.keyframe_index == 4)].iloc[0]
    assert [e["track_id"] for e in pair.grounding] == list(pair.track_ids)
    assert [e["region_id"] for e in pair.grounding] == list(pair.region_ids)


@pytest.fixture(scope="module")
def random_qa():
    parts = [random_scene(f"rand-{i}", seed=i) for i in range(3)]
    frames = pa.concat_tables([p[0] for p in parts])
    objects = pa.concat_tables([p[1] for p in parts])
    projections = pa.concat_tables([p[2] for p in parts])
    return frames, objects, projections, run(frames, objects, projections)


def test_every_quantitative_answer_states_its_unit_and_value(random_qa):
    qa = random_qa[3]
    assert qa.schema.equals(QA)
    df = qa.to_pandas()
    quant = df[df.kind == "quantitative"]
    assert len(quant) > 500 and set(quant.unit) == {"m", "degrees", "m/s"}
    assert set(quant.family) == {"object_spatial", "ego_spatial", "ego_spatiotemporal"}
    tol = 0.5 * 10 ** -PipelineConfig().qa.decimals + 1e-9
    for r in quant.itertuples():
        nums = [float(x) for x in re.findall(UNIT_RE[r.unit], r.answer)]
        assert len(nums) == 1, (r.answer, r.unit)
        assert abs(nums[0] - r.value) <= tol, (r.answer, r.value)
        assert not re.search(UNIT_RE[r.unit], r.question), r.question  # the question does not leak it
    qual = df[df.kind == "qualitative"]
    assert set(qual.unit) == {"bool", "o'clock", "front_behind"}
    yn = qual[qual.answer.str.match(r"^(Yes|No)\b")]
    assert ((yn.answer.str.startswith("Yes")) == (yn.value == 1.0)).all()
    assert 0.3 < (yn.value == 1.0).mean() < 0.7  # the pair order is randomised: answers are balanced


def test_determinism_and_seed(random_qa):
    frames, objects, projections, qa = random_qa
    again = run(frames, objects, projections)
    assert again.equals(qa)
    cfg = PipelineConfig()
    cfg.qa.seed = 7
    other = run(frames, objects, projections, cfg)
    # the seed picks phrasings (and which object pairs are asked, in which order); ego questions stay the same
    ego = lambda t: t.filter(pc.not_equal(t.column("family"), "object_spatial"))  # noqa: E731
    a, b = ego(qa), ego(other)
    assert b.column("qa_id").equals(a.column("qa_id")) and b.column("value").equals(a.column("value"))
    changed = pc.sum(pc.not_equal(b.column("template_id"), a.column("template_id"))).as_py()
    assert 0.2 * a.num_rows < changed < 0.9 * a.num_rows
    # several phrasings are really used for each question type
    df = qa.to_pandas()
    assert (df.groupby(["family", "question_type"]).template_id.nunique() >= 2).all()


def test_batch_of_scenes_equals_scene_by_scene(random_qa):
    frames, objects, projections, qa = random_qa
    parts = []
    for s in ("rand-0", "rand-1", "rand-2"):
        f = lambda t: t.filter(pc.equal(t.column("scene_id"), s))  # noqa: E731
        parts.append(run(f(frames), f(objects), f(projections)))
    # value by value: each batch has its own grounding dictionaries
    assert pa.concat_tables(parts).cast(plain_schema(QA)).equals(qa.cast(plain_schema(QA)))


def test_caps_families_and_splits(random_qa):
    frames, objects, projections, _ = random_qa
    cfg = PipelineConfig()
    cfg.qa.max_objects_per_keyframe = 3
    cfg.qa.max_pairs_per_keyframe = 2
    cfg.qa.families = ["object_spatial", "ego_spatial"]
    df = run(frames, objects, projections, cfg).to_pandas()
    assert set(df.family) == {"object_spatial", "ego_spatial"}
    assert max(max(r) for r in df.region_ids) == 2
    pairs = df[df.family == "object_spatial"].groupby(["scene_id", "keyframe_index"]).track_ids.apply(
        lambda s: len({tuple(sorted(t)) for t in s}))
    assert pairs.max() <= 2
    for frac, expect in ((0.0, {"train"}), (1.0, {"val"})):
        cfg = PipelineConfig()
        cfg.qa.val_fraction = frac
        cfg.qa.families = ["ego_spatial"]
        assert set(run(frames, objects, projections, cfg).column("split").to_pylist()) == expect
    # splits are per scene
    assert df.groupby("scene_id").split.nunique().max() == 1


def test_nothing_visible_gives_no_rows():
    frames, objects, _ = hand_scene()
    hidden = {(r["frame_index"], r["track_id"]): False for r in objects.to_pylist()}
    qa = run(frames, objects, make_projections(objects, hidden))
    assert qa.schema.equals(QA)
    # only the questions about the ego (its speed at each horizon after each keyframe) remain
    assert set(qa.column("question_type").to_pylist()) == {"ego_speed"}
    assert all(len(t) == 0 for t in qa.column("track_ids").to_pylist())


def test_front_camera_falls_back_to_the_most_forward_camera():
    """A log without cfg.qa.front_camera: the camera whose optical axis points along +x is the front one."""
    frames, objects, _ = hand_scene()
    fwd = np.array([[0, 0, 1, 0], [-1, 0, 0, 0], [0, -1, 0, 0], [0, 0, 0, 1.0]])  # optical z -> ego +x
    rear = np.array([[0, 0, -1, 0], [1, 0, 0, 0], [0, -1, 0, 0], [0, 0, 0, 1.0]])  # optical z -> ego -x
    cams = frames.column("cameras").to_pylist()
    for per_frame in cams:
        for c, name, T in zip(per_frame, ("rear_cam", "fwd_cam"), (rear, fwd)):
            c["name"], c["ego_SE3_cam"] = name, T.reshape(-1).tolist()
    frames = frames.set_column(frames.schema.get_field_index("cameras"), "cameras",
                               pa.array(cams, frames.schema.field("cameras").type))
    proj = make_projections(objects, {(k, 4): False for k in range(frames.num_rows)},
                            lambda r: "fwd_cam" if r["center_ego_m"][0] >= 0 else "rear_cam")
    df = run(frames, objects, proj).to_pandas()
    st = df[df.family == "ego_spatiotemporal"]
    assert len(st) and {g["camera"] for gl in st.grounding for g in gl} == {"fwd_cam"}
    assert not st.track_ids.map(lambda t: 3 in t).any()  # the truck behind stays out of it


def test_context_frames_follow_the_keyframe_helper():
    """The multi-scene frame search picks what the per-clip context_indices picks per anchor (nearest frame
    within the tolerance, else none), across several scenes at once."""
    from generator.sources.keyframes import context_indices, nearest_frame_rows
    from schemas.config import KeyframeConfig

    rng = np.random.default_rng(3)
    offsets = np.array(list(KeyframeConfig().context_offsets_s()) + [1.0, 2.0, 3.0])
    scenes, ts = [], []
    for s, step in enumerate((0.5, 0.1, 0.5)):  # nuScenes-like 2 Hz, AV2-like 10 Hz, 2 Hz with gaps
        t = np.arange(0, 20, step) + rng.normal(0, 0.02, int(round(20 / step)))
        if s == 2:
            t = np.delete(t, [9, 10, 20])
        scenes.append(np.full(len(t), s))
        ts.append(np.round(1e15 + t * 1e6).astype(np.int64))
    sc, tt = np.concatenate(scenes), np.concatenate(ts)
    starts = np.cumsum([0] + [len(t) for t in ts])
    for s in range(3):
        for anchor in range(4, len(ts[s]) - 7, 3):
            want = context_indices(ts[s], anchor, offsets, 0.06)
            got = nearest_frame_rows(sc, tt, np.full(len(offsets), s), ts[s][anchor] + np.round(offsets * 1e6), 0.06)
            got = np.where(got >= 0, got - starts[s], -1)
            assert got.tolist() == want.tolist(), (s, anchor)


def test_each_scene_front_camera_comes_from_its_first_frame_with_cameras():
    """One rule (``generator.types.scene_front_cameras``) for QA and the exports (``sources.front_camera_images``):
    a scene whose first frame has no cameras takes its front camera from the next frame's rig; a later frame whose
    rig would choose another camera does not change the scene's choice."""
    from generator.sources import front_camera_images
    from generator.types import scene_front_cameras

    fwd = np.array([[0, 0, 1, 0], [-1, 0, 0, 0], [0, -1, 0, 0], [0, 0, 0, 1.0]]).reshape(-1)
    rear = np.array([[0, 0, -1, 0], [1, 0, 0, 0], [0, -1, 0, 0], [0, 0, 0, 1.0]]).reshape(-1)
    # scene 0: frame 0 without cameras, frame 1 (a, b) -> b forward; frame 2 (a, b) with a forward (ignored)
    # scene 1: frame 3 (a, b) -> a forward
    names = ["a", "b", "a", "b", "a", "b"]
    T = np.stack([rear, fwd, fwd, rear, fwd, rear])
    entry_frame = np.array([1, 1, 2, 2, 3, 3])
    entry_scene = np.array([0, 0, 0, 0, 1, 1])
    keys, chosen = scene_front_cameras(entry_scene, entry_frame, names, T, "CAM_FRONT")
    assert keys.tolist() == [0, 1] and [names[i] for i in chosen] == ["b", "a"]

    cam_t = pa.list_(pa.struct([("name", pa.string()), ("image_path", pa.string()), ("width_px", pa.int32()),
                                ("height_px", pa.int32()), ("K", pa.list_(pa.float64(), 9)),
                                ("ego_SE3_cam", pa.list_(pa.float64(), 16))]))

    def cam(n, t):
        return {"name": n, "image_path": f"{n}.jpg", "width_px": 8, "height_px": 6, "K": [1.0] * 9,
                "ego_SE3_cam": t.tolist()}

    frames = pa.table({"scene_id": ["s0", "s0", "s0", "s1"], "frame_index": pa.array([0, 1, 2, 0], pa.int32()),
                       "cameras": pa.array([[], [cam("a", rear), cam("b", fwd)], [cam("a", fwd), cam("b", rear)],
                                            [cam("a", fwd), cam("b", rear)]], cam_t)})
    got = front_camera_images(frames, "CAM_FRONT")
    assert list(zip(*(got.column(c).to_pylist() for c in ("scene_id", "frame_index", "name")))) == [
        ("s0", 1, "b"), ("s0", 2, "b"), ("s1", 0, "a")]


@pytest.mark.parametrize("case", ["objects_end_before_the_first_keyframe", "no_objects"])
def test_a_scene_without_objects_at_its_keyframes_gets_its_ego_questions(labelled_run, case):
    """A scene whose objects all lie before its first keyframe crashed the QA stage (IndexError in the ego
    intention family), and a scene with no object at all got no QA, not even about the ego. Both get every
    question about the ego that does not depend on objects (ego behaviour, ego speed) exactly as the full
    scene does, ego intention rows without a target, and no row about an object."""
    from generator.runfolder import RunReader

    reader = RunReader(str(labelled_run))
    cfg, sid = reader.config(), reader.scene_ids()[0]
    t = {n: reader.read_scene(n, sid) for n in ("frames", "attributes", "projections", "labels", "objects")}
    tpl = load_templates(cfg)
    full = generate_qa(t["frames"], t["attributes"], t["projections"], cfg, tpl, labels=t["labels"], objects=t["objects"])
    anchors = t["frames"].filter(t["frames"].column("is_anchor")).column("frame_index").to_pylist()
    cut = min(anchors) if case != "no_objects" else -1
    part = {n: t[n].filter(pc.less(t[n].column("frame_index"), cut)) for n in ("attributes", "projections", "objects")}
    labels = t["labels"].filter(pc.or_(pc.equal(t["labels"].column("subject"), "ego"),
                                       pc.less(t["labels"].column("frame_index"), cut)))
    assert part["objects"].num_rows == (0 if case == "no_objects" else part["objects"].num_rows) and \
        (case == "no_objects" or part["objects"].num_rows > 0)
    q = generate_qa(t["frames"], part["attributes"], part["projections"], cfg, tpl, labels=labels,
                    objects=part["objects"])

    def rows(table, keep):
        return sorted((r["qa_id"], r["answer"]) for r in table.select(["qa_id", "family", "question_type", "answer"])
                      .to_pylist() if keep(r))

    ego_only = lambda r: r["family"] == "ego_behaviour" or (r["family"], r["question_type"]) == (  # noqa: E731
        "ego_spatiotemporal", "ego_speed")
    assert rows(q, ego_only) == rows(full, ego_only) and len(rows(q, ego_only)) >= 2 * len(anchors)
    assert pc.sum(pc.list_value_length(q.column("track_ids"))).as_py() in (0, None)
    intent = q.filter(pc.equal(q.column("family"), "ego_intention"))
    assert intent.num_rows > 0 and all(i.endswith(":ego") for i in intent.column("qa_id").to_pylist())
