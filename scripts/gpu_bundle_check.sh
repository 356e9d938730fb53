#!/usr/bin/env bash
# Shows that the GPU bundle alone is enough to build sluice: makes a bare Debian root (debootstrap:
# a minimal system with only g++, make, CMake and python3, none of sluice's libraries), copies
# the working tree and the bundle into it, and runs `scripts/gpu_check.sh --bundle gpu-bundle
# --no-cuda` there, chrooted: it unpacks the bundle into a prefix, configures, builds and runs
# the no-GPU paths of the GPU tests. Run as root, on a Debian machine that can reach its mirror.
#   scripts/gpu_bundle_check.sh [ROOT]    (default ROOT: /var/tmp/sluice-bare; kept for reuse)
# Exit status: 0 (or 77: built, no GPU there, as expected) passed; anything else failed.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
  -*) echo "gpu_bundle_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac
root=${1:-/var/tmp/sluice-bare}
[ "$(id -u)" -eq 0 ] || { echo "gpu_bundle_check.sh: needs root (debootstrap, chroot)" >&2; exit 1; }
[ -f gpu-bundle/MANIFEST ] || bash scripts/gpu_bundle.sh

if [ ! -x "$root/usr/bin/cmake" ]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
  echo "gpu_bundle_check: debootstrap into $root (a few minutes)"
  debootstrap --variant=minbase --include=build-essential,cmake,python3 \
    "$(. /etc/os-release && echo "$VERSION_CODENAME")" "$root" >"$root.debootstrap.log" 2>&1 || {
    tail -20 "$root.debootstrap.log"
    exit 1
  }
fi
for lib in libucx libzmq libsodium libboost; do
  if ls "$root"/usr/include/"$lib"* "$root"/usr/lib/x86_64-linux-gnu/"$lib"*.so* >/dev/null 2>&1; then
    echo "gpu_bundle_check: $root is not bare: it has $lib" >&2
    exit 1
  fi
done

tree=$root/sluice
rm -rf "$tree"
mkdir -p "$tree"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$tree"
cp -r gpu-bundle "$tree/"
rm -rf "$tree/gpu-bundle/prefix"

mounted=()
cleanup() { for m in "${mounted[@]}"; do umount "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
for m in proc sys dev; do
  mount --bind "/$m" "$root/$m"
  mounted=("$root/$m" "${mounted[@]}")
done
rc=0
chroot "$root" /bin/bash -c 'cd /sluice && bash scripts/gpu_check.sh --bundle gpu-bundle --no-cuda' || rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 77 ]; then
  echo "gpu_bundle_check: built and ran against the bundle alone (exit $rc)"
  exit 0
fi
echo "gpu_bundle_check: FAILED (exit $rc)"
exit 1
