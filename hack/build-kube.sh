#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from the pinned
# k8s.io/kubernetes module into the cache, once per version.
#
# Built in a wrapper module (write_kube_wrapper_module in lib.sh): k8s.io/kubernetes cannot be
# installed directly.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

version=${KUBE_VERSION:-$BELAY_KUBE_VERSION}
bin_dir="$BELAY_CACHE/bin/kubernetes-$version"
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

begin_build "kubernetes-$version" "$bin_dir" "${binaries[@]}"

write_kube_wrapper_module "$version" belay.dev/hack/kubernetes

packages=()
for b in "${binaries[@]}"; do
  [[ $b == kubectl ]] && packages+=("k8s.io/kubernetes/cmd/kubectl") || packages+=("k8s.io/kubernetes/cmd/$b")
done
log "fetching dependencies (first run downloads several hundred MB)"
# An explicit @version on each package keeps `go get` from upgrading to the newest release.
go get "${packages[@]/%/@$version}"

ldflags=$(kube_ldflags "$version")
mkdir -p "$bin_dir.partial"
for i in "${!binaries[@]}"; do
  log "building ${binaries[$i]} $version"
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin_dir.partial/${binaries[$i]}" "${packages[$i]}"
done
finish_build "kubernetes-$version" "$bin_dir"
