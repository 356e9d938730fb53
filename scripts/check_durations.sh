#!/usr/bin/env bash
# Fails listing each bare duration literal outside tests (the rules: scripts/check_durations.py).
#   scripts/check_durations.sh [ROOT]
set -euo pipefail
exec python3 "$(dirname "$0")/check_durations.py" "$@"
