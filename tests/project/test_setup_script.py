"""``scripts/setup.sh`` (what ``make run`` and ``make test`` call first): its checks for the Debian packages it
needs, run with stand-ins for the system's tools so that nothing is installed."""
from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup.sh"


def _tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


def test_present_packages_are_not_installed_again(tmp_path):
    """libusb already in the linker's cache and chromium on the PATH: setup installs nothing. Its check reads the
    whole cache listing: under ``set -o pipefail`` a ``ldconfig -p | grep -q`` pipeline fails when grep stops at
    its first match while ldconfig still writes (SIGPIPE; 10 times in 300 under load), and setup then ran
    ``apt-get`` again. The stand-in ldconfig writes 7 MB after the match, so that race is lost every time."""
    bin_dir, venv = tmp_path / "bin", tmp_path / "venv"
    bin_dir.mkdir()
    (venv / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    _tool(bin_dir, "ldconfig", "echo '\tlibusb-1.0.so.0 (libc6,x86-64) => /lib/x86_64-linux-gnu/libusb-1.0.so.0'\n"
                               "yes '\tlibother.so (libc6,x86-64) => /lib/libother.so' | head -n 200000")
    for name in ("apt-get", "sudo"):
        _tool(bin_dir, name, f'echo "{name} $*" >> {calls}')
    _tool(bin_dir, "chromium", "exit 0")
    _tool(venv / "bin", "python", "exit 0")  # the environment is ready: setup only re-points its install
    key = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + SETUP.read_bytes()).hexdigest()[:16]
    (venv / f".drivegen-deps-{key}-auto").touch()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DRIVEGEN_VENV": str(venv),
           "DRIVEGEN_EXTRAS": "auto"}
    res = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert not calls.exists(), calls.read_text()
    assert "environment ready" in res.stderr
