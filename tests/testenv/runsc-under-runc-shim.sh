#!/bin/sh
# gVisor's runsc as containerd's runc shim calls it (docs/testenv.md, "gVisor on the node"). The
# shim speaks runc's command line, which runsc takes, except for three things it bridges here.
set -u
runsc=/usr/bin/runsc
# ptrace: no /dev/kvm needed. network=host: the pod's network namespace, its sockets the kernel's;
# this runsc (2022) refuses its own network stack on kernels since 6.11, taking every network
# namespace there for the host's.
flags="--platform=ptrace --network=host"
root= bundle= pidfile= command= id= prev=
shim=$PPID
for arg; do
  case $prev in
    --root) root=$arg ;;
    --bundle) bundle=$arg ;;
    --pid-file) pidfile=$arg ;;
  esac
  case $prev:$arg in
    --root:* | --log:* | --log-format:* | --bundle:* | --pid-file:* | --console-socket:* | --process:* | *:-*) ;;
    *) if [ -z "$command" ]; then command=$arg; elif [ -z "$id" ]; then id=$arg; fi ;;
  esac
  prev=$arg
done
holders="$root-holders"

case $command in
  create)
    $runsc $flags "$@" || exit
    # 1. runsc names the pod's sandbox process as the pid of each of the pod's containers, so the
    # shim would never see a container end: a holder process stands in as its pid and, once the
    # container started, waits on it with `runsc wait` and exits with its status.
    # 2. runsc gives a container of a pod the stdio of `runsc start`, whose output the shim reads
    # until it closes (never, then): the holder keeps the container's stdio from `create` until then.
    grep -q '"io.kubernetes.cri.container-type":"container"' "$bundle/config.json" || exit 0
    mkdir -p "$holders"
    (
      started=
      trap 'started=1' USR1
      while [ -z "$started" ]; do
        kill -0 "$shim" 2>/dev/null || exit 137 # the shim is gone: so is the container
        sleep 0.2
      done
      exec </dev/null >/dev/null 2>&1
      waited=$($runsc --root "$root" wait "$id")
      status=$(printf '%s' "$waited" | sed -n 's/.*"exitStatus":\([0-9]*\).*/\1/p')
      exit "${status:-255}"
    ) &
    echo $! >"$holders/$id"
    printf %s $! >"$pidfile"
    ;;
  start)
    if [ -f "$holders/$id" ]; then
      holder=$(cat "$holders/$id")
      rm -f "$holders/$id"
      $runsc $flags "$@" </proc/"$holder"/fd/0 >/proc/"$holder"/fd/1 2>/proc/"$holder"/fd/2
      started=$?
      kill -USR1 "$holder"
      exit $started
    fi
    exec $runsc $flags "$@"
    ;;
  kill)
    $runsc $flags "$@" && exit 0
    # 3. A container that has ended: the shim takes runc's words for it as "already finished".
    $runsc --root "$root" state "$id" 2>/dev/null | grep -q '"status": "running"' && exit 1
    echo "container not running" >&2
    exit 1
    ;;
  *)
    exec $runsc $flags "$@"
    ;;
esac
