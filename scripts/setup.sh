#!/usr/bin/env bash
# Idempotent setup for drivegen on a fresh Debian/Python 3.11 machine.
# Creates (or reuses) a virtual environment whose dependencies are keyed by a hash of
# pyproject.toml and this script, so a fresh clone reuses an existing environment in seconds.
#   DRIVEGEN_VENV     where the venv lives (default: ~/.cache/drivegen/venv)
#   DRIVEGEN_EXTRAS   "auto" (default): add the mmdet3d extra when ../shared/wheels has the mmcv wheel
#                     and the sam2 extra; "none": core + test only.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
home="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
venv="${DRIVEGEN_VENV:-$home/.cache/drivegen/venv}"
extras="${DRIVEGEN_EXTRAS:-auto}"
wheels="${DRIVEGEN_WHEELS:-$here/../shared/wheels}"
log() { printf '[setup] %s\n' "$*" >&2; }

# open3d needs libusb at import time; a fresh machine lacks it. The linker cache's listing is read whole: a
# `ldconfig -p | grep -q` pipeline fails under pipefail when grep stops at its match while ldconfig still writes.
libs="$(ldconfig -p 2>/dev/null || true)"
if [[ "$libs" != *libusb-1.0.so.0* ]]; then
  log "installing Debian package libusb-1.0-0 (needed by open3d)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq libusb-1.0-0 >/dev/null
fi

# the report's browser test (tests/report/test_report.py) renders it in headless Chromium; skipped without it.
if ! command -v chromium >/dev/null 2>&1; then
  log "installing Debian package chromium (browser test of drivegen report)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null || log "could not install chromium: tests/report/test_report.py's browser tests will be skipped"
fi

key="$(cat "$here/pyproject.toml" "$here/scripts/setup.sh" | sha256sum | cut -c1-16)-$extras"
stamp="$venv/.drivegen-deps-$key"
if [ ! -f "$stamp" ]; then
  log "creating environment in $venv (first run takes a few minutes)"
  python3.11 -m venv "$venv" 2>/dev/null || python3 -m venv "$venv"
  py="$venv/bin/python"
  "$py" -m pip install -q --upgrade "pip>=24" "setuptools>=77,<81" wheel
  # torch first, exactly the CPU wheel, so nothing later resolves CUDA torch.
  "$py" -m pip install -q "torch==2.13.0"
  # view: rerun-sdk (CPU-only wheel) for `drivegen view`, so tests/report/test_view.py runs rather than skips;
  # docs: MkDocs and its Material theme, so the suite builds the documentation site (tests/project/test_docs.py)
  "$py" -m pip install -q -e "$here[test,view,docs]"
  if [ "$extras" = auto ]; then
    # sam2 is source-only and its isolated build would download CUDA torch: build it against ours.
    log "installing sam2 without torchvision: pip then prints 'ERROR: ... sam2 1.1.0 requires torchvision',"
    log "  which is expected (no torchvision build works with CPU torch 2.13; drivegen does not use it)"
    if SAM2_BUILD_CUDA=0 "$py" -m pip install -q --no-build-isolation --no-deps "sam2==1.1.0" \
        && "$py" -m pip install -q "hydra-core>=1.3" "iopath>=0.1.10"; then
      log "sam2 installed (CPU build)"
    else
      log "sam2 could not be installed; its tests will skip"
    fi
    if ls "$wheels"/mmcv-2.1.0-*.whl >/dev/null 2>&1; then
      if "$py" -m pip install -q --find-links "$wheels" "mmcv==2.1.0" "mmdet==3.2.0" "mmengine==0.10.7" \
          "mmdet3d==1.4.0" "opencv-python==4.11.0.86" "opencv-python-headless==4.11.0.86" "numpy==1.26.4"; then
        log "mmdet3d installed with the prebuilt mmcv wheel"
      else
        log "mmdet3d could not be installed; its tests will skip"
      fi
    else
      log "no mmcv wheel in $wheels: mmdet3d not installed (docs/models.md); its tests will skip"
    fi
  fi
  rm -f "$venv"/.drivegen-deps-*
  touch "$stamp"
else
  # Re-point the editable install at this checkout (cheap; a fresh clone lives elsewhere).
  "$venv/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$here" >/dev/null 2>&1 \
    || "$venv/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$here"
fi
log "environment ready: $venv"
