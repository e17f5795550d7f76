"""Held secrets in every shape a tool can print them, and secrets of no known format.

Each shape first on its own (pure functions: the secret's value is asserted absent from what would
be recorded, and the marker names the detector), then through a real `belay run` whose harness holds
a canary `OPENAI_API_KEY` of no vendor's shape and whose plan prints it from a file declared as
input (the sandbox's environment is clean): raw, base64, hex, in two halves on two lines and in two
halves across two commands, with an unheld `sk-` key, an unheld AWS secret key on its own and a
random value beside `token:`. None of them is in the record's bytes; with the redaction switched
off (`BELAY_REDACTION=off`) every one of them is, so the check can fail.
"""

from __future__ import annotations

import base64
import json
import os
import string
from pathlib import Path

import pytest

from belay.harness.redaction import REDACTION_ENV, HeldSecret, Redactor, held_secrets, marker, redact_text
from tests.scripted import write_scripted_session
from tests.security.test_redaction import ALNUM, _random, belay

SESSION = "canary"
NAME = "OPENAI_API_KEY"


def canary() -> str:
    """A provider key of no vendor's exact shape: detect-secrets' OpenAI detector misses it."""
    return "sk-" + _random(ALNUM, 8) + "-" + _random(ALNUM, 30)


def aws_secret_key() -> str:
    while True:  # a random one with both cases and a digit, as real ones have
        key = _random(ALNUM + "/+", 40)
        if all(any(test(c) for c in key) for test in (str.isdigit, str.isupper, str.islower)):
            return key


def held_redactor(value: str) -> Redactor:
    return Redactor(held=held_secrets({NAME: value}))


def shapes(value: str) -> dict[str, str]:
    half = len(value) // 2
    return {
        "raw": f"printed {value} here",
        "base64": base64.b64encode(value.encode()).decode() + "\n",
        "base64 inside a longer text": base64.b64encode(f"KEY={value}\nmore\n".encode()).decode(),
        "base64 wrapped at 76 columns": _wrapped(base64.b64encode(f"{'x' * 50}{value}".encode()).decode()),
        "hex": value.encode().hex() + "\n",
        "hex upper case": value.encode().hex().upper(),
        "split across lines": f"{value[:half]}\n{value[half:]}\n",
        "split unevenly across lines": f"{value[:3]}\r\n{value[3:]}",
    }


def _wrapped(text: str) -> str:
    return "\n".join(text[i : i + 76] for i in range(0, len(text), 76))


@pytest.mark.parametrize("shape", list(shapes("x" * 40)))
def test_a_held_value_is_redacted_in_every_shape(shape: str) -> None:
    # Of no format at all, so only holding it finds it; fixed, because a random one's base64 can
    # spell a secret-like name ("kEy") that the name detector then follows, and the control fails.
    value = "Zq8vN2mW4tR7pL1xC9bH3sD6fJ0gA5yU"
    text = shapes(value)[shape]
    plain = Redactor().output(text).value
    redacted = held_redactor(value).output(text)
    # Without holding the value, the detectors alone leave it (or its encoding) in the text: the
    # check below sees it. Held, it is gone, in every form.
    assert _leaks(plain, value) and not _leaks(redacted.value, value)
    detector = {"raw": "", "base64 wrapped at 76 columns": " base64 split"}.get(shape, " " + shape.split()[0])
    assert marker(NAME + detector) in redacted.value, redacted.value
    assert redacted.count >= 1


