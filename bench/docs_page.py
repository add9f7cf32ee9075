"""``--docs``: a benchmark writes what it printed to the documentation site's benchmarks page.

Every ``bench/<name>.py`` runs its ``main`` inside ``docs_page("<name>")``. Given ``--docs`` (anywhere in its
arguments; the bench itself never sees it), everything the bench prints to stdout is also kept, and when the
bench ends with exit code 0 it is written to ``docs/benchmarks/<name>.md`` under a line naming the command, the
date, the CPU model and core count (and the GPU when torch sees one) and the commit. ``docs/benchmarks.md``
includes these files; nobody edits them, and a failed bench leaves the page as it was. The goals a bench prints
beside its figures (``(goal >= 2,000)``: what the developers aim at) are the console's, not the page's: the page
states what was measured (``without_goals``).
"""
from __future__ import annotations

import contextlib
import datetime
import io
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = REPO / "docs" / "benchmarks"


def checkout_label(module: str) -> str:
    """The checkout whose ``generator/__init__.py`` (``module``) a measurement ran: 'this checkout', or another's
    folder (a bench's ``--code``)."""
    checkout = Path(module).resolve().parents[1]
    return "this checkout" if checkout == REPO else str(checkout)


def machine() -> str:
    """'<CPU model> x <cores> cores' from /proc/cpuinfo (the platform's processor string elsewhere), plus the
    GPU's name when a CUDA GPU is visible to an already imported torch."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if not model:
        import platform
        model = platform.processor() or platform.machine()
    text = f"{model} x {os.cpu_count()} cores"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        text += f", GPU {torch.cuda.get_device_name(0)}"
    return text


def _commit() -> str:
    """The checkout's commit; ``DRIVEGEN_COMMIT`` names it where the tree travelled without its ``.git``."""
    if os.environ.get("DRIVEGEN_COMMIT"):
        return os.environ["DRIVEGEN_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class _Tee(io.TextIOBase):
    def __init__(self, stream):
        self.stream, self.kept = stream, io.StringIO()

    def write(self, text):
        self.kept.write(text)
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()


_GOAL_ALONE = re.compile(r" ?\(goal [^;()]*\)")  # "(goal <= 1.10x)"
_GOAL_FIRST = re.compile(r"goal [^;()]*; ")  # "(goal >= 1.85x; 2 cores shared ...)" -> "(2 cores shared ...)"


def without_goals(text: str) -> str:
    """``text`` without the goals a bench prints beside its figures."""
    return _GOAL_FIRST.sub("", _GOAL_ALONE.sub("", text))


def page_text(name: str, argv: list[str], output: str, when: datetime.date | None = None,
              script: str | None = None) -> str:
    """The page of bench ``script`` (default ``name``: one bench may write pages by mode, e.g. ``scale.py
    --minimal`` -> ``scale-minimal``)."""
    command = " ".join(["python", f"bench/{script or name}.py", *argv])
    when = when or datetime.date.today()
    body = without_goals(output).rstrip("\n")
    return (f"<!-- written by `{command} --docs`; do not edit: run the command again -->\n"
            f"`{command}`, {when.isoformat()}, {machine()}, commit {_commit()}:\n\n"
            f"```text\n{body}\n```\n")


@contextlib.contextmanager
def docs_page(name: str):
    """Run a bench's main inside this; with ``--docs`` its stdout becomes ``docs/benchmarks/<name>.md``."""
    if "--docs" not in sys.argv[1:]:
        yield
        return
    sys.argv.remove("--docs")
    argv = sys.argv[1:]
    tee = _Tee(sys.stdout)
    code = 0
    sys.stdout = tee
    try:
        yield
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        raise
    except BaseException:
        code = 1
        raise
    finally:
        sys.stdout = tee.stream
        if code == 0:
            PAGES.mkdir(parents=True, exist_ok=True)
            target = PAGES / f"{name}.md"
            target.write_text(page_text(name, argv, tee.kept.getvalue(), script=Path(sys.argv[0]).stem))
            print(f"wrote {target.relative_to(REPO)}", file=sys.stderr)
        else:
            print(f"bench {name} exited {code}: docs/benchmarks/{name}.md left as it was", file=sys.stderr)
