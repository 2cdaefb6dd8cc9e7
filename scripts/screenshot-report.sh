#!/usr/bin/env bash
# Renders an adgauge HTML report to a PNG with headless Chromium, for people to look at.
# Usage: scripts/screenshot-report.sh REPORT_DIR/index.html OUT.png [WIDTHxHEIGHT]
# Needs Debian's chromium (apt-get install -y chromium).
set -euo pipefail
html="${1:?usage: $0 REPORT.html OUT.png [WIDTHxHEIGHT]}"
out="${2:?usage: $0 REPORT.html OUT.png [WIDTHxHEIGHT]}"
size="${3:-1280x4000}"
browser="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$browser" ]; then
  echo "chromium not found: apt-get install -y chromium" >&2
  exit 4
fi
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run --user-data-dir="$profile" \
  --hide-scrollbars --window-size="${size/x/,}" --screenshot="$(realpath -m "$out")" \
  "file://$(realpath "$html")" >/dev/null 2>&1
echo "wrote $out"
