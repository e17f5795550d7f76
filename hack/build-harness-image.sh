#!/usr/bin/env bash
# Builds the Belay image (harness-image/Dockerfile) in the project's own Docker engine
# (hack/docker-engine.sh), with no registry: the base is a Debian root filesystem bootstrapped here
# (harness-image/build-local-base.sh), and the Dockerfile installs Debian's Python on it.
#
# The tag is a hash of everything the image is made from, so a run with unchanged sources finds it
# in $BELAY_CACHE/docker/harness-image.tag and starts nothing. Otherwise it installs docker.io and
# debootstrap when missing, starts the engine, bootstraps the base unless that engine already has
# it, builds, drops older tags of the image and stops the engine.
#
# Usage: hack/build-harness-image.sh              (root)
#        hack/build-harness-image.sh --print-tag  the tag the current sources give; builds nothing
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
source "$here/lib.sh"

image_name=belay-harness
base_tag=belay-debian:bookworm
docker_dir=$BELAY_CACHE/docker
built_tag_file=$docker_dir/harness-image.tag
# The client docker.io installs beside dockerd: another docker on PATH may be a newer client that
# wants buildx for BuildKit.
docker_cli=${BELAY_DOCKER_CLI:-/usr/bin/docker}
export DOCKER_HOST=unix://$docker_dir/docker.sock

# What goes into the image (the build context the .dockerignore lets through) and how it is made.
input_hash() {
  (
    cd "$repo"
    find harness-image/Dockerfile harness-image/Dockerfile.dockerignore harness-image/build-local-base.sh \
      pyproject.toml README.md operator examples -type f -not -path '*/__pycache__/*' -not -path '*.egg-info/*' -print0 \
      | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
  )
}
tag=$image_name:$(input_hash)

if [[ ${1:-} == --print-tag ]]; then
  echo "$tag"
  exit 0
fi

is_built() { [[ -f $built_tag_file && $(<"$built_tag_file") == "$tag" ]]; }
if is_built; then
  log "harness image $tag already built"
  exit 0
fi
take_build_lock harness-image
if is_built; then
  log "harness image $tag was built by another run meanwhile"
  exit 0
fi
started=$SECONDS

ensure_debian_packages docker.io debootstrap

mkdir -p "$docker_dir"
exec 8>"$docker_dir/engine.lock"
if ! flock -n 8; then
  log "waiting for the Docker engine in $docker_dir (a test run may be using it)"
  flock 8
fi
# The engine must not inherit the locks: if this script is killed, they are released with it.
bash "$here/docker-engine.sh" >>"$docker_dir/engine.log" 2>&1 8>&- 9>&- &
engine_pid=$!
stop_engine() {
  kill -TERM "$engine_pid" 2>/dev/null || true
  wait "$engine_pid" 2>/dev/null || true
  bash "$here/docker-engine.sh" --unmount-leftovers
}
trap stop_engine EXIT
for _ in $(seq 120); do
  "$docker_cli" version >/dev/null 2>&1 && break
  kill -0 "$engine_pid" 2>/dev/null || { tail -20 "$docker_dir/engine.log" >&2; exit 1; }
  sleep 0.5
done
"$docker_cli" version >/dev/null

# A build from an empty data root is the cold build (harness-image.seconds); a later build reuses
# the base and the cached layers and records its time apart (harness-image-rebuild.seconds).
time_name=harness-image-rebuild
if "$docker_cli" image inspect "$base_tag" >/dev/null 2>&1; then
  log "base image $base_tag found in $docker_dir/data"
else
  time_name=harness-image
  log "bootstrapping the Debian base image $base_tag"
  base_started=$SECONDS
  DOCKER=$docker_cli bash "$repo/harness-image/build-local-base.sh" "$base_tag" >/dev/null
  record_build_time harness-image-base $((SECONDS - base_started))
fi

build_args=(--network host -f "$repo/harness-image/Dockerfile" --build-arg "BASE_IMAGE=$base_tag" -t "$tag")
# Behind a TLS-intercepting proxy pip in the build needs the host's CA bundle (a build secret, so it
# stays out of the image).
ca_bundle=/etc/ssl/certs/ca-certificates.crt
[[ -s $ca_bundle ]] && build_args+=(--secret "id=ca-bundle,src=$ca_bundle")
log "building $tag"
DOCKER_BUILDKIT=1 "$docker_cli" build --progress plain "${build_args[@]}" "$repo"

# Older builds of the image are of no further use; their layers shared with this one stay, and the
# build cache keeps what the last week's builds used.
"$docker_cli" images --format '{{.Repository}}:{{.Tag}}' "$image_name" | { grep -vxF "$tag" || true; } \
  | xargs -r "$docker_cli" rmi >/dev/null
"$docker_cli" builder prune --force --filter until=168h >/dev/null
echo "$tag" >"$built_tag_file.partial" && mv "$built_tag_file.partial" "$built_tag_file"
record_build_time "$time_name" $((SECONDS - started))
log "harness image $tag built in $((SECONDS - started))s"
