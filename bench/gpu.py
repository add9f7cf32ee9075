"""GPU figures (issue #12 item 6): CenterPoint and SAM 2.1 alone vs inside the streaming pipeline.

    python bench/gpu.py [--scenes 4] [--sam t,l] [--detector centerpoint|labels|lidar] [--perceive-actors 1,2]
                        [--actor-cpus 0.5,4]
                        [--decode-prompts 0,32] [--decoder-only] [--allow-cpu] [--cameras CAM_FRONT,...]

Needs a CUDA GPU and the CUDA builds of mmcv/mmdet3d/sam2 (docs/models.md). Without one it prints why and
exits 0 (skipped); ``--allow-cpu`` runs the same code on the CPU as a smoke check (figures meaningless).

Inputs: generated nuScenes-format logs (``--scenes`` of 40 keyframes, 10 Hz sweeps, six 800x450 cameras).
Models: CenterPoint (mmdet3d's pillar nuScenes config) and SAM 2.1 hiera-t / hiera-l, random weights (speed
does not depend on them). ``--detector labels`` (the logs' own boxes) or ``lidar`` (the CPU lidar detector,
needs open3d) measures SAM without CenterPoint, for a GPU machine whose mmcv has no CUDA ops yet.

0. SAM's mask decoder: the box prompts (the logs' boxes projected) of ``--decoder-frames`` keyframes' images,
   encoded in batches of ``segmentation.sam2.batch_images``, decoded one call per image
   (``decode_prompts: 0``) and the batch's images together in calls of up to N prompts: ms per frame and,
   on CUDA, the peak memory the decoding adds. ``--decoder-only`` stops after it.
1. alone: drivegen's own detect and perceive stages in this process, scene after scene, the model built once:
   ``generator.perception.detect_scene`` (CenterPoint, frames in batches of ``detection.mmdet3d.batch_size``) and
   ``perceive_scene`` (tracking, SAM on every camera image with boxes, batches of ``segmentation.sam2.
   batch_images``, visibility): frames/s of each.
2. in the pipeline: ``drivegen run``'s streaming Ray Dataset on the same scenes, the GPUs advertised to Ray
   (one GPU per model actor while there are enough): each model actor's rate (frames over its stage's summed
   time, from the manifests) against the alone rate (goal >= 80 %), its busy share (its stage's summed time /
   the run's wall time, goal >= 80 %; and / the span from its first scene's start to its last scene's end,
   from the manifests' ``stage_spans_unix``, which leaves out the actor's start-up and the pipeline's fill
   and drain), and the run's frames/s per GPU. Each ``run_pipeline`` call starts its own actors, so the
   timed run's wall time includes building the models once more. With CenterPoint on the same GPU, the
   perceive stage's rate is also split by scene: the scenes whose perceive span overlapped CenterPoint's
   work by half or more vs the rest, which shows what sharing the GPU costs. Each stage's rate is also given
   over the scenes after each actor's first (``warm_rate``): ``alone`` is measured warm, while an actor's
   first scene pays its model's first calls.
   ``--perceive-actors K`` (a list: one pipeline run each) gives the perceive stage K actors
   (``ray.stage_actors``) and every model actor an equal share of one GPU, 1 / (K + 1) with the CenterPoint
   actor: the slower stage gets more actors on the same device. A stage's busy share is then its summed time
   over K actors; its throughput, frames over its span. ``--actor-cpus C`` (a list too: one run per K and C)
   gives each model actor C CPUs (``ray.actor_num_cpus``): Ray caps an actor's OpenMP/torch threads at
   floor(C), at least 1, while the stages alone use every core.
"""
from __future__ import annotations

import os

