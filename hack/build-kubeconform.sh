#!/usr/bin/env bash
# Builds kubeconform from the pinned github.com/yannh/kubeconform module into the cache, once per
# version. `make lint` runs it (hack/kubeconform.sh), so it is built there on a fresh machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

version=$BELAY_KUBECONFORM_VERSION
module=github.com/yannh/kubeconform
bin_dir="$BELAY_CACHE/bin/kubeconform-$version"

begin_build "kubeconform-$version" "$bin_dir" kubeconform

upstream_gomod=$(upstream_gomod "$module@$version")
printf 'module belay.dev/hack/kubeconform\n\ngo %s\n' "$(awk '/^go /{print $2; exit}' "$upstream_gomod")" > go.mod
log "fetching dependencies"
go get "$module/cmd/kubeconform@$version"

mkdir -p "$bin_dir.partial"
log "building kubeconform $version"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$bin_dir.partial/kubeconform" "$module/cmd/kubeconform"
finish_build "kubeconform-$version" "$bin_dir"
