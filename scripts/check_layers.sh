#!/usr/bin/env bash
# Fails listing each circle of includes between folders or files (scripts/check_layers.py); else
# prints the folders in layers, each above what it includes.
#   scripts/check_layers.sh [ROOT]
set -euo pipefail
exec python3 "$(dirname "$0")/check_layers.py" "$@"
