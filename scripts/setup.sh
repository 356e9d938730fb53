#!/usr/bin/env bash
# Installs every Debian package sluice needs. Idempotent: when everything is already there it
# prints nothing and touches nothing. Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libucx-dev ucx-utils            # transfer engine; ucx_perftest for the side-by-side bench
  libzmq3-dev cppzmq-dev          # control plane
  libsodium-dev                   # Ed25519 signatures of weight versions
  libboost-dev                    # Boost.Asio (header-only in 1.74)
  nlohmann-json3-dev              # configuration and message headers
  doctest-dev                     # tests
  libspdlog-dev libfmt-dev        # logging
  libcli11-dev                    # command line
  libxxhash-dev                   # chunk checksums
  libssl-dev                      # chunk digests (SHA-256) under the version signature
  libzstd-dev                     # delta versions (format/delta.hpp)
  libsqlite3-dev                  # the rollout manager's durable state
  libopenblas-dev                 # reference model matrix products
  iproute2                        # emulated hosts: ip netns, veth, tc
  slurm-wlm munge                 # a one-host Slurm for sluice slurm's test (scripts/slurm_local.sh)
  clang libclang-rt-14-dev        # libFuzzer targets (scripts/fuzz.sh)
  python3-dev pybind11-dev        # the Python package (python/)
  python3-numpy python3-torch     # its tensors; the PyTorch example (examples/torch_grpo)
  python3-venv python3-pip python3-setuptools python3-wheel  # pip install ./python, offline
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install packages" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
