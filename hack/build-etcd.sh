#!/usr/bin/env bash
# Builds etcd and etcdctl from the pinned go.etcd.io/etcd modules into the cache, once per version.
#
# etcd has no installable main module on the proxy (go.etcd.io/etcd/v3 is not published), so a
# wrapper module holds a two-line main that calls go.etcd.io/etcd/server/v3/etcdmain, exactly what
# upstream's own main does. etcdctl is the main package of go.etcd.io/etcd/etcdctl/v3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

version=${ETCD_VERSION:-$BELAY_ETCD_VERSION}
bin_dir="$BELAY_CACHE/bin/etcd-$version"
binaries=(etcd etcdctl)

begin_build "etcd-$version" "$bin_dir" "${binaries[@]}"
mkdir -p "${work}/cmd/etcd"

log "resolving go.etcd.io/etcd/server/v3@$version"
upstream_gomod=$(go mod download -json "go.etcd.io/etcd/server/v3@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
cat > go.mod <<GOMOD
module belay.dev/hack/etcd

go $(awk '/^go /{print $2; exit}' "$upstream_gomod")
GOMOD
cat > cmd/etcd/main.go <<'GO'
// The etcd server, as upstream's main builds it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO

log "fetching dependencies"
go get "go.etcd.io/etcd/server/v3/etcdmain@$version" "go.etcd.io/etcd/etcdctl/v3@$version"

ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$version"
mkdir -p "$bin_dir.partial"
log "building etcd $version"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin_dir.partial/etcd" ./cmd/etcd
log "building etcdctl $version"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin_dir.partial/etcdctl" go.etcd.io/etcd/etcdctl/v3
finish_build "etcd-$version" "$bin_dir"
