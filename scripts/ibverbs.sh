#!/usr/bin/env bash
# Fetches rdma-core's libibverbs (headers and libibverbs.so.1) and the libnl libraries it links
# against, as Debian packages, into .deps/ibverbs unless they are already there, and prints that
# folder. No RDMA NIC is needed: weft-net's `ib` tests compile a C probe against verbs.h to
# check the binding's struct layouts and constants, and load libibverbs.so.1 to check that the
# binding opens it and reports the absence of devices.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.deps/ibverbs"
lib="$dest/usr/lib/x86_64-linux-gnu"
if [ ! -f "$dest/usr/include/infiniband/verbs.h" ] || [ ! -f "$lib/libibverbs.so.1" ] \
  || [ ! -f "$dest/lib/x86_64-linux-gnu/libnl-3.so.200" ] || [ ! -f "$lib/libnl-route-3.so.200" ]; then
  packages=(libibverbs-dev libibverbs1 libnl-3-200 libnl-route-3-200)
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  if ! (cd "$work" && apt-get download -q "${packages[@]}" >&2 2>/dev/null); then
    apt-get update -qq >&2
    (cd "$work" && apt-get download -q "${packages[@]}" >&2)
  fi
  mkdir -p "$dest"
  for deb in "$work"/*.deb; do
    dpkg-deb -x "$deb" "$dest"
  done
fi
echo "$dest"
