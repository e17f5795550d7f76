"""The briefing built from an AgentSession's typed status: the page `kubectl belay brief` prints.

The operator puts the briefing's sections in the status (`status.briefing`, built from the fold
as `belay brief` builds them, with every command spelled for `kubectl belay`); the rest of the page
comes from the status itself (phase, step, last seq, request version, the interruption), the
spec's request, and what a cluster user observes (the sandbox pods, the budgets against their
clock). A status the operator has not written yet gives a page with empty sections.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from belay.views.briefing.build import page
from belay.views.briefing.model import Briefing, BriefingSections, SandboxItem
from belay.views.status.model import SessionStatus


def briefing_from_status(
    name: str,
    status: SessionStatus,
    *,
    goal: str,
    parts: Mapping[str, str],
    sandboxes: Sequence[SandboxItem] = (),
    budgets: Mapping[str, int] | None = None,
    now: datetime | None = None,
) -> Briefing:
    """`goal` and `parts` are the spec's request, which the status records by version only."""
    return page(
        status.briefing or BriefingSections(),
        observed=sandboxes,
        limits=budgets or {},
        now=now,
        session_id=name,
        phase=status.phase,
        current_step=status.current_step,
        last_seq=status.last_seq,
        goal=goal,
        request_version=status.request_version,
        request_parts=dict(sorted(parts.items())),
        interruption=status.interruption,
    )
