"""Dataset card: Table 4/5 statistics streamed over shards, histograms, visibility drops and errors."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from support.writers import make_qa_table
from generator.pipeline.exports import card_extra
from generator.runfolder import RunReader, RunStore, commit_tables, write_error
from generator.writers.card import CONFIG_TABLES, compute_stats, write_card
from generator.writers.parquet import write_qa_shards
from schemas import layout
from schemas.config import WriterConfig
from schemas.layout import split_glob
from schemas.tables import PROJECTIONS


@pytest.fixture
def shards(tmp_path):
    tables = [make_qa_table(f"scene-{k}", n=120, seed=k, num_keyframes=3) for k in range(3)]
    for t in tables:
        write_qa_shards(t, tmp_path, t["scene_id"][0].as_py(), WriterConfig(parquet_max_rows=17))
    return tmp_path, pa.concat_tables(tables)


def test_counts_match_an_independent_pandas_count(shards):
    run, t = shards
    df = t.to_pandas()
    stats = compute_stats(run / "qa", batch_size=13)  # tiny batches: threads span batches and shards
    assert stats["num_qa"] == len(df)
    assert stats["num_threads"] == df.groupby(["scene_id", "keyframe_index"]).ngroups
    assert stats["num_scenes"] == 3
    for (fam, kind, split), n in df.groupby(["family", "kind", "split"]).size().items():
        assert stats["qa_counts"][fam][kind][split] == n
    # Table 5: unique (scene, keyframe, track) per family and class
    obj = df[["family", "scene_id", "keyframe_index", "track_ids", "class_names"]].copy()
    obj = obj.explode(["track_ids", "class_names"]).drop_duplicates()
    want = obj.groupby(["family", "class_names"]).size()
    got = {(f, c): n for f, d in stats["object_classes"].items() for c, n in d.items()}
    assert got == {k: int(v) for k, v in want.items()}
    # a per-QA count would be larger: the dedup really happened
    per_qa = df.explode("class_names").groupby("family").size()
    assert any(sum(stats["object_classes"][f].values()) < per_qa[f] for f in per_qa.index)


def test_histograms_pick_quantities_by_unit_and_skip_sizes(shards):
    run, t = shards
    df = t.to_pandas()
    stats = compute_stats(run / "qa")
    q = df[df["kind"] == "quantitative"]
    for name, (units, types) in {"distance": ({"m"}, {"distance", "distance_future"}),
                                 "heading": ({"deg"}, {"bearing"}), "velocity": ({"m/s"}, {"speed"})}.items():
        v = q[q["unit"].isin(units) & q["question_type"].isin(types)]["value"].to_numpy()
        h = stats["histograms"][name]
        edges = np.asarray(h["bin_edges"])
        assert h["counts"] == np.histogram(v, bins=edges)[0].tolist()
        assert h["above"] == int((v > edges[-1]).sum()) and h["below"] == int((v < edges[0]).sum())
    assert stats["histograms"]["distance"]["above"] > 0  # helper draws distances up to 120 m


def test_write_card_files_and_run_extra(shards, tmp_path):
    run, t = shards
    # a run folder: a scene whose manifest counts dropped objects, and two failed scene/stage rows
    store = RunStore(tmp_path / "runfolder")
    proj = pa.Table.from_pylist([
        {"scene_id": "scene-0", "frame_index": i, "track_id": i, "camera": "CAM_FRONT", "visible": v,
         "drop_reason": r}
        for i, (v, r) in enumerate([(True, None), (False, "box_iou"), (False, "box_iou"), (False, "coverage")])],
        schema=PROJECTIONS)
    commit_tables(store, "scene-0", {"projections": proj}, split="train", counts={"dropped_by_reason": {"box_iou": 2, "coverage": 1}})
    for stage in ("detect", "segment"):
        write_error(store, {"scene_id": "scene-9", "stage": stage, "file": "x", "error_type": "SourceError",
                            "message": "m", "attempt": 1})
    extra = card_extra(RunReader(store))
    assert extra == {"visibility_drops": {"box_iou": 2, "coverage": 1}, "errors": {"detect": 1, "segment": 1}}
    stats = write_card(run / "qa", run, {**extra, "run_id": "r1"})
    card = run / "card"
    on_disk = json.loads((card / "stats.json").read_text())
    assert on_disk == json.loads(json.dumps(stats)) and on_disk["run_id"] == "r1"
    readme = (run / "README.md").read_text()  # the card sits at the dataset root, its plots in card/
    assert f"{len(t)} QA pairs" in readme and "| box_iou | 2 |" in readme and "2 failed scene/stage" in readme
    import matplotlib.image as mpimg
    for name in ("distance", "heading", "velocity"):
        img = mpimg.imread(card / f"hist_{name}.png")
        assert img.ndim == 3 and img.shape[0] > 100 and img.std() > 0
        assert f"(card/hist_{name}.png)" in readme


def test_table_input_equals_shard_input(shards):
    run, t = shards
    a, b = compute_stats(t), compute_stats(sorted((run / "qa").glob("*.parquet")))
    assert a == b


def test_mismatched_track_and_class_lists_are_refused():
    t = make_qa_table("s", n=5)
    bad = t.set_column(t.schema.get_field_index("class_names"), "class_names",
                       pa.array([["car"]] * 5, pa.list_(pa.string())))
    with pytest.raises(ValueError, match="track_ids and class_names"):
        compute_stats(bad)


def test_card_on_generated_qa(tmp_path):
    """The project's QA generator output (real units 'm', 'degrees', 'm/s', sizes in 'm')."""
    from support.bench import make_bench_run
    from generator.runfolder import read_table

    br = make_bench_run(tmp_path, with_qa="generated")
    stats = write_card(br.run / "qa", br.run, card_extra(RunReader(br.run)))
    df = read_table(br.run, "qa").to_pandas()
    assert stats["num_qa"] == len(df) > 0
    assert sum(n for f in stats["qa_counts"].values() for k in f.values() for n in k.values()) == len(df)
    q = df[df["kind"] == "quantitative"]
    sizes = q["question_type"].isin(["width", "height", "length"])
    assert sum(stats["histograms"]["distance"]["counts"]) + stats["histograms"]["distance"]["above"] == \
        int(((q["unit"] == "m") & ~sizes).sum())
    assert sum(stats["histograms"]["heading"]["counts"]) == int((q["unit"] == "degrees").sum()) > 0
    assert sum(stats["histograms"]["velocity"]["counts"]) + stats["histograms"]["velocity"]["above"] == \
        int((q["unit"] == "m/s").sum()) > 0



