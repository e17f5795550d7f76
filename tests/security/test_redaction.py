"""Secrets never reach the record.

The detectors and the held values on their own (pure functions), then a real `belay run` whose
harness holds AWS, GitHub and OpenAI credentials in its environment and whose tools read a `.env`
file, an AWS credentials file and a note carrying those values, print them, dump the harness's
environment through /proc when the sandbox lets them, and pass a held secret in their arguments:
no secret appears in `belay events --json`, the harness log, the run's output or the briefing,
which counts what was redacted. The same run with the redaction switched off
(`BELAY_REDACTION=off`) shows every one of them: the check can fail.
"""

from __future__ import annotations

import json
import os
import secrets
import string
import subprocess
from pathlib import Path

import pytest

from belay.api.agentsession import SubagentSpec
from belay.harness.harness_tools import run_in_harness
from belay.harness.redaction import (
    REDACTION_ENV,
    HeldSecret,
    Redactor,
    held_secrets,
    marker,
    redact_text,
    redact_value,
)
from belay.harness.runtime import ToolRuntime
from belay.journal.events import EffectClass, ToolRequest, ToolResult
from tests.belay_cli import belay_command
from tests.scripted import write_scripted_session

SESSION = "leaky"


def _random(alphabet: str, length: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


ALNUM = string.ascii_letters + string.digits


def planted() -> dict[str, str]:
    """Fresh credentials, shaped like the real ones."""
    return {
        "AWS_SECRET_ACCESS_KEY": _random(ALNUM + "/+", 40),
        "GITHUB_TOKEN": "ghp_" + _random(ALNUM, 36),
        "OPENAI_API_KEY": "sk-proj-" + _random(ALNUM, 48),
    }


# --------------------------------------------------------------------------------------------------
# What the harness holds


def test_credentials_in_the_environment_are_held_by_name_and_other_variables_are_not() -> None:
    environment = {
        **planted(),
        "BELAY_EVENT_STORE": "etcd://root:Zq8wNv3kLm2p@etcd:2379",
        "BELAY_SESSION": "parser-fix-session",
        "BELAY_SESSION_SPEC": '{"stores": {"secretRef": "belay-stores"}}',
        "PATH": "/usr/local/bin:/usr/bin",
        "HOME": "/home/someone",
        "API_TOKEN": "short",
    }
    held = {secret.value: secret.kind for secret in held_secrets(environment)}
    for name in planted():
        assert held[environment[name]] == name
    # A password inside an ordinary variable is found by the detectors, not the whole value.
    assert held["Zq8wNv3kLm2p"] == "BELAY_EVENT_STORE"
    assert "etcd://root:Zq8wNv3kLm2p@etcd:2379" not in held
    for ordinary in ("parser-fix-session", "/usr/local/bin:/usr/bin", "/home/someone", "belay-stores"):
        assert ordinary not in held
    assert "short" not in held  # too short to redact without hiding ordinary text


def test_files_named_by_credential_variables_are_read_and_held(tmp_path: Path) -> None:
    tokens = tmp_path / "sandbox-tokens"
    tokens.mkdir()
    (tokens / "researcher").write_text("tok-researcher-0123456789\n")
    (tokens / "implementer").write_text("tok-implementer-0123456789")
    key_file = tmp_path / "record-key"
    key_file.write_text("4f1c2a9e8d7b6c5a4f1c2a9e8d7b6c5a\n")
    environment = {
        "BELAY_SANDBOX_TOKEN_DIR": str(tokens),
        "BELAY_RECORD_KEY_FILE": str(key_file),
        "BELAY_MISSING_SECRET_FILE": str(tmp_path / "absent"),
    }
    held = {secret.value: secret.kind for secret in held_secrets(environment)}
    assert held == {
        "tok-researcher-0123456789": "BELAY_SANDBOX_TOKEN_DIR",
        "tok-implementer-0123456789": "BELAY_SANDBOX_TOKEN_DIR",
        "4f1c2a9e8d7b6c5a4f1c2a9e8d7b6c5a": "BELAY_RECORD_KEY_FILE",
    }


# --------------------------------------------------------------------------------------------------
# Redacting text


def test_every_held_value_is_replaced_wherever_it_appears() -> None:
    credentials = planted()
    held = held_secrets(credentials)
    text = "\n".join(f"{name}={value}" for name, value in credentials.items())
    text += (
        f"\nunlabelled: {credentials['AWS_SECRET_ACCESS_KEY']}; reversed? no: {credentials['GITHUB_TOKEN']}"
    )
    redacted, count = redact_text(text, held, assignments=True)
    for name, value in credentials.items():
        assert value not in redacted
        assert marker(name) in redacted
    assert count == 5


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        ("aws_access_key_id = AKIAQWERTYUIOPASDFGH", "AKIAQWERTYUIOPASDFGH", "AWS Access Key"),
        (
            "aws_secret_access_key = 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",
            "Hq3/9xVbN2mK8pL0sT4uW7yZ1aC5eG6iJ+oR2dF4",
            "Secret Keyword",
        ),
        ("DB_PASSWORD=correct-horse-battery-staple", "correct-horse-battery-staple", "Secret Keyword"),
        ("DB_PASSWORD=!correct-horse", "!correct-horse", "Secret Keyword"),
        (
            "aws_secret_access_key = +Hq3/9xVbN2mK8pL0sT4uW7yZ1aC5eG6iJ+oR2dF",
            "+Hq3/9xVbN2mK8pL0sT4uW7yZ1aC5eG6iJ+oR2dF",
            "Secret Keyword",
        ),
        ("password: '#1 choice'", "#1 choice", "Secret Keyword"),
        ('{"password": "s3cr3t-Pa55word"}', "s3cr3t-Pa55word", "Secret Keyword"),
        (
            "git clone https://deploy:Xy7pQ2rT9wLm@git.example.com/repo.git",
            "Xy7pQ2rT9wLm",
            "Basic Auth Credentials",
        ),
        (
            "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 in prose",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "GitHub Token",
        ),
        (
            "export STRIPE=sk_live_4eC39HqLyjWDarjtT1zdp7dc",
            "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
            "Stripe Access Key",
        ),
        (
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0."
            "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "JSON Web Token",
        ),
    ],
)
def test_the_detectors_find_credentials_of_known_shapes(text: str, secret: str, kind: str) -> None:
    redacted, count = redact_text(text, (), assignments=True)
    assert secret not in redacted
    assert marker(kind) in redacted
    assert count == 1


