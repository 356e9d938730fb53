#!/usr/bin/env bash
# The built-in agentic task with and without its tool: examples/grpo_tool.json (sums of two-digit
# numbers; the model may call a calculator) run per seed as it is, and with task.tool=none (the
# same sums, the same warm start on running sums only, no calls). Prints held-out accuracy after
# the warm start and at the end, how often the model called the tool, and accuracy by number of
# terms.
#
#   scripts/tool_study.sh [--seeds "1 2 3"] [--set key=value ...]   overrides go to every run
# Run folders: runs/tool-<calc|none>-s<seed>-<time>.
set -euo pipefail
cd "$(dirname "$0")/.."

seeds="1 2 3"
if [[ "${1:-}" == "--seeds" ]]; then
  seeds="$2"
  shift 2
fi

bash scripts/setup.sh
cmake -S . -B build -DSLUICE_BUILD_TESTS=ON >/dev/null
cmake --build build --target sluice -j "$(nproc 2>/dev/null || echo 2)" >/dev/null

stamp=$(date +%Y%m%d-%H%M%S)
dirs=()
for seed in $seeds; do
  for tool in calc none; do
    dir="runs/tool-${tool}-s${seed}-${stamp}"
    sets=(--set "actor.learner.gpt.init_seed=${seed}")
    for section in manager.task rollout.task actor.learner.task; do
      sets+=(--set "${section}.seed=${seed}" --set "${section}.tool=${tool}")
    done
    echo "== seed ${seed}, tool ${tool} =="
    ./build/sluice run examples/grpo_tool.json "${sets[@]}" --out "${dir}" "$@" | grep -E "^(job |held-out accuracy \(prompts)"
    dirs+=("${dir}")
  done
done

python3 - "${dirs[@]}" <<'PY'
import json, os, sys

def evals(d):
    rows = []
    with open(os.path.join(d, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if "accuracy" in j:
                rows.append(j)
    return rows[0], rows[-1]

print("\n| Seed | Tool | Held-out after warm start | At the end | Tool calls at the end | End, by terms (2/3/4/5/6) |")
print("| --- | --- | --- | --- | --- | --- |")
for d in sys.argv[1:]:
    name = os.path.basename(d).split("-")
    first, last = evals(d)
    by = "/".join(f"{100 * c / p:.0f}" if p else "-" for _, p, c in last["accuracy_by_terms"])
    print(f"| {name[2][1:]} | {name[1]} | {100 * first['accuracy']:.1f}% | {100 * last['accuracy']:.1f}% "
          f"| {100 * last.get('eval_tool_use', 0):.0f}% | {by} |")
PY
