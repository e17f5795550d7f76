#!/usr/bin/env bash
# A Debian base image built here, with no registry: debootstrap a minimal bookworm root filesystem
# from the Debian mirror and `docker import` it. The harness image then builds on it with
#   docker build -f harness-image/Dockerfile --build-arg BASE_IMAGE=belay-debian:bookworm .
#
# Usage: harness-image/build-local-base.sh [image-tag]   (root; needs debootstrap and docker)
# DOCKER names the docker client to use (default: docker on PATH); DOCKER_HOST picks the engine.
set -euo pipefail
tag=${1:-belay-debian:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
rootfs=$(mktemp -d /tmp/belay-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT

debootstrap --variant=minbase bookworm "$rootfs" "$mirror"
# Apt in the image reads the same mirror (security updates from the mirror's security suite).
cat > "$rootfs/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
SOURCES
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
tar -C "$rootfs" --numeric-owner -c . | "${DOCKER:-docker}" import - "$tag"
echo "$tag"
