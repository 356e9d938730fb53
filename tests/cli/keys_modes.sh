#!/bin/sh
# `sluice keys DIR`: every key file and the members file have mode 0600, the folder 0700; a role
# refuses a secret key file that others may read, naming the path.
set -eu
sluice=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$sluice" keys "$work/keys" --relays 2 --rollouts 3 >"$work/out"
n=0
for f in "$work"/keys/*.key "$work/keys/members.json"; do
  mode=$(stat -c %a "$f")
  [ "$mode" = 600 ] || { echo "$f has mode $mode, not 600"; exit 1; }
  n=$((n + 1))
done
# weightstore, rollout-manager, actor, operator, 2 relays, 3 rollouts, and members.json
[ "$n" -eq 10 ] || { echo "expected 10 files, found $n"; ls -l "$work/keys"; exit 1; }
[ "$(stat -c %a "$work/keys")" = 700 ] || { echo "the keys folder is not 0700"; exit 1; }
grep -q '"role": "relay"' "$work/keys/members.json"
if grep -q secret "$work/keys/members.json"; then echo "members.json holds a secret"; exit 1; fi
# The actor signs versions: its sign_key is in members.json (the only one), its secret half only
# in its own key file.
[ "$(grep -c '"sign_key"' "$work/keys/members.json")" -eq 1 ] || {
  echo "members.json should list exactly one sign_key (the actor's)"; exit 1; }
grep -q '"sign_secret_key"' "$work/keys/actor.key" || { echo "actor.key has no signing key"; exit 1; }
if grep -q sign_ "$work/keys/relay-0.key"; then echo "a relay holds a signing key"; exit 1; fi
echo "ok: $n files, mode 600"
chmod 644 "$work/keys/weightstore.key"
if out=$("$sluice" --log-level warn weightstore --set store.listen='tcp://127.0.0.1:*' \
    --set store.security.key_file="$work/keys/weightstore.key" \
    --set store.security.members_file="$work/keys/members.json" 2>&1); then
  echo "a store started with a world-readable key"; exit 1
fi
echo "$out" | grep -q "$work/keys/weightstore.key.*mode 0644" || { echo "$out"; exit 1; }
echo "ok: world-readable key refused: $out"
