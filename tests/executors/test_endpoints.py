"""Which provider a managed executor talks to comes from the SDKs' standard variables alone: a base
URL names any server that speaks the API, a key alone the provider, and with neither `belay run`
uses the session's local stand-in, a process of its own that outlives the run, and the record and
the briefing say that the stand-in decided."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from belay.executors.endpoints import NO_KEY, configured_endpoint, standin_model_id
from tests.belay_cli import (
    completed,
    deliverables,
    read_events,
    run_belay,
    session_standin,
    stop_session_standins,
)
from tests.executors.example import SESSION, example_manifest, review_sha256


def test_a_key_alone_is_the_providers_api_and_a_base_url_any_server() -> None:
    real = configured_endpoint("openai-agents", {"OPENAI_API_KEY": "sk-1"})
    assert real is not None and real.base_url is None and real.api_key == "sk-1"
    assert real.label == "https://api.openai.com/v1 (the OpenAI API)"
    other = configured_endpoint(
        "anthropic-managed", {"ANTHROPIC_BASE_URL": "https://user:secret@proxy.example:8443/x?token=t"}
    )
    assert other is not None and other.base_url == "https://user:secret@proxy.example:8443/x?token=t"
    assert other.api_key == NO_KEY
    assert other.label == "https://proxy.example:8443/x (ANTHROPIC_BASE_URL)"  # no credential recorded
    assert configured_endpoint("openai-agents", {"ANTHROPIC_API_KEY": "sk-2"}) is None


@pytest.mark.slow
def test_with_nothing_configured_belay_run_uses_the_sessions_own_standin_which_outlives_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    home = tmp_path / "home"
    try:
        result = run_belay(home, "run", str(example_manifest(tmp_path / "manifest")))
        assert result.returncode == 0, result.stderr
        events = read_events(home, SESSION)
        assert completed(events) and deliverables(events)["review.md"] == review_sha256()
        used = re.search(r"session \S+ at (http://127\.0\.0\.1:\d+/v1) \(the local stand-in\)", result.stdout)
        assert used is not None, result.stdout[-1500:]
        # The record says who decided: the stand-in's scripted plan, not the model of the manifest.
        assert {e.actor.model_id for e in events if e.type == "tool_result"} == {standin_model_id("gpt-5")}
        assert f"model {standin_model_id('gpt-5')}" in result.stdout
        # A process of its own, found in the session's directory, still answering after the run.
        standin = session_standin(home, SESSION, "openai-agents")
        assert standin is not None and standin.base_url == used.group(1)
        assert standin.stats()["sessions_created"] == 1
    finally:
        stop_session_standins(home)
    assert session_standin(home, SESSION, "openai-agents") is None


def test_with_nothing_configured_and_no_plan_belay_run_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    manifest = example_manifest(tmp_path / "manifest")
    data = yaml.safe_load(manifest.read_text())
    del data["spec"]["executor"]["plan"]
    manifest.write_text(yaml.safe_dump(data))
    home = tmp_path / "home"
    result = run_belay(home, "run", str(manifest))
    assert result.returncode != 0
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: openai-agents: no provider is configured") and "OPENAI_API_KEY" in line
    assert read_events(home, SESSION) == []