def test_a_private_key_is_redacted_from_its_header_to_its_footer() -> None:
    body = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
    key = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n{body[::-1]}\n-----END OPENSSH PRIVATE KEY-----"
    text = f"before\n{key}\nafter"
    redacted, count = redact_text(text, (), assignments=True)
    assert redacted == f"before\n{marker('Private Key')}\nafter"
    assert count == 1
    cut_off, _ = redact_text(f"-----BEGIN RSA PRIVATE KEY-----\n{body}", (), assignments=True)
    assert body not in cut_off


def test_hashes_code_and_placeholders_are_not_taken_for_secrets() -> None:
    text = "\n".join(
        [
            "commit 3f786850e387550fdab836ed7e6dc881de23001b",
            '{"sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}',
            'SECRET_KEY = os.environ["SECRET_KEY"]',
            "password = get_password()",
            "api_key: ${API_KEY}",
            "def parse(token): return token.strip()",
            "server at 203.0.113.7 answered",
        ]
    )
    assert redact_text(text, (), assignments=True) == (text, 0)


def test_redaction_is_idempotent() -> None:
    credentials = planted()
    held = held_secrets(credentials)
    text = "\n".join(f"{name}={value}" for name, value in credentials.items())
    text += "\naws_access_key_id = AKIAQWERTYUIOPASDFGH\npassword: hunter2hunter2\n"
    once, count = redact_text(text, held, assignments=True)
    assert count == 5
    assert redact_text(once, held, assignments=True) == (once, 0)


def test_arguments_keep_assignments_but_lose_held_values_and_known_shapes() -> None:
    """A request runs as recorded, so what it is asked is not scanned for `password = ...`
    (common in code a model writes); held values and token shapes are still replaced."""
    credentials = planted()
    redactor = Redactor(held=held_secrets(credentials))
    content = 'password = "h0rse-battery-value"\n'
    request = {
        "content": content,
        "command": f"curl -H 'Authorization: token {credentials['GITHUB_TOKEN']}' https://example.com",
        "nested": [{"key": f"AKIAQWERTYUIOPASDFGH {credentials['OPENAI_API_KEY']}"}],
    }
    redacted = redactor.arguments(request)
    assert redacted.value["content"] == content
    assert credentials["GITHUB_TOKEN"] not in redacted.value["command"]
    assert redacted.value["nested"] == [{"key": f"{marker('AWS Access Key')} {marker('OPENAI_API_KEY')}"}]
    assert redacted.count == 3
    output = redactor.output({"content": content})
    assert output.value == {"content": f'password = "{marker("Secret Keyword")}"\n'} and output.count == 1


