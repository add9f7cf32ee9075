"""Pipeline config: paper defaults, refusal of bad files with the file and field named, overrides."""
from __future__ import annotations

import contextlib
import io

import pytest
import yaml

from schemas.config import ConfigError, KeyframeConfig, PipelineConfig, load_config, parse_config


def write(tmp_path, text: str, name: str = "cfg.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_defaults_are_the_papers_values():
    c = load_config(None)
    # STRIDE-QA §4.2 keyframe sampling: 1 Hz, 2-17 s, context -2 s .. +3 s, four context frames at 2 Hz
    k = c.keyframes
    assert (k.rate_hz, k.window_start_s, k.window_end_s) == (1.0, 2.0, 17.0)
    assert (k.context_before_s, k.context_after_s, k.context_rate_hz) == (2.0, 3.0, 2.0)
    # STRIDE-QA §4.2 visibility filter: box IoU > 0.3, coverage > 0.8, SAM IoU score > 0.8
    v = c.visibility
    assert (v.box_iou_min, v.coverage_min, v.mask_score_min) == (0.3, 0.8, 0.8)
    # STRIDE-QA App. C.3 tolerances: 25 % distance, 10 deg, 20 % speed or 0.5 m/s below 1 m/s
    t = c.tolerances
    assert (t.distance_rel, t.bearing_deg, t.speed_rel, t.speed_abs_mps, t.speed_abs_below_mps) == \
        (0.25, 10.0, 0.2, 0.5, 1.0)
    # STRIDE-QA §3 / App.: horizons 0..3 s, seed 42, front camera
    assert c.qa.horizons_s == [0.0, 1.0, 2.0, 3.0] and c.qa.seed == 42 and c.qa.front_camera == "CAM_FRONT"
    # DRAMA-X App. A.3 fragment linking thresholds: 0.2 for gaps <= 3 frames, 0.3 otherwise
    lk = c.tracking.linking
    assert (lk.short_gap_frames, lk.threshold_short_gap, lk.threshold_long_gap) == (3, 0.2, 0.3)
    assert c == PipelineConfig()


def test_round_trip_through_yaml(tmp_path):
    c = load_config(None, overrides={"keyframes": {"rate_hz": 2.0}, "qa": {"seed": 7}})
    again = load_config(write(tmp_path, c.to_yaml()))
    assert again == c and again.keyframes.rate_hz == 2.0 and again.qa.seed == 7


def test_yaml_text_is_pyyamls_own():
    """to_yaml uses libyaml's emitter for speed; its text must stay the pure-Python dumper's byte for byte,
    since run folders store a hash of it (config_key) that --resume compares."""
    import yaml

    for cfg in (PipelineConfig(), parse_config({"qa": {"seed": 5}, "detection": {"backend": "lidar"},
                                                "intention": {"kerb_side": "left"}})):
        assert cfg.to_yaml() == yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def test_partial_file_keeps_other_defaults(tmp_path):
    c = load_config(write(tmp_path, "keyframes:\n  window_end_s: 12\nvisibility:\n  coverage_min: 0.5\n"))
    assert c.keyframes.window_end_s == 12.0 and c.keyframes.window_start_s == 2.0
    assert c.visibility.coverage_min == 0.5 and c.visibility.box_iou_min == 0.3


@pytest.mark.parametrize("text, field", [
    ("keyframes:\n  rate_hz: -1\n", "keyframes.rate_hz"),
    ("keyframes:\n  rate_hz: fast\n", "keyframes.rate_hz"),
    ("visibility:\n  coverage_min: 1.5\n", "visibility.coverage_min"),
    ("detection:\n  backend: yolo\n", "detection.backend"),
    ("ray:\n  actor_pool_size: 0\n", "ray.actor_pool_size"),
    ("segmentation:\n  sam2:\n    decode_prompts: -1\n", "segmentation.sam2.decode_prompts"),
    ("segmentation:\n  sam2:\n    decode_prompts: many\n", "segmentation.sam2.decode_prompts"),
])
def test_bad_value_is_refused_naming_file_and_field(tmp_path, text, field):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert str(p) in msg and f"'{field}'" in msg


def test_unknown_field_is_refused(tmp_path):
    p = write(tmp_path, "keyframes:\n  rate_hz: 1\n  rate: 2\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(p) in str(e.value) and "'keyframes.rate'" in str(e.value)
    with pytest.raises(ConfigError, match="'keyframe'"):  # a misspelt section
        load_config(write(tmp_path, "keyframe:\n  rate_hz: 1\n", "b.yaml"))


def test_cross_field_check_window(tmp_path):
    p = write(tmp_path, "keyframes:\n  window_start_s: 10\n  window_end_s: 5\n")
    with pytest.raises(ConfigError, match="window_end_s must be greater"):
        load_config(p)


def test_unknown_detection_class_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="spaceship"):
        load_config(write(tmp_path, "detection:\n  classes: [car, spaceship]\n"))


def test_unknown_qa_statistics_column_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"qa_statistics_columns: \['questoin'\] are not QA columns"):
        load_config(write(tmp_path, "writers:\n  qa_statistics_columns: [scene_id, questoin]\n"))


