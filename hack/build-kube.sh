#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from the pinned
# k8s.io/kubernetes module into the cache, once per version.
#
# `go install k8s.io/kubernetes/...@vX` fails: the module's go.mod replaces every staging module
# (k8s.io/api, k8s.io/apimachinery, ...) with a local folder that is not in the module zip. A wrapper
# module that requires k8s.io/kubernetes and replaces each staging module with its published v0.x
# twin builds fine. The replace list is derived from the module's own go.mod, never typed by hand.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

version=${KUBE_VERSION:-$BELAY_KUBE_VERSION}
staging_version="v0.${version#v1.}"
bin_dir="$BELAY_CACHE/bin/kubernetes-$version"
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

begin_build "kubernetes-$version" "$bin_dir" "${binaries[@]}"

log "resolving k8s.io/kubernetes@$version"
upstream_gomod=$(go mod download -json "k8s.io/kubernetes@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')

{
  echo "module belay.dev/hack/kubernetes"
  echo
  echo "go $(awk '/^go /{print $2; exit}' "$upstream_gomod")"
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  # Each "k8s.io/foo => ./staging/src/k8s.io/foo" becomes "k8s.io/foo => k8s.io/foo v0.N.P".
  awk -v sv="$staging_version" '
    /=> \.\/staging\/src\// { for (i = 1; i <= NF; i++) if ($i == "=>") { print "replace " $(i-1) " => " $(i-1) " " sv } }
  ' "$upstream_gomod"
} > go.mod
log "wrapper go.mod has $(grep -c '^replace' go.mod) staging replacements"

packages=()
for b in "${binaries[@]}"; do
  [[ $b == kubectl ]] && packages+=("k8s.io/kubernetes/cmd/kubectl") || packages+=("k8s.io/kubernetes/cmd/$b")
done
log "fetching dependencies (first run downloads several hundred MB)"
# An explicit @version on each package keeps `go get` from upgrading to the newest release.
go get "${packages[@]/%/@$version}"

ldflags="-s -w"
for kv in "gitVersion=$version" "gitMajor=1" "gitMinor=$(echo "$version" | cut -d. -f2)" \
          "gitTreeState=clean" "gitCommit=module-$version" "buildDate=1970-01-01T00:00:00Z"; do
  ldflags+=" -X k8s.io/component-base/version.$kv -X k8s.io/client-go/pkg/version.$kv"
done

mkdir -p "$bin_dir.partial"
for i in "${!binaries[@]}"; do
  log "building ${binaries[$i]} $version"
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin_dir.partial/${binaries[$i]}" "${packages[$i]}"
done
finish_build "kubernetes-$version" "$bin_dir"