def test_examples_and_split_counts(shards):
    """Example rows: per family the rows with the smallest qa_id (whatever the shard order); per split the
    scenes and keyframes, as pandas counts them."""
    run, t = shards
    df = t.to_pandas()
    stats = compute_stats(run / "qa", batch_size=7)
    for fam, rows in stats["examples"].items():
        want = df[df["family"] == fam].sort_values("qa_id").head(2)
        assert [r["qa_id"] for r in rows] == want["qa_id"].tolist()
        assert [r["question"] for r in rows] == want["question"].tolist()
    assert set(stats["examples"]) == set(df["family"])
    assert stats["split_scenes"] == df.groupby("split")["scene_id"].nunique().to_dict()
    assert stats["split_threads"] == df.groupby("split")[["scene_id", "keyframe_index"]].apply(
        lambda g: len(g.drop_duplicates())).to_dict()


# ------------------------------------------------------------------------------------------ published card
@pytest.fixture(scope="module")
def card_run(synth_root, tmp_path_factory):
    """The two generated scenes through the pipeline with the card on and half the scenes in 'val' (so both
    splits are real: scene-0001 hashes into val, scene-0000 into train), one camera to keep it short."""
    from generator.pipeline import run
    from schemas.config import parse_config
    from support.data import SYNTH_VERSION

    out = tmp_path_factory.mktemp("card") / "run"
    cfg = parse_config({"qa": {"val_fraction": 0.5}, "segmentation": {"cameras": ["CAM_FRONT"]},
                        "bench": {"export": False}, "intention": {"export": False}, "writers": {"webdataset": False,
                                    "card": True}})
    res = run(str(out), source="nuscenes", data=str(synth_root), version=SYNTH_VERSION, cfg=cfg, executor="local",
              progress=False)
    assert res.exit_code == 0, res.summary
    return out


