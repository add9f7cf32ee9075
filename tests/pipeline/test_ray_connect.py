"""The embedded Ray's security defaults (``generator.pipeline.ray_connect``): every value of ``RAY_AUTH_MODE``
handled (``off`` or an empty value ran an unauthenticated Ray while the log said "with token authentication"),
the opt-out warned on every run, the whole instance and its metrics endpoint on 127.0.0.1 unless told otherwise
(``--metrics-port`` listened on 0.0.0.0), and a busy or bad metrics port refused before ``--out`` exists (it made
``--out``, waited 45 s and ended "internal error (a bug in drivegen)")."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

from support.pipeline import REPO
from support.raynodes import free_port


def test_every_ray_auth_mode_value_is_handled(monkeypatch):
    """Unset and ``token`` (any case) are token authentication; ``disabled`` is refused for the embedded Ray
    unless ``ray.allow_unauthenticated``, allowed for a client of a cluster (the cluster decides); every other
    value (Ray reads them all as disabled) is refused, naming the value."""
    from generator.pipeline.ray_connect import auth_mode
    from schemas.config import PipelineConfig
    from schemas.errors import InputError

    cfg, allow = PipelineConfig(), PipelineConfig.model_validate({"ray": {"allow_unauthenticated": True}})
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert auth_mode(cfg, joining=False) == "token" and auth_mode(cfg, joining=True) == "token"
    for value in ("token", "TOKEN", "Token"):
        monkeypatch.setenv("RAY_AUTH_MODE", value)
        assert auth_mode(cfg, joining=False) == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.raises(InputError, match="ray.allow_unauthenticated: true"):
        auth_mode(cfg, joining=False)
    assert auth_mode(allow, joining=False) == "disabled" and auth_mode(cfg, joining=True) == "disabled"
    for value in ("off", "", "false", "0", "none", " token", "tokens", "DISABLE"):
        monkeypatch.setenv("RAY_AUTH_MODE", value)
        for c, joining in ((cfg, False), (allow, False), (cfg, True)):
            with pytest.raises(InputError, match=f"RAY_AUTH_MODE={value!r}.*not one of Ray's modes"):
                auth_mode(c, joining=joining)


def _run_here(argv: list, capsys) -> tuple[int, str]:
    """``drivegen ARGV`` in this process (a command refused before Ray starts needs no process of its own): the
    exit code and stderr."""
    from generator.cli import main

    try:
        code = main([str(a) for a in argv])
    except SystemExit as stop:  # argparse's refusals
        code = stop.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("value", ["off", ""])
def test_an_unknown_ray_auth_mode_is_exit_2_before_the_run_folder(value, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAY_AUTH_MODE", value)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "run"
    code, err = _run_here(["run", "--out", out, "--scenes", 1, "--no-progress"], capsys)
    assert code == 2 and f"RAY_AUTH_MODE={value!r}" in err, err[-2000:]
    assert not out.exists()


EMBEDDED = r"""
import io, json, logging, sys, time
stream = io.StringIO()
logging.basicConfig(stream=stream, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
import psutil
from generator.pipeline.ray_connect import ensure_ray
from schemas.config import PipelineConfig

a = json.loads(sys.argv[1])
cfg = PipelineConfig.model_validate({"ray": {"num_cpus": 1, "allow_unauthenticated": a["allow"]}})
assert ensure_ray(cfg, metrics_port=a["port"], metrics_host=a["host"])
import ray
from ray._raylet import AuthenticationMode, get_authentication_mode

def listening():
    procs = [psutil.Process()] + psutil.Process().children(recursive=True)
    found = set()
    for p in procs:
        try:
            found |= {(c.laddr.ip, c.laddr.port) for c in p.net_connections("tcp") if c.status == "LISTEN"}
        except psutil.Error:
            pass
    return sorted(found)

def workers():  # Ray's task worker processes (they retitle themselves 'ray::IDLE' once started)
    n = 0
    for p in psutil.Process().children(recursive=True):
        try:
            argv = p.cmdline()
        except psutil.Error:
            continue
        if argv and (argv[0].startswith("ray::IDLE") or (len(argv) > 1 and argv[1].endswith("default_worker.py"))):
            n += 1  # (not the raylet, whose arguments name default_worker.py too)
    return n

deadline = time.time() + 60  # the metrics agent starts after ray.init returns
while a["port"] not in {port for _, port in listening()} and time.time() < deadline:
    time.sleep(0.5)
time.sleep(1)  # a worker Ray started as the driver connected has had its time to appear
print(json.dumps({"token": get_authentication_mode() == AuthenticationMode.TOKEN,
                  "node_ip": ray.util.get_node_ip_address(), "listening": listening(), "log": stream.getvalue(),
                  "workers": workers()}))
sys.stdout.flush()
sys.stdin.readline()  # the test scrapes the endpoint meanwhile
ray.shutdown()
"""


def _embedded(port: int, host: str = "127.0.0.1", allow: bool = False, env: dict | None = None) -> dict:
    """Start the embedded Ray as ``drivegen run --metrics-port port --metrics-host host`` does, in a process of its
    own: what Ray reports (auth mode, node address), the addresses its processes listen on, the log, and a scrape
    of the metrics endpoint (``metrics``: its metric names)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    full.update({"RAY_metrics_report_interval_ms": "500", **(env or {})})
    err = tempfile.TemporaryFile(mode="w+")  # a file: Ray's lines cannot fill a pipe the test does not read
    proc = subprocess.Popen([sys.executable, "-c", EMBEDDED, json.dumps({"port": port, "host": host, "allow": allow})],
                            cwd=REPO, env=full, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        line = proc.stdout.readline()
        err.seek(0)
        assert line, err.read()[-3000:]
        got = json.loads(line)
        names: set[str] = set()
        deadline = time.monotonic() + 60
        while not {"ray_node_mem_used", "ray_component_rss_mb"} <= names and time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                text = r.read().decode()
            names = {ln.split("{")[0].split(" ")[0] for ln in text.splitlines() if ln.startswith("ray_")}
            time.sleep(0.5)
        got["metrics"] = names
        proc.communicate("done\n", timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        err.close()
    assert proc.returncode == 0
    return got


def _loopback(ip: str) -> bool:
    return ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1")


@pytest.mark.ray
@pytest.mark.slow
def test_embedded_ray_listens_on_loopback_and_logs_its_real_mode(tmp_path):
    """Default: every port of the embedded Ray (GCS, raylet, workers, agents, the metrics endpoint) on 127.0.0.1,
    token authentication as Ray reports it, and the log saying both; the endpoint shows the machine's and Ray's
    processes' figures, as the cluster guide says. Told otherwise (``--metrics-host 0.0.0.0``,
    here with the documented opt-out of authentication): the metrics endpoint on every interface, and a warning
    that the Ray runs without authentication. No task worker is started before the first task
    (``ray_connect.EMBEDDED_SYSTEM_CONFIG``)."""
    port = free_port()
    got = _embedded(port, env={"HOME": str(tmp_path)})
    assert got["token"] and got["node_ip"] == "127.0.0.1"
    assert {"ray_node_mem_used", "ray_node_cpu_utilization", "ray_component_rss_mb"} <= got["metrics"]  # documented
    assert ("127.0.0.1", port) in [tuple(x) for x in got["listening"]], got["listening"]
    exposed = [x for x in got["listening"] if not _loopback(x[0])]
    assert len(got["listening"]) >= 5 and not exposed, f"listening beyond 127.0.0.1: {exposed}"
    assert "embedded Ray on 127.0.0.1 only, with token authentication" in got["log"], got["log"]
    assert f"live metrics (Prometheus): http://127.0.0.1:{port}/metrics" in got["log"]
    assert (tmp_path / ".ray" / "auth_token").stat().st_mode & 0o077 == 0  # the token file is the user's alone
    assert got["workers"] == 0, "the embedded Ray started task workers before any task (prestart_worker_first_driver)"

    port = free_port()
    got = _embedded(port, host="0.0.0.0", allow=True, env={"HOME": str(tmp_path), "RAY_AUTH_MODE": "disabled"})
    assert not got["token"] and ["0.0.0.0", port] in got["listening"], got["listening"]
    assert "WARNING drivegen.ray: the embedded Ray on every interface" in got["log"], got["log"]
    assert "runs WITHOUT authentication (RAY_AUTH_MODE=disabled, ray.allow_unauthenticated: true)" in got["log"]
    assert f"http://0.0.0.0:{port}/metrics (every interface, no authentication)" in got["log"]


def test_a_busy_or_bad_metrics_port_is_exit_2_before_the_run_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    out = tmp_path / "run"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, err = _run_here(["run", "--out", out, "--scenes", 1, "--no-progress", "--metrics-port", port], capsys)
    assert code == 2 and f"--metrics-port {port}: port {port} on 127.0.0.1 is in use" in err, err[-2000:]
    assert "internal error" not in err and not out.exists()
    for bad in ("0", "70000", "http"):
        code, err = _run_here(["run", "--out", out, "--scenes", 1, "--metrics-port", bad], capsys)
        assert code == 2 and "--metrics-port" in err and not out.exists(), (bad, err[-500:])
    for args, says in ((("--local",), "--local runs without Ray"),
                       (("--address", "127.0.0.1:1"), "a cluster's are on each node's own endpoint"),
                       (("--metrics-host", "0.0.0.0", "--local"), "--local runs without Ray")):
        code, err = _run_here(["run", "--out", out, "--scenes", 1, "--metrics-port", free_port(), *args], capsys)
        assert code == 2 and says in err and not out.exists(), err[-500:]
    code, err = _run_here(["run", "--out", out, "--scenes", 1, "--metrics-host", "0.0.0.0"], capsys)
    assert code == 2 and "--metrics-host goes with --metrics-port" in err and not out.exists()
