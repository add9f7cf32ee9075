"""One floating-point result per input in every process a run uses: in-process, on any Ray worker, resumed.

The cause this module removes. NumPy (1.26, x86 with AVX-512) computes float64 ``arctan2``, ``exp``, ``log``,
``power``, ``arcsin``, ... with SIMD kernels (SVML, AVX-512F) only when the input and output memory do not
overlap, and with the C library's scalar function otherwise. Its overlap test takes ``stride * length`` bytes
from the input's first element, so for a strided view such as ``R[:, 1, 0]`` of an (N, 3, 3) array it reaches
up to ``(stride - 8)`` bytes past the array's end, into whatever malloc placed there: when that is the output
buffer, the scalar function runs. The SIMD and scalar functions disagree in the last bit on a few percent of
inputs (``atan2``: 16 of 508 object yaws of one scene), so the same stage on the same input gave different
bytes depending on the heap of the process it ran in (``yaw_global_rad`` of one frame differed between two
2-worker runs of the same logs).

The rule: numpy's AVX-512 dispatch is off in every process that runs stages (``NPY_DISABLE_CPU_FEATURES``
gains ``AVX512F``, or on numpy >= 2.4 its new names for the same targets, which numpy reads once, when it is
first imported). Every float64 transcendental then is
the C library's, whatever the memory layout. It is set

- in the driver when the ``generator`` package is imported (``generator/__init__.py``), which the ``drivegen``
  command does before anything imports numpy;
- on Ray's workers through the job's ``runtime_env`` (``ray_env_vars``), on an embedded Ray and on a cluster.

A process that imported numpy before ``generator`` (a notebook that ran ``import numpy`` first) keeps the
SIMD kernels: ``numpy_pinned`` says so, and the driver warns that such a run's bytes may differ in the last
digit from other runs of the same logs. The C library's functions are fixed per machine type (glibc chooses
an FMA variant or not by CPU), so the promise is the same bytes on the same kind of machine; a cluster of
mixed CPU generations may differ in the last digit. The cost is small: the stages' transcendental calls are
a few per object per frame, and glibc's scalar ``atan2`` takes ~20 ns (``bench/pipeline.py`` shows no change).
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
import os
import re
import sys

NUMPY_FEATURES_OFF = ("AVX512F",)
"""numpy (< 2.4) CPU features drivegen disables; AVX512F implies every AVX-512 dispatch target (SKX, ICL, SPR)"""
NUMPY_FEATURES_OFF_V4 = ("X86_V4", "AVX512_ICL", "AVX512_SPR")
"""the same for numpy >= 2.4, which names its x86 dispatch targets by level and refuses ``AVX512F`` (a warning
at import, and the kernels stay on); disabling ``X86_V4`` alone leaves ICL and SPR on"""
_ENV = "NPY_DISABLE_CPU_FEATURES"


def features_off(numpy_version: str | None = None) -> tuple[str, ...]:
    """The names to disable for this numpy (``numpy_version``; default: the installed one, read from its
    metadata without importing it, since the variable must be set before the import)."""
    if numpy_version is None:
        try:
            numpy_version = version("numpy")
        except PackageNotFoundError:
            return NUMPY_FEATURES_OFF
    major, minor = (int(re.match(r"\d+", x).group()) for x in numpy_version.split(".")[:2])
    return NUMPY_FEATURES_OFF_V4 if (major, minor) >= (2, 4) else NUMPY_FEATURES_OFF


def numpy_env_value(current: str | None = None) -> str:
    """``NPY_DISABLE_CPU_FEATURES`` with drivegen's features added to what ``current`` (the user's) names."""
    names = (current if current is not None else os.environ.get(_ENV, "")).replace(",", " ").split()
    return " ".join(names + [f for f in features_off() if f not in names])


def pin_numpy() -> bool:
    """Set ``NPY_DISABLE_CPU_FEATURES`` for numpy's import in this process and its children. Returns False when
    numpy was already imported here (too late for this process: see ``numpy_pinned``)."""
    os.environ[_ENV] = numpy_env_value()
    return "numpy" not in sys.modules or numpy_pinned()


def numpy_pinned() -> bool:
    """True when this process's numpy runs no AVX-512 kernel (disabled, or a CPU without AVX-512)."""
    import numpy  # here, not at the top: this module runs before numpy's import (pin_numpy)

    core = numpy._core if int(numpy.__version__.split(".")[0]) >= 2 else numpy.core
    features = core._multiarray_umath.__cpu_features__
    return not any(features.get(f, False) for f in features_off(numpy.__version__))


def ray_env_vars() -> dict[str, str]:
    """Environment of a run's Ray workers (the job's ``runtime_env``): numpy pinned as in the driver."""
    return {_ENV: numpy_env_value()}
