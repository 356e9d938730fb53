#!/usr/bin/env bash
# Makes the bundle that lets scripts/gpu_check.sh build sluice on a bare GPU machine: one that
# has CUDA, CMake, g++ and PyTorch but none of the Debian libraries sluice needs, and can fetch
# nothing. Run it here, on a Debian machine that can reach its package mirror; send the bundle
# along with the working tree; gpu_check.sh unpacks it into a prefix there and builds against it.
#   scripts/gpu_bundle.sh [DIR]        (default DIR: gpu-bundle, which git ignores)
# What goes in: the -dev packages of the libraries the build links (UCX, ZeroMQ, libsodium,
# Boost's headers, nlohmann-json, doctest, spdlog and fmt, CLI11, xxhash, zstd, SQLite,
# OpenBLAS), the shared libraries those need that a CUDA image may lack, and pkgconf. Not the
# compiler, CMake, Python or CUDA: the GPU machine brings those. DIR/MANIFEST lists every package
# with its version and SHA-256; gpu_check.sh checks the files against it before unpacking.
# Exit status: 0 made; 1 a package could not be downloaded; 2 a bad argument.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
  -*) echo "gpu_bundle.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac
dir=${1:-gpu-bundle}

packages=(
  # UCX and the libraries its transports load
  libucx-dev libucx0 libnuma1 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200
  ibverbs-providers
  # ZeroMQ and what libzmq5 links (gpu_check.sh drops libzmq.pc's Requires.private: the build
  # links dynamically, so the -dev packages of these are not needed)
  libzmq3-dev libzmq5 cppzmq-dev libnorm1 libpgm-5.3-0 libbsd0 libmd0 libgssapi-krb5-2
  libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1
  libsodium-dev libsodium23
  libboost1.74-dev libboost-dev nlohmann-json3-dev doctest-dev libcli11-dev
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libxxhash-dev libxxhash0 libzstd-dev libzstd1 libsqlite3-dev libsqlite3-0
  libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5
  libquadmath0
  pkgconf pkgconf-bin libpkgconf3
)

command -v apt-get >/dev/null || { echo "gpu_bundle.sh: needs apt-get (a Debian machine)" >&2; exit 1; }
mkdir -p "$dir/debs"
rm -f "$dir"/debs/*.deb "$dir/MANIFEST"
echo "gpu_bundle: downloading ${#packages[@]} packages into $dir/debs"
# apt's download sandbox user cannot write into a root-owned tree; download as the caller.
(cd "$dir/debs" && apt-get download -o APT::Sandbox::User="$(id -un)" -qq "${packages[@]}") || {
  echo "gpu_bundle.sh: apt-get download failed (run apt-get update first?)" >&2
  exit 1
}

{
  echo "# sluice GPU bundle: Debian $(. /etc/os-release && echo "$VERSION_ID") $(dpkg --print-architecture), made $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# package version sha256 file"
  for f in "$dir"/debs/*.deb; do
    name=$(dpkg-deb -f "$f" Package)
    version=$(dpkg-deb -f "$f" Version)
    echo "$name $version $(sha256sum "$f" | cut -d' ' -f1) $(basename "$f")"
  done
} >"$dir/MANIFEST"

count=$(grep -vc '^#' "$dir/MANIFEST")
if [ "$count" -ne ${#packages[@]} ]; then
  echo "gpu_bundle.sh: downloaded $count packages of ${#packages[@]}" >&2
  exit 1
fi
echo "gpu_bundle: $count packages, $(du -sh "$dir/debs" | cut -f1), listed in $dir/MANIFEST"
