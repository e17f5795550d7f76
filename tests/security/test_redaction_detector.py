"""Secrets of a known format, unheld, are redacted with the detector's name in the marker; harmless
tool output is left alone. Each case on its own, both ways, so the tuning is pinned."""

from __future__ import annotations

import pytest

from belay.harness.redaction import AWS_SECRET_KEY, GITHUB_TOKEN, PROVIDER_KEY, marker, redact_text

# Made-up values of each format, none ever issued.
GITHUB_PAT = "github_pat_11ABCDEFG0aBcDeFgHiJkL_" + (
    "Zq7Xw2Vb9Nm4Lk8Jh3Gf6Ds1Ap5Oi0Uy7Tr2Ew9Qa4Sd8Fg3Hj6Kl1Zx5Cv0Bn7M"
)
ANTHROPIC = "sk-ant-api03-" + (
    "Qw3rTy7UiOp2AsDf6GhJk9LzXc4VbNm8Qw1ErTy5UiOp0AsDf3GhJk7LzXc2VbNm6Qw9ErTy4UiOp8AsDf1Gh-AAAA"
)
OPENAI = "sk-proj-" + "Ab3De5Gh7Jk9Mn2Pq4St6Vw8Yz0Bc1Ef3Hi5Kl7No9Qr2Tu4Wx6Za8Cd0Fg2Ij4Lm6Op8Rs1Uv3Xy5"
AWS = "u7Rk2Qp9Xv/Lm4Tz8Wc1Ny6Bd3Hf0Js5Ga+Ke2Pq"


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        (f"remote: token {GITHUB_PAT} accepted", GITHUB_PAT, GITHUB_TOKEN),
        (f"x-api-key: {ANTHROPIC}", ANTHROPIC, PROVIDER_KEY),
        (f"{OPENAI}\n", OPENAI, PROVIDER_KEY),
        (f"{AWS}\n", AWS, AWS_SECRET_KEY),
    ],
    ids=["github-fine-grained", "anthropic", "openai-proj", "aws-secret-alone"],
)
def test_a_secret_of_a_known_format_is_redacted(text: str, secret: str, kind: str) -> None:
    redacted, count = redact_text(text, (), assignments=True)
    assert secret not in redacted
    assert marker(kind) in redacted
    assert count >= 1


@pytest.mark.parametrize(
    "text",
    [
        "PWD=/workspace\n",
        "ln: failed to create symbolic link 'out/x': File exists\n",
        "ln: failed to create symbolic link 'out/secret': File exists\n",
        "cat /workspace/src/parser/tokenizer.py\n",
        "PASSWORD_FILE=/run/secrets/db\n",
        "3f9c2a1b7d4e5f60718293a4b5c6d7e8f9012345 Fix the tokenizer's off-by-one\n",
        "2026-12-03 worker 1b4e28ba-2fa1-11d2-883f-0016d3cca427 started\n",
    ],
    ids=["pwd", "ln-error", "ln-error-secret-name", "path", "secret-file-path", "git-log", "uuid"],
)
def test_harmless_text_is_left_alone(text: str) -> None:
    assert redact_text(text, (), assignments=True) == (text, 0)
