#!/usr/bin/env bash
# One GPU lease, one call: bench/gpu.py on this checkout's code against a baseline checkout, on the same GPU.
#
#   scripts/gpu_lease.sh prepare BASE_REV     here (with pip's registry): fills .dev/ (git-ignored, ~58 MB)
#   # device tool: run "bash scripts/gpu_lease.sh device" with carry [".dev"] and timeout_s 590
#
# The lent machine (Python 3.12, torch with CUDA, numpy 2.5, pyarrow, pandas, OpenCV; no registry) lacks Ray,
# the OpenMMLab stack, SAM 2, nuScenes' devkit and their small dependencies: `prepare` downloads them as
# cp312 wheels into .dev/whl (Ray without its Java jars and RLlib, which the 64 MiB the tool carries cannot
# hold), builds the sdist-only ones (sam2 without its CUDA extension, iopath, antlr4), fetches mmcv 2.1.0's
# source and setuptools < 81 for its build (scripts/build_mmcv_cuda.sh), and puts BASE_REV's tree in
# .dev/base. `device` installs them, then checks everything cheap before anything costly: the imports and a
# generated scene read through the nuScenes loader; only then does it build mmcv's CUDA ops (about 210-290 s
# on 16 cores) and run the benches, each under a timeout, their output also in $OUT.
#
# Lessons of the 2026-11-27 lease (an H100), which lost its 15 minutes to setup:
#   * carry .dev in ONE call: a path named in carry replaces the machine's copy, so a second call carrying
#     .dev again wiped the installed wheels and the built mmcv (built twice, 279 s and 287 s);
#   * the nuScenes loader needs nuscenes-devkit and its cachetools, which no import of `generator` pulls in
#     (the loader imports them when a source opens): hence the generated-scene check before the build.
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=.dev
WHEELS="pydantic==2.14.4 pydantic_core==2.50.5 annotated_types==0.8.0 typing_inspection==0.4.5
  mmengine==0.10.7 mmdet==3.2.0 mmdet3d==1.4.0 addict==2.4.0 yapf==0.43.0 termcolor==3.3.0 terminaltables==3.1.10
  pycocotools==2.0.11 shapely==2.0.7 pyquaternion==0.9.9 motmetrics==1.4.0 xmltodict==1.0.4 hydra-core==1.3.8
  omegaconf==2.3.1 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
  dill==0.4.1 platformdirs==4.14.8 webdataset==1.0.2 braceexpand==0.1.7 nuscenes-devkit==1.2.0
  cachetools==5.5.2"
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
  --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux1_x86_64"

prepare() {
  local base=${1:?usage: $0 prepare BASE_REV}
  local py=${PYTHON:-python3}
  grep -qx "/$DEV/" .git/info/exclude 2>/dev/null || echo "/$DEV/" >> .git/info/exclude
  rm -rf "$DEV" && mkdir -p "$DEV/whl" "$DEV/sdist" "$DEV/base"
  # shellcheck disable=SC2086
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
    -d "$DEV/whl" $WHEELS
  SAM2_BUILD_CUDA=0 "$py" -m pip wheel -q --no-deps --no-build-isolation -w "$DEV/whl" \
    sam2==1.1.0 iopath==0.1.10 antlr4-python3-runtime==4.9.3
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
    -d "$DEV/sdist" ray==2.60.0 setuptools==80.10.2
  "$py" - "$DEV/sdist"/ray-*.whl "$DEV/whl" <<'PY'
import sys, zipfile
from pathlib import Path
src, out = Path(sys.argv[1]), Path(sys.argv[2]) / Path(sys.argv[1]).name
drop = lambda n: n.startswith(("ray/jars/", "ray/rllib/")) or n.endswith(".js.map")
with zipfile.ZipFile(src) as zi, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zo:
    for i in zi.infolist():
        if drop(i.filename):
            continue
        data = zi.read(i)
        if i.filename.endswith("dist-info/RECORD"):
            data = "\n".join(l for l in data.decode().split("\n") if not drop(l.split(",")[0])).encode()
        zo.writestr(i, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=6)
PY
  rm "$DEV/sdist"/ray-*.whl
  # mmcv's sdist straight from the index: pip download would build its metadata, which needs torch's build
  "$py" - "$DEV/sdist" <<'PY'
import re, sys, urllib.request
page = urllib.request.urlopen("https://pypi.org/simple/mmcv/").read().decode()
url = re.search(r'href="([^"#]*mmcv-2\.1\.0\.tar\.gz)', page).group(1)
urllib.request.urlretrieve(url, f"{sys.argv[1]}/mmcv-2.1.0.tar.gz")
PY
  git archive "$base" | tar x -C "$DEV/base"
  echo "$DEV: $(du -sh "$DEV" | cut -f1) (the tool carries at most 64 MiB with the tracked tree)"
}