def _leaks(text: str, value: str) -> bool:
    """Whether `text` still holds `value`, in any of the shapes above, or a half of it."""
    joined = text.replace("\r", "").replace("\n", "")
    encoded = base64.b64encode(value.encode()).decode().rstrip("=")
    forms = [value, value[: len(value) // 2], value[len(value) // 2 :], value.encode().hex(), encoded[4:-4]]
    return any(form in joined or form.upper() in joined for form in forms) or _in_base64(joined, value)


def _in_base64(text: str, value: str) -> bool:
    for offset in range(4):
        try:
            if value in base64.b64decode(text[offset:] + "===", validate=False).decode(errors="replace"):
                return True
        except ValueError:
            continue
    return False


def test_a_held_value_split_across_two_outputs_of_one_subagent_is_redacted_in_both() -> None:
    value = canary()
    redactor = held_redactor(value)
    first = redactor.output([{"stdout": f"echo {value[:20]}\n"[5:], "stderr": ""}, None], subagent="a")
    # Another subagent's output in between does not count as the rest of this one's.
    other = redactor.output([{"stdout": value[20:], "stderr": ""}, None], subagent="b")
    second = redactor.output([{"stdout": value[20:] + "\n", "stderr": ""}, None], subagent="a")
    assert value[:20] not in json.dumps(first.value) and value[20:] not in json.dumps(second.value)
    assert first.value[0]["stdout"] == marker(f"{NAME} split") + "\n"
    assert second.value[0]["stdout"] == marker(f"{NAME} split") + "\n"
    assert other.value[0]["stdout"] == value[20:], (
        "a piece on its own, of another subagent's, is not a secret"
    )
    # Without the subagent's previous output the second half alone is not found: the tail is what
    # finds it.
    assert held_redactor(value).output([{"stdout": value[20:] + "\n"}, None]).value[0]["stdout"] == (
        value[20:] + "\n"
    )


def test_a_sandbox_token_the_harness_learns_is_held() -> None:
    token = _random(ALNUM + "-_", 43)
    redactor = Redactor().holding(token, "sandbox token")
    assert redactor.output(f"Authorization: Bearer {token}").value == (
        f"Authorization: Bearer {marker('sandbox token')}"
    )
    assert Redactor(enabled=False).holding(token, "sandbox token").output(token).value == token


def test_store_credentials_in_a_json_spec_are_held(tmp_path: Path) -> None:
    key_file = tmp_path / "record-key"
    key_file.write_text("0123456789abcdef0123456789abcdef\n")
    spec = {
        "backend": "s3",
        "bucket": "belay",
        "secret_key": "Wq3rT5yU7iO9pA1s",
        "record_key_file": str(key_file),
    }
    held = {s.value: s.kind for s in held_secrets({"BELAY_ARTIFACT_STORE": json.dumps(spec)})}
    assert held == {
        "Wq3rT5yU7iO9pA1s": "BELAY_ARTIFACT_STORE.secret_key",
        "0123456789abcdef0123456789abcdef": "BELAY_ARTIFACT_STORE.record_key_file",
    }


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        ("export KEY=sk-" + "Ab3dE6gH9jK2mN5pQ8rS1tV4", "sk-Ab3dE6gH9jK2mN5pQ8rS1tV4", "Provider API Key"),
        (
            "use sk-ant-api03-Zx9Qw3Er5Ty7Ui1Op0Lk2Jh now",
            "sk-ant-api03-Zx9Qw3Er5Ty7Ui1Op0Lk2Jh",
            "Provider API Key",
        ),
        (
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLE12\n",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLE12",
            "AWS Secret Access Key",
        ),
        ("the session token: Zx9Qw3Er5Ty7Ui1Op", "Zx9Qw3Er5Ty7Ui1Op", "High Entropy Beside A Secret Name"),
        ("the api key is Q7w8E9r0T1y2U3i4O5p6", "Q7w8E9r0T1y2U3i4O5p6", "High Entropy Beside A Secret Name"),
        ("X-Secret aB3dE6gH9jK2mN5pQ8rS", "aB3dE6gH9jK2mN5pQ8rS", "High Entropy Beside A Secret Name"),
    ],
)
def test_secrets_of_no_vendor_format_are_redacted(text: str, secret: str, kind: str) -> None:
    redacted, count = redact_text(text, (), assignments=True)
    assert secret not in redacted and marker(kind) in redacted, redacted
    assert count == 1


def test_words_hashes_and_identifiers_beside_secret_names_are_kept() -> None:
    text = "\n".join(
        [
            "cache key: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "the token parser handles every_identifier_name_in_snake_case",
            "secret rotation runs monthly for all environments",
            "sk-some-long-identifier-of-words",
            "commit 3f786850e387550fdab836ed7e6dc881de23001b",
            "key_for_the_configuration_parser_module",
            "ThisIsAnIdentifierOfFortyCharactersLongX",
        ]
    )
    assert redact_text(text, (), assignments=True) == (text, 0)