@pytest.mark.parametrize("text, kind", [("- a\n- b\n", "list"), ("42\n", "int"), ("just text\n", "str")])
def test_yaml_that_is_not_a_mapping(tmp_path, text, kind):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(p) in str(e.value) and "mapping" in str(e.value) and kind in str(e.value)


def test_invalid_yaml_and_missing_file(tmp_path):
    p = write(tmp_path, "keyframes: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")


def test_empty_file_is_the_defaults(tmp_path):
    assert load_config(write(tmp_path, "")) == PipelineConfig()


def test_overrides_merge_deeply_and_are_validated(tmp_path):
    p = write(tmp_path, "tracking:\n  max_age_s: 2.0\n  linking:\n    d_max_m: 5\n")
    c = load_config(p, overrides={"tracking": {"linking": {"t_max_s": 1.0}}, "writers": {"webdataset": False}})
    assert c.tracking.max_age_s == 2.0  # from the file
    assert c.tracking.linking.d_max_m == 5.0 and c.tracking.linking.t_max_s == 1.0  # file + override merged
    assert c.writers.webdataset is False
    with pytest.raises(ConfigError) as e:
        load_config(p, overrides={"tracking": {"linking": {"t_max_s": -1}}})
    assert "'tracking.linking.t_max_s'" in str(e.value) and str(p) in str(e.value)


def test_assignment_is_validated():
    k = KeyframeConfig()
    with pytest.raises(ValueError):
        k.rate_hz = 0
    c = parse_config({"qa": {"decimals": 3}})
    assert c.qa.decimals == 3
    with pytest.raises(ConfigError, match="'qa.decimals'"):
        parse_config({"qa": {"decimals": 9}}, where="inline")


def test_saved_yaml_is_a_plain_mapping():
    data = yaml.safe_load(PipelineConfig().to_yaml())
    assert isinstance(data, dict) and data["keyframes"]["rate_hz"] == 1.0 and data["version"] == 1


def test_sam2_decode_prompts_auto_is_per_device(tmp_path):
    """``segmentation.sam2.decode_prompts: auto`` (the default) is the measured faster setting per device: the
    batch's images together on a GPU, one decoder call per image on the CPU; a number is used as given."""
    from schemas.config import SAM2_GPU_DECODE_PROMPTS

    sam = PipelineConfig().segmentation.sam2
    assert sam.decode_prompts == "auto"
    assert sam.decode_prompts_on("cuda") == SAM2_GPU_DECODE_PROMPTS > 0
    assert sam.decode_prompts_on("cpu") == 0
    for given in (0, 8):
        c = load_config(write(tmp_path, f"segmentation:\n  sam2:\n    decode_prompts: {given}\n", f"{given}.yaml"))
        assert c.segmentation.sam2.decode_prompts_on("cuda") == c.segmentation.sam2.decode_prompts_on("cpu") == given


