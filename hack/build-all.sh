#!/usr/bin/env bash
# Builds (or finds in $BELAY_CACHE) every real component the tests start: etcd and the S3 server
# first (the store tests need them), then the Kubernetes control plane, then helm. One at a time:
# each Go build already uses every core.
#
# A cached run only checks that the binaries exist and takes well under a second. Each script that
# really builds records its duration in $BELAY_CACHE/build-times/; this script records the sum for
# a run that found nothing cached in cold-build.seconds, which is what `testenv_cold_build_s` reports.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

# Debian packages the tests use at run time, installed only when missing (CI runs as root).
apt_packages=()
missing_packages=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing_packages+=("$pkg")
done
if ((${#missing_packages[@]})); then
  log "installing ${missing_packages[*]}"
  sudo_cmd=(); [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing_packages[@]}"
fi

command -v go >/dev/null || { log "go is not on PATH; the components are built from Go modules"; exit 1; }

scripts=(build-etcd.sh build-s3.sh build-kube.sh build-helm.sh)
cold=1
[[ -d $BELAY_CACHE/bin ]] && [[ -n $(ls -A "$BELAY_CACHE/bin" 2>/dev/null) ]] && cold=0

started=$SECONDS
for script in "${scripts[@]}"; do
  bash "$here/$script"
done
elapsed=$((SECONDS - started))

if ((cold)); then
  record_build_time cold-build "$elapsed"
  log "cold build of all components took ${elapsed}s (recorded in $BELAY_CACHE/build-times)"
else
  log "all components ready in $BELAY_CACHE/bin (${elapsed}s)"
fi
