#!/bin/sh
# `sluice k8s JOB.json --out DIR`: the manifests a user would apply, checked for what kubectl and
# the roles need (no cluster here): one file per role group with the expected kinds and names; the
# store's and the manager's Services are headless and select their pods; every pod's command
# names a role file that the ConfigMap holds (the indexed ones evaluated for every index, as the
# pod's shell would), with its own id, key and the Services' endpoints; each pod mounts only its
# role's keys, 0400; completions and parallelism follow the job; an agent endpoint's token is in
# a Secret only the rollouts mount. Bad input is refused by name.
# usage: k8s.sh SLUICE
set -eu
sluice=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat >"$work/job.json" <<'JSON'
{
  "name": "GRPO_small",
  "rollouts": 3,
  "relays": 2,
  "manager": {"prompts": 8},
  "actor_command": {"argv": ["python3", "train.py", "--lr", "1e-5"]}
}
JSON
"$sluice" k8s "$work/job.json" --out "$work/k8s" --image registry.example/sluice:1 \
  --namespace rl --store-port 7000 --manager-port 7001 >"$work/out" ||
  fail "sluice k8s failed: $(cat "$work/out")"
grep -q "kubectl apply -f $work/k8s/" "$work/out" || fail "no apply hint: $(cat "$work/out")"

python3 - "$work/k8s" <<'PY'
import json, os, subprocess, sys

d = sys.argv[1]
def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)

files = sorted(f for f in os.listdir(d) if f.endswith(".json"))
want = ["00-config.json", "10-weightstore.json", "20-manager.json", "30-relay.json",
        "40-rollout.json", "50-actor.json"]
if files != want:
    fail(f"manifest files {files}, expected {want}")
docs = {}
for f in files:
    doc = json.load(open(os.path.join(d, f)))
    if doc.get("kind") != "List" or doc.get("apiVersion") != "v1":
        fail(f"{f} is not a v1 List")
    docs[f] = doc["items"]
kinds = {f: [(i["apiVersion"], i["kind"], i["metadata"]["name"]) for i in items]
         for f, items in docs.items()}
expect = {
    "00-config.json": [("v1", "ConfigMap", "grpo-small-config"), ("v1", "Secret", "grpo-small-keys")],
    "10-weightstore.json": [("v1", "Service", "grpo-small-weightstore"),
                            ("apps/v1", "StatefulSet", "grpo-small-weightstore")],
    "20-manager.json": [("v1", "Service", "grpo-small-manager"),
                        ("apps/v1", "StatefulSet", "grpo-small-manager")],
    "30-relay.json": [("v1", "Service", "grpo-small-relay"),
                      ("apps/v1", "StatefulSet", "grpo-small-relay")],
    "40-rollout.json": [("batch/v1", "Job", "grpo-small-rollout")],
    "50-actor.json": [("batch/v1", "Job", "grpo-small-actor")],
}
if kinds != expect:
    fail(f"kinds and names {kinds}")
for items in docs.values():
    for i in items:
        if i["metadata"].get("namespace") != "rl":
            fail(f"{i['metadata']['name']} is not in namespace rl")

config = docs["00-config.json"][0]["data"]
secret = docs["00-config.json"][1]["stringData"]
roles = {name: json.loads(text) for name, text in config.items()}
want_files = {"weightstore.json", "rollout-manager.json", "relay-0.json", "relay-1.json",
              "rollout-0.json", "rollout-1.json", "rollout-2.json", "actor.json"}
if set(roles) != want_files:
    fail(f"ConfigMap files {sorted(roles)}")
ids = ["weightstore", "rollout-manager", "actor", "operator", "relay-0", "relay-1",
       "rollout-0", "rollout-1", "rollout-2"]
if set(secret) != {i + ".key" for i in ids} | {"members.json"}:
    fail(f"Secret keys {sorted(secret)}")
members = json.loads(secret["members.json"])
if "secret" in secret["members.json"]:
    fail("members.json holds a secret")

store_ep = "tcp://grpo-small-weightstore.rl.svc:7000"
manager_ep = "tcp://grpo-small-manager.rl.svc:7001"
if roles["weightstore.json"]["store"]["listen"] != "tcp://0.0.0.0:7000":
    fail("the store does not listen on every interface at 7000")
if roles["rollout-manager.json"]["manager"]["listen"] != "tcp://0.0.0.0:7001":
    fail("the manager does not listen at 7001")
if roles["actor.json"]["actor"]["store"] != store_ep or roles["actor.json"]["actor"]["manager"] != manager_ep:
    fail("the actor does not reach the Services")