def _front_matter(readme: str) -> dict:
    import yaml

    assert readme.startswith("---\n")
    return yaml.safe_load(readme.split("---\n", 2)[1])


def test_published_card_loads_with_datasets(card_run, tmp_path, monkeypatch):
    """The folder as published (copied elsewhere: every path must be relative to its root) loads with
    ``datasets.load_dataset`` offline: the QA config by default with the splits its rows carry, and each
    per-scene table by name and split, with the rows the run folder holds."""
    import shutil

    datasets = pytest.importorskip("datasets", reason="Hugging Face datasets is in the test extra")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    published = tmp_path / "published"
    shutil.copytree(card_run, published)
    cache = str(tmp_path / "hf_cache")
    meta = _front_matter((published / "README.md").read_text())
    assert not (published / "card" / "README.md").exists()
    names = [c["config_name"] for c in meta["configs"]]
    assert names == ["qa", "labels", "attributes", "objects", "projections", "frames"]
    assert meta["configs"][0]["data_files"] == [{"split": "train", "path": "qa/train-*.parquet"},
                                                {"split": "val", "path": "qa/val-*.parquet"}]
    for c in meta["configs"]:  # every table one glob per split: the card does not grow with the run's scenes
        assert c["data_files"] == [{"split": sp, "path": split_glob(c["config_name"], sp)} for sp in ("train", "val")]
    assert meta["license"] == "apache-2.0"  # generated logs: the project's own licence

    reader = RunReader(card_run)
    qa = reader.read_table("qa", columns=["qa_id", "split", "scene_id"]).to_pandas()
    assert set(qa["split"]) == {"train", "val"}
    dd = datasets.load_dataset(str(published), cache_dir=cache)
    assert set(dd) == {"train", "val"}
    for sp in ("train", "val"):
        assert dd[sp].num_rows == int((qa["split"] == sp).sum()) > 0
        assert set(dd[sp].unique("split")) == {sp}
    scene_split = qa.groupby("scene_id")["split"].first().to_dict()
    for name in names[1:]:
        for sp in ("train", "val"):
            got = datasets.load_dataset(str(published), name, split=sp, cache_dir=cache)
            want = reader.read_table(name, scenes=[s for s, v in scene_split.items() if v == sp],
                                     columns=["scene_id"])
            assert got.num_rows == want.num_rows > 0, (name, sp)
            assert set(got.unique("scene_id")) == {s for s, v in scene_split.items() if v == sp}


def test_card_content(card_run):
    """Provenance says the answers are the logs' annotations (labels backend) and names the licence; every
    table's columns with the units their names declare; real example rows; splits with counts; validation
    absent until validate runs; the anonymisation section; limitations."""
    readme = (card_run / "README.md").read_text()
    reader = RunReader(card_run)
    qa = reader.read_table("qa", columns=["qa_id", "family", "split"]).to_pandas()
    assert "**The answers come from the logs' own 3D annotations, not from perception**" in readme
    assert "computed from (no noise added)." in readme and "seeded noise" not in readme  # every rate 0
    assert "| detection | `labels` |" in readme and "| segmentation | `cpu` |" in readme
    assert "Licence: **Apache-2.0**" in readme and "logs generated by drivegen" in readme
    assert "| `horizon_s` | `float64` | s |" in readme or "| `horizon_s` | `double` | s |" in readme
    assert "| `center_ego_m` | `list<double>[3]` | m | ego (x forward, y left, z up) | yes |" in readme
    assert "| `future_xy_ego_m` |" in readme and "| `velocity_global_mps` |" in readme
    for fam in qa["family"].unique():
        first = qa[qa["family"] == fam]["qa_id"].min()
        assert f"| {first} |" in readme, fam
    for sp, n in qa.groupby("split").size().items():
        assert f"| {sp} | 1 | " in readme and f" | {n} |" in readme
    for section in ("## Validation", "## Anonymisation", "## Limitations", "## Schema", "## Splits"):
        assert section in readme
    assert "`drivegen validate` has not been run" in readme
    assert "faces on, plates on, strip_timestamps on" in readme and "face recall" in readme  # default config
    card = json.loads((card_run / "summary.json").read_text())["card"]  # the run's summary names the card
    assert card["path"].endswith("README.md") and card["splits"] == qa.groupby("split").size().to_dict()


