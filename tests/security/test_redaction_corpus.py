"""The redactor measured on real source and configuration: no finding at all (a budget of 0), and
every secret planted into it found, in every spelling the redactor claims to read.

The corpus is a fixed sample, so that it runs in seconds: the files of this machine's Python
standard library (its test suites left out: they plant credentials on purpose, as
tests/security does) and of the project's Python (operator, tests less the redaction tests that
plant secrets, bench) taken in the order of the SHA-256 of their paths until each reaches its
size, and all of the project's Kubernetes manifests (the chart's templates and CRDs, crds/,
examples/, argocd/, hack/) and its CI configuration (.ci/run, the Makefile, pyproject.toml).
docs/security.md gives the figures of the whole corpus.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest

from belay.harness.redaction import Redactor, held_secrets, redact_text

ROOT = Path(__file__).resolve().parents[2]
STDLIB = Path(sysconfig.get_paths()["stdlib"])
STDLIB_SAMPLE_BYTES = 600_000
PROJECT_PYTHON_SAMPLE_BYTES = 400_000
_TEST_SUITES = {"test", "tests", "idle_test"}


def _sample(files: list[Path], base: Path, size: int) -> list[Path]:
    ordered = sorted(files, key=lambda p: hashlib.sha256(str(p.relative_to(base)).encode()).hexdigest())
    taken, total = [], 0
    for path in ordered:
        if total >= size:
            break
        taken.append(path)
        total += path.stat().st_size
    return taken


def corpus() -> list[Path]:
    stdlib = [
        p
        for p in STDLIB.rglob("*.py")
        if not ({"site-packages", "dist-packages"} | _TEST_SUITES) & set(p.relative_to(STDLIB).parts)
    ]
    project_python = [
        p
        for folder in ("operator", "tests", "bench")
        for p in (ROOT / folder).rglob("*.py")
        if not p.name.startswith("test_redaction")
    ]
    manifests = [
        p
        for folder in ("charts", "crds", "examples", "argocd", "hack")
        for p in sorted((ROOT / folder).rglob("*"))
        if p.is_file() and p.suffix in (".yaml", ".yml", ".json", ".tpl", ".sh", "")
    ]
    ci = [ROOT / ".ci" / "run", ROOT / "Makefile", ROOT / "pyproject.toml"]
    return (
        _sample(stdlib, STDLIB, STDLIB_SAMPLE_BYTES)
        + _sample(project_python, ROOT, PROJECT_PYTHON_SAMPLE_BYTES)
        + manifests
        + [p for p in ci if p.exists()]
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        return None


def test_the_corpus_has_no_finding() -> None:
    files = corpus()
    texts = {path: text for path in files if (text := _read(path)) is not None}
    assert sum(len(t) for t in texts.values()) > 1_200_000 and len(texts) > 100
    findings = {}
    for path, text in texts.items():
        redacted, count = redact_text(text, (), assignments=True)
        if count:
            findings[str(path)] = [line for line in redacted.splitlines() if "[REDACTED:" in line]
    assert findings == {}


# --------------------------------------------------------------------------------------------------
# Planted secrets

HELD = {
    "OPENAI_API_KEY": "sk-Q7wE9rT1-yU3iO5pA7sD9fG1hJ3kL5zX7cV9bN1m",
    "BELAY_RECORD_KEY": "r3c0rd/K3y+Vb8Nm2Qw4Er6Ty8Ui0Op",
}
# One of each kind the detectors claim, none ever issued, each with the text that carries it.
DETECTED = {
    "AWS Access Key": ("aws_access_key_id = ", "AKIAQ7WE9RT1YU3IO5PA"),
    "AWS Secret Access Key": ("", "u7Rk2Qp9Xv/Lm4Tz8Wc1Ny6Bd3Hf0Js5Ga+Ke2Pq"),
    "GitHub Token": ("remote: ", "ghp_Q7wE9rT1yU3iO5pA7sD9fG1hJ3kL5zX7cV9b"),
    "GitHub Token fine-grained": (
        "",
        "github_pat_11ABCDEFG0aBcDeFgHiJkL_Zq7Xw2Vb9Nm4Lk8Jh3Gf6Ds1Ap5Oi0Uy7Tr2Ew9Qa4Sd8Fg3Hj6Kl1Zx5Cv0Bn7M",
    ),
    "Provider API Key": ("x-api-key: ", "sk-ant-api03-Zx9Qw3Er5Ty7Ui1Op0Lk2Jh4Gf6Ds8Ap"),
    "Slack Token": ("", "xoxb-123456789012-1234567890123-q7we9rt1yu3io5pa7sd9fg1h"),
    "Stripe Access Key": ("STRIPE=", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    "JSON Web Token": (
        "Authorization: Bearer ",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
    "Private Key": (
        "-----BEGIN RSA PRIVATE KEY-----\n",
        "MIIEowIBAAKCAQEAq7wE9rT1yU3iO5pA7sD9fG1hJ3kL5zX7cV9bN1mQ\n-----END RSA PRIVATE KEY-----",
    ),
    "Basic Auth Credentials": ("git clone https://deploy:", "Xy7pQ2rT9wLm"),
    "Secret Keyword env": ("DB_PASSWORD=", "hunter2hunter2"),
    "Secret Keyword quoted": ('"password": "', "s3cr3t-Pa55word"),
    "High Entropy Beside A Secret Name": ("the session token: ", "Zx9Qw3Er5Ty7Ui1Op"),
}
_SUFFIX = {"Basic Auth Credentials": "@git.example.com/r.git", "Secret Keyword quoted": '"'}


def _grep_color(line: str) -> str:
    middle = len(line) // 2
    return f"\x1b[01;31m\x1b[K{line[:middle]}\x1b[m{line[middle:]}\x1b[m\x1b[K"


def _zero_width(line: str) -> str:
    return "".join(c + ("\u200b" if i % 3 == 2 else "") for i, c in enumerate(line))


ENCODINGS: dict[str, Callable[[str], str]] = {
    "as it is": lambda line: line,
    "json": lambda line: json.dumps(line)[1:-1].replace("/", "\\/"),
    "json unicode": lambda line: "".join(c if c.isalnum() else f"\\u{ord(c):04x}" for c in line),
    "html": lambda line: html.escape(line).replace("/", "&#47;").replace("-", "&#x2d;"),
    "ansi colour": _grep_color,
    "zero-width": _zero_width,
    "utf-16": lambda line: line.encode("utf-16-le").decode(),
    # Upper case is a held value's only: the token formats are case-sensitive, and an upper-cased
    # token of a secret the harness does not hold is no longer that token.
    "upper case": str.upper,
}


def _readable(text: str) -> str:
    """What a person reading `text` sees, by the test's own means."""
    for _ in range(2):
        text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
        text = html.unescape(text.replace("\\/", "/").replace('\\"', '"').replace("\\n", "\n"))
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    return re.sub("[\x00\u200b]", "", text).lower()