if roles["actor.json"]["options"] != {}:
    fail("the actor command role has no options section")

# Headless Services select the pods of their StatefulSets.
for f in ["10-weightstore.json", "20-manager.json", "30-relay.json"]:
    svc, sts = docs[f]
    if svc["spec"].get("clusterIP") != "None":
        fail(f"{f}: the Service is not headless")
    if sts["spec"]["serviceName"] != svc["metadata"]["name"]:
        fail(f"{f}: serviceName {sts['spec']['serviceName']}")
    labels = sts["spec"]["template"]["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in svc["spec"]["selector"].items()):
        fail(f"{f}: the Service selects {svc['spec']['selector']}, pods have {labels}")
    if sts["spec"]["selector"]["matchLabels"] != labels:
        fail(f"{f}: the StatefulSet's selector misses its pods")
if docs["10-weightstore.json"][0]["spec"]["ports"][0]["port"] != 7000:
    fail("the store Service's port")
if docs["10-weightstore.json"][1]["spec"]["replicas"] != 1:
    fail("not one store")
if docs["30-relay.json"][1]["spec"]["replicas"] != 2:
    fail("not two relays")
for f, n in [("40-rollout.json", 3), ("50-actor.json", 1)]:
    spec = docs[f][0]["spec"]
    if (spec.get("completionMode"), spec.get("completions"), spec.get("parallelism")) != ("Indexed", n, n):
        fail(f"{f}: completionMode/completions/parallelism {spec}")

def pod(f, k=-1):
    return docs[f][k]["spec"]["template"]["spec"]

def role_file_of(command, env):
    """The role file a pod's command names, evaluated as the pod's shell would."""
    if command[:2] == ["sh", "-c"]:
        echo = command[2].replace("exec", "printf '%s\\n'", 1)
        words = subprocess.run(["sh", "-c", echo], env=env, capture_output=True, text=True,
                               check=True).stdout.split("\n")[:-1]
    else:
        words = command
    if words[-2] != "--config":
        fail(f"command {command} does not end in --config FILE")
    path = words[-1]
    if not path.startswith("/sluice/config/"):
        fail(f"{path} is not in the ConfigMap's mount")
    return words, os.path.basename(path)

checks = [("10-weightstore.json", "weightstore", [{}]),
          ("20-manager.json", "rollout-manager", [{}]),
          ("30-relay.json", "relay", [{"HOSTNAME": f"grpo-small-relay-{i}"} for i in range(2)]),
          ("40-rollout.json", "rollout", [{"JOB_COMPLETION_INDEX": str(i)} for i in range(3)]),
          ("50-actor.json", "actor", [{}])]
for f, role, envs in checks:
    spec = pod(f)
    (c,) = spec["containers"]
    if c["image"] != "registry.example/sluice:1":
        fail(f"{f}: image {c['image']}")
    vols = {v["name"]: v for v in spec["volumes"]}
    if vols["config"]["configMap"]["name"] != "grpo-small-config":
        fail(f"{f}: config volume {vols['config']}")
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    if mounts != {"config": "/sluice/config", "keys": "/sluice/keys", "run": "/sluice/run"}:
        fail(f"{f}: mounts {mounts}")
    keys = vols["keys"]["secret"]
    if keys["secretName"] != "grpo-small-keys" or keys["defaultMode"] != 0o400:
        fail(f"{f}: keys volume {keys}")
    mounted = {i["key"] for i in keys["items"]}
    for env in envs:
        words, file = role_file_of(c["command"], env)
        doc = roles[file]
        section = {"weightstore": "store", "rollout-manager": "manager"}.get(role, role)
        cfg = doc[section]
        own = {"relay": cfg.get("relay_id"), "rollout": cfg.get("rollout_id")}.get(role, role)
        if own != file[:-5]:
            fail(f"{file}: id {own}")
        key = cfg["security"]["key_file"]
        if key != f"/sluice/keys/{own}.key" or os.path.basename(key) not in mounted:
            fail(f"{f}: {file} wants {key}; the pod mounts {sorted(mounted)}")
        if "members.json" not in mounted:
            fail(f"{f}: no members.json")
        if role in ("relay", "rollout") and cfg["store"] != store_ep:
            fail(f"{file}: store {cfg['store']}")
        if role == "rollout" and cfg["manager"] != manager_ep:
            fail(f"{file}: manager {cfg['manager']}")
        if role == "actor":
            if words != ["python3", "train.py", "--lr", "1e-5", "--config", "/sluice/config/actor.json"]:
                fail(f"actor command {words}")
        elif words[:2] != ["sluice", role]:
            fail(f"{f}: command {words}")
    # Only this role's keys: a rollout pod cannot act as the actor.
    others = {k for k in mounted if k != "members.json" and not k.startswith(role)}
    if others:
        fail(f"{f}: mounts keys of others: {sorted(others)}")
print("ok: 6 manifest files, kinds, headless Services, commands, role files, keys per pod")
PY

# A plain job listens unauthenticated on every interface: refused unless that is said, with an
# error that names the flag; nothing is written.
if out=$("$sluice" k8s "$work/job.json" --set auth=plain --out "$work/plain" 2>&1); then
  fail "a plain job on 0.0.0.0 was written without --allow-plain-public"
fi
echo "$out" | grep -q "0.0.0.0.*--allow-plain-public" || fail "unclear: $out"
[ ! -e "$work/plain" ] || fail "a refused plain job wrote $work/plain"
echo "ok: plain job refused without --allow-plain-public"
# Plain jobs get no Secret and no keys volume.
"$sluice" k8s "$work/job.json" --set auth=plain --allow-plain-public --out "$work/plain" \
  >/dev/null 2>&1 || fail "a plain job"
grep -q '"Secret"' "$work/plain/00-config.json" && fail "a plain job has a Secret"
grep -q '"secretName"' "$work/plain/50-actor.json" && fail "a plain job mounts keys"
echo "ok: plain job without keys"

# The agent endpoint's token: in a Secret mounted in the rollouts' pods only (0400), and in
# DIR/agent_token (0600) for the agent; never in the ConfigMap, whose role files name its path.
"$sluice" k8s "$work/job.json" --set rollout.engine=model --set rollout.agent_listen=0.0.0.0:8000 \
  --out "$work/agent" >/dev/null 2>&1 || fail "an agent job"
python3 - "$work/agent" <<'PY'
import json, os, sys

d = sys.argv[1]
def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)

