#!/usr/bin/env bash
# The README's picture of the report: a page of the sample browser of a run (default: ./out, what `make run`
# wrote) rendered by headless Chromium into docs/assets/report.png, and what it shows (the page and its first QA
# row) into docs/assets/report.png.json, which tests/project/test_docs.py checks against the default run's report.
#   scripts/report_screenshot.sh [RUN] [PAGE]      (PAGE default: samples-object_spatial-1.html)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run="${1:-out}" page="${2:-samples-object_spatial-1.html}"
html="$(cd "$run" && pwd)/report/$page"
[ -f "$html" ] || { echo "report_screenshot: $html does not exist: run make run (or drivegen report RUN) first" >&2; exit 2; }
browser="$(command -v chromium || command -v chromium-browser || true)"
[ -n "$browser" ] || { echo "report_screenshot: chromium is not installed (scripts/setup.sh installs it)" >&2; exit 2; }
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
mkdir -p "$repo/docs/assets"
"$browser" --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking --hide-scrollbars \
  --user-data-dir="$profile" --window-size=1280,900 --virtual-time-budget=5000 \
  --screenshot="$repo/docs/assets/report.png" "file://$html" 2>/dev/null
qa_id="$(grep -o -m1 'data-qa-id="[^"]*"' "$html" | head -n1 | cut -d'"' -f2)"
printf '{"page": "%s", "first_qa_id": "%s"}\n' "$page" "$qa_id" > "$repo/docs/assets/report.png.json"
echo "wrote $repo/docs/assets/report.png from $html (first QA row: $qa_id)"