def test_settings_a_family_moved_still_load_from_older_run_folders():
    """An earlier drivegen wrote ``writers.bench_export`` / ``writers.intention_export``; the families now keep
    them in their own sections (``PaperFamily.moved_settings``). An old config.yaml loads with its values,
    the new key wins when both are given, and an unknown key beside an old one is still refused."""
    old = {"writers": {"bench_export": False, "intention_export": False, "webdataset": False}}
    cfg = parse_config(old)
    assert cfg.bench.export is False and cfg.intention.export is False and cfg.writers.webdataset is False
    assert old["writers"] == {"bench_export": False, "intention_export": False, "webdataset": False}  # not mutated
    assert parse_config({"writers": {"bench_export": False}, "bench": {"export": True}}).bench.export is True
    assert parse_config({}).bench.export is True
    with pytest.raises(ConfigError, match="writers.bench_exports"):
        parse_config({"writers": {"bench_exports": False}})
    # the round trip writes the new place only
    assert "bench_export" not in cfg.to_yaml() and parse_config(yaml.safe_load(cfg.to_yaml())) == cfg


@pytest.mark.parametrize("kind", ["fifo", "symlink_loop", "folder"])
def test_an_input_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    """A FIFO as --config or --pred blocked the command forever; a symlink loop was called "does not exist".
    Each is refused at once with what it is, for the config and for a prediction file."""
    import os
    import threading

    from generator.validate.score import read_predictions
    from schemas.errors import InputError

    p = tmp_path / "input.json"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "symlink_loop":
        os.symlink(tmp_path / "other", p)
        os.symlink(p, tmp_path / "other")
    else:
        p.mkdir()
    want = {"fifo": "is a FIFO", "symlink_loop": "is a symlink loop", "folder": "is a folder"}[kind]
    for read, error in ((load_config, ConfigError), (read_predictions, InputError)):
        got: list = []
        t = threading.Thread(target=lambda: got.append(_raised(read, str(p))), daemon=True)
        t.start()
        t.join(10)
        if t.is_alive():  # unblock the reader so the test process can end, then fail
            with open(p, "w") if kind == "fifo" else open(os.devnull, "w"):
                pass
            pytest.fail(f"{read.__name__} blocked on a {kind}")
        assert isinstance(got[0], error) and want in str(got[0]) and str(p) in str(got[0]), got


def test_a_prediction_file_is_read_with_a_size_limit_and_streamed(tmp_path, monkeypatch):
    """Issue 57 #13: a 109 MB prediction file was read whole with no limit (819 MB at peak). A JSON document,
    parsed whole, has a size limit naming the streamed formats; JSON Lines and Parquet are read a record at a
    time when the scorer streams them (``score qa``)."""
    import json

    import pandas as pd

    import generator.validate.score as sc
    from schemas.errors import InputError

    rows = [{"qa_id": str(i), "answer": f"{i} m"} for i in range(100)]
    monkeypatch.setattr(sc, "MAX_JSON_PREDICTION_BYTES", 1000)
    (tmp_path / "a.json").write_text(json.dumps(rows))
    with pytest.raises(InputError, match=r"is 3,\d+ bytes, more than 1,000 for a JSON file.*JSON Lines"):
        sc.read_predictions(str(tmp_path / "a.json"))
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pd.DataFrame(rows).to_parquet(tmp_path / "a.parquet")
    for name in ("a.jsonl", "a.parquet"):
        it = sc.read_predictions(str(tmp_path / name), stream=True)
        assert not isinstance(it, list) and next(it) == rows[0] and list(it) == rows[1:]
        assert sc.read_predictions(str(tmp_path / name)) == rows
    monkeypatch.setattr(sc, "MAX_PREDICTION_BYTES", 1000)
    with pytest.raises(InputError, match=r"more than 1,000 \[file="):
        sc.read_predictions(str(tmp_path / "a.jsonl"))


