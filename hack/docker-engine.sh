#!/usr/bin/env bash
# The project's own Docker engine: dockerd from Debian's docker.io with its data root, exec root,
# socket and configuration under $BELAY_CACHE/docker. Image layers persist from one run to the next,
# and a system engine, if the machine has one, is never used or touched. Runs in the foreground
# until it gets SIGTERM.
#
# One engine per data root: whoever starts it holds $BELAY_CACHE/docker/engine.lock (flock) until
# it has stopped it (hack/build-harness-image.sh, the `harness_image` test fixture).
#
# Usage: hack/docker-engine.sh                      (root)
#        hack/docker-engine.sh --unmount-leftovers  after the engine has stopped (see below)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

docker_dir=$BELAY_CACHE/docker
pidfile=$docker_dir/dockerd.pid
mkdir -p "$docker_dir"

# dockerd bind-mounts the host's network namespace under its exec root for `--network host`
# containers and leaves it mounted when it stops; a killed dockerd leaves its other mounts too.
# Unmounted, deepest first, so the next start is clean and `rm -rf $BELAY_CACHE` works.
unmount_leftovers() {
  awk -v root="$docker_dir/" 'index($5, root) == 1 { print $5 }' /proc/self/mountinfo | sort -r \
    | while read -r mount_point; do umount "$mount_point" || umount --lazy "$mount_point"; done
}
if [[ ${1:-} == --unmount-leftovers ]]; then
  unmount_leftovers
  exit 0
fi

# The caller holds the lock, so an engine still alive on this data root was left by a run that was
# killed; it would make this dockerd refuse to start (its pid file), so stop it first.
if [[ -f $pidfile ]]; then
  old_pid=$(<"$pidfile")
  if [[ -n $old_pid && $(cat "/proc/$old_pid/comm" 2>/dev/null) == dockerd ]]; then
    log "stopping dockerd $old_pid, left running by an earlier run"
    kill -TERM "$old_pid" 2>/dev/null || true
    for _ in $(seq 100); do [[ -d /proc/$old_pid ]] || break; sleep 0.2; done
    kill -KILL "$old_pid" 2>/dev/null || true
    for _ in $(seq 50); do [[ -d /proc/$old_pid ]] || break; sleep 0.1; done
  fi
fi

unmount_leftovers

# An empty configuration file of our own, so /etc/docker/daemon.json (if any) does not apply.
echo '{}' > "$docker_dir/daemon.json"

# No bridge and no iptables rules: the engine changes nothing in the host's network, and nothing
# needs them (builds and containers use the host's network with `--network host`).
exec dockerd \
  --data-root "$docker_dir/data" \
  --exec-root "$docker_dir/exec" \
  --host "unix://$docker_dir/docker.sock" \
  --pidfile "$pidfile" \
  --config-file "$docker_dir/daemon.json" \
  --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
  --log-level=warn
