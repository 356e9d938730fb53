#!/usr/bin/env bash
# Unpacks the bundle that scripts/gpu_bundle.sh made into a prefix, and writes PREFIX/env.sh,
# which points CMake, pkg-config and the dynamic loader at it. A build that sources env.sh needs
# nothing of the Debian libraries on the machine itself.
#   scripts/gpu_prefix.sh BUNDLE PREFIX
# Every .deb is checked against BUNDLE/MANIFEST (SHA-256) before anything is unpacked. Then:
#   - UCX's CMake file names /usr as its prefix: rewritten to PREFIX/usr;
#   - libzmq.pc's Requires.private is dropped: it names the -dev packages of what libzmq links,
#     which a dynamic link does not need;
#   - PREFIX/ldpath holds links to the bundle's shared libraries that the machine's loader cannot
#     find itself (ldconfig -p), and to UCX's always; env.sh puts only that folder on
#     LD_LIBRARY_PATH, so another library the machine has stays the machine's;
#   - pkg-config: the machine's if it has one, else the bundle's pkgconf.
# Exit status: 0 done; 1 a file is missing or does not match the manifest, or unpacking failed;
# 2 a bad argument.
set -euo pipefail

if [ $# -ne 2 ] || [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,15p' "$0"
  [ $# -eq 2 ] && exit 0 || exit 2
fi
bundle=$1
prefix=$2
manifest=$bundle/MANIFEST
[ -f "$manifest" ] || { echo "gpu_prefix.sh: no $manifest (make the bundle with scripts/gpu_bundle.sh)" >&2; exit 1; }

echo "gpu_prefix: checking $(grep -vc '^#' "$manifest") packages against $manifest"
while read -r name version sum file; do
  case "$name" in '#'*|'') continue ;; esac
  deb=$bundle/debs/$file
  [ -f "$deb" ] || { echo "gpu_prefix.sh: $name $version: $deb is missing" >&2; exit 1; }
  got=$(sha256sum "$deb" | cut -d' ' -f1)
  [ "$got" = "$sum" ] || { echo "gpu_prefix.sh: $deb does not match the manifest's SHA-256" >&2; exit 1; }
done <"$manifest"

rm -rf "$prefix"
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
# A .deb is an ar archive whose data.tar.* holds the files. dpkg-deb where there is one; else ar
# and tar (binutils comes with g++).
unpack() {
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$prefix"
    return
  fi
  local member
  member=$(ar t "$1" | grep '^data\.tar')
  case "$member" in
    *.xz) ar p "$1" "$member" | tar -xJ -C "$prefix" ;;
    *.zst) ar p "$1" "$member" | zstd -dc | tar -x -C "$prefix" ;;
    *.gz) ar p "$1" "$member" | tar -xz -C "$prefix" ;;
    *) echo "gpu_prefix.sh: $1: no data member this script can unpack ($member)" >&2; return 1 ;;
  esac
}
while read -r name _ _ file; do
  case "$name" in '#'*|'') continue ;; esac
  unpack "$bundle/debs/$file"
done <"$manifest"

arch_dir=lib/x86_64-linux-gnu
# UCX's exported targets carry an absolute prefix.
for f in "$prefix"/usr/$arch_dir/cmake/ucx/*.cmake; do
  sed -i "s|set(prefix \"/usr\")|set(prefix \"$prefix/usr\")|" "$f"
done
sed -i '/^Requires.private:/d' "$prefix/usr/$arch_dir/pkgconfig/libzmq.pc"

# Libraries the machine lacks, by soname. Debian installs some under /lib as well as /usr/lib.
mkdir -p "$prefix/ldpath"
known=$(ldconfig -p 2>/dev/null || true)  # read once: grep -q on a pipe would cut it short
have_lib() { grep -q "^[[:space:]]*$1 " <<<"$known"; }
# OpenBLAS lives in a folder of its own (Debian's alternatives link it into place on install).
for dir in "$prefix/usr/$arch_dir" "$prefix/$arch_dir" "$prefix/usr/$arch_dir/openblas-pthread"; do
  [ -d "$dir" ] || continue
  for lib in "$dir"/*.so.*; do
    [ -e "$lib" ] || continue
    soname=$(objdump -p "$lib" 2>/dev/null | awk '/SONAME/ {print $2}')
    [ -n "$soname" ] && [ "$(basename "$lib")" = "$soname" ] || continue
    # UCX's libraries go together, always the bundle's: a machine may have another UCX, whose
    # libuct the bundle's libucp would otherwise load, and they share internal symbols.
    case "$soname" in
      libucp.so.*|libuct.so.*|libucs.so.*|libucm.so.*) ln -sf "$lib" "$prefix/ldpath/$soname"; continue ;;
    esac
    have_lib "$soname" || ln -sf "$lib" "$prefix/ldpath/$soname"
  done
done

# pkg-config: the bundle's pkgconf runs through a wrapper that finds its own library.
pkg_config=$(command -v pkg-config || true)
if [ -z "$pkg_config" ]; then
  pkg_config=$prefix/bin/pkg-config
  mkdir -p "$prefix/bin"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
    "$prefix/usr/$arch_dir" "$prefix/usr/bin/pkgconf" >"$pkg_config"
  chmod +x "$pkg_config"
fi

cat >"$prefix/env.sh" <<EOF
# Written by scripts/gpu_prefix.sh: source it before configuring, building or running.
export CMAKE_PREFIX_PATH="$prefix/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
export PKG_CONFIG="$pkg_config"
export PKG_CONFIG_LIBDIR="$prefix/usr/$arch_dir/pkgconfig:$prefix/usr/$arch_dir/openblas-pthread/pkgconfig:$prefix/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$prefix"
export LD_LIBRARY_PATH="$prefix/ldpath\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$prefix/usr/$arch_dir/ucx"
EOF
echo "gpu_prefix: unpacked into $prefix; $(ls "$prefix/ldpath" | wc -l) libraries the machine lacks are on LD_LIBRARY_PATH; source $prefix/env.sh"
