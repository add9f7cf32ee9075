#!/usr/bin/env bash
# What a new user's first `make run` costs: a fresh clone and a fresh HOME (so a new virtual environment and
# newly generated logs), timed step by step, with the disk each leaves behind. Writes the table to
# docs/benchmarks/setup.md (included by docs/guide/install.md) and prints it.
#   scripts/measure_setup.sh [WORKDIR]     (default: a new temporary folder; removed at the end)
# Debian packages (libusb-1.0-0, chromium) are not counted when the machine already has them.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${1:-$(mktemp -d /tmp/drivegen-measure-XXXXXX)}"
mkdir -p "$work"
clone="$work/drivegen" fresh_home="$work/home"
rm -rf "$clone" "$fresh_home"
git clone -q "$repo" "$clone"
mkdir -p "$fresh_home"
[ -e "$repo/../shared" ] && [ ! -e "$work/shared" ] && ln -s "$(cd "$repo/../shared" && pwd)" "$work/shared"
secs() { python3 -c "import time; print(f'{time.time() - $1:.0f}')"; }
cd "$clone"
t0=$(python3 -c "import time; print(time.time())")
HOME="$fresh_home" make setup >"$work/setup.log" 2>&1
setup_s=$(secs "$t0")
venv_gb=$(du -sb "$fresh_home/.cache/drivegen/venv" | awk '{printf "%.1f", $1 / 1e9}')
t1=$(python3 -c "import time; print(time.time())")
HOME="$fresh_home" make run >"$work/run1.log" 2>&1
run1_s=$(secs "$t1")
t2=$(python3 -c "import time; print(time.time())")
HOME="$fresh_home" make run >"$work/run2.log" 2>&1
run2_s=$(secs "$t2")
logs_mb=$(du -sb "$fresh_home/.cache/drivegen/synth" | awk '{printf "%.0f", $1 / 1e6}')
out_mb=$(du -sb "$clone/out" | awk '{printf "%.0f", $1 / 1e6}')
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') x $(nproc) cores"
page="$repo/docs/benchmarks/setup.md"
mkdir -p "$(dirname "$page")"
cat >"$page" <<TABLE
<!-- written by \`scripts/measure_setup.sh\`; do not edit: run the command again -->
\`scripts/measure_setup.sh\`, $(date -u +%F), $cpu, commit $(git -C "$repo" describe --always --dirty):

| step (fresh clone, fresh HOME) | wall time | disk it leaves |
|---|---|---|
| \`make setup\`: the virtual environment, model stacks included | ${setup_s} s | ${venv_gb} GB (\`~/.cache/drivegen/venv\`) |
| first \`make run\`: generates the logs, runs, writes the report | ${run1_s} s | ${logs_mb} MB of logs (\`~/.cache/drivegen/synth\`), ${out_mb} MB in \`./out\` |
| second \`make run\` (replaces \`./out\`) | ${run2_s} s | the same |
TABLE
cat "$page"
tail -3 "$work/run2.log"
[ -z "${1:-}" ] && rm -rf "$work"
exit 0
