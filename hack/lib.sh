# Shared settings for the hack/ scripts. Everything expensive lives in one fixed folder outside the
# checkout, keyed by version, so a second run on the same machine reuses it.
export BELAY_CACHE=${BELAY_CACHE:-$HOME/.cache/belay}
export GOMODCACHE=${GOMODCACHE_OVERRIDE:-$BELAY_CACHE/go/mod}
export GOCACHE=$BELAY_CACHE/go/build-cache
# -modcacherw: module files stay writable, so `rm -rf $BELAY_CACHE` works without root.
export GOFLAGS="-buildvcs=false -modcacherw"
export GOTOOLCHAIN=local
# Go's official tarball installs here; a non-login shell (make, CI) may not have it on PATH.
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
  export PATH=$PATH:/usr/local/go/bin
fi

BELAY_KUBE_VERSION=v1.34.4
BELAY_ETCD_VERSION=v3.6.16
BELAY_HELM_VERSION=v3.19.5
# The S3 server is versitygw (Apache-2.0) with its posix backend: a real S3 gateway, one static binary.
BELAY_S3_VERSION=v1.8.0
# The node: kubelet and kube-proxy come with BELAY_KUBE_VERSION; the NetworkPolicy enforcer, the
# cluster DNS and the CRI client are pinned here.
BELAY_KUBEROUTER_VERSION=v2.1.0
BELAY_COREDNS_VERSION=v1.14.3
BELAY_CRICTL_VERSION=v1.34.0
# The platform's own tools, which judge the operator's objects in the tests and `make lint`: kstatus
# (the cli-utils library Flux and kpt compute status with), the Lua runtime Argo CD runs health
# scripts in, with the YAML reader Argo CD's tests use, and the manifest validator.
BELAY_CLIUTILS_VERSION=v0.37.2
BELAY_GOPHERLUA_VERSION=v1.1.2
BELAY_SIGSYAML_VERSION=v1.6.0
BELAY_KUBECONFORM_VERSION=v0.8.0

log() { printf '[hack %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# One build per component at a time on this machine (two `make test` runs may start together); the
# second waits, then finds the binaries and stops. The lock is released when the script exits.
take_build_lock() {
  mkdir -p "$BELAY_CACHE/build"
  exec 9>"$BELAY_CACHE/build/$1.lock"
  if ! flock -n 9; then
    log "waiting for another build of $1"
    flock 9
  fi
}

# Every build script starts here. It exits the script when the binaries are cached (also after
# waiting for a concurrent build of the same thing); otherwise it enters a fresh work folder.
begin_build() {
  local label=$1 bin_dir=$2
  shift 2
  if all_present "$bin_dir" "$@"; then
    log "$label already built in $bin_dir"
    exit 0
  fi
  take_build_lock "$label"
  if all_present "$bin_dir" "$@"; then
    log "$label was built by another run meanwhile"
    exit 0
  fi
  build_started=$SECONDS
  work="$BELAY_CACHE/build/$label"
  rm -rf "$work" && mkdir -p "$work" && cd "$work"
}

# ...and ends here: $bin_dir.partial becomes $bin_dir in one rename, so a cut build is never used.
# Besides the wall time it records the CPU time of the build's processes (<label>.cpu.seconds),
# which does not depend on what else the machine is doing.
finish_build() {
  local label=$1 bin_dir=$2 cpu
  rm -rf "$bin_dir" && mv "$bin_dir.partial" "$bin_dir"
  record_build_time "$label" $((SECONDS - build_started))
  # `times` prints the shell's own and its children's user and system time as "XmY.Zs"; in a pipe
  # or $(...) it would run in a subshell and see no children, so it writes to a file.
  times >"$work/times"
  cpu=$(tail -1 "$work/times" | python3 -c 'import re,sys; print(round(sum(int(m)*60+float(s) for m,s in re.findall(r"(\d+)m([\d.]+)s", sys.stdin.read()))))')
  record_build_time "$label.cpu" "$cpu"
  log "$label ready in $bin_dir"
}

all_present() {
  local dir=$1; shift
  for name in "$@"; do [[ -x "$dir/$name" ]] || return 1; done
}

# Each script that really builds (not a cache hit) records how long it took, so the bench can report
# the cold build cost without rebuilding: $BELAY_CACHE/build-times/<name>-<version>.seconds
record_build_time() {
  local name=$1 seconds=$2
  mkdir -p "$BELAY_CACHE/build-times"
  echo "$seconds" > "$BELAY_CACHE/build-times/$name.seconds.partial"
  mv "$BELAY_CACHE/build-times/$name.seconds.partial" "$BELAY_CACHE/build-times/$name.seconds"
}

# Debian packages a local sandbox needs at run time: bubblewrap builds its walls (see
# docs/security.md). Installed by `make setup` as root and by hack/build-all.sh.
sandbox_apt_packages=(bubblewrap)
# Debian's Chromium: the report test opens `belay report`'s page in it, headless and offline.
# Installed by `make setup` as root (hack/install-report-tools.sh) and by hack/build-all.sh.
report_apt_packages=(chromium)

# Installs the named Debian packages that are missing (CI runs as root; elsewhere through sudo). With
# everything installed it only asks dpkg, which takes a few milliseconds per package.
ensure_debian_packages() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  # One line per package on the screen; apt's and dpkg's own output (hundreds of lines) goes to a
  # log, shown only when the install fails.
  for pkg in "${missing[@]}"; do
    log "installing $pkg from Debian's packages"
  done
  local sudo_cmd=() apt_log
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  mkdir -p "$BELAY_CACHE/logs"
  apt_log=$BELAY_CACHE/logs/apt-install.log
  if ! { "${sudo_cmd[@]}" apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
    >"$apt_log" 2>&1; then
    tail -n 40 "$apt_log" >&2
    log "apt-get could not install ${missing[*]} (the whole output: $apt_log)"
    return 1
  fi
  log "installed ${missing[*]} (apt's output: $apt_log)"
}

# Go module proxy metadata: the go.mod of module@version (downloaded into the module cache).
upstream_gomod() {
  go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])'
}