os.environ.setdefault("TQDM_DISABLE", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SAM_CONFIGS = {"t": "configs/sam2.1/sam2.1_hiera_t.yaml", "l": "configs/sam2.1/sam2.1_hiera_l.yaml"}


def centerpoint_config() -> str:
    import mmdet3d

    return str(Path(mmdet3d.__file__).parent / ".mim/configs/centerpoint/"
               "centerpoint_pillar02_second_secfpn_8xb4-cyclic-20e_nus-3d.py")


def pipeline_config(sam: str, cameras: list[str] | None, detector: str = "centerpoint", perceive_actors: int = 1,
                    actor_cpus: float | None = None, precision: str = "auto"):
    from schemas.config import PipelineConfig

    cfg = PipelineConfig()
    if precision != "auto":  # (only then: the bench also runs against checkouts that predate the field)
        cfg.detection.mmdet3d.precision = cfg.segmentation.sam2.precision = precision
    if detector == "centerpoint":
        cfg.detection.backend = "mmdet3d"
        cfg.detection.mmdet3d.config = centerpoint_config()
    else:
        cfg.detection.backend = detector
    cfg.segmentation.backend = "sam2"
    cfg.segmentation.sam2.model_config_name = SAM_CONFIGS[sam]
    if cameras:
        cfg.segmentation.cameras = cameras
    cfg.ray.model_stages = "actors"
    if actor_cpus is not None:
        cfg.ray.actor_num_cpus = actor_cpus
    if perceive_actors > 1:  # the slower stage gets more actors; every actor an equal share of one GPU
        share = 1.0 / (perceive_actors + 1)
        cfg.ray.stage_actors = {"perceive": {"pool_size": perceive_actors, "num_gpus": share},
                                "detect": {"num_gpus": share}}
    cfg.writers.card = cfg.bench.export = cfg.writers.webdataset = False
    cfg.report.on_run = False
    return cfg


def sam_decoder(scenes, cfg, caps: list[int], n_frames: int):
    """Part 0: ms per frame of SAM's mask decoding, one call per image vs the batch's images together.
    -> the segmenter it built (part 1 reuses it)."""
    import torch

    from actors.segment import build_segmenter
    from generator.projection import project_boxes
    from generator.sources import io

    seg = build_segmenter(cfg.segmentation)
    frames = [f for sc in scenes for f in sc.frames if f.labels is not None][:n_frames]
    items = []
    for f in frames:
        for cam in cfg.segmentation.cameras:
            box2d, _, ok = project_boxes(f.labels, f.cameras[cam])
            items.append((io.load_image(f, cam), box2d[ok], [np.zeros((0, 2))] * int(ok.sum())))
    bs = cfg.segmentation.sam2.batch_images
    batches = []
    for i in range(0, len(items), bs):
        chunk = items[i:i + bs]
        batches.append((seg.encode([im for im, _, _ in chunk]), [im.shape[:2] for im, _, _ in chunk],
                        [(b, p) for _, b, p in chunk]))
    n_prompts = sum(len(b) for _, b, _ in items)
    print(f"0. SAM 2.1 mask decoder ({seg.device}): {len(frames)} frames, {len(items)} images, "
          f"{n_prompts / len(frames):.1f} prompts per frame, encoder batches of {bs}")
    cuda = seg.device.type == "cuda"
    for rep in range(2):  # the first pass warms up (kernels, allocator); the second is printed
        for cap in caps:
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            t0 = time.perf_counter()
            for feats, hws, prompts in batches:
                if cap:
                    seg.decode_many(feats, hws, prompts, cap)
                else:
                    [seg.decode(f, hw, *pr) for f, hw, pr in zip(feats, hws, prompts)]
            _sync()
            dt = time.perf_counter() - t0
            if rep:
                mem = f", +{(torch.cuda.max_memory_allocated() - base) / 2**20:,.0f} MiB peak" if cuda else ""
                how = "one call per image" if not cap else f"the batch together, calls of <= {cap} prompts"
                print(f"  decode_prompts {cap:>3d} ({how}): {1000 * dt / len(frames):7.1f} ms per frame{mem}")
    return seg


def alone(scenes, cfg, seg) -> dict:
    """Seconds of the detect and perceive stages over ``scenes`` with segmenter ``seg`` (warm: the first scene
    runs twice)."""
    from actors.detect import build_detector
    from generator.perception import detect_scene, perceive_scene

    det = build_detector(cfg.detection)
    perceive_scene(scenes[0], detect_scene(scenes[0], det), cfg, segmenter=seg)  # warm-up (CUDA kernels, caches)
    out = {"detect": 0.0, "perceive": 0.0, "frames": 0, "prompts": 0, "device": str(getattr(seg, "device", getattr(det, "device", "?")))}
    for sc in scenes:
        t0 = time.perf_counter()
        d = detect_scene(sc, det)
        _sync()
        t1 = time.perf_counter()
        per = perceive_scene(sc, d, cfg, segmenter=seg)
        _sync()
        out["prompts"] += len(per.projections) - per.projections["mask_score"].null_count  # boxes SAM segmented
        out["detect"] += t1 - t0
        out["perceive"] += time.perf_counter() - t1
        out["frames"] += len(sc.frames)
    return out


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def in_pipeline(logs: Path, ids: list[str], desc: dict, cfg, n_gpus: int, work: Path) -> dict:
    import ray

    from generator.pipeline import RunStore, run_pipeline
    from generator.pipeline.stages import default_stages, write_scene
    from generator.runfolder import RunReader

    ray.init(address="local", num_gpus=n_gpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        stages = default_stages(cfg)
        rows = {}
        for name in ("warm", "timed"):  # one scene first: Ray's workers, the files' caches and CUDA's kernels warm
            out = work / name
            shutil.rmtree(out, ignore_errors=True)
            t0, unix0 = time.perf_counter(), time.time()
            res = run_pipeline(RunStore(out), desc, cfg, ids[:1] if name == "warm" else ids, stages, write_scene,
                               executor="ray", progress=False)
            wall = time.perf_counter() - t0
            if res.summary.scenes.failed:
                raise SystemExit(f"pipeline run failed: {res.summary.errors[:2]}")
            rows = {"wall": wall, "frames": res.summary.frames}
            manifests = RunReader(str(out)).manifests()
            for stage in ("detect", "perceive"):
                # per scene, by start: (start unix s, end unix s, frames, stage seconds)
                scenes = rows[stage + "_scenes"] = sorted(
                    (*m["stage_spans_unix"][stage], int(m["counts"]["frames"]), float(m["timings_s"].get(stage, 0.0)))
                    for m in manifests)
                rows[stage] = sum(t for *_, t in scenes)
                # the stream through this stage: its first scene's start to its last scene's end
                rows[stage + "_span"] = max(b for _, b, _, _ in scenes) - scenes[0][0]
                rows[stage + "_first"] = scenes[0][0] - unix0  # actor start-up + upstream work
            # the stream: from the first model call (any stage's first scene) to the last scene's end
            spans = [m["stage_spans_unix"][st] for m in manifests for st in ("detect", "perceive")]
            rows["stream"] = max(b for _, b in spans) - min(a for a, _ in spans)
        return rows
    finally:
        ray.shutdown()


class Mps:
    """NVIDIA's Multi-Process Service for the pipeline runs: the control daemon started with its pipe and log
    folders under ``work``, whose variables this process's environment passes on to Ray and its workers (a CUDA
    process finds the service through ``CUDA_MPS_PIPE_DIRECTORY``); ``quit`` stops it."""

    def __init__(self, work: Path):
        self.exe = shutil.which("nvidia-cuda-mps-control")
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": str(work / "mps-pipe"), "CUDA_MPS_LOG_DIRECTORY": str(work / "mps-log")}

    def __enter__(self):
        import subprocess

        if not self.exe:
            raise SystemExit("--mps: nvidia-cuda-mps-control is not on the PATH")
        for d in self.env.values():
            Path(d).mkdir(parents=True, exist_ok=True)
        os.environ.update(self.env)
        subprocess.run([self.exe, "-d"], env=dict(os.environ), check=True)
        print(f"MPS: control daemon started ({self.env['CUDA_MPS_PIPE_DIRECTORY']})")
        return self

    def __exit__(self, *exc):
        import subprocess

        subprocess.run([self.exe], input="quit\n", text=True, env=dict(os.environ), check=False)
        log = Path(self.env["CUDA_MPS_LOG_DIRECTORY"]) / "control.log"
        if log.exists():
            print("MPS control log, last lines:", *log.read_text().splitlines()[-4:], sep="\n  ")
        for k in self.env:
            os.environ.pop(k, None)


def warm_rate(scenes: list[tuple[float, float, int, float]], actors: int) -> tuple[float, int] | None:
    """Frames/s per actor over the scenes after each actor's first, and how many scenes that is: ``scenes`` is
    (start unix s, end unix s, frames, stage seconds) sorted by start. An actor's first scene pays its model's first calls
    (CUDA kernels loaded, cuDNN/cuBLAS handles, the allocator's pools), which ``alone`` pays in its warm-up;
    the ``actors`` earliest starts are taken as those first scenes (every actor starts with the stream).
    None when no scene is left."""
    rest = scenes[actors:]
    secs = sum(t for *_, t in rest)
    return (sum(f for _, _, f, _ in rest) / secs, len(rest)) if rest and secs > 0 else None


def detect_overlap(span: list[float], detect: list[tuple[float, float, int, float]]) -> float:
    """The share of one scene's perceive ``span`` (start, end unix s) during which any scene's detect ran
    (``detect``: rows as ``warm_rate``'s; their spans do not overlap: one CenterPoint actor)."""
    a, b = span
    return sum(max(0.0, min(b, d1) - max(a, d0)) for d0, d1, _, _ in detect) / max(b - a, 1e-9)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", type=int, default=4,
                    help="generated scenes (40 keyframes each; default 4: with fewer, the stream's fill and drain "
                         "dominate and a second actor of a stage may get no scene)")
    ap.add_argument("--sam", default="t,l", help="SAM 2.1 variants: t (hiera-t), l (hiera-l); default t,l")
    ap.add_argument("--cameras", default=None, help="cameras SAM segments (default: the config's six)")
    ap.add_argument("--detector", choices=("centerpoint", "labels", "lidar"), default="centerpoint",
                    help="centerpoint (GPU, needs mmcv's CUDA ops), labels (the logs' boxes) or lidar (the CPU "
                         "detector, needs open3d): the last two give SAM figures only")
    ap.add_argument("--actor-cpus", default=None,
                    help="CPUs each model actor asks for, one pipeline run per value (default: the config's "
                         "ray.actor_num_cpus; e.g. 0.5,4)")
    ap.add_argument("--perceive-actors", default="1",
                    help="perceive-stage actors sharing the GPU, one pipeline run per value (default 1; e.g. 1,2)")
    ap.add_argument("--decode-prompts", default="0,32",
                    help="part 0: SAM decoder settings compared (0 = one call per image; default 0,32)")
    ap.add_argument("--decoder-frames", type=int, default=8, help="part 0: keyframes decoded (default 8)")
    ap.add_argument("--decoder-only", action="store_true", help="stop after part 0")
    ap.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp16", "fp32"),
                    help="both models' arithmetic (detection.mmdet3d.precision, segmentation.sam2.precision; "
                         "default auto: bfloat16 on a GPU)")
    ap.add_argument("--pipeline-only", action="store_true",
                    help="skip parts 0 and 1 (the decoder and the models alone): the pipeline's figures only")
    ap.add_argument("--mps", action="store_true",
                    help="run the pipeline under NVIDIA's Multi-Process Service (started here, stopped after), "
                         "which lets the kernels of the model actors' processes share the GPU at once instead "
                         "of taking turns; best with --pipeline-only (this process then makes no CUDA context)")
    ap.add_argument("--allow-cpu", action="store_true", help="run on the CPU as a smoke check (figures meaningless)")
    ap.add_argument("--keep", default=None, help="keep the run folders here")
    a = ap.parse_args(argv)
    out = getattr(sys.stdout, "stream", sys.stdout)  # under --docs, the stream behind docs_page's copy
    out.reconfigure(line_buffering=True)  # each figure reaches a log or pipe as soon as it is printed
    try:
        import torch
    except ImportError:
        print("bench/gpu.py: skipped: torch is not installed")
        return 0
    n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n_gpus == 0 and not a.allow_cpu:
        print("bench/gpu.py: skipped: no CUDA GPU here (torch.cuda.is_available() is False). Run it on a GPU "
              "machine after building the CUDA ops (docs/models.md); --allow-cpu checks the code on the CPU.")
        return 0
    try:
        if a.detector == "centerpoint":
            centerpoint_config()
        import sam2  # noqa: F401
    except ImportError as err:
        print(f"bench/gpu.py: skipped: {err} (install the 'models' extra)")
        return 0

    from generator.pipeline import SYNTH_VERSION, synth_logs
    from generator.sources import open_source

    logs = synth_logs(a.scenes, seed=0)
    cameras = a.cameras.split(",") if a.cameras else None
    work = Path(a.keep or tempfile.mkdtemp(prefix="drivegen-gpu-bench-"))
    device = torch.cuda.get_device_name(0) if n_gpus else "CPU (smoke check: figures meaningless)"
    print(f"drivegen GPU bench: {a.scenes} generated scenes, {n_gpus} GPU(s): {device}")
    for sam in a.sam.split(","):
        cfg = pipeline_config(sam, cameras, a.detector, precision=a.precision)
        src = open_source("nuscenes", logs, cfg, version=SYNTH_VERSION)
        ids, desc = src.scene_ids(), src.describe()
        detector = {"centerpoint": "CenterPoint pillar", "labels": "the logs' boxes",
                    "lidar": "lidar detector (CPU)"}[a.detector]
        if a.pipeline_only:  # no alone figures: its ratios print as nan
            solo, n = {"detect": float("nan"), "perceive": float("nan")}, float("nan")
            print(f"{detector} + SAM 2.1 hiera-{sam}, precision {a.precision}: the pipeline only")
        else:
            scenes = [src.load_scene(s) for s in ids]
            seg = sam_decoder(scenes, cfg, [int(x) for x in a.decode_prompts.split(",")], a.decoder_frames)
            if a.decoder_only:
                continue
            solo = alone(scenes, cfg, seg)
            del seg  # the pipeline's actors build their own: give its GPU memory back to them
            if n_gpus:
                torch.cuda.empty_cache()
            n = solo["frames"]
            print(f"{detector} + SAM 2.1 hiera-{sam} ({solo['device']}, precision {a.precision}), {n} frames, "
                  f"{len(cfg.segmentation.cameras)} camera(s) segmented, {solo['prompts'] / n:.1f} SAM prompts "
                  "per frame (the boxes that pass the geometric filter)")
        runs = [(k, c) for k in (int(x) for x in a.perceive_actors.split(","))
                for c in ([float(x) for x in a.actor_cpus.split(",")] if a.actor_cpus else [None])]
        for k, c in runs:
            cfg = pipeline_config(sam, cameras, a.detector, perceive_actors=k, actor_cpus=c, precision=a.precision)
            with Mps(work) if a.mps else contextlib.nullcontext():
                run = in_pipeline(logs, ids, desc, cfg, n_gpus, work / f"sam-{sam}-{k}-{c}")
            print(f" perceive actors: {k}" + (f" (each model actor {1 / (k + 1):.2f} of a GPU)" if k > 1 else "")
                  + f", {cfg.ray.actor_num_cpus:g} CPU(s) asked per model actor")
            models = [("detect", "CenterPoint", 1)] if a.detector == "centerpoint" else []
            for stage, model, actors in models + [("perceive", f"SAM 2.1 hiera-{sam} (+ tracking, visibility)", k)]:
                r_alone, r_actor = n / solo[stage], run["frames"] / run[stage]  # stage time summed over actors
                r_stage = run["frames"] / run[stage + "_span"]
                busy, busy_stream = run[stage] / (actors * run["wall"]), run[stage] / (actors * run[stage + "_span"])
                print(f"  {model:<42s} alone {r_alone:7.2f} frames/s   in the pipeline {r_actor:7.2f} "
                      f"frames/s per actor ({r_actor / r_alone:.0%} of alone, goal >= 80 %), stage "
                      f"{r_stage:.2f} frames/s over its span   actor busy {busy:.0%} of the run (goal >= 80 %), "
                      f"{busy_stream:.0%} from its first scene to its last; first scene began "
                      f"{run[stage + '_first']:.1f} s into the run")
                warm = warm_rate(run[stage + "_scenes"], actors)
                if warm:
                    print(f"    {stage}, after each actor's first scene: {warm[0]:.2f} frames/s per actor over "
                          f"{warm[1]} scene(s) ({warm[0] / r_alone:.0%} of alone, which is measured warm)")
            if models:  # what sharing the GPU with CenterPoint costs the perceive stage
                for label, sel in (("while CenterPoint ran", lambda o: o >= 0.5), ("otherwise", lambda o: o < 0.5)):
                    part = [(f, t) for *span, f, t in run["perceive_scenes"]
                            if sel(detect_overlap(span, run["detect_scenes"]))]
                    if part:
                        rate = sum(f for f, _ in part) / sum(t for _, t in part)
                        print(f"    perceive, scenes {label}: {rate:.2f} frames/s per actor over {len(part)} "
                              f"scene(s) ({rate / (n / solo['perceive']):.0%} of alone)")
            print(f"  pipeline{' (MPS)' if a.mps else ''}: {run['frames'] / run['wall']:.2f} frames/s in {run['wall']:.1f} s, "
                  f"{run['frames'] / run['wall'] / max(n_gpus, 1):.2f} frames/s per GPU; "
                  f"{run['frames'] / run['stream'] / max(n_gpus, 1):.2f} frames/s per GPU from the first model "
                  f"call to the last ({run['stream']:.1f} s)")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    from docs_page import docs_page  # bench/ is on sys.path when a bench runs as a script

    with docs_page("gpu"):
        sys.exit(main())