def test_requests_drop_sk_keys_but_keep_random_values_beside_names() -> None:
    """What a tool is asked runs as recorded: only the near-certain shapes are taken there."""
    request = {"command": "curl -H 'token: Zx9Qw3Er5Ty7Ui1Op' -d sk-Ab3dE6gH9jK2mN5pQ8rS1tV4"}
    redacted = Redactor().arguments(request)
    assert redacted.value == {
        "command": f"curl -H 'token: Zx9Qw3Er5Ty7Ui1Op' -d {marker('Provider API Key')}"
    }


def test_held_values_are_never_in_the_redactors_repr() -> None:
    value = canary()
    redactor = held_redactor(value)
    redactor.output(value[:20], subagent="a")
    assert value[:20] not in repr(redactor.tails.keys()) and "tails" not in repr(redactor)
    assert HeldSecret(value, NAME) in redactor.held


# --------------------------------------------------------------------------------------------------
# A real `belay run`


def canary_session(directory: Path, value: str, unheld: dict[str, str]) -> Path:
    inputs = directory / "inputs"
    inputs.mkdir(parents=True)
    (inputs / "canary").write_text(value)
    (inputs / "others.txt").write_text(
        f"provider {unheld['sk']}\n{unheld['aws']}\nthe session token: {unheld['token']}\n"
    )
    commands = [
        "cat cfg/canary; echo",
        "base64 -w0 cfg/canary; echo",
        "od -An -tx1 cfg/canary | tr -d ' \\n'; echo",
        "head -c 20 cfg/canary; echo; tail -c +21 cfg/canary; echo",
        "head -c 17 cfg/canary",  # the first half of a value, and the rest in the next output
        "tail -c +18 cfg/canary; echo",
        "cat cfg/others.txt",
    ]
    steps = [
        {
            "id": "print",
            "title": "Print the configuration",
            "actions": [{"tool": "run_command", "arguments": {"command": command}} for command in commands],
        }
    ]
    agent = {
        "name": "agent",
        "networkProfile": "none",
        "inputs": [{"source": str(inputs), "target": "cfg", "hostPath": True}],
        "declared": ["cfg/*"],
    }
    return write_scripted_session(directory, SESSION, "Print the configuration.", [agent], {"agent": steps})


@pytest.mark.parametrize("redaction", ["on", "off"])
def test_a_canary_in_every_shape_never_reaches_the_record_of_a_real_run(
    tmp_path: Path, redaction: str
) -> None:
    value = canary()
    unheld = {
        "sk": "sk-" + _random(ALNUM, 32),
        "aws": aws_secret_key(),
        "token": _random(string.digits, 4) + "aB" + _random(ALNUM, 18),
    }
    manifest = canary_session(tmp_path, value, unheld)
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8", NAME: value}
    if redaction == "off":
        environment[REDACTION_ENV] = "off"
    home = tmp_path / "home"
    run = belay(home, environment, "run", str(manifest))
    assert run.returncode == 0, run.stdout + run.stderr
    events = belay(home, environment, "events", SESSION, "--json")
    assert events.returncode == 0, events.stderr
    record = events.stdout
    harness_log = (home / "sessions" / SESSION / "logs" / "harness.log").read_text()
    half = 17
    forms = {
        "raw": value,
        "base64": base64.b64encode(value.encode()).decode(),
        "hex": value.encode().hex(),
        "first half": value[:half],
        "second half": value[half:],
        **unheld,
    }
    leaked = {name for name, form in forms.items() if form in record or form in harness_log}
    if redaction == "off":
        assert leaked == set(forms)  # the same check, with nothing in between, finds every one
        return
    assert leaked == set()
    for kind in [NAME, f"{NAME} base64", f"{NAME} hex", f"{NAME} split", "Provider API Key"]:
        assert marker(kind) in record, kind
    for kind in ["AWS Secret Access Key", "High Entropy Beside A Secret Name"]:
        assert marker(kind) in record, kind
    results = [json.loads(line)["payload"] for line in record.splitlines() if '"tool_result"' in line]
    stdout = [r["output"]["stdout"] for r in results if "stdout" in (r.get("output") or {})]
    assert stdout[4] == marker(f"{NAME} split") and stdout[5] == marker(f"{NAME} split") + "\n"
