#!/usr/bin/env bash
# Build the Meshgate OCI image without a daemon and without a container registry:
#   1. a Debian bookworm base from Debian's own archive (debootstrap --variant=minbase),
#      imported as localhost/debian-base:bookworm (kept: later builds skip this step);
#   2. `buildah bud --isolation chroot --layers` of deploy/container/Containerfile,
#      tagged meshgate:<version> (gateway.__version__) and meshgate:latest.
# Needs root, and: apt-get install -y buildah podman debootstrap
#
# Options:
#   --context DIR     the source tree to build from (default: this repository)
#   --no-base-cache   debootstrap the base again even if localhost/debian-base:bookworm exists
#   --no-cache        build every layer again (apt, pip), not only those whose inputs changed
#   --mirror URL      the Debian archive (default http://deb.debian.org/debian)
#   --tag NAME:TAG    tag the image NAME:TAG instead of meshgate:<version>
# Prints the image's tag as its last line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CONTEXT="$ROOT"
BASE=localhost/debian-base:bookworm
MIRROR=http://deb.debian.org/debian
BASE_CACHE=1
LAYER_CACHE=(--layers)
TAG=""

while [ $# -gt 0 ]; do
    case "$1" in
        --context) CONTEXT="$(cd "$2" && pwd)"; shift 2 ;;
        --no-base-cache) BASE_CACHE=0; shift ;;
        --no-cache) LAYER_CACHE=(--layers --no-cache); shift ;;
        --mirror) MIRROR="$2"; shift 2 ;;
        --tag) TAG="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
        *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [ "$(id -u)" != 0 ]; then
    echo "build.sh: needs root (debootstrap, and buildah's chroot isolation)" >&2
    exit 1
fi
missing=()
for tool in buildah podman debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "build.sh: missing ${missing[*]}; install them with: apt-get install -y buildah podman debootstrap" >&2
    exit 1
fi

VERSION="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$CONTEXT/gateway/__init__.py")"
if [ -z "$VERSION" ]; then
    echo "build.sh: no __version__ in $CONTEXT/gateway/__init__.py" >&2
    exit 1
fi
TAG="${TAG:-meshgate:$VERSION}"

now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

if [ "$BASE_CACHE" = 1 ] && podman image exists "$BASE"; then
    echo "build.sh: base $BASE exists (--no-base-cache to make it again)" >&2
else
    rootfs="$(mktemp -d /var/tmp/meshgate-rootfs.XXXXXX)"
    trap 'rm -rf "$rootfs"' EXIT
    start="$(now)"
    echo "build.sh: debootstrap --variant=minbase bookworm from $MIRROR" >&2
    if ! debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$rootfs.log" 2>&1; then
        tail -n 30 "$rootfs.log" >&2
        echo "build.sh: debootstrap failed; the whole output is in $rootfs.log" >&2
        exit 1
    fi
    rm -f "$rootfs.log"
    # apt's lists are made again in the Containerfile; the base need not carry them.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
    echo "build.sh: debootstrap took $(took "$start") s" >&2
    start="$(now)"
    tar --numeric-owner -C "$rootfs" -c . | podman import --quiet - "$BASE" >/dev/null
    echo "build.sh: podman import took $(took "$start") s" >&2
    rm -rf "$rootfs"
    trap - EXIT
fi

# pip in the build reaches PyPI through whatever this host does: where the host's pip trusts
# an extra CA (PIP_CERT, e.g. a TLS-inspecting proxy), that bundle is bind-mounted into the
# RUN steps (never copied into the image) and handed to pip as PIP_CERT.
build_ca=()
host_ca="${PIP_CERT:-}"
if [ -n "$host_ca" ] && [ -r "$host_ca" ]; then
    # On /mnt, which the base has (empty): a new mount point would be left in the image.
    build_ca=(--volume "$(dirname "$host_ca"):/mnt:ro" --build-arg "PIP_CERT=/mnt/$(basename "$host_ca")")
fi

start="$(now)"
echo "build.sh: buildah bud --isolation chroot -t $TAG (context $CONTEXT)" >&2
buildah bud --isolation chroot "${LAYER_CACHE[@]}" --force-rm --quiet "${build_ca[@]}" \
    -f "$ROOT/deploy/container/Containerfile" -t "$TAG" -t "${TAG%%:*}:latest" "$CONTEXT" >&2
echo "build.sh: buildah bud took $(took "$start") s" >&2
echo "$TAG"