CARRIERS = {
    "python": lambda: STDLIB / "configparser.py",
    "manifest": lambda: ROOT / "charts" / "belay" / "templates" / "deployment.yaml",
    "ci": lambda: ROOT / ".ci" / "run",
}


@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize("carrier", list(CARRIERS))
def test_every_planted_secret_is_found(carrier: str, encoding: str) -> None:
    # Its first 200 lines, to keep each case fast.
    lines = CARRIERS[carrier]().read_text().splitlines(keepends=True)[:200]
    spell = ENCODINGS[encoding]
    planted: dict[str, str] = {name: value for name, value in HELD.items()}
    if encoding != "upper case":
        planted |= {kind: value for kind, (_, value) in DETECTED.items()}
    plants = [f"{name}={spell(value)}\n" for name, value in HELD.items()]
    if encoding != "upper case":
        plants += [
            spell(prefix + value + _SUFFIX.get(kind, "")) + "\n" for kind, (prefix, value) in DETECTED.items()
        ]
    # Spread through the file, each on its own line.
    step = max(1, len(lines) // (len(plants) + 1))
    for index, plant in reversed(list(enumerate(plants))):
        lines.insert((index + 1) * step, plant)
    text = "".join(lines)
    for name, value in planted.items():
        assert value.lower().split("\n")[0] in _readable(text), name

    redacted = Redactor(held=held_secrets(HELD)).output(text)

    readable = _readable(redacted.value)
    left = [name for name, value in planted.items() if value.lower().split("\n")[0] in readable]
    assert left == []
    assert redacted.count == len(plants)