def test_values_are_walked_and_other_types_kept() -> None:
    held = (HeldSecret("hunter2hunter2", "DB_PASSWORD"),)
    value = {"exit_code": 0, "ok": True, "lines": ("a hunter2hunter2", ["hunter2hunter2"]), "none": None}
    redacted = redact_value(value, held, assignments=False)
    assert redacted.value == {
        "exit_code": 0,
        "ok": True,
        "lines": (f"a {marker('DB_PASSWORD')}", [marker("DB_PASSWORD")]),
        "none": None,
    }
    assert redacted.count == 2


def test_the_switch_turns_redaction_off() -> None:
    credentials = planted()
    off = Redactor.from_environment({**credentials, REDACTION_ENV: "off"})
    text = f"GITHUB_TOKEN={credentials['GITHUB_TOKEN']}"
    assert off.output(text).value == text
    assert (
        Redactor.from_environment(credentials).output(text).value == f"GITHUB_TOKEN={marker('GITHUB_TOKEN')}"
    )


async def test_a_result_a_harness_tool_builds_is_redacted_like_any_other() -> None:
    """An error text made from what a tool was given (here a note kind holding a password, which
    the request keeps: assignments are not scanned in requests) is scanned before it is recorded."""
    runtime = ToolRuntime(attempt=None, artifacts=None, recovery=None, redactor=Redactor())  # type: ignore[arg-type]
    request = ToolRequest(
        operation_id="agent.look.1",
        tool="record_note",
        arguments={"note_id": "n", "kind": "password=hunter2hunter2", "text": "a note"},
        effect=EffectClass.IDEMPOTENT,
    )
    [result] = await run_in_harness(runtime, SubagentSpec(name="agent"), request)
    assert isinstance(result, ToolResult) and result.error is not None
    assert "hunter2hunter2" not in result.error and marker("Secret Keyword") in result.error
    assert result.redactions == 1


# --------------------------------------------------------------------------------------------------
# A real `belay run`

# Walks up from the command to the `belay` process and prints its environment: the attack the
# sandbox walls stop; without them, the redaction is what keeps the result out of the record.
HARNESS_ENVIRONMENT = (
    'p=$$; while [ "$p" -gt 1 ]; do '
    "if tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q belay.cli.main; then "
    "tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null; fi; "
    "p=$(awk '{print $4}' /proc/$p/stat 2>/dev/null || echo 1); done; true"
)