def test_card_shows_validation_and_anonymisation(card_run, tmp_path):
    """Figures of ``validate/report.json`` appear in the rewritten card; an ``anonymize`` entry of the run
    (config, else summary) is stated as it is."""
    import shutil

    from generator.pipeline.exports import write_run_card

    run = tmp_path / "run"
    shutil.copytree(card_run, run)
    (run / "validate").mkdir()
    (run / "validate" / "report.json").write_text(json.dumps({
        "scenes": {"evaluated": ["scene-0000", "scene-0001"]}, "detection": {"mAP": 0.8125, "NDS": 0.75},
        "tracking": {"AMOTA": 0.6, "IDSW": 3.0}, "label_agreement": {"agreement": 0.97}}))
    import yaml

    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["anonymize"]["plates"] = False
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    write_run_card(RunReader(run))
    readme = (run / "README.md").read_text()
    assert "| detection mAP | 0.8125 |" in readme and "| tracking IDSW | 3.0 |" in readme
    assert "| scenes evaluated | 2 |" in readme
    assert ("Anonymisation per the run's config (`anonymize`, STRIDE-QA App. A.4): faces on, plates off, "
            "strip_timestamps on.") in readme
    assert "face recall 1.000, plate recall 1.000" in readme and "Timestamps and source image paths" in readme


def test_validate_rewrites_the_card_with_its_figures(card_run, tmp_path):
    """``drivegen validate RUN`` writes its report into the run and rewrites the card from it."""
    import shutil

    from generator.cli import main as cli

    run = tmp_path / "run"
    shutil.copytree(card_run, run)
    assert "`drivegen validate` has not been run" in (run / "README.md").read_text()
    assert cli(["validate", str(run), "--no-tracking", "--quiet"]) == 0
    report = json.loads((run / "validate" / "report.json").read_text())
    readme = (run / "README.md").read_text()
    assert f"| detection mAP | {round(report['detection']['mAP'], 4)} |" in readme
    assert f"| scenes evaluated | {len(report['scenes']['evaluated'])} |" in readme
    assert "has not been run" not in readme


def test_card_of_a_run_folder_from_before_split_names(card_run, tmp_path, monkeypatch):
    """A run folder whose QA shards and per-scene tables were named ``<scene>-<k>``, ``<scene>`` (before the split
    led the names): the card lists each split's files (QA's read from their rows, the tables' by their scene's
    split) instead of a glob, and loads the same rows."""
    import shutil

    datasets = pytest.importorskip("datasets", reason="Hugging Face datasets is in the test extra")
    from generator.pipeline.exports import write_run_card

    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    run = tmp_path / "old"
    shutil.copytree(card_run, run)
    by_split = tuple(f"{layout.TABLES[n].folder}/" for n in CONFIG_TABLES)
    for m_path in (run / "manifest").glob("*.json"):
        m = json.loads(m_path.read_text())
        for f in m["files"]:
            if f["path"].startswith(by_split):  # the QA shards and the per-scene tables the card publishes
                folder, name = f["path"].rsplit("/", 1)
                old = f"{folder}/{name.split('-', 1)[1]}"  # drop the '<split>-'
                (run / f["path"]).rename(run / old)
                f["path"] = old
        m_path.write_text(json.dumps(m))
    assert RunReader(run).check() == []
    write_run_card(RunReader(run))
    configs = _front_matter((run / "README.md").read_text())["configs"]
    assert [c["config_name"] for c in configs] == list(CONFIG_TABLES)
    for c in configs:  # each split's files listed: a glob would name none of them
        files = {d["split"]: d["path"] for d in c["data_files"]}
        assert set(files) == {"train", "val"} and all(isinstance(p, list) and len(p) == 1 for p in files.values())
    reader = RunReader(run)
    qa = reader.read_table("qa", columns=["split", "scene_id"]).to_pandas()
    dd = datasets.load_dataset(str(run), cache_dir=str(tmp_path / "hf_cache"))
    assert {sp: d.num_rows for sp, d in dd.items()} == qa.groupby("split").size().to_dict()
    [val_scene] = qa[qa["split"] == "val"]["scene_id"].unique()
    labels = datasets.load_dataset(str(run), "labels", split="val", cache_dir=str(tmp_path / "hf_cache"))
    assert set(labels.unique("scene_id")) == {val_scene}
    assert labels.num_rows == reader.read_table("labels", [val_scene]).num_rows