device() {
  set +e
  local t0; t0=$(date +%s)
  export PYTHONUNBUFFERED=1 TQDM_DISABLE=1 PYTHONPATH=$PWD/$DEV/site OUT=${OUT:-/tmp/gpu-lease}
  mkdir -p "$OUT"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$DEV/site" "$DEV"/whl/*.whl
  # everything cheap first: a failure here costs seconds, not the build
  python3 - <<'PY' || { echo "the checks before the build failed: nothing built"; exit 1; }
import ray, sam2.build_sam, mmengine, mmdet, nuscenes, generator.pipeline
from generator.pipeline import SYNTH_VERSION, synth_logs
from generator.sources import open_source
from schemas.config import PipelineConfig
logs = synth_logs(1, seed=0)
src = open_source("nuscenes", logs, PipelineConfig(), version=SYNTH_VERSION)
print("checks before the build: ok,", len(src.load_scene(src.scene_ids()[0]).frames), "frames read")
PY
  echo "checked at $(( $(date +%s) - t0 )) s"
  PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/$DEV/sdist MAX_JOBS=${MAX_JOBS:-16} \
    bash scripts/build_mmcv_cuda.sh "$DEV/mmcv_whl" "$DEV"/sdist/mmcv-2.1.0.tar.gz > "$OUT/mmcv_build.log" 2>&1
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$DEV/site" "$DEV"/mmcv_whl/mmcv-2.1.0-*.whl
  python3 -c "import mmcv.ops, mmdet3d.apis" || { tail -20 "$OUT/mmcv_build.log"; exit 1; }
  echo "mmcv built at $(( $(date +%s) - t0 )) s"
  cp bench/gpu.py bench/docs_page.py "$DEV/base/bench/"  # the same bench in both checkouts
  # 1. the baseline, pipeline only; 2. this checkout, pipeline only, one and two perceive actors (the comparison,
  # into docs/benchmarks/gpu.md); 3. with the time left, this checkout's models alone and the pipeline under MPS
  local base_args=${BASE_ARGS:-"--scenes 3 --sam t --pipeline-only"}
  local new_args=${NEW_ARGS:-"--scenes 3 --sam t --pipeline-only --perceive-actors 1,2"}
  local more_args=${MORE_ARGS:-"--scenes 3 --sam t --decoder-frames 2 --decode-prompts 32 --mps"}
  nvidia-smi dmon -s u -d 1 -o T > "$OUT/dmon.log" 2>&1 &
  # shellcheck disable=SC2086
  (cd "$DEV/base" && timeout 120 python3 bench/gpu.py $base_args) 2>&1 | tee "$OUT/base.log" | grep -E "^ |pipeline"
  python3 -m ray.scripts.scripts stop --force > /dev/null 2>&1  # what a timeout left of Ray goes
  echo "baseline done at $(( $(date +%s) - t0 )) s"
  # shellcheck disable=SC2086
  timeout $(( 575 - ($(date +%s) - t0) )) python3 bench/gpu.py $new_args --docs 2>&1 | tee "$OUT/new.log" \
    | grep -E "^ |pipeline"
  cp docs/benchmarks/gpu.md "$OUT/" 2>/dev/null
  python3 -m ray.scripts.scripts stop --force > /dev/null 2>&1
  echo "this checkout done at $(( $(date +%s) - t0 )) s"
  if (( 575 - ($(date +%s) - t0) > 100 )); then
    # shellcheck disable=SC2086
    timeout $(( 580 - ($(date +%s) - t0) )) python3 bench/gpu.py $more_args 2>&1 | tee "$OUT/more.log" \
      | grep -E "^ |pipeline"
  fi
  kill %1 2>/dev/null
  echo "done at $(( $(date +%s) - t0 )) s"
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  device) device ;;
  *) echo "usage: $0 prepare BASE_REV | device" >&2; exit 2 ;;
esac
