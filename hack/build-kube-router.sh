#!/usr/bin/env bash
# Builds kube-router, the node's NetworkPolicy enforcer (iptables and ipset; only its firewall is
# run), from its pinned Go module into the cache, once per version.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

version=${KUBEROUTER_VERSION:-$BELAY_KUBEROUTER_VERSION}
module=github.com/cloudnativelabs/kube-router/v2
bin_dir="$BELAY_CACHE/bin/kube-router-$version"

begin_build "kube-router-$version" "$bin_dir" kube-router

log "resolving $module@$version"
printf 'module belay.dev/hack/kube-router\n\ngo %s\n' "$(awk '/^go /{print $2; exit}' "$(upstream_gomod "$module@$version")")" > go.mod

log "fetching dependencies"
go get "$module/cmd/kube-router@$version"

ldflags="-s -w -X $module/pkg/version.Version=$version -X $module/pkg/version.BuildDate=1970-01-01T00:00:00Z"
mkdir -p "$bin_dir.partial"
log "building kube-router $version"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin_dir.partial/kube-router" "$module/cmd/kube-router"
finish_build "kube-router-$version" "$bin_dir"