def test_card_quotes_the_data_as_text_never_as_markup(tmp_path):
    """A scene name or template text holding HTML or Markdown (``<img src=x onerror=...>``, a link, emphasis, a
    table pipe, a backtick) is shown literally in the card's example rows: rendered by a CommonMark viewer
    with raw HTML on (as the Hub and GitHub render cards), it makes no element and no link."""
    markdown_it = pytest.importorskip("markdown_it")
    evil_scene = '<img src=x onerror="alert(1)">'
    evil_text = "[click](javascript:alert(2)) **bold** _bold_ `tick` | pipe <script>alert(3)</script> & more"
    t = make_qa_table("scene-0", n=20, seed=1)
    t = t.set_column(t.schema.get_field_index("scene_id"), "scene_id", pa.array([evil_scene] * t.num_rows))
    t = t.set_column(t.schema.get_field_index("question"), "question", pa.array([evil_text] * t.num_rows))
    t = t.set_column(t.schema.get_field_index("qa_id"), "qa_id",  # the scene's name leads a row's qa_id
                     pa.array([evil_scene + q.split(":", 1)[-1] for q in t.column("qa_id").to_pylist()]))
    write_card(t, tmp_path)
    html = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(
        (tmp_path / "README.md").read_text())
    assert '<img src="x"' not in html and 'onerror="' not in html and "<script" not in html
    assert 'href="javascript' not in html
    assert "<strong>bold</strong>" not in html and "<code>tick</code>" not in html
    assert "onerror=&quot;alert(1)&quot;&gt;" in html and "[click](javascript:alert(2))" in html
    # one table cell per value: the pipe did not split the question's cell
    row = next(line for line in html.splitlines() if "alert(2)" in line)
    assert "pipe" in row and "| pipe" in row
    assert "<em>bold</em>" not in html and "**bold** _bold_" in html


def test_card_code_spans_hold_any_backticks():
    """A value the card shows as code (a source path, a backend) cannot close its code span early."""
    markdown_it = pytest.importorskip("markdown_it")
    from generator.writers.card import code_span

    assert "<code>a`b``c</code>" in markdown_it.MarkdownIt("commonmark").render(code_span("a`b``c"))
    assert "<code>/logs/x</code>" in markdown_it.MarkdownIt("commonmark").render(code_span("/logs/x"))


def test_card_names_only_the_noise_that_is_on():
    """The card's provenance lists the label noise rates that are on, never a parameter that only shapes noise
    (``ghost_presence``, ``miss_run_s``), so noise-free labels say so; the labels detector decides the same way."""
    from actors.detect.labels import is_noise_free
    from generator.writers.card import _provenance
    from schemas.config import LabelNoiseConfig

    def said(noise: LabelNoiseConfig) -> str:
        info = {"provenance": {"answers_from_labels": True, "label_noise": noise.model_dump(mode="json")}}
        return "\n".join(_provenance(info, None))

    free = LabelNoiseConfig()
    assert "(no noise added)" in said(free) and "ghost_presence" not in said(free) and is_noise_free(free)
    noisy = LabelNoiseConfig(center_m=0.3, ghosts_per_ha=2.0)
    assert "with seeded noise (center_m 0.3, ghosts_per_ha 2.0)." in said(noisy) and not is_noise_free(noisy)
