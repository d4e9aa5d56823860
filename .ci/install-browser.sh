#!/usr/bin/env bash
# Install headless Chromium + chromedriver (Debian packages) for the attnkit
# browser tests (tests/inspect/test_viewer_browser.py, tests/report/test_browser.py),
# and the fonts the pages need: DejaVu for Latin text, Noto CJK so the Chinese
# report (attnkit report --lang zh) renders its characters instead of empty boxes.
#
# Idempotent and quiet: exits at once when both binaries and the CJK fonts are already present,
# and prints apt's output only when something fails.
# Run as root on a fresh Debian machine:  bash .ci/install-browser.sh
set -euo pipefail

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && dpkg -s fonts-noto-cjk >/dev/null 2>&1; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "install-browser.sh: needs root on Debian (apt-get install; uid $(id -u)); run: sudo bash .ci/install-browser.sh" >&2
    exit 1
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
        chromium chromium-driver fonts-dejavu-core fonts-noto-cjk; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "install-browser.sh: apt-get failed (log above)" >&2
    exit 1
fi

for bin in /usr/bin/chromium /usr/bin/chromedriver; do
    if [ ! -x "$bin" ]; then
        echo "install-browser.sh: $bin missing after apt-get install" >&2
        exit 1
    fi
done

if ! fc-list :lang=zh family | grep -q .; then
    echo "install-browser.sh: no font covering Chinese after installing fonts-noto-cjk (fc-list :lang=zh is empty)" >&2
    exit 1
fi
