# Sourced by the tests that need emulated hosts: exits 77 (skipped) unless this machine lets us
# create network namespaces as root.
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null 2>&1; then
  echo "skipped: needs root and iproute2"; exit 77
fi
if ! ip netns add sluice-probe-$$ 2>/dev/null; then
  echo "skipped: cannot create network namespaces here"; exit 77
fi
ip netns del sluice-probe-$$
