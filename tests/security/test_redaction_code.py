"""Code and configuration that name a secret are not secrets: the model reads them as they are.

Each line below was redacted before (`if password == [REDACTED...]`, `secret_santa = [REDACTED...]`,
`secretRef: [REDACTED...]`, `primary key: [REDACTED...]`, `Using cache key: [REDACTED...]`), so
the model read, and could write back, corrupted code. Each is left alone now; and the values the
same detectors are for, in the same places, are still found (both ways, so the tuning is pinned).
"""

from __future__ import annotations

import pytest

from belay.harness.redaction import marker, redact_text

NAMES_ONLY = [
    "if password == stored_password:",
    "  password: !vault |",
    "$randomPassword = -join ((65..90) + (97..122) | Get-Random -Count 16 | % {[char]$_})",
    "if password == expected:",
    "if password != confirmation:",
    "secret_santa = people",
    "envFrom: [{secretRef: {name: belay-stores}}]",
    "secretRef: belay-stores",
    "primary key: customerOrderId2024X",
    "the primary key is OrderLineItem2024Id",
    "Using cache key: setup-python-Linux-x64-3.11.7-pip-"
    + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "Cache restored from key: node-cache-Linux-npm-3f786850e387550fdab836ed7e6dc881de23001b",
    "def __init__(self, api_key: str | None = None) -> None:",
    "return login(user=user, password=password)",
    "pwd = None",
    "authkey=self._authkey, exposed=exposed,",
    '"AWS_SECRET_ACCESS_KEY": s3.secret_key,',
    "credentialsSecret: openai-keys",
    'raise TypeError("pwd: expected bytes, got %s" % type(pwd).__name__)',
    'fp = urlopen("http://user:pass@python.org/")',
    'b"YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXpBQkNE"',
    "RegEnumKey = win32api.RegEnumKey",
    'self.zip.open("test.txt", pwd="python")',
    "self.password = self.distribution.password",
    "password = password + b'\\x00' * (blocksize - len(password))",
    'adapter = Adapter("claude-test", base_url=url, api_key="sk-ant-test")',
]


@pytest.mark.parametrize("line", NAMES_ONLY)
def test_a_line_that_only_names_a_secret_is_left_alone(line: str) -> None:
    assert redact_text(line + "\n", (), assignments=True) == (line + "\n", 0)


@pytest.mark.parametrize(
    ("line", "secret", "kind"),
    [
        ("DB_PASSWORD=letmein", "letmein", "Secret Keyword"),
        ("export API_KEY=hunter2hunter2", "hunter2hunter2", "Secret Keyword"),
        ("password: hunter2hunter2", "hunter2hunter2", "Secret Keyword"),
        ('if password == "s3cr3t-Pa55word":', "s3cr3t-Pa55word", "Secret Keyword"),
        ('if "s3cr3t-Pa55word" == password:', "s3cr3t-Pa55word", "Secret Keyword"),
        ('client_secret = "8f2Kq-Lw9xZ3"', "8f2Kq-Lw9xZ3", "Secret Keyword"),
        ("      password: Zq8wNv3kLm2p  # the admin's", "Zq8wNv3kLm2p", "Secret Keyword"),
        ("api key: Zx9Qw3Er5Ty7Ui1Op0Lk2Jh", "Zx9Qw3Er5Ty7Ui1Op0Lk2Jh", "High Entropy Beside A Secret Name"),
        (
            "signing key: Zx9Qw3Er5Ty7Ui1Op0Lk2Jh",
            "Zx9Qw3Er5Ty7Ui1Op0Lk2Jh",
            "High Entropy Beside A Secret Name",
        ),
        ("git clone https://deploy:Xy7pQ2rT9wLm@host/r.git", "Xy7pQ2rT9wLm", "Basic Auth Credentials"),
        (
            "u7Rk2Qp9Xv/Lm4Tz8Wc1Ny6Bd3Hf0Js5Ga+Ke2Pq",
            "u7Rk2Qp9Xv/Lm4Tz8Wc1Ny6Bd3Hf0Js5Ga+Ke2Pq",
            "AWS Secret Access Key",
        ),
    ],
)
def test_a_value_beside_the_same_names_is_still_found(line: str, secret: str, kind: str) -> None:
    redacted, count = redact_text(line, (), assignments=True)
    assert secret not in redacted and marker(kind) in redacted, redacted
    assert count == 1
