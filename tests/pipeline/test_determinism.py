"""Same logs and config, same bytes (README "What drivegen guarantees").

End to end: every data file of a run (the tables its manifests list, WebDataset shards, the families' exports,
the dataset card) has the same SHA-256 whether the run went in-process, through Ray with two worker processes,
or through Ray with one and had its driver's process group SIGKILLed mid-run and was finished with
``--resume --local``; on the generated logs and (in-process and two workers) on the real AV2 excerpt.

The two causes, each shown failing without its fix:
  * numpy chose a SIMD or the C library's ``arctan2`` by where malloc put the output (``generator.numerics``);
  * Parquet bytes depended on how a dictionary column was built: its value order, values held twice (pyarrow
    then writes uninitialised memory into the dictionary page), its chunks (``schemas.tables.write_parquet``).
"""
from __future__ import annotations

import hashlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.pipeline import REPO, data_checksums, drivegen, manifest_count, wait_for, write_config
from generator.numerics import features_off, numpy_pinned
from schemas.tables import write_parquet


# ------------------------------------------------------------------------------------------ numpy


def _cpu_has_avx512() -> bool:
    return "avx512f" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else False


_STRIDED_ATAN2 = r"""
import sys
if sys.argv[1] == "pinned":
    import generator  # noqa: F401  (pins numpy before its import)
import numpy as np

rng = np.random.default_rng(0)
n = 4096
# R[:, 1, 0] of (n, 3, 3) rotations, as generator.perception takes an ego yaw; the output either in a fresh
# buffer or right behind R's last element, where numpy's overlap test (stride * n bytes from R[0, 1, 0])
# reaches: numpy's AVX-512 kernel runs for the first, the C library's atan2 for the second
buf = np.empty(n * 9 + n)
R = buf[: n * 9].reshape(n, 3, 3)
R[:] = rng.normal(size=(n, 3, 3))
fresh = np.arctan2(R[:, 1, 0], R[:, 0, 0])
behind = np.arctan2(R[:, 1, 0], R[:, 0, 0], out=buf[n * 9:])
print(int((fresh != behind).sum()))
"""


