"""`python -m tests.testenv up|down|status`: the environment outside pytest, for a shell or a demo.

`up` starts etcd, the S3 server and the control plane on free ports, and, where it can (as root,
with the node's components built), a node with the Belay image imported; it leaves them running
and writes $BELAY_CACHE/run/testenv.json. `up --no-node` starts no node (everything on loopback).
`down` stops everything, puts the machine back as the node found it, and removes that state."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from tests.testenv import node as node_module
from tests.testenv.env import (
    TestEnv,
    missing_components,
    node_wanted,
    remove_run_dir,
    still_ours,
    stop_recorded,
)
from tests.testenv.state import TestEnvState, run_root, state_path


def _usage(state: TestEnvState) -> str:
    return "\n".join(
        [
            f"control plane {state.kube_version} at {state.server}",
            f"  kubectl --kubeconfig {state.kubeconfig} version",
            f"  export KUBECONFIG={state.kubeconfig}",
            f"  (kubectl built here: {state.kubectl})",
            f"etcd (event store): {state.etcd_endpoint}",
            f"S3 server: {state.s3.endpoint_url} region {state.s3.region}",
            f"  AWS_ACCESS_KEY_ID={state.s3.access_key} AWS_SECRET_ACCESS_KEY={state.s3.secret_key}",
            f"helm: {state.helm or 'not built (bash hack/build-helm.sh)'}",
            *(
                [f"node {state.node.name}: pods run there (crictl socket {state.node.containerd_socket})"]
                if state.node
                else []
            ),
            f"state: {state_path()}",
            "stop everything with: make testenv-down  (python -m tests.testenv down)",
        ]
    )


def _nodes_table(state: TestEnvState) -> str:
    listed = subprocess.run(
        [state.kubectl, "--kubeconfig", state.kubeconfig, "get", "nodes", "-o", "wide"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return listed.stdout + listed.stderr


def up(with_node: bool = True) -> int:
    path = state_path()
    if path.exists():
        previous = TestEnvState.read(path)
        if all(still_ours(p) for p in previous.processes):
            print("testenv is already up\n" + _usage(previous))
            return 0
        # A half-dead environment from an earlier run: clear it before starting afresh.
        stop_recorded(previous)
        remove_run_dir(previous)
        path.unlink()
    missing = missing_components()
    if missing:
        print("cannot start the testenv:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 1
    run_dir = run_root() / f"testenv-{time.strftime('%Y%m%d-%H%M%S')}"
    no_node = node_wanted() if with_node else "not asked for (--no-node)"
    harness = node_module.harness_image_for_sources()[0] if no_node is None else None
    env = TestEnv(run_dir, detached=True, node=no_node is None, harness_image=harness)
    started = time.perf_counter()
    try:
        env.start()
    except Exception as error:
        print(f"testenv failed to start: {error}", file=sys.stderr)
        return 1
    if env.node is not None:
        # The node outlives this command: its containerd now stands for it as the owner.
        containerd = env.node.processes["containerd"]
        assert containerd.pid is not None
        node_module.hand_over(containerd.pid, env.node.pids())
    state = env.state()
    state.write(path)
    print(f"testenv up in {time.perf_counter() - started:.1f}s\n" + _usage(state))
    if env.node is not None:
        print(_nodes_table(state), end="")
        if harness is None:
            print(
                "the Belay image is not built for these sources; "
                "run `make testenv-build` to run it on the node"
            )
    else:
        print(f"no node: {no_node}")
    return 0


def down() -> int:
    path = state_path()
    if not path.exists():
        print("testenv is not up (no state file)")
        return 0
    state = TestEnvState.read(path)
    stopped = stop_recorded(state)
    left = [p.pid for p in state.processes if still_ours(p)]
    if left:
        print(f"processes still running after stop: {left}", file=sys.stderr)
        return 1
    remove_run_dir(state)
    path.unlink()
    print(f"testenv down: stopped {len(stopped)} processes, removed {state.run_dir}")
    return 0


def status() -> int:
    path = state_path()
    if not path.exists():
        print("testenv is not up")
        return 1
    state = TestEnvState.read(path)
    for record in state.processes:
        print(f"{record.name:26} pid {record.pid:>7}  {'running' if still_ours(record) else 'GONE'}")
    return 0 if all(still_ours(p) for p in state.processes) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.testenv", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--no-node", action="store_true", help="up: the control plane and stores only")
    args = parser.parse_args(argv)
    if args.command == "up":
        return up(with_node=not args.no_node)
    return {"down": down, "status": status}[args.command]()


if __name__ == "__main__":
    sys.exit(main())
