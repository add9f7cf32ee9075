#!/usr/bin/env bash
# Build an mmcv 2.1.0 wheel with its CUDA ops for the torch of this Python, on a GPU machine.
#
#   scripts/build_mmcv_cuda.sh WHEELDIR [mmcv-2.1.0.tar.gz]
#   pip install --no-deps WHEELDIR/mmcv-2.1.0-*.whl
#
# PyPI has no mmcv 2.1.0 wheel for recent torch. This builds one from the source package (downloaded when no
# path is given; pip needs torch installed to read its metadata), for this GPU's architecture only
# (TORCH_CUDA_ARCH_LIST, e.g. "8.0;9.0" for several), with MAX_JOBS parallel compiles (default: all cores).
# Two changes make 2.1.0 build against torch 2.11 / CUDA 13:
#   * the two sources that include <THC/THCAtomics.cuh> include ATen's <ATen/cuda/Atomic.cuh> instead, which
#     defines the same gpuAtomicAdd (THC is gone from recent torch);
#   * setup.py imports pkg_resources, which setuptools 81 removed: an older setuptools is put first on the path.
# Measured (issue #12): NVIDIA H200, torch 2.11.0+cu130, nvcc 13.0, 16 cores, TORCH_CUDA_ARCH_LIST=9.0:
# 200 s; CenterPoint then ran on the GPU inside drivegen's pipeline (docs/models.md).
set -euo pipefail
out=$(mkdir -p "${1:?usage: $0 WHEELDIR [mmcv-2.1.0.tar.gz]}" && cd "$1" && pwd)
sdist=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PY=${PYTHON:-python3}
if [ -z "$sdist" ]; then
  "$PY" -m pip download -q --no-deps --no-binary :all: --no-build-isolation -d "$work" mmcv==2.1.0
  sdist=$work/mmcv-2.1.0.tar.gz
fi
tar xzf "$sdist" -C "$work"
cd "$work/mmcv-2.1.0"
sed -i 's#<THC/THCAtomics.cuh>#<ATen/cuda/Atomic.cuh>#' \
  mmcv/ops/csrc/common/pytorch_cuda_helper.hpp mmcv/ops/csrc/pytorch/cuda/ms_deform_attn_cuda.cu
if ! "$PY" -c "import pkg_resources" 2>/dev/null; then
  "$PY" -m pip install -q --target "$work/setuptools" "setuptools<81"
  export PYTHONPATH="$work/setuptools${PYTHONPATH:+:$PYTHONPATH}"
fi
arch=${TORCH_CUDA_ARCH_LIST:-$("$PY" -c "import torch; print('%d.%d' % torch.cuda.get_device_capability())")}
echo "building mmcv 2.1.0 with CUDA ops for sm ${arch} into ${out} (takes minutes)"
TORCH_CUDA_ARCH_LIST=$arch MMCV_WITH_OPS=1 FORCE_CUDA=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} \
  "$PY" -m pip wheel --no-build-isolation --no-deps -w "$out" .
echo "done: $(ls "$out"/mmcv-2.1.0-*.whl)"
