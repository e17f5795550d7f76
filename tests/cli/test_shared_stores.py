"""`belay run` of the example with `spec.stores` naming the test environment's etcd and S3: the
record is in etcd and the artifacts in S3, not in the home, and `belay brief` from another
directory, given the same stores, shows the finished session and where its record is."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
from pathlib import Path

import pytest
import yaml

from belay.journal.state import fold
from belay.stores.factory import open_artifact_store, open_event_store
from tests.belay_cli import run_belay
from tests.harness.example import EXAMPLE, SESSION
from tests.testenv.s3 import S3Server

pytestmark = pytest.mark.testenv


def s3_environment(s3: S3Server) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": s3.access_key,
        "AWS_SECRET_ACCESS_KEY": s3.secret_key,
        "AWS_ENDPOINT_URL": s3.endpoint_url,
        "AWS_REGION": s3.region,
    }


def test_run_on_shared_stores_and_brief_from_elsewhere(
    tmp_path: Path, etcd_endpoint: str, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"run-{secrets.token_hex(4)}"
    bucket = f"belay-{prefix}"
    s3_server.client().create_bucket(Bucket=bucket)
    events_url = f"etcd://{etcd_endpoint.removeprefix('http://')}/{prefix}"
    artifacts_url = f"s3://{bucket}/artifacts"
    example = tmp_path / "example"
    shutil.copytree(EXAMPLE, example)
    manifest = yaml.safe_load((example / "session.yaml").read_text())
    manifest["spec"]["stores"] = {"events": events_url, "artifacts": artifacts_url}
    (example / "session.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    environment = s3_environment(s3_server)

    home = tmp_path / "laptop"
    result = run_belay(home, "run", "--quiet", str(example / "session.yaml"), environment=environment)
    assert result.returncode == 0, result.stderr
    assert not (home / "events.db").exists()  # the record is not in the home
    assert not any((home / "artifacts").glob("**/*"))

    async def read_record() -> list:
        store = open_event_store(events_url)
        try:
            return await store.read(SESSION)
        finally:
            await store.close()

    events = asyncio.run(read_record())
    state = fold(events)
    assert state.lifecycle.completed
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    artifacts = open_artifact_store(artifacts_url)
    for name in ("report.md", "fix.patch"):
        assert artifacts.exists(state.artifacts[name].ref.sha256)

    # The same home needs nothing more: its entry for the session names the stores.
    same_home = run_belay(home, "brief", SESSION, "--json", environment=environment)
    assert same_home.returncode == 0, same_home.stderr
    assert json.loads(same_home.stdout)["record"] == events_url

    elsewhere = tmp_path / "elsewhere"
    unknown = run_belay(elsewhere, "brief", SESSION, environment=environment)
    assert unknown.returncode == 1 and unknown.stderr.startswith("error: unknown session")

    brief = run_belay(
        elsewhere,
        "brief",
        SESSION,
        "--json",
        "--events",
        events_url,
        "--artifacts",
        artifacts_url,
        environment=environment,
    )
    assert brief.returncode == 0, brief.stderr
    shown = json.loads(brief.stdout)
    assert shown["phase"] == "Succeeded"
    assert shown["last_seq"] == events[-1].seq
    assert shown["record"] == events_url
    assert shown["artifact_store"] == artifacts_url
    reviewed = {item["name"]: item for item in shown["ready_for_review"]}
    assert {"report.md", "fix.patch"} <= set(reviewed)

    text = run_belay(elsewhere, "brief", SESSION, environment={**environment, "BELAY_EVENTS": events_url})
    assert text.returncode == 0, text.stderr
    assert f"events: {events_url}" in text.stdout

    fetched = run_belay(
        elsewhere,
        "--events",
        events_url,
        "--artifacts",
        artifacts_url,
        "artifacts",
        "get",
        SESSION,
        "fix.patch",
        "-o",
        str(tmp_path / "fix.patch"),
        environment=environment,
    )
    assert fetched.returncode == 0, fetched.stderr
    page = tmp_path / "report.html"
    reported = run_belay(
        elsewhere,
        "report",
        SESSION,
        "-o",
        str(page),
        environment={**environment, "BELAY_EVENTS": events_url, "BELAY_ARTIFACTS": artifacts_url},
    )
    assert reported.returncode == 0, reported.stderr
    assert f"{s3_server.endpoint_url}/{bucket}/artifacts/" in page.read_text()  # presigned links
    assert (tmp_path / "fix.patch").read_bytes() == artifacts.get(state.artifacts["fix.patch"].ref.sha256)


def test_a_bad_store_url_is_one_error_line(tmp_path: Path) -> None:
    result = run_belay(tmp_path / "home", "--events", "mysql://db/belay", "sessions")
    assert result.returncode == 1
    assert result.stderr.startswith("error: cannot open the event store mysql://db/belay")
    assert "Traceback" not in result.stderr
