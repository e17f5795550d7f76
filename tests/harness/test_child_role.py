"""A child session's subagent does the child's part: its role (its task's title on the page, what
a model is told it is) is the child's goal, not the coordinator's role of starting and gathering
children; a goal longer than a role may be is cut, and the child's spec stays valid."""

from __future__ import annotations

from belay.api.agentsession import AgentSession
from belay.harness.children import ROLE_LIMIT, child_spec
from belay.journal.state.records import SessionLinkRecord

PARENT = {
    "request": {"goal": "Upgrade both packages.", "parts": {"core": "the retry loop"}},
    "executor": {"type": "scripted", "plan": "plans/coordinator.yaml"},
    "subagents": [
        {"name": "lead", "role": "Splits the upgrade and gathers the patches.", "networkProfile": "none"}
    ],
}


def _child(goal: str) -> AgentSession:
    link = SessionLinkRecord(
        session="deps-core", part="core", goal=goal, plan="core.yaml", deliverable="core.patch", seq=3
    )
    spec = child_spec(PARENT, link)
    return AgentSession.model_validate(
        {
            "apiVersion": "belay.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": "deps-core"},
            "spec": spec,
        }
    )


def test_a_childs_subagent_has_the_childs_goal_as_its_role() -> None:
    [lead] = _child("Make the core retry loop honour a timeout.").spec.subagents
    assert lead.role == "Make the core retry loop honour a timeout."
    assert lead.deliverable == "core.patch"
    assert PARENT["subagents"][0]["role"] == "Splits the upgrade and gathers the patches."  # not changed


def test_a_goal_longer_than_a_role_is_cut_and_the_spec_stays_valid() -> None:
    [lead] = _child("x" * (ROLE_LIMIT * 2)).spec.subagents
    assert len(lead.role) == ROLE_LIMIT and lead.role.endswith("...")
