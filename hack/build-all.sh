#!/usr/bin/env bash
# Builds (or finds in $BELAY_CACHE) every real component the tests start, in two lanes side by
# side: one Go build keeps only about 1.5 of two cores busy (it links on one thread, and waits on
# module downloads), so two at once fill the machine. One lane builds the Kubernetes control plane,
# then the node's kubelet and kube-proxy, which reuse most of its compiled packages; the other etcd
# and the S3 server (the store tests need them), helm, then the node's kube-router, CoreDNS and
# crictl, then the platform's tools that judge the operator's objects (kstatus, the Argo CD health
# harness, kubeconform). Then the Belay image (hack/build-harness-image.sh), which needs root for its Docker engine;
# without root it is left out and the tests that run it skip.
#
# A cached run only checks that the binaries exist and takes well under a second. Each script that
# really builds records its duration in $BELAY_CACHE/build-times/; this script records the sum for
# a run that found nothing cached in cold-build.seconds, which is what `testenv_cold_build_s` reports
# (the image is not part of that sum: it records its own build in harness-image.seconds).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

# Debian packages the tests use at run time, installed only when missing (CI runs as root): the
# local sandboxes' walls, the browser the report test opens a report in, and the node's container
# runtimes (runc, and gVisor's runsc for the RuntimeClass `gvisor`), its CNI plugins, and the tools
# kube-proxy and kube-router program the kernel with; strace counts the SQLite store's fsyncs in its
# tests.
apt_packages=("${sandbox_apt_packages[@]}" "${report_apt_packages[@]}" containerd runc runsc containernetworking-plugins iptables nftables ipset conntrack strace)
ensure_debian_packages "${apt_packages[@]}"

command -v go >/dev/null || { log "go is not on PATH; the components are built from Go modules"; exit 1; }

lanes=("build-kube.sh build-kube-node.sh"
       "build-etcd.sh build-s3.sh build-helm.sh build-kube-router.sh build-coredns.sh build-crictl.sh build-kstatus.sh build-argocd-health.sh build-kubeconform.sh")
cold=1
[[ -d $BELAY_CACHE/bin ]] && [[ -n $(ls -A "$BELAY_CACHE/bin" 2>/dev/null) ]] && cold=0

run_lane() {
  local script
  for script in $1; do
    bash "$here/$script" || { log "$script failed"; return 1; }
  done
}

started=$SECONDS
pids=()
for lane in "${lanes[@]}"; do
  run_lane "$lane" &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
((failed == 0)) || { log "a component did not build (above)"; exit 1; }
elapsed=$((SECONDS - started))

if ((cold)); then
  record_build_time cold-build "$elapsed"
  log "cold build of all components took ${elapsed}s (recorded in $BELAY_CACHE/build-times)"
else
  log "all components ready in $BELAY_CACHE/bin (${elapsed}s)"
fi

if [[ $(id -u) -eq 0 ]]; then
  bash "$here/build-harness-image.sh"
else
  log "not root: the harness image is not built (its Docker engine needs root); its tests will skip"
fi
