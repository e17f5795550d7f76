# Shared settings for the hack/ scripts. Everything expensive lives in one fixed folder outside the
# checkout, keyed by version, so a second run on the same machine reuses it.
export BELAY_CACHE=${BELAY_CACHE:-$HOME/.cache/belay}
export GOMODCACHE=${GOMODCACHE_OVERRIDE:-$BELAY_CACHE/go/mod}
export GOCACHE=$BELAY_CACHE/go/build-cache
export GOFLAGS=-buildvcs=false
export GOTOOLCHAIN=local

BELAY_KUBE_VERSION=v1.34.4
BELAY_ETCD_VERSION=v3.6.16
BELAY_HELM_VERSION=v3.19.5
BELAY_S3_VERSION=v0.0.0-20261109003541-7506e5f91cd6

log() { printf '[hack %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

all_present() {
  local dir=$1; shift
  for name in "$@"; do [[ -x "$dir/$name" ]] || return 1; done
}