def _strided_atan2_differences(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"}
    r = subprocess.run([sys.executable, "-c", _STRIDED_ATAN2, mode], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip())


def test_numpy_gives_one_result_wherever_the_output_lands():
    assert _strided_atan2_differences("pinned") == 0
    if not _cpu_has_avx512():
        pytest.skip("the cause needs a CPU with AVX-512: without it numpy has one kernel anyway")
    # the same computation without drivegen's pin differs in the last bit (proves the check can fail)
    assert _strided_atan2_differences("unpinned") > 0


def test_the_test_process_and_a_command_are_pinned():
    assert numpy_pinned()
    r = subprocess.run([sys.executable, "-c", "import generator, numpy\n"
                        "from generator.numerics import features_off, numpy_pinned\nprint(numpy_pinned())"],
                       capture_output=True, text=True, cwd=REPO, timeout=60,
                       env={k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"})
    assert r.stdout.strip() == "True", r.stderr


def test_the_pin_names_the_features_each_numpy_knows():
    """numpy 2.4 renamed its x86 dispatch targets by level and only warns about ``AVX512F`` (kernels left on,
    seen with numpy 2.4.6); 1.26 knows no ``X86_V4``."""
    assert features_off("1.26.4") == ("AVX512F",)
    assert features_off("2.3.5") == ("AVX512F",)
    assert set(features_off("2.4.6")) == {"X86_V4", "AVX512_ICL", "AVX512_SPR"}
    assert features_off("2.5.0rc1") == features_off("2.4.0")
    assert features_off() == features_off(np.__version__)


# ------------------------------------------------------------------------------------------ Parquet


def _bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    write_parquet(sink, table)
    return sink.getvalue()


def test_parquet_bytes_depend_on_the_rows_alone():
    """The same rows, their dictionary built four ways, give one file; reading it back and writing it again
    gives the same file."""
    values = [f"{i % 37}-{'x' * (i % 13)}" for i in range(3000)]
    first_use = pa.array(values).dictionary_encode()
    d, idx = first_use.dictionary, first_use.indices.to_numpy()
    reversed_order = pa.DictionaryArray.from_arrays(pa.array(len(d) - 1 - idx), d.take(pa.array(np.arange(len(d))[::-1])))
    twice = idx.copy()
    twice[::2] += len(d)  # every value held twice in the dictionary, the rows use both copies
    held_twice = pa.DictionaryArray.from_arrays(pa.array(twice), pa.concat_arrays([d, d]))
    # inside lists and structs, as the QA table's grounding masks
    def nested(arr):
        return pa.ListArray.from_arrays(pa.array(np.arange(0, 3001, 3, dtype=np.int32)),
                                        pa.StructArray.from_arrays([arr], ["counts"]))

    ways = {"first use": first_use, "reversed": reversed_order, "held twice": held_twice}
    files = {name: (_bytes(pa.table({"x": nested(arr)})), _bytes(pa.table({"y": arr})))
             for name, arr in ways.items()}
    files["two chunks"] = (_bytes(pa.table({"x": pa.chunked_array([nested(first_use)[:400], nested(first_use)[400:]])})),
                           _bytes(pa.table({"y": pa.chunked_array([first_use[:1200], first_use[1200:]])})))
    assert len(set(files.values())) == 1, {k: [hashlib.sha256(b).hexdigest()[:12] for b in v]
                                           for k, v in files.items()}
    back = pq.read_table(io.BytesIO(files["first use"][1]))
    assert back.column("y").to_pylist() == values
    assert _bytes(back) == files["first use"][1]
    # the check can fail: pyarrow alone writes the reversed dictionary to other bytes
    raw = [io.BytesIO(), io.BytesIO()]
    pq.write_table(pa.table({"y": first_use}), raw[0])
    pq.write_table(pa.table({"y": reversed_order}), raw[1])
    assert raw[0].getvalue() != raw[1].getvalue()


# ------------------------------------------------------------------------------------------ end to end


def _killed_then_resumed(out: Path, args: list, cfg: Path, env: dict) -> None:
    """``drivegen run`` (``env`` added to this process's), its whole process group SIGKILLed once a scene is
    committed or its stages have begun, then ``drivegen run --resume --local``: the run folder a Ray run left,
    finished in one process (a Ray run with one worker runs its scenes one after another in one process too)."""
    env = {**os.environ, "TQDM_DISABLE": "1", **env}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, "-m", "generator.cli", "run", "--out", str(out), *map(str, args),
                             "--config", str(cfg), "--no-progress"], cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def begun():
            if proc.poll() is not None:
                return True
            att = out / "_attempts"
            return manifest_count(out) >= 1 or (att.is_dir() and any(att.iterdir()))

        wait_for(begun, 300, "the run to commit or start a scene")
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read()[-2000:]}"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not (out / "summary.json").exists()  # killed mid-run
    r = drivegen("run", "--resume", out, "--local", "--no-progress", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("logs", ["generated", "av2"])
def test_same_bytes_in_process_on_one_or_two_workers_and_resumed(logs, request, tmp_path):
    """generated: two scenes with every sensor of the generated logs (sweeps, six full-size cameras) and every
    default stage and export; their first 7 s (``short_logs``), as the bytes of a frame do not depend on how many
    follow it. av2: the real log (one scene) in-process and on two workers. The kill and ``--resume`` run on the
    generated logs alone: the real log's one scene, killed midway, is that scene run again from its start as the
    two-worker run runs it (two more Ray runs of the log, about 25 CPU s, and no other cause)."""
    generated = logs == "generated"
    if generated:  # the default job on short_logs (its runs read the logs by the same paths)
        args, env = ["--scenes", "2"], {"DRIVEGEN_SYNTH_DIR": str(request.getfixturevalue("short_logs_cache"))}
    else:
        args, env = ["--source", "av2", "--data", request.getfixturevalue("av2_log")], {}
    runs = {}
    r = drivegen("run", "--out", tmp_path / "local", *args, "--local", "--no-progress", env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    runs["in-process"] = data_checksums(tmp_path / "local")
    if generated:
        # two workers: the embedded default run that tests/pipeline/test_pipeline.py checks, made once per test run
        out, r = request.getfixturevalue("short_default_run")
    else:
        out = tmp_path / "ray2"
        cfg = write_config(tmp_path / "ray2.yaml", {"ray": {"num_cpus": 2, "scenes_in_flight": 1}})
        r = drivegen("run", "--out", out, *args, "--config", cfg, "--no-progress", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    runs["Ray, 2 workers"] = data_checksums(out)
    if generated:
        # one worker, killed, then resumed in one process (a separate uninterrupted one-worker run, and a resume on
        # Ray, each added a Ray run and no cause)
        cfg = write_config(tmp_path / "ray1.yaml", {"ray": {"num_cpus": 1, "scenes_in_flight": 1}})
        _killed_then_resumed(tmp_path / "resumed", args, cfg, env)
        runs["Ray, 1 worker, killed; resumed in one process"] = data_checksums(tmp_path / "resumed")

    base = runs["in-process"]
    assert any(k.startswith("qa/") for k in base) and any(k.startswith("perception/objects/") for k in base)
    assert "README.md" in base and any(k.startswith("bench/") or k.startswith("intention/") for k in base)
    for name, sums in runs.items():
        assert sums.keys() == base.keys(), (name, sorted(sums.keys() ^ base.keys()))
        differ = sorted(k for k in base if sums[k] != base[k])
        assert not differ, f"{name}: {len(differ)} file(s) differ from the in-process run: {differ[:10]}"