def leaky_session(directory: Path, credentials: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """A session whose tools read and print secrets. Returns the manifest and every secret value
    planted anywhere (the harness's environment and the files)."""
    files = {
        # Values that begin with punctuation too (detect-secrets' keyword pattern misses those).
        "DATABASE_PASSWORD": "!" + _random(ALNUM, 19),
        "aws_secret_access_key": "/" + _random(ALNUM + "/+", 39),
        "aws_access_key_id": "AKIA" + _random(string.ascii_uppercase + string.digits, 16),
        "STRIPE_SECRET_KEY": "sk_live_" + _random(ALNUM, 24),
    }
    inputs = directory / "inputs"
    (inputs / "aws").mkdir(parents=True)
    (inputs / ".env").write_text(
        f"OPENAI_API_KEY={credentials['OPENAI_API_KEY']}\n"
        f"DATABASE_PASSWORD={files['DATABASE_PASSWORD']}\n"
        f"STRIPE_SECRET_KEY={files['STRIPE_SECRET_KEY']}\n"
        "DEBUG=true\n"
    )
    (inputs / "aws" / "credentials").write_text(
        "[default]\n"
        f"aws_access_key_id = {files['aws_access_key_id']}\n"
        f"aws_secret_access_key = {files['aws_secret_access_key']}\n"
        "region = eu-west-1\n"
    )
    (inputs / "notes.txt").write_text(
        f"deploy with {credentials['GITHUB_TOKEN']}\nthe backup key: {credentials['AWS_SECRET_ACCESS_KEY']}\n"
    )
    steps = [
        {
            "id": "look",
            "title": "Read the configuration",
            "actions": [
                {
                    "tool": "run_command",
                    "arguments": {"command": "cat .env aws/credentials notes.txt", "cwd": "cfg"},
                },
                {"tool": "read_file", "arguments": {"path": "cfg/.env"}},
                {"tool": "read_file", "arguments": {"path": "cfg/aws/credentials"}},
                {"tool": "read_file", "arguments": {"path": "cfg/notes.txt"}},
                {"tool": "run_command", "arguments": {"command": HARNESS_ENVIRONMENT}},
            ],
        },
        {
            "id": "use",
            "title": "Use a credential",
            "actions": [
                {
                    "tool": "run_command",
                    "arguments": {"command": f"echo token={credentials['GITHUB_TOKEN']}"},
                },
                {
                    "tool": "write_file",
                    "arguments": {
                        "path": "out/config.json",
                        "content": json.dumps({"openai": credentials["OPENAI_API_KEY"]}),
                    },
                },
                {"tool": "read_file", "arguments": {"path": "out/config.json"}},
                {
                    "tool": "record_note",
                    "arguments": {
                        "note_id": "seen",
                        "kind": "finding",
                        "text": f"the key is {credentials['AWS_SECRET_ACCESS_KEY']}",
                    },
                },
            ],
        },
    ]
    agent = {
        "name": "agent",
        "networkProfile": "none",
        "inputs": [{"source": str(inputs), "target": "cfg", "hostPath": True}],
        "declared": ["cfg/*", "out/*"],
    }
    goal = "Read the service's configuration and report what it uses."
    manifest = write_scripted_session(directory, SESSION, goal, [agent], {"agent": steps})
    return manifest, {**credentials, **files}


def belay(home: Path, environment: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        belay_command(home, *args), capture_output=True, text=True, timeout=180, env=environment, check=False
    )


@pytest.mark.parametrize("redaction", ["on", "off"])
def test_planted_secrets_never_reach_the_record_of_a_real_run(tmp_path: Path, redaction: str) -> None:
    credentials = planted()
    manifest, every_secret = leaky_session(tmp_path, credentials)
    # The harness's environment is these credentials and what a shell needs, nothing of the
    # machine the test runs on (the command below prints it).
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8", **credentials}
    if redaction == "off":
        environment[REDACTION_ENV] = "off"
    home = tmp_path / "home"

    run = belay(home, environment, "run", str(manifest))
    assert run.returncode == 0, run.stdout + run.stderr
    events = belay(home, environment, "events", SESSION, "--json")
    brief = belay(home, environment, "brief", SESSION)
    assert events.returncode == 0 and brief.returncode == 0
    harness_log = (home / "sessions" / SESSION / "logs" / "harness.log").read_text()
    where = {
        "belay events --json": events.stdout,
        "the harness log": harness_log,
        "belay run's output": run.stdout + run.stderr,
        "belay brief": brief.stdout,
    }
    leaks = sorted(
        f"{name} in {place}"
        for name, value in every_secret.items()
        for place, text in where.items()
        if value in text
    )
    recorded = [json.loads(line) for line in events.stdout.splitlines()]
    counted = sum(
        e["payload"].get("redactions", 0) for e in recorded if e["type"] in ("tool_request", "tool_result")
    )

    if redaction == "off":
        # The same check, with nothing between the tools and the record: it finds every secret.
        leaked = {leak.split(" in ")[0] for leak in leaks if leak.endswith("in belay events --json")}
        assert leaked == set(every_secret)
        assert counted == 0 and "redacted" not in brief.stdout
        return

    assert leaks == []
    for kind in [*credentials, "Secret Keyword", "AWS Access Key"]:
        assert marker(kind) in events.stdout, kind
    # Every planted value passed through a tool at least once; the briefing counts each redaction.
    assert counted >= len(every_secret)
    assert f"{counted} secrets redacted from tool requests and results" in brief.stdout
    # The request ran as recorded: the sandbox got the marker, never the token.
    echoed = next(
        e for e in recorded if e["type"] == "tool_result" and e["payload"]["operation_id"] == "agent.use.1"
    )
    assert echoed["payload"]["output"]["stdout"] == f"token={marker('GITHUB_TOKEN')}\n"
