#!/usr/bin/env bash
# Builds the S3 server (versitygw, Apache-2.0; its posix backend keeps buckets as folders) from its
# pinned Go module into the cache, once per version.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

version=${S3_VERSION:-$BELAY_S3_VERSION}
module=github.com/versity/versitygw
bin_dir="$BELAY_CACHE/bin/versitygw-$version"

begin_build "versitygw-$version" "$bin_dir" versitygw

log "resolving $module@$version"
upstream_gomod=$(go mod download -json "$module@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
printf 'module belay.dev/hack/versitygw\n\ngo %s\n' "$(awk '/^go /{print $2; exit}' "$upstream_gomod")" > go.mod

log "fetching dependencies"
go get "$module/cmd/versitygw@$version"

ldflags="-s -w -X main.Version=$version -X main.Build=module-$version -X main.BuildTime=1970-01-01T00:00:00Z"
mkdir -p "$bin_dir.partial"
log "building versitygw $version"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin_dir.partial/versitygw" "$module/cmd/versitygw"
finish_build "versitygw-$version" "$bin_dir"