token = open(os.path.join(d, "agent_token")).read().strip()
for f in ["agent_token", "00-config.json"]:
    if os.stat(os.path.join(d, f)).st_mode & 0o077:
        fail(f"{f} may be read by others")
items = json.load(open(os.path.join(d, "00-config.json")))["items"]
secrets = {i["metadata"]["name"]: i for i in items if i["kind"] == "Secret"}
if secrets.get("grpo-small-agent", {}).get("stringData", {}).get("agent_token", "").strip() != token:
    fail(f"no Secret grpo-small-agent holding the token: {sorted(secrets)}")
config = next(i for i in items if i["kind"] == "ConfigMap")["data"]
if any(token in text for text in config.values()):
    fail("the ConfigMap holds the token")
rollout = json.loads(config["rollout-0.json"])["rollout"]
if rollout["agent_token_file"] != "/sluice/agent/agent_token":
    fail(f"the rollout reads its token from {rollout['agent_token_file']}")
for f in sorted(os.listdir(d)):
    if f.endswith(".json") and f != "00-config.json" and token in open(os.path.join(d, f)).read():
        fail(f"{f} holds the token")
for f in ["10-weightstore.json", "20-manager.json", "30-relay.json", "40-rollout.json",
          "50-actor.json"]:
    spec = json.load(open(os.path.join(d, f)))["items"][-1]["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    if f == "40-rollout.json":
        secret = vols.get("agent", {}).get("secret", {})
        if secret.get("secretName") != "grpo-small-agent" or secret.get("defaultMode") != 0o400:
            fail(f"the rollouts' agent volume {secret}")
        if mounts.get("agent") != "/sluice/agent":
            fail(f"the rollouts mount {mounts}")
    elif "agent" in vols:
        fail(f"{f} mounts the agent token")
print("ok: the agent token in its Secret and its file only")
PY

# Bad input: a clear error, nothing written.
if out=$("$sluice" k8s "$work/job.json" --set 'name=---' --out "$work/bad" 2>&1); then
  fail "a job without a usable name was accepted"
fi
echo "$out" | grep -q "does not make a Kubernetes name" || fail "unclear: $out"
[ ! -e "$work/bad" ] || fail "files written for a refused job"
if out=$("$sluice" k8s "$work/job.json" 2>&1); then fail "no --out accepted"; fi
echo "$out" | grep -q -- "--out is required" || fail "unclear: $out"
echo "ok: refused: $(echo "$out" | head -n 1)"
