"""The real test environment's costs: building it from source once per machine (the Go-built
components, and the Belay image where the build runs as root), and starting it from the cache on
every test run."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from tests.testenv.binaries import NODE_COMPONENTS, cache_dir, components
from tests.testenv.env import TestEnv, missing_components

from bench.common import Figure

WARM_RUNS = 3


def cold_build_seconds() -> tuple[float, str]:
    """What hack/build-all.sh recorded: a whole cold run if there was one on this machine, otherwise
    the sum of each component's own recorded build (each script records its build when it really
    builds, so the parts add up to a cold run made in several steps)."""
    times = cache_dir() / "build-times"
    whole = times / "cold-build.seconds"
    if whole.exists():
        detail = "one cold `bash hack/build-all.sh` run, two builds at a time, the node's components included"
        return float(whole.read_text()), detail
    parts = {
        c.folder: times / f"{c.folder}.seconds" for n, c in components().items() if n not in NODE_COMPONENTS
    }
    absent = [name for name, path in parts.items() if not path.exists()]
    if absent:
        raise RuntimeError(f"no recorded build time for {', '.join(absent)}: build them from a cold cache")
    seconds = {name: float(path.read_text()) for name, path in parts.items()}
    detail = (
        "sum of each component's first build, one after another sharing Go's caches as build-all.sh does: "
    )
    detail += ", ".join(f"{n} {s:.0f}s" for n, s in seconds.items())
    return sum(seconds.values()), detail + "; the node's components not included (node_cold_build_s)"


def node_build_seconds() -> tuple[float, float | None, str] | None:
    """The node's components (kubelet, kube-proxy, kube-router, CoreDNS, crictl), each as its
    script recorded it when it really built, after the control plane (so kubelet and kube-proxy
    reuse the packages compiled for it, as in a cold `hack/build-all.sh` run): wall seconds, CPU
    seconds (None where not recorded), and the parts."""
    times = cache_dir() / "build-times"
    folders = [c.folder for n, c in components().items() if n in NODE_COMPONENTS]
    if not all((times / f"{f}.seconds").exists() for f in folders):
        return None
    wall = {f: float((times / f"{f}.seconds").read_text()) for f in folders}
    cpu = {f: float(p.read_text()) for f in folders if (p := times / f"{f}.cpu.seconds").exists()}
    parts = ", ".join(f"{f} {wall[f]:.0f}s" + (f" ({cpu[f]:.0f} CPU-s)" if f in cpu else "") for f in folders)
    return sum(wall.values()), (sum(cpu.values()) if len(cpu) == len(folders) else None), parts


def harness_image_build_seconds() -> tuple[float, str] | None:
    """What hack/build-harness-image.sh recorded (it runs as root only): the build from an empty
    Docker data root, its debootstrap part, and the last rebuild after a source change."""
    times = cache_dir() / "build-times"
    recorded = {
        name: float(path.read_text())
        for name in ("harness-image", "harness-image-base", "harness-image-rebuild")
        if (path := times / f"{name}.seconds").exists()
    }
    if "harness-image" not in recorded:
        return None
    detail = "from an empty Docker data root, with no registry"
    if "harness-image-base" in recorded:
        detail += f": debootstrapped base {recorded['harness-image-base']:.0f}s, then the image"
    if "harness-image-rebuild" in recorded:
        detail += f"; the last rebuild after a source change took {recorded['harness-image-rebuild']:.0f}s"
    return recorded["harness-image"], detail


def warm_start_seconds(runs: int) -> list[float]:
    """Time from nothing running to every component answering its health check, binaries cached."""
    samples = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="belay-bench-testenv-") as run_dir:
            env = TestEnv(Path(run_dir))
            started = time.perf_counter()
            try:
                env.start()
                samples.append(time.perf_counter() - started)
            finally:
                env.stop()
    return samples


def run() -> list[Figure]:
    missing = missing_components()
    if missing:
        raise RuntimeError("components not built: " + "; ".join(missing))
    cold, cold_detail = cold_build_seconds()
    samples = sorted(warm_start_seconds(WARM_RUNS))
    median = samples[len(samples) // 2]
    figures = [
        Figure(
            key="testenv_cold_build_s",
            value=cold,
            unit="s",
            command="rm -rf ~/.cache/belay && bash hack/build-all.sh",
            detail=cold_detail + " (2 cores shared with other work; module downloads included)",
            goal="fits in CI's 90 min",
        ),
        Figure(
            key="testenv_warm_start_s",
            value=median,
            unit="s",
            command="python -m bench bench_testenv",
            detail=f"median of {WARM_RUNS}: "
            + ", ".join(f"{s:.2f}" for s in samples)
            + " (etcd, S3 server, etcd + kube-apiserver + controller-manager + scheduler, to healthy)",
            goal="seconds",
        ),
    ]
    node = node_build_seconds()
    if node is not None:
        wall, cpu, parts = node
        figures.append(
            Figure(
                key="node_cold_build_s",
                value=wall,
                unit="s",
                command="rm -rf ~/.cache/belay/bin/{kubernetes-node,kube-router,coredns,crictl}-* "
                "&& make testenv-build",
                detail="the node's components (kubelet and kube-proxy after the control plane, the "
                "others in the second lane of hack/build-all.sh): "
                + parts
                + " (wall time on 2 cores shared with other work; module downloads included)",
                goal="all builds (testenv_cold_build_s, which holds this when it is one run) and "
                "the image beside the tests, then the node's tests: CI under 60 min",
            )
        )
        if cpu is not None:
            figures.append(
                Figure(
                    key="node_cold_build_cpu_s",
                    value=cpu,
                    unit="CPU-s",
                    command="python -m bench bench_testenv (recorded by each hack/ script)",
                    detail="user and system time of the node's builds, whatever the machine's load: "
                    "on an idle 2-core machine the wall time is half of it to all of it, plus downloads",
                )
            )
    image = harness_image_build_seconds()
    if image is not None:
        figures.append(
            Figure(
                key="harness_image_cold_build_s",
                value=image[0],
                unit="s",
                command="rm -rf ~/.cache/belay/docker && bash hack/build-harness-image.sh",
                detail=image[1] + " (2 cores shared with other work; Debian and PyPI downloads included)",
            )
        )
    return figures
