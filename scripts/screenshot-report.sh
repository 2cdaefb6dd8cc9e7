#!/usr/bin/env bash
# Renders an adgauge HTML report to a PNG with headless Chromium, for people to look at, and
# prints the page's height at that width (the report aims at under 8,000 px for the quick suite).
# Usage: scripts/screenshot-report.sh REPORT_DIR/index.html OUT.png [WIDTH]   (default 1280)
# The page is drawn in a window 16,000 px tall, then cut below its last non-white row (Python 3
# with Pillow: python3-pil). Needs Debian's chromium (apt-get install -y chromium).
set -euo pipefail
html="${1:?usage: $0 REPORT.html OUT.png [WIDTH]}"
out="${2:?usage: $0 REPORT.html OUT.png [WIDTH]}"
width="${3:-1280}"
tall=16000
browser="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$browser" ]; then
  echo "chromium not found: apt-get install -y chromium" >&2
  exit 4
fi
if ! python3 -c 'import PIL' 2>/dev/null; then
  echo "python3 with Pillow not found: apt-get install -y python3-pil" >&2
  exit 4
fi
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run --user-data-dir="$profile" \
  --hide-scrollbars --window-size="$width,$tall" --screenshot="$(realpath -m "$out")" \
  "file://$(realpath "$html")" >/dev/null 2>&1
python3 - "$out" "$tall" <<'EOF'
import sys
from PIL import Image, ImageChops
path, tall = sys.argv[1], int(sys.argv[2])
img = Image.open(path).convert("RGB")
# The last row that is not the page's white background, plus a margin.
box = ImageChops.difference(img, Image.new("RGB", img.size, (255, 255, 255))).getbbox()
height = min(img.height, (box[3] if box else 0) + 16)
img.crop((0, 0, img.width, height)).save(path)
more = " (or more: the window's height)" if height >= tall else ""
print(f"wrote {path}: {img.width} x {height} px; page height {height} px{more}")
EOF
