#!/usr/bin/env bash
# Builds crictl, the CRI client the node tests use to run commands inside a pod's container (as the
# container, with its user, root file system and network), from its pinned Go module into the cache.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

version=${CRICTL_VERSION:-$BELAY_CRICTL_VERSION}
module=sigs.k8s.io/cri-tools
bin_dir="$BELAY_CACHE/bin/crictl-$version"

begin_build "crictl-$version" "$bin_dir" crictl

log "resolving $module@$version"
printf 'module belay.dev/hack/crictl\n\ngo %s\n' "$(awk '/^go /{print $2; exit}' "$(upstream_gomod "$module@$version")")" > go.mod

log "fetching dependencies"
go get "$module/cmd/crictl@$version"

mkdir -p "$bin_dir.partial"
log "building crictl $version"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $module/pkg/version.Version=$version" \
  -o "$bin_dir.partial/crictl" "$module/cmd/crictl"
finish_build "crictl-$version" "$bin_dir"
