#!/usr/bin/env bash
# Builds CoreDNS, the cluster DNS of the test node, from its pinned Go module into the cache, once per
# version. A wrapper main links only the plugins the node's Corefile uses (tests/testenv/node.py):
# CoreDNS's own main links every plugin, cloud DNS providers included, which would triple the build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

version=${COREDNS_VERSION:-$BELAY_COREDNS_VERSION}
module=github.com/coredns/coredns
bin_dir="$BELAY_CACHE/bin/coredns-$version"
plugins=(ready health errors log kubernetes)

begin_build "coredns-$version" "$bin_dir" coredns

log "resolving $module@$version"
printf 'module belay.dev/hack/coredns\n\ngo %s\n' "$(awk '/^go /{print $2; exit}' "$(upstream_gomod "$module@$version")")" > go.mod
mkdir -p cmd/coredns
{
  echo '// CoreDNS with the plugins the test node uses, in the order of upstream'"'"'s plugin.cfg.'
  echo 'package main'
  echo
  echo 'import ('
  for plugin in "${plugins[@]}"; do echo "	_ \"$module/plugin/$plugin\""; done
  echo
  echo "	\"$module/core/dnsserver\""
  echo "	\"$module/coremain\""
  echo ')'
  echo
  printf 'func init() { dnsserver.Directives = []string{'
  printf '"%s", ' "${plugins[@]}"
  echo '} }'
  echo
  echo 'func main() { coremain.Run() }'
} > cmd/coredns/main.go
gofmt -w cmd/coredns/main.go

log "fetching dependencies"
go get "$module@$version"

mkdir -p "$bin_dir.partial"
log "building coredns $version (plugins: ${plugins[*]})"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $module/coremain.GitCommit=module-$version" \
  -o "$bin_dir.partial/coredns" ./cmd/coredns
finish_build "coredns-$version" "$bin_dir"
