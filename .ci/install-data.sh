#!/usr/bin/env bash
# Install the Debian-only data sets the experiments read (Fashion-MNIST IDX files, the KJV and
# Reina-Valera 1909 Bibles for pysword), and the Noto CJK font the Chinese report's figures are
# drawn with (attnkit report --lang zh; matplotlib finds it under /usr/share/fonts). Idempotent;
# quiet unless apt fails. Without root or apt it says so and exits 0: every experiment then uses
# its named fallback with a visible notice, and the Chinese page shows English figures with a note.
set -uo pipefail
have() { [ -d /usr/share/datasets/fashion-mnist ] && [ -d /usr/share/sword/modules ] && dpkg -s fonts-noto-cjk >/dev/null 2>&1; }
have && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "install-data.sh: not root on Debian; Fashion-MNIST, the Bibles and the CJK font stay missing (fallbacks are used)" >&2
    exit 0
fi
log="$(mktemp)"; trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
        dataset-fashion-mnist sword-text-kjv sword-text-sparv fonts-noto-cjk; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "install-data.sh: apt-get failed (log above); fallbacks will be used" >&2
fi
exit 0
