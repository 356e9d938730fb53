#!/usr/bin/env bash
# Installs what is missing, builds, and runs the default job: a real GRPO run on the built-in
# reference model (a small GPT learning multi-term addition with running sums), every role a
# real process on loopback: the weight store, a relay, the rollout manager, two rollouts that
# generate with a KV cache, and the actor (a supervised warm start, then GRPO, publishing every
# version through the weight store). It prints live progress and a summary; the run folder has
# the metrics, the final weights (safetensors) and an HTML report.
#
#   scripts/demo.sh [--set key=value ...]     e.g. --set mode=sync
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
# The flags scripts/test.sh uses too, so that the tests later reuse this build.
bash scripts/configure.sh build none
cmake --build build --target sluice -j "$(nproc 2>/dev/null || echo 2)" >/dev/null

./build/sluice version
echo
./build/sluice run examples/grpo_arith.json "$@"