def _raised(fn, arg):
    try:
        fn(arg)
    except Exception as err:  # noqa: BLE001 - the test inspects it
        return err
    return None


@pytest.mark.parametrize("data, hint", [
    ({"qa": {"familes": ["ego_spatial"]}}, "did you mean 'qa.families'?"),
    ({"detetion": {}}, "did you mean 'detection'?"),
    ({"tracking": {"kalman": {"gate_chi": 3}}}, "did you mean 'tracking.kalman.gate_chi2'?"),
    ({"bench": {"exprt": False}}, "did you mean 'bench.export'?"),  # a family's section
    ({"zzz": 1}, None),
])
def test_a_misspelt_key_is_refused_with_the_closest_known_one(data, hint):
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert (hint in str(err.value)) if hint else ("did you mean" not in str(err.value))


@pytest.mark.parametrize("yaml_text, field", [
    ("labels: {num_waypoints: 1000000000}", "labels.num_waypoints"),
    ("intention: {history_steps: 1000000000}", "intention.history_steps"),
    ("keyframes: {context_frames: 1000000000}", "keyframes.context_frames"),
    ("drama_x: {risk: {horizon_s: 1000000000}}", "drama_x.risk.horizon_s"),
    ("drama_x: {risk: {horizon_s: 4, step_s: 0.000000001}}", "drama_x.risk"),
    ("pie: {path_horizon_s: 30, path_step_s: 0.000001}", "pie"),
    ("writers: {parquet_max_rows: 1}", "writers.parquet_max_rows"),  # 4,442 shards for one scene
    ("writers: {wds_max_samples: 1}", "writers.wds_max_samples"),
    # issue 57 #12/#13: each was accepted and failed late, after --out existed (or hung), naming no field
    ("segmentation: {cpu: {dilate_px: 1000000}}", "segmentation.cpu.dilate_px"),
    ("intention: {collision_substeps: 1000000000}", "intention.collision_substeps"),  # 44.7 GiB
    ("sources: {lidar_rings: 1000000000}", "sources.lidar_rings"),
    ("keyframes: {rate_hz: 1000000000}", "keyframes.rate_hz"),  # 112 GiB
    ("keyframes: {window_end_s: 100000}", "keyframes"),  # 1 Hz for 28 hours
    ("anonymize: {cascade_upscale_to_px: 100000000}", "anonymize.cascade_upscale_to_px"),
    ("segmentation: {cpu: {grabcut_iterations: 1000000000}}", "segmentation.cpu.grabcut_iterations"),  # hung
    ("detection: {lidar: {ground_ransac_iterations: 1000000000}}", "detection.lidar.ground_ransac_iterations"),
    ("report: {image_width_px: 1000000000}", "report.image_width_px"),
    ("drama_x: {image_intent: {video_fps: 1000000000}}", "drama_x.image_intent.video_fps"),
    ("report: {seed: -1}", "report.seed"),  # numpy refuses a negative seed: a crash at the end of the run
])
def test_size_like_settings_are_bounded_before_any_work(tmp_path, yaml_text, field):
    """A horizon or count of 1e9 was accepted; a scene then failed with a MemoryError naming no field, after
    --out was made. Now the config is refused with the field named, and --out is never created."""
    from generator.cli import main

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml_text + "\n")
    out = tmp_path / "out"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["run", "--out", str(out), "--config", str(cfg), "--local", "--no-progress"])
    assert code == 2 and f"field '{field}" in err.getvalue(), err.getvalue()
    assert not out.exists()


