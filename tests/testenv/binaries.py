"""Where the components built by hack/ live. The pinned versions are read from hack/lib.sh, the one
place they are written, so a version bump there moves the tests with it."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
LIB_SH = REPO_ROOT / "hack" / "lib.sh"


def cache_dir() -> Path:
    """$BELAY_CACHE, defaulting as hack/lib.sh does."""
    return Path(os.environ.get("BELAY_CACHE") or Path.home() / ".cache" / "belay")


def pinned_versions(lib_sh: str | None = None) -> dict[str, str]:
    """Every `BELAY_<NAME>_VERSION=<value>` assignment in hack/lib.sh, keyed by lower-case name."""
    text = LIB_SH.read_text() if lib_sh is None else lib_sh
    return {
        m.group(1).lower(): m.group(2)
        for m in re.finditer(r"^BELAY_([A-Z0-9]+)_VERSION=([^\s#]+)", text, flags=re.MULTILINE)
    }


@dataclass(frozen=True)
class Component:
    """One thing hack/ builds: a folder of binaries under $BELAY_CACHE/bin, and the script that makes it."""

    name: str
    version: str
    folder: str
    binaries: tuple[str, ...]
    build_script: str

    @property
    def bin_dir(self) -> Path:
        return cache_dir() / "bin" / self.folder

    def path(self, binary: str) -> Path:
        if binary not in self.binaries:
            raise KeyError(f"{self.name} has no binary {binary!r}")
        return self.bin_dir / binary

    def missing(self) -> list[str]:
        return [b for b in self.binaries if not os.access(self.bin_dir / b, os.X_OK)]

    def missing_reason(self) -> str | None:
        """None when every binary is built, otherwise a sentence saying what to run."""
        absent = self.missing()
        if not absent:
            return None
        return (
            f"{self.name} {self.version} is not built ({', '.join(absent)} missing in {self.bin_dir}); "
            f"run `bash hack/{self.build_script}` or `make testenv-build`"
        )


def own_tool_folder(name: str, version: str, requirements: list[str]) -> str:
    """The cache folder of one of the project's own Go programs (hack/tools/<name>), keyed as
    hack/lib.sh's `own_tool_key` keys it: the pinned module versions and the program's source."""
    digest = hashlib.sha256("".join(f"{r}\n" for r in requirements).encode())
    for source in sorted((REPO_ROOT / "hack" / "tools" / name).glob("*.go")):
        digest.update(source.read_bytes())
    return f"{name}-{version}-{digest.hexdigest()[:12]}"


def components() -> dict[str, Component]:
    v = pinned_versions()
    kube = v["kube"]
    cli_utils, gopher_lua = v["cliutils"], v["gopherlua"]
    kstatus_requires = [f"sigs.k8s.io/cli-utils@{cli_utils}"]
    argocd_health_requires = [f"github.com/yuin/gopher-lua@{gopher_lua}", f"sigs.k8s.io/yaml@{v['sigsyaml']}"]
    return {
        "kubernetes": Component(
            "kubernetes",
            kube,
            f"kubernetes-{kube}",
            ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"),
            "build-kube.sh",
        ),
        "etcd": Component("etcd", v["etcd"], f"etcd-{v['etcd']}", ("etcd", "etcdctl"), "build-etcd.sh"),
        "s3": Component("s3", v["s3"], f"versitygw-{v['s3']}", ("versitygw",), "build-s3.sh"),
        "helm": Component("helm", v["helm"], f"helm-{v['helm']}", ("helm",), "build-helm.sh"),
        # The node (tests/testenv/node.py), beside Debian's containerd, runc and CNI plugins.
        "node": Component(
            "node", kube, f"kubernetes-node-{kube}", ("kubelet", "kube-proxy", "pause"), "build-kube-node.sh"
        ),
        "kube-router": Component(
            "kube-router",
            v["kuberouter"],
            f"kube-router-{v['kuberouter']}",
            ("kube-router",),
            "build-kube-router.sh",
        ),
        "coredns": Component(
            "coredns", v["coredns"], f"coredns-{v['coredns']}", ("coredns",), "build-coredns.sh"
        ),
        "crictl": Component("crictl", v["crictl"], f"crictl-{v['crictl']}", ("crictl",), "build-crictl.sh"),
        # The platform's own judges of the operator's objects (docs/operator.md, "Judged by the
        # platform's tools").
        "kstatus": Component(
            "kstatus",
            cli_utils,
            own_tool_folder("kstatus", cli_utils, kstatus_requires),
            ("kstatus",),
            "build-kstatus.sh",
        ),
        "argocd-health": Component(
            "argocd-health",
            gopher_lua,
            own_tool_folder("argocd-health", gopher_lua, argocd_health_requires),
            ("argocd-health",),
            "build-argocd-health.sh",
        ),
        "kubeconform": Component(
            "kubeconform",
            v["kubeconform"],
            f"kubeconform-{v['kubeconform']}",
            ("kubeconform",),
            "build-kubeconform.sh",
        ),
    }


# What a node needs beside the control plane (and the harness image, see docker_engine.py).
NODE_COMPONENTS = ("node", "kube-router", "coredns", "crictl")


def component(name: str) -> Component:
    return components()[name]
