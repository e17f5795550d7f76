"""A scope change invalidates exactly the results whose recorded inputs it touched, transitively
through upstream results and the artifacts they produced, and nothing else."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from belay.journal.events import (
    Artifact,
    ArtifactRef,
    DerivedFrom,
    Note,
    NoteKind,
    ScopeChange,
    ToolResult,
    UserInput,
)
from belay.journal.state import SessionState, fold
from tests.journal.fixtures import LogBuilder, sha


def _result(log: LogBuilder, result_id: str, **inputs: object) -> None:
    log.add(
        ToolResult(
            operation_id=f"op-{result_id}", ok=True, result_id=result_id, derived_from=DerivedFrom(**inputs)
        )
    )  # type: ignore[arg-type]


def _base() -> LogBuilder:
    """a <- part x; b <- a; c <- artifact produced by b; d <- part y; e <- nothing changed;
    n is a note derived from c; g <- the goal."""
    log = LogBuilder()
    log.add(UserInput(goal="G", parts={"x": "1", "y": "2", "z": "3"}))
    _result(log, "a", request_version=1, request_parts=("x",))
    _result(log, "b", request_version=1, results=("a",))
    log.add(
        Artifact(
            name="b.csv",
            ref=ArtifactRef(sha256=sha("b.csv"), size=3),
            result_id="b",
        )
    )
    _result(log, "c", request_version=1, artifacts=(sha("b.csv"),))
    _result(log, "d", request_version=1, request_parts=("y",))
    _result(log, "e", request_version=1, request_parts=("z",))
    log.add(
        Note(
            note_id="n",
            kind=NoteKind.FINDING,
            text="derived from c",
            derived_from=DerivedFrom(results=("c",)),
        )
    )
    _result(log, "g", request_version=1, request_parts=("goal",))
    return log


def _invalid(state: SessionState) -> set[str]:
    return {r.result_id for r in state.invalid_results()}


def test_changing_one_part_invalidates_its_dependents_transitively_and_nothing_else() -> None:
    log = _base()
    log.add(ScopeChange(request_version=2, summary="x changes", changed_parts={"x": "10"}))
    state = fold(log.events)
    assert state.scope_changes[-1].invalidated == ("a", "b", "c", "note:n")
    assert _invalid(state) == {"a", "b", "c", "note:n"}
    assert all(state.results[r].valid for r in ("d", "e", "g"))
    assert all(state.results[r].invalidated_by_version == 2 for r in ("a", "b", "c", "note:n"))


def test_removing_a_part_invalidates_what_used_it() -> None:
    log = _base()
    log.add(ScopeChange(request_version=2, summary="drop y", removed_parts=("y",)))
    state = fold(log.events)
    assert state.scope_changes[-1].invalidated == ("d",)
    assert _invalid(state) == {"d"}


def test_a_new_goal_invalidates_results_derived_from_the_goal() -> None:
    log = _base()
    log.add(ScopeChange(request_version=2, summary="new goal", goal="G2"))
    state = fold(log.events)
    assert state.scope_changes[-1].invalidated == ("g",)


def test_restating_a_part_with_its_value_invalidates_nothing() -> None:
    log = _base()
    log.add(ScopeChange(request_version=2, summary="same", changed_parts={"x": "1"}, goal="G"))
    state = fold(log.events)
    assert state.scope_changes[-1].invalidated == ()
    assert _invalid(state) == set()


def test_each_change_reports_only_what_it_invalidated() -> None:
    log = _base()
    log.add(ScopeChange(request_version=2, summary="x", changed_parts={"x": "10"}))
    log.add(ScopeChange(request_version=3, summary="y", changed_parts={"y": "20"}))
    state = fold(log.events)
    assert [c.invalidated for c in state.scope_changes] == [("a", "b", "c", "note:n"), ("d",)]
    assert state.results["d"].invalidated_by_version == 3


def test_a_result_built_on_superseded_inputs_is_invalid_when_recorded() -> None:
    log = _base()
    log.add(ScopeChange(request_version=2, summary="x", changed_parts={"x": "10"}))
    _result(log, "late", request_version=1, request_parts=("x",))  # computed before v2 landed
    _result(log, "fresh", request_version=2, request_parts=("x",))
    _result(log, "on-invalid", request_version=2, results=("b",))
    state = fold(log.events)
    assert not state.results["late"].valid
    assert state.results["fresh"].valid
    assert not state.results["on-invalid"].valid
    # Redoing a result under its id with current inputs makes it valid again.
    _result(log, "a", request_version=2, request_parts=("x",))
    assert fold(log.events).results["a"].valid


def test_a_redone_result_is_no_longer_tied_to_inputs_it_dropped() -> None:
    log = _base()
    _result(log, "d", request_version=1, request_parts=("z",))  # d now depends on z, not y
    log.add(ScopeChange(request_version=2, summary="y", changed_parts={"y": "20"}))
    state = fold(log.events)
    assert state.scope_changes[-1].invalidated == ()
    assert state.results["d"].valid


# (result id, request parts, upstream result ids, produces an artifact)
ResultSpec = tuple[str, tuple[str, ...], tuple[str, ...], bool]


@st.composite
def result_graphs(draw: st.DrawFn) -> tuple[list[ResultSpec], set[str]]:
    """Results r0..rN, each derived from some request parts and some earlier results, some of them
    producing an artifact that later results consume; and the parts one scope change touches."""
    count = draw(st.integers(1, 15))
    results = []
    for index in range(count):
        parts = tuple(draw(st.lists(st.sampled_from(PARTS), max_size=2, unique=True)))
        upstream = tuple(
            draw(st.lists(st.sampled_from([f"r{j}" for j in range(index)]), max_size=3, unique=True))
            if index
            else []
        )
        produces_artifact = draw(st.booleans())
        results.append((f"r{index}", parts, upstream, produces_artifact))
    touched = set(draw(st.lists(st.sampled_from(PARTS), min_size=1, max_size=3, unique=True)))
    return results, touched


PARTS = ["p", "q", "s", "t"]


@settings(max_examples=80, deadline=None)
@given(graph=result_graphs(), through_artifacts=st.booleans())
def test_invalidation_is_exactly_the_transitive_dependents_of_the_touched_parts(
    graph: tuple[list[ResultSpec], set[str]], through_artifacts: bool
) -> None:
    results, touched = graph
    log = LogBuilder()
    log.add(UserInput(goal="G", parts={p: "v1" for p in PARTS}))
    produced: dict[str, str] = {}
    for result_id, parts, upstream, produces_artifact in results:
        # Upstream results are named directly or, when they produced an artifact, by its hash.
        by_hash = tuple(produced[u] for u in upstream if through_artifacts and u in produced)
        by_id = tuple(u for u in upstream if not (through_artifacts and u in produced))
        derived = DerivedFrom(request_version=1, request_parts=parts, results=by_id, artifacts=by_hash)
        log.add(
            ToolResult(operation_id=f"op-{result_id}", ok=True, result_id=result_id, derived_from=derived)
        )
        if produces_artifact:
            produced[result_id] = sha(result_id)
            log.add(
                Artifact(
                    name=f"{result_id}.out",
                    ref=ArtifactRef(sha256=sha(result_id), size=1),
                    result_id=result_id,
                )
            )
    log.add(ScopeChange(request_version=2, summary="s", changed_parts={p: "v2" for p in touched}))
    state = fold(log.events)

    expected: set[str] = set()
    changed = True
    while changed:  # the fixpoint, computed the slow and obvious way
        changed = False
        for result_id, parts, upstream, _ in results:
            if result_id not in expected and (touched & set(parts) or expected & set(upstream)):
                expected.add(result_id)
                changed = True
    assert set(state.scope_changes[-1].invalidated) == expected
    assert {r.result_id for r in state.invalid_results()} == expected
