#!/usr/bin/env bash
# Renders an adgauge HTML report with headless Chromium at a window width, checks that the page
# does not overflow it sideways (no horizontal scrollbar), and takes a screenshot of the whole
# page.
#
#   scripts/screenshot-report.sh REPORT_DIR/index.html OUT.png [WIDTH]    (default 1280)
#
# Prints `WIDTH px: page W x H px, fits` and exits 0, or names the overflow and exits 1;
# exits 4 without Chromium (Debian: apt-get install -y chromium). Needs nothing else: the page's
# size is read by Chromium itself, from a copy of the report with a one-line script added (the
# report carries no scripts of its own).
set -euo pipefail
html="${1:?usage: $0 REPORT.html OUT.png [WIDTH]}"
out="${2:?usage: $0 REPORT.html OUT.png [WIDTH]}"
width="${3:-1280}"
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
if [ -z "$browser" ]; then
  echo "chromium not found: apt-get install -y chromium" >&2
  exit 4
fi
work="$(mktemp -d)"
# The copy sits beside the report so that relative links resolve as in the original.
page="$(dirname "$(realpath "$html")")/.adgauge-measure-$$.html"
trap 'rm -rf "$work" "$page"' EXIT
sed 's#</body>#<script>document.title="size "+document.documentElement.scrollWidth+" "+document.documentElement.scrollHeight+" "+window.innerWidth;</script></body>#' \
  "$html" >"$page"
chrome() {
  "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --user-data-dir="$work/profile" \
    --hide-scrollbars "$@" 2>/dev/null
}
size="$(chrome --window-size="$width,900" --dump-dom "file://$page" | sed -n 's#.*<title>size \([0-9]*\) \([0-9]*\) \([0-9]*\)</title>.*#\1 \2 \3#p' | head -1)"
if [ -z "$size" ]; then
  echo "chromium rendered no size for $html" >&2
  exit 1
fi
read -r page_width page_height view <<<"$size"
chrome --window-size="$width,$page_height" --screenshot="$(realpath -m "$out")" "file://$page" >/dev/null
if [ "$page_width" -gt "$view" ]; then
  echo "$width px: page $page_width x $page_height px, wider than the window ($view px): it scrolls sideways; screenshot $out"
  exit 1
fi
echo "$width px: page $page_width x $page_height px, fits; screenshot $out"
