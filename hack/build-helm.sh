#!/usr/bin/env bash
# Builds helm from the pinned helm.sh/helm/v3 module into the cache, once per version, stamped the
# way helm's own Makefile stamps a release.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

version=${HELM_VERSION:-$BELAY_HELM_VERSION}
module=helm.sh/helm/v3
bin_dir="$BELAY_CACHE/bin/helm-$version"

begin_build "helm-$version" "$bin_dir" helm

log "resolving $module@$version"
upstream_gomod=$(go mod download -json "$module@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
printf 'module belay.dev/hack/helm\n\ngo %s\n' "$(awk '/^go /{print $2; exit}' "$upstream_gomod")" > go.mod

log "fetching dependencies"
go get "$module/cmd/helm@$version"

# helm reports the Kubernetes version it was built against as its default capabilities; its
# Makefile derives that from the client-go it links (v0.N.P -> 1.N).
client_go=$(go list -m -f '{{.Version}}' k8s.io/client-go)
kube_major=$(( $(echo "${client_go#v}" | cut -d. -f1) + 1 ))
kube_minor=$(echo "$client_go" | cut -d. -f2)
ldflags="-s -w -X $module/internal/version.version=$version"
ldflags+=" -X $module/internal/version.gitCommit=module-$version -X $module/internal/version.gitTreeState=clean"
for pkg in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X $module/$pkg.k8sVersionMajor=$kube_major -X $module/$pkg.k8sVersionMinor=$kube_minor"
done

mkdir -p "$bin_dir.partial"
log "building helm $version"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin_dir.partial/helm" "$module/cmd/helm"
finish_build "helm-$version" "$bin_dir"
