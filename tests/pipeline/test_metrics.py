"""Live metrics (``generator.pipeline.metrics``): scraped for real from the embedded Ray's Prometheus endpoint
while a run goes, the per-stage counters move; the Grafana dashboard queries only metrics drivegen exports."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from support.data import REPO, SYNTH_VERSION
from support.pipeline import LIGHT, write_config

DASHBOARD = REPO / "docs" / "assets" / "grafana-drivegen.json"
SAMPLE = re.compile(r'^(ray_drivegen_[a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+)$')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(text: str) -> dict[tuple[str, str], float]:
    """{(name, labels): value} of the drivegen samples of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m:
            labels = ",".join(sorted(p for p in (m.group(2) or "").strip("{}").split(",")
                                     if p and not p.startswith(("Component", "NodeAddress", "SessionName", "Version",
                                                                 "WorkerId", "JobId"))))
            out[(m.group(1), labels)] = out.get((m.group(1), labels), 0.0) + float(m.group(3))
    return out


@pytest.mark.slow
def test_metrics_endpoint_moves_during_a_run(minimal_logs, tmp_path):
    """``drivegen run --metrics-port P``: scraping http://127.0.0.1:P/metrics while the run goes shows the scenes
    counter and each stage's counters rising between scrapes, and the pending gauge falling. The lighter pipeline of
    the fault tests (two cameras, no WebDataset, card or report): every stage and every metric is there, the
    writers and the end-of-run report that no metric counts are not."""
    port = _free_port()
    cfg = write_config(tmp_path / "light.yaml", LIGHT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_metrics_report_interval_ms": "500", "TQDM_DISABLE": "1"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, "-m", "generator.cli", "run", "--source", "nuscenes", "--data",
                             str(minimal_logs), "--version", SYNTH_VERSION, "--out", str(tmp_path / "run"),
                             "--config", str(cfg), "--metrics-port", str(port), "--no-progress"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    scrapes: list[dict] = []

    def scrape():
        while proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    got = parse(r.read().decode())
                if got:
                    scrapes.append(got)
            except OSError:
                pass
            time.sleep(0.3)

    t = threading.Thread(target=scrape, daemon=True)
    t.start()
    out, _ = proc.communicate(timeout=600)
    t.join(5)
    assert proc.returncode == 0, out[-3000:]
    assert scrapes, f"nothing scraped from port {port}:\n{out[-2000:]}"

    def value(s, name, **labels):
        want = ",".join(sorted(f'{k}="{v}"' for k, v in labels.items()))
        return sum(v for (n, lab), v in s.items() if n == name and all(p in lab.split(",") for p in want.split(",")
                                                                      if p))

    ok = [value(s, "ray_drivegen_scenes_total", status="ok") for s in scrapes]
    assert max(ok) <= 12
    assert len({v for v in ok if v > 0}) >= 2, f"the scenes counter never moved between scrapes: {ok}"
    perceive = [value(s, "ray_drivegen_stage_seconds_total", stage="perceive") for s in scrapes]
    assert perceive[-1] > min(perceive), perceive
    pending = [value(s, "ray_drivegen_scenes_pending") for s in scrapes
               if any(n == "ray_drivegen_scenes_pending" for n, _ in s)]
    assert pending and min(pending) < max(pending)
    assert any(v > 0 for s in scrapes for (n, lab), v in s.items() if n == "ray_drivegen_rows_total"
               and 'table="qa"' in lab)
    names = {n for s in scrapes for n, _ in s}
    assert names >= dashboard_metrics(), f"the dashboard queries metrics no run exported: {dashboard_metrics() - names}"


def dashboard_metrics() -> set[str]:
    """The drivegen metric names the Grafana dashboard's queries use."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    return {m for e in exprs for m in re.findall(r"ray_drivegen_[a-z_]+", e)} - {"ray_drivegen_actor_busy_seconds_total",
                                                                                "ray_drivegen_actor_gpu_memory_bytes"}


def test_dashboard_queries_exported_metrics():
    """Every drivegen metric the dashboard queries is one ``generator.pipeline.metrics`` declares (with Ray's
    ``ray_`` prefix), and every declared metric has a panel."""
    declared = set(re.findall(r'"(drivegen_[a-z_]+)"', (REPO / "generator/pipeline/metrics.py").read_text()))
    dash = json.loads(DASHBOARD.read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p.get("targets", []))
    used = {m[len("ray_"):] for m in re.findall(r"ray_drivegen_[a-z_]+", exprs)}
    assert used and used <= declared, used - declared
    assert declared <= used, f"metrics without a panel: {declared - used}"
    assert all(p.get("title") for p in dash["panels"])