def _fields(model, prefix: str = ""):
    """(dotted name, pydantic FieldInfo, annotation) of every setting under ``model``, sub-sections expanded."""
    import typing

    from pydantic import BaseModel

    for name, info in model.model_fields.items():
        ann = info.annotation
        inner = [a for a in typing.get_args(ann) if a is not type(None)] or [ann]
        if len(inner) == 1 and isinstance(inner[0], type) and issubclass(inner[0], BaseModel):
            yield from _fields(inner[0], f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", info, ann


def test_every_whole_number_and_rate_setting_has_an_upper_bound():
    """Issue 57 #13: size-like settings were unbounded (six of them found by the fuzzer, each a late failure:
    44.7 GiB, 112 GiB, a hang). Every whole-number setting of every section (the registered families' too) and
    every rate now has an upper bound checked when the config is read, so a 1e9 of any is refused by name."""
    import typing

    from schemas.families import config_sections

    sections = [("", PipelineConfig)] + [(f"{name}.", model) for name, model in config_sections().items()]
    unbounded, checked = [], 0
    for prefix, model in sections:
        for name, info, ann in _fields(model, prefix):
            args = set(typing.get_args(ann)) or {ann}
            rate = float in args and name.endswith(("_hz", "fps"))
            if not (int in args or rate) or name == "segmentation.sam2.decode_prompts":  # (its validator: below)
                continue
            checked += 1
            if not any(hasattr(m, "le") or hasattr(m, "lt") for m in info.metadata):
                unbounded.append(name)
    assert checked > 60 and not unbounded, unbounded
    with pytest.raises(ConfigError, match="segmentation.sam2.decode_prompts"):
        parse_config({"segmentation": {"sam2": {"decode_prompts": 10 ** 9}}})


def test_a_model_file_that_is_a_fifo_is_refused_before_the_run(tmp_path):
    """Issue 57 #12: a FIFO in place of a file drivegen reads is refused wherever it is read; a model checkpoint
    would block its actor forever. It is refused with the field named, before --out exists."""
    import os

    from generator.cli import main

    os.mkfifo(tmp_path / "ckpt.pth")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"detection: {{backend: mmdet3d, mmdet3d: {{checkpoint: '{tmp_path / 'ckpt.pth'}'}}}}\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["run", "--out", str(tmp_path / "out"), "--config", str(cfg), "--local", "--no-progress"])
    assert code == 2 and "field 'detection.mmdet3d.checkpoint'" in err.getvalue() and "FIFO" in err.getvalue()
    assert not (tmp_path / "out").exists()


def test_more_ray_cpus_than_cores_is_warned_about():
    """ray.num_cpus: 1000 on 2 cores passed without a word (Ray then runs 1000 scenes' tasks on 2 cores)."""
    from generator.pipeline.ray_connect import oversubscribed

    text = oversubscribed(parse_config({"ray": {"num_cpus": 1000}}), cores=2)
    assert text and "ray.num_cpus=1000 on a machine with 2 CPUs" in text
    assert oversubscribed(parse_config({"ray": {"num_cpus": 2}}), cores=2) is None
    assert oversubscribed(parse_config({}), cores=2) is None


def test_a_text_parsed_again_gives_an_equal_config_of_its_own():
    """``config_from_yaml`` keeps the configs it parsed (a run's workers read the same config.yaml scene after
    scene): the same text gives an equal config, and changing one config changes no other, not even the next
    one parsed from that text; a bad text is refused every time."""
    from schemas.config import config_from_yaml

    text = parse_config({"qa": {"seed": 7}}).to_yaml().encode()
    a = config_from_yaml(text, "a.yaml")
    a.qa.seed = 99
    a.anonymize.jpeg_quality = 11
    b, c = config_from_yaml(text, "b.yaml"), config_from_yaml(text, "c.yaml")
    assert b.qa.seed == c.qa.seed == 7 and b.anonymize.jpeg_quality == PipelineConfig().anonymize.jpeg_quality
    b.tracking.max_age_s = 123.0
    assert config_from_yaml(text).tracking.max_age_s != 123.0 and b is not c
    for where in ("x.yaml", "y.yaml"):
        with pytest.raises(ConfigError, match=where):
            config_from_yaml(b"seed: [1", where)
