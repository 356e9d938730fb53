#!/usr/bin/env bash
# Renders a sluice report (report.html) in headless Chromium and checks that a person would see
# the plots: the DOM Chromium builds holds the four plot <svg> elements with their lines, and the
# screenshot is not a blank page (it has several colours, among them each plot's series colour).
#
#   tests/report/chromium.sh RUN_DIR/report.html
#
# Exits 0 when the page renders as expected, 1 when it does not, 77 (ctest: skipped) when no
# Chromium is installed (Debian: apt-get install chromium).
set -euo pipefail

html=${1:?usage: chromium.sh REPORT.html}
if [[ ! -f $html ]]; then
  echo "chromium.sh: no such file: $html" >&2
  exit 1
fi

browser=""
for candidate in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$candidate" > /dev/null 2>&1; then
    browser=$(command -v "$candidate")
    break
  fi
done
if [[ -z $browser ]]; then
  echo "chromium.sh: skipped: no chromium binary installed (apt-get install chromium)"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-chromium.XXXXXX")
trap 'rm -rf "$work"' EXIT
url="file://$(cd "$(dirname "$html")" && pwd)/$(basename "$html")"
# A private profile, so that parallel runs do not share (or lock) one.
flags=(--headless --disable-gpu --no-sandbox --user-data-dir="$work/profile"
  --no-first-run --hide-scrollbars --window-size=1200,1600)

if ! timeout 60 "$browser" "${flags[@]}" --screenshot="$work/shot.png" "$url" \
  > "$work/screenshot.log" 2>&1; then
  echo "chromium.sh: FAIL: $browser could not take a screenshot:" >&2
  tail -20 "$work/screenshot.log" >&2
  exit 1
fi
if ! timeout 60 "$browser" "${flags[@]}" --dump-dom "$url" > "$work/dom.html" \
  2> "$work/dom.log"; then
  echo "chromium.sh: FAIL: $browser could not dump the DOM:" >&2
  tail -20 "$work/dom.log" >&2
  exit 1
fi

python3 - "$work/dom.html" "$work/shot.png" "$html" << 'EOF'
import re
import struct
import sys
import zlib

dom_path, png_path, html_path = sys.argv[1:4]
failures = []

# ---- the DOM as Chromium parsed it ----
dom = open(dom_path, encoding="utf-8", errors="replace").read()
svgs = re.findall(r"<svg\b.*?</svg>", dom, flags=re.S)
if len(svgs) != 4:
    failures.append(f"the DOM has {len(svgs)} <svg> elements, expected 4")
for i, svg in enumerate(svgs):
    if "<polyline" not in svg and "<circle" not in svg and "no data" not in svg:
        failures.append(f"plot {i + 1} has neither a line, points nor a 'no data' note")
# The series colours the page uses, to look for in the screenshot.
source = open(html_path, encoding="utf-8", errors="replace").read()
colours = sorted(set(re.findall(r'<polyline[^>]*stroke="#([0-9a-fA-F]{6})"', source)))

# ---- the screenshot, decoded with zlib only (no PIL) ----
def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, ctype, _, _, interlace = header
    if depth != 8 or ctype not in (2, 6) or interlace != 0:
        raise ValueError(f"unsupported PNG layout: depth {depth}, colour type {ctype}, "
                         f"interlace {interlace}")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        ftype = raw[start]
        row = bytearray(raw[start + 1:start + 1 + stride])
        if ftype == 1:
            for i in range(bpp, stride):
                row[i] = (row[i] + row[i - bpp]) & 0xFF
        elif ftype == 2:
            row = bytearray((a + b) & 0xFF for a, b in zip(row, prev))
        elif ftype == 3:
            for i in range(stride):
                left = row[i - bpp] if i >= bpp else 0
                row[i] = (row[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif ftype == 4:
            for i in range(stride):
                a = row[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                row[i] = (row[i] + pred) & 0xFF
        elif ftype != 0:
            raise ValueError(f"bad PNG filter {ftype} in row {y}")
        rows.append(bytes(row))
        prev = row
    return width, height, bpp, rows

try:
    width, height, bpp, rows = read_png(png_path)
except (ValueError, zlib.error, struct.error, TypeError) as e:
    print(f"chromium.sh: FAIL: cannot read the screenshot: {e}", file=sys.stderr)
    sys.exit(1)

counts = {}
for row in rows:
    for i in range(0, len(row), bpp):
        rgb = row[i:i + 3]
        counts[rgb] = counts.get(rgb, 0) + 1
background, background_pixels = max(counts.items(), key=lambda kv: kv[1])
total = width * height
ink = total - background_pixels
if len(counts) < 8:
    failures.append(f"the screenshot has only {len(counts)} distinct colours: a blank page?")
if ink < total // 100:
    failures.append(f"only {ink} of {total} pixels differ from the background: a blank page?")
for hex_colour in colours:
    rgb = bytes.fromhex(hex_colour)
    if counts.get(rgb, 0) < 20:
        failures.append(f"series colour #{hex_colour} covers {counts.get(rgb, 0)} pixels: "
                        "a plot's line is not visible")

print(f"chromium.sh: {len(svgs)} svg plots in the DOM; screenshot {width}x{height}, "
      f"{len(counts)} distinct colours, {ink} non-background pixels; series colours "
      + ", ".join(f"#{c}: {counts.get(bytes.fromhex(c), 0)} px" for c in colours))
if failures:
    for f in failures:
        print(f"chromium.sh: FAIL: {f}", file=sys.stderr)
    sys.exit(1)
print("chromium.sh: ok")
EOF
