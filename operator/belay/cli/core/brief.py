"""`brief`: the briefing where the session runs, and its renderings.

Locally the page is built from the fold, with what this machine observes (where each artifact is,
which sandbox processes are alive, the budgets against its clock); in a cluster from the
AgentSession's typed status, with the sandbox pods it names. Either way one `Briefing` model and
the same renderers (`belay.views.briefing.render`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from belay.api.agentsession import AgentSession
from belay.api.status import AgentSessionStatus
from belay.journal.events import ArtifactRef
from belay.journal.phase import Liveness
from belay.journal.state import SessionState
from belay.local.liveness import observed_sandboxes
from belay.local.record import open_session
from belay.local.runtime import LocalHome, load_installed
from belay.stores.base import RecordCorrupt
from belay.views.briefing.build import briefing, child_item
from belay.views.briefing.model import Briefing, ChildItem, SandboxItem
from belay.views.briefing.render import render_json, render_markdown, render_text
from belay.views.status.briefing import briefing_from_status
from belay.views.status.model import NOT_PROJECTED

STYLES = ("text", "markdown", "json", "json-lines")


def render(brief: Briefing, style: str) -> str:
    """`style`: text, markdown, json, or json-lines (one compact object per line, for a follower's
    stream)."""
    if style == "json-lines":
        return brief.model_dump_json()
    return {"json": render_json, "markdown": render_markdown, "text": render_text}[style](brief)


async def children_of(home: LocalHome, state: SessionState) -> list[ChildItem]:
    """A coordinator's child sessions as their own records in this home say (none for any other
    session): what its page says of each child, and each child's hypotheses and decisions. A
    child whose record cannot be read says so, in the store's words."""
    children = []
    for name, link in sorted(state.children.items()):
        if not home.session_exists(name):
            children.append(child_item(link, None, None))
            continue
        try:
            opened = await open_session(home, name)
        except RecordCorrupt as error:
            children.append(ChildItem(session=name, part=link.part, summary=f"its record: {error}"))
            continue
        children.append(child_item(link, opened.state, opened.liveness))
    return children


def of_home(
    home: LocalHome, state: SessionState, liveness: Liveness | None, children: Sequence[ChildItem] = ()
) -> Briefing:
    """The briefing as this home sees it: artifact locations, observed sandboxes, budgets, and a
    coordinator's children (`children_of`)."""
    store = home.open_artifact_store()

    def locate(ref: ArtifactRef) -> str:
        return store.location(ref.sha256) if store.exists(ref.sha256) else ref.uri

    sandboxes = []
    budgets: dict[str, int] = {}
    if home.session_exists(state.session_id):
        spec = load_installed(home, state.session_id).spec
        profiles = {sub.name: sub.network_profile for sub in spec.subagents}
        sandboxes = observed_sandboxes(home.sandboxes_dir(state.session_id), profiles)
        budgets = spec.budgets.model_dump(by_alias=True, exclude_none=True)
    return briefing(
        state,
        locate=locate,
        artifact_store=home.artifacts_location,
        record=home.events_location if home.stores_elsewhere else "",
        liveness=liveness,
        sandboxes=sandboxes,
        budgets=budgets,
        children=children,
    )


def _pods(session: AgentSession, status: AgentSessionStatus | None) -> list[SandboxItem]:
    """Each subagent's sandbox pod, as the operator's status names it."""
    pods = {pod.subagent: pod for pod in status.sandboxes} if status is not None else {}
    items = []
    for sub in session.spec.subagents:
        pod = pods.get(sub.name)
        where = f"pod {pod.pod} ({pod.phase})" if pod is not None else "no sandbox pod"
        alive = pod.phase == "Running" if pod is not None else False
        items.append(
            SandboxItem(subagent=sub.name, where=where, network_profile=sub.network_profile, alive=alive)
        )
    return items


def of_cluster(session: AgentSession, *, now: datetime) -> Briefing:
    """The briefing of an AgentSession read from the apiserver: its status's sections, its spec's
    request and budgets, its sandbox pods."""
    request = session.spec.request
    return briefing_from_status(
        session.session_id,
        session.status or NOT_PROJECTED,
        goal=request.goal,
        parts=request.parts,
        sandboxes=_pods(session, session.status),
        budgets=session.spec.budgets.model_dump(by_alias=True, exclude_none=True),
        now=now,
    )
