#!/usr/bin/env bash
# Builds what a node runs besides the container runtime: kubelet and kube-proxy from the pinned
# k8s.io/kubernetes module (the same wrapper module and flags as hack/build-kube.sh, so the packages
# they share with the control plane come from the build cache), and `pause`, the pod sandbox's
# process: with no registry, the pause image is made here from it (tests/testenv/images.py).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

version=${KUBE_VERSION:-$BELAY_KUBE_VERSION}
bin_dir="$BELAY_CACHE/bin/kubernetes-node-$version"
binaries=(kubelet kube-proxy pause)

begin_build "kubernetes-node-$version" "$bin_dir" "${binaries[@]}"

write_kube_wrapper_module "$version" belay.dev/hack/kubernetes-node
mkdir -p cmd/pause
cat > cmd/pause/main.go <<'GO'
// The pod sandbox's process: it holds the pod's namespaces, reaps whatever is re-parented to it,
// and exits on SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
GO

log "fetching dependencies"
go get "k8s.io/kubernetes/cmd/kubelet@$version" "k8s.io/kubernetes/cmd/kube-proxy@$version"

ldflags=$(kube_ldflags "$version")
mkdir -p "$bin_dir.partial"
for binary in kubelet kube-proxy; do
  log "building $binary $version"
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin_dir.partial/$binary" "k8s.io/kubernetes/cmd/$binary"
done
log "building pause"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin_dir.partial/pause" ./cmd/pause
finish_build "kubernetes-node-$version" "$bin_dir"
