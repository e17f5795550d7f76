"""`kubectl belay brief` and `belay brief` print the same page for the same record: five sessions
standing in five places, their records written once into a home's event store, read by `belay
brief` from the home and by `kubectl belay brief` (as a person allowed AgentSessions only) from the
status the operator projects from the same store (`session_status_patch`, applied as the operator
applies it). The sections are the same, and so is every line in them but the commands' spelling
(`kubectl belay` in a cluster) and what each side observes of the sandboxes."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from belay.controller import names
from belay.controller.kube import KubeClient, load_api_client
from belay.local.runtime import LocalHome
from tests.api.kubehelpers import install_crds
from tests.belay_cli import run_belay
from tests.controller.sessions_only_user import kubectl_belay, sessions_only_kubeconfig
from tests.controller.test_fleet_cluster import holder, manifest, project
from tests.fleet_records import EXPECTED, write_five_sessions
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv

# A person runs `belay resume` locally; in a cluster the operator recovers the attempt. The page
# says so in its first sections, which are told apart here by the phase they name.
INTERRUPTED = "fleet-interrupted"


def sections(page: str) -> dict[str, list[str]]:
    """The page's sections by heading, each with its lines, commands spelled as `belay` takes them."""
    found: dict[str, list[str]] = {}
    heading = ""
    for line in page.splitlines():
        if line and not line.startswith(" "):
            heading = line
            found[heading] = []
        else:
            found[heading].append(line.replace("kubectl belay ", "belay "))
    return found


# Its own: the fleet test writes sessions of the same names, on the same control plane when both run
# in one worker.
NAMESPACE = "belay-parity"


async def test_kubectl_belay_brief_prints_the_sections_belay_brief_prints_for_one_record(
    kube: ControlPlane, tmp_path: Path
) -> None:
    install_crds(kube)
    kube.kubectl("create", "namespace", NAMESPACE)
    config_file = sessions_only_kubeconfig(kube, NAMESPACE, tmp_path / "sessions-only.kubeconfig")
    home = LocalHome(tmp_path / "home")
    store, artifacts = home.open_event_store(), home.open_artifact_store()
    client = KubeClient(load_api_client(str(kube.kubeconfig)), field_manager=names.FIELD_MANAGER)
    pages: dict[str, tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]] = {}
    try:
        await write_five_sessions(store, artifacts, holder)
        for name in EXPECTED:
            kube.kubectl("create", "-f", "-", input=json.dumps(manifest(name, {}, NAMESPACE)))
        for name in EXPECTED:
            # A live attempt renews its lease right before both read it, and both read at once: the
            # renewal is fresh for both.
            if EXPECTED[name].alive:
                await store.renew_lease(name, 1)
            await project(client, store, artifacts, name, NAMESPACE)
            with ThreadPoolExecutor(2) as pool:
                asked = pool.submit(run_belay, home.root, "brief", name)
                cluster = kubectl_belay(config_file, "brief", name)
                local = asked.result()
            pages[name] = (local, cluster)
    finally:
        await store.close()

    for name, (local, cluster) in pages.items():
        assert local.returncode == 0 and cluster.returncode == 0, (local.stderr, cluster.stderr)
        mine, theirs = sections(local.stdout), sections(cluster.stdout)
        if name == INTERRUPTED:
            # Locally nothing but a person resumes it; in a cluster the operator does.
            assert next(iter(mine)).split(": ")[1].startswith("Interrupted")
            assert next(iter(theirs)).split(": ")[1].startswith("Recovering")
            mine = {k: v for k, v in mine.items() if not k.startswith(("Session ", "Interrupted since"))}
            theirs = {k: v for k, v in theirs.items() if not k.startswith(("Session ", "Recovering since"))}
            mine.pop("Attempts and recovery"), theirs.pop("Attempts and recovery")
        assert list(mine) == list(theirs), (name, list(mine), list(theirs))
        for heading in mine:
            if heading != "Resources":  # each side observes the sandboxes where it runs
                assert mine[heading] == theirs[heading], (name, heading)