# A wrapper module around k8s.io/kubernetes@$1, written to ./go.mod. `go install k8s.io/kubernetes/...`
# fails: the module's go.mod replaces every staging module (k8s.io/api, k8s.io/apimachinery, ...) with
# a local folder that is not in the module zip. The wrapper replaces each with its published v0.x
# twin; the list is derived from the module's own go.mod, never typed by hand.
write_kube_wrapper_module() {
  local version=$1 module=$2 gomod
  local staging_version="v0.${version#v1.}"
  log "resolving k8s.io/kubernetes@$version"
  gomod=$(upstream_gomod "k8s.io/kubernetes@$version")
  {
    echo "module $module"
    echo
    echo "go $(awk '/^go /{print $2; exit}' "$gomod")"
    echo
    echo "require k8s.io/kubernetes $version"
    echo
    # Each "k8s.io/foo => ./staging/src/k8s.io/foo" becomes "k8s.io/foo => k8s.io/foo v0.N.P".
    awk -v sv="$staging_version" '
      /=> \.\/staging\/src\// { for (i = 1; i <= NF; i++) if ($i == "=>") { print "replace " $(i-1) " => " $(i-1) " " sv } }
    ' "$gomod"
  } > go.mod
  log "wrapper go.mod has $(grep -c '^replace' go.mod) staging replacements"
}

# The -ldflags that stamp a Kubernetes binary with its version, as a release build does. The same
# flags for every Kubernetes binary, so they share the compiled packages in the build cache.
kube_ldflags() {
  local version=$1 ldflags="-s -w" kv
  for kv in "gitVersion=$version" "gitMajor=1" "gitMinor=$(echo "$version" | cut -d. -f2)" \
            "gitTreeState=clean" "gitCommit=module-$version" "buildDate=1970-01-01T00:00:00Z"; do
    ldflags+=" -X k8s.io/component-base/version.$kv -X k8s.io/client-go/pkg/version.$kv"
  done
  echo "$ldflags"
}

# The project's own Go programs (hack/tools/<name>/main.go) are built against pinned modules; their
# cache folder is keyed by the pinned versions and by a hash of their source, so an edit of the
# program builds it again and an unchanged one is found in the cache.
own_tool_key() {
  local name=$1; shift
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  { printf '%s\n' "$@"; cat "$root/hack/tools/$name"/*.go; } | sha256sum | cut -c1-12
}

# Builds hack/tools/<name> in the current (fresh) work folder into $bin_dir.partial/<name>, requiring
# the given module@version pairs; the other modules are what those pinned versions require.
build_own_tool() {
  local name=$1 bin_dir=$2; shift 2
  local root requirement
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  printf 'module belay.dev/tools/%s\n\ngo %s\n' "$name" "$(go env GOVERSION | sed 's/^go//; s/\.[0-9]*$//')" > go.mod
  cp "$root/hack/tools/$name"/*.go .
  for requirement in "$@"; do
    log "requiring $requirement"
    go get "$requirement"
  done
  go mod tidy
  mkdir -p "$bin_dir.partial"
  log "building $name"
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin_dir.partial/$name" .
}
