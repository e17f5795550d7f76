"""Secrets never reach the record: what a tool is asked and what it answers is scanned before it is
recorded, and every secret found is replaced by a marker naming its kind, `[REDACTED:<kind>]`.

Two sources say what a secret is:

- **What the harness holds** (`held_secrets`): the exact values of its own credentials, taken from
  its environment. A variable whose name says it is a credential (a part such as KEY, SECRET,
  TOKEN, PASSWORD, CREDENTIALS, AUTH: `AWS_SECRET_ACCESS_KEY`, `GITHUB_TOKEN`, `OPENAI_API_KEY`)
  is held whole; one whose name also ends in `_FILE` or `_DIR` names files read from a Secret
  (the sandbox tokens, the record key), and their contents are held. The marker names the
  variable. A credential inside any other variable (a password in a store URL) is found by the
  detectors below and held too.
- **What looks like one** (`detect-secrets`, Yelp's scanner): its token-format
  detectors (AWS access key ids, GitHub, GitLab, OpenAI, Slack, Stripe, SendGrid, npm, PyPI,
  Twilio, Discord and Telegram tokens, JWTs, private keys (the whole block), passwords in URLs, Azure
  storage keys, ...), and for tool output its keyword detector for assignments (`password = x`,
  `aws_secret_access_key: x`, `DB_PASSWORD=x` in a `.env` file) with the library's filters for
  what is not a value (`secret = get_secret()`, `${SECRET}`, `<password>`), plus the values it
  misses because they begin with punctuation. The marker names the detector's secret type. A
  keyword, basic-auth or entropy finding stands only when its value reads as a secret, not as code
  or configuration that only names one (`belay.harness.secret_values`: `if password == expected`,
  `secretRef: belay-stores`, `Using cache key: ...` are left alone).

Both read the output as it is and its reading (`belay.harness.normalised`: escapes read, colour
codes and invisible characters removed; lower-cased for held values), and a secret found in the
reading is replaced in the exact span of the output it came from.

What a tool is asked is scanned without the keyword detector: a request runs exactly as recorded
(a resumed attempt repeats it from the record), so a false positive there would change what
runs, and the keyword heuristic has many (any string assigned to a `password` variable in code).
The entropy detectors are not used at all: every hash and checksum looks like a secret to them.

Everything here is a pure function of its inputs except `Redactor.from_environment`, which reads
the environment and the files it names.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import re
import string
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from belay.harness.held_values import held_spans, tail_of
from belay.harness.normalised import changed_regions, normalised
from belay.harness.secret_values import (
    encoded_text,
    keyword_value,
    looks_random,
    names_a_lookup_key,
    placeholder_password,
)

# Test switch: `BELAY_REDACTION=off` records tool requests and results as they are, so the
# security tests can show that their check finds a leak when the redaction is gone.
REDACTION_ENV = "BELAY_REDACTION"
# A held value shorter than this is not redacted: it would match ordinary text everywhere.
MIN_HELD_LENGTH = 8
# Files named by a credential variable ending in _FILE or _DIR: larger ones are not credentials.
MAX_SECRET_FILE_BYTES = 64 * 1024

CREDENTIAL_NAME_PARTS = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "ACCESSKEY",
        "SECRETKEY",
        "SECRET",
        "SECRETS",
        "TOKEN",
        "TOKENS",
        "AUTHTOKEN",
        "PAT",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "CREDS",
        "AUTH",
        "PRIVATE",
    }
)
FILE_NAME_SUFFIXES = ("_FILE", "_DIR")


def marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


@dataclass(frozen=True)
class HeldSecret:
    value: str
    kind: str  # the environment variable it came from


@dataclass(frozen=True)
class Redaction:
    """One result of scanning: the value with every secret replaced, and how many were."""

    value: Any
    count: int
    tail: str = ""  # the end of the raw output, kept in memory only (`redact_value`)


# --------------------------------------------------------------------------------------------------
# The detectors of detect-secrets, as (kind, pattern, secret group) for exact spans


@dataclass(frozen=True)
class _Detector:
    kind: str
    pattern: re.Pattern[str]
    # The group holding the secret (the keyword patterns'); None: the token itself (`_span`), or
    # for Belay's punctuated assignment its named group `quoted` or `bare`.
    group: int | None


# Public IP addresses are not credentials, and hiding them would blind every network diagnosis.
_NOT_SECRETS = frozenset({"Public IP (ipv4)"})
# What a token-format pattern may take in around the token itself (a leading space or `=`).
_SEPARATORS = " \t\r\n=:\"'"
# What may still belong to a token after a pattern stopped matching: a pattern that ends lazily
# (the JWT one stops before the signature) must not leave the rest of the token in the record.
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_\-.+/=]*")
_PRIVATE_KEY = "Private Key"
_BASIC_AUTH = "Basic Auth Credentials"
# The footer, by its words: its dashes may be escaped in the text (`&#x2d;`, `\u002d`).
_PRIVATE_KEY_END = re.compile(r"END[ A-Z0-9]*PRIVATE KEY[^\n]*")


@functools.cache
def _format_detectors() -> tuple[_Detector, ...]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    found = []
    plugins: dict[str, Any] = get_mapping_from_secret_type_to_class()
    for kind, plugin in sorted(plugins.items()):
        if not issubclass(plugin, RegexBasedDetector) or kind in _NOT_SECRETS:
            continue
        found += [_Detector(kind, pattern, None) for pattern in plugin.denylist]
    return tuple(found)


@functools.cache
def _keyword_detectors() -> tuple[_Detector, ...]:
    from detect_secrets.plugins.keyword import (
        CONFIG_DENYLIST_REGEX_TO_GROUP,
        DENYLIST_REGEX,
        KeywordDetector,
    )

    # The library's value pattern must begin with a letter, digit or underscore, so it misses a
    # value that begins with punctuation (`DB_PASSWORD=!x`, an AWS secret key starting with `/`
    # or `+`). Belay's one addition: the same names and assignments, any such value (quoted: up
    # to its quote; unquoted: up to a space or a comma) that is not already a marker.
    punctuated = re.compile(
        DENYLIST_REGEX
        + r"""['"\]]{0,2}\s*(?::=|={1,3}|:)\s*(?!['"]?\[REDACTED:)"""
        + r"""(?:(?P<quote>['"])(?P<quoted>[^\w\s'"][^'"]*)(?P=quote)|(?P<bare>[^\w\s'"][^\s'",]*))""",
        re.IGNORECASE,
    )
    return (
        *(
            _Detector(KeywordDetector.secret_type, pattern, group)
            for pattern, group in CONFIG_DENYLIST_REGEX_TO_GROUP.items()
        ),
        _Detector(KeywordDetector.secret_type, punctuated, None),
    )


@functools.cache
def _keyword() -> re.Pattern[str]:
    """Any of the keyword detector's names, in ASCII-lowercased text (`_ascii_lower`): only a
    line holding one can hold an assignment. Matching lowercased text case-sensitively is some
    20 times faster than the detector's own case-insensitive patterns, which then run on the few
    lines found."""
    from detect_secrets.plugins.keyword import DENYLIST

    return re.compile("|".join(DENYLIST))


_ASCII_LOWER = str.maketrans(string.ascii_uppercase + "Ñ", string.ascii_lowercase + "ñ")


def _ascii_lower(text: str) -> str:
    """Lowercase that keeps every offset (`str.lower` may change the length of a string)."""
    return text.translate(_ASCII_LOWER)


def _span(match: re.Match[str]) -> tuple[int, int]:
    """Where the secret is in a token-format match. Some patterns capture the secret itself (the
    password of `scheme://user:password@`, the key after `aws_secret_access_key = '`): the widest
    group of four characters or more is it. Others capture only a prefix (`ghp` of a GitHub
    token) or nothing: the whole match is the secret, less any separator it took in around it."""
    groups = [
        match.span(index)
        for index in range(1, (match.re.groups or 0) + 1)
        if match.start(index) >= 0 and match.end(index) - match.start(index) >= 4
    ]
    if groups:
        return max(groups, key=lambda span: span[1] - span[0])
    start, end = match.span()
    text = match.string
    while start < end and text[start] in _SEPARATORS:
        start += 1
    while end > start and text[end - 1] in _SEPARATORS:
        end -= 1
    if start < end:
        tail = _TOKEN_TAIL.match(text, end)
        end = tail.end() if tail else end
    return start, end


def _private_key_block(text: str, start: int, end: int) -> tuple[int, int]:
    """The private key detector finds the `BEGIN ... PRIVATE KEY` header; the key is the block
    from that line to its END line (or to the end of a cut-off text)."""
    line_start = text.rfind("\n", 0, start) + 1
    footer = _PRIVATE_KEY_END.search(text, end)
    return line_start, footer.end() if footer else len(text)


def _is_not_a_value(secret: str, assignment: str) -> bool:
    """detect-secrets' own filters for keyword matches that are code or placeholders."""
    from detect_secrets.filters.heuristic import (
        is_indirect_reference,
        is_not_alphanumeric_string,
        is_prefixed_with_dollar_sign,
        is_templated_secret,
    )

    return (
        is_templated_secret(secret)
        or is_prefixed_with_dollar_sign(secret)
        or is_not_alphanumeric_string(secret)
        or is_indirect_reference(assignment)
        or _reads_as_a_path(secret)
        or _reads_as_an_error(secret)
    )


# A path, absolute or relative to `.`, `..` or `~`: `PWD=/workspace`, `PASSWORD_FILE=/run/secrets/db`.
_PATH = re.compile(r"(?:~|\.{1,2})?(?:/[\w.@%-]*)+")
# A message of plain words, the first capitalised, as `strerror` words them: `ln: '/w/secret': File
# exists`, `cat: /etc/passwd: Permission denied`, `Read-only file system`.
_ERROR_WORDS = re.compile(r"[A-Z][a-z]*(?:[ -][A-Za-z][a-z]*)+")


def _reads_as_a_path(value: str) -> bool:
    """A path names where a secret may be, it is not one; unless it looks generated (an AWS
    secret key may begin with `/` and hold more of them)."""
    return _PATH.fullmatch(value) is not None and not _looks_generated(value)


def _looks_generated(value: str) -> bool:
    """A part of 16 characters or more with both cases and a digit, or letters of both cases in
    near equal numbers, as random base64 has them and names (`HomeController`) do not."""
    if any(len(part) >= 16 and _mixed(part) for part in value.split("/")):
        return True
    upper, lower = sum(c.isupper() for c in value), sum(c.islower() for c in value)
    return min(upper, lower) >= 6 and 1 / 3 <= upper / lower <= 3


def _reads_as_an_error(value: str) -> bool:
    """What follows `name: ` in a tool's error message (`ln: '/workspace/secret': File exists`),
    where the name was a file's. One plain word (`password: letmein`) is still taken for a value."""
    return _ERROR_WORDS.fullmatch(value) is not None


def detect(text: str, *, assignments: bool) -> list[tuple[int, int, str]]:
    """(start, end, kind) of every secret the detectors find in `text`, overlaps merged (the
    earlier finding names the merged span)."""
    found: list[tuple[int, int, str]] = []
    for detector in _format_detectors():
        for match in detector.pattern.finditer(text):
            if detector.kind == _PRIVATE_KEY:
                start, end = _private_key_block(text, *match.span())
            else:
                start, end = _span(match)
            if detector.kind == _BASIC_AUTH and placeholder_password(text[start:end]):
                continue
            if end > start:
                found.append((start, end, detector.kind))
    found += _provider_keys(text)
    found += _github_tokens(text)
    if assignments:
        found += _assignments(text)
        found += _entropy_findings(text)
    return _merged(found)


# --------------------------------------------------------------------------------------------------
# Belay's own detectors, for what the token formats miss


PROVIDER_KEY = "Provider API Key"
# detect-secrets' name for GitHub's tokens; its pattern knows only the classic `ghp_`-style ones.
GITHUB_TOKEN = "GitHub Token"
# A fine-grained personal access token: `github_pat_`, 22 characters, `_`, 59 characters. Taken
# with any length from 40 characters on, should the parts grow.
_GITHUB_FINE_GRAINED = re.compile(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{40,}")
AWS_SECRET_KEY = "AWS Secret Access Key"
BESIDE_A_NAME = "High Entropy Beside A Secret Name"
# An `sk-` key of any vendor's shape (`sk-`, `sk-proj-`, `sk-ant-api03-`, ...): what follows `sk-`
# is 20 or more key characters, holding a run of 16 letters and digits with both in it (so that
# `sk-some-long-identifier` is not one).
_PROVIDER_KEY = re.compile(r"(?<![A-Za-z0-9_\-])sk-[A-Za-z0-9_\-]{20,}")
_KEY_RUN = re.compile(r"[A-Za-z0-9]{16,}")
# An AWS secret access key on its own: exactly 40 base64 characters, not inside a longer run.
_AWS_SECRET_KEY = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
# A secret-like name and, after a separator of at most a few characters (`: `, `=`, `" : "`, ` is `),
# a value of 16 or more characters.
_BESIDE_A_NAME = re.compile(
    r"(?i)(?P<name>secret|key|token|password|passwd|credential)s?\b[\w-]{0,20}?['\"]?"
    r"(?:\s*[:=]\s*|\s+is\s+|\s+)['\"]?(?P<value>[A-Za-z0-9+/_\-.~]{16,}=*)"
)
_HEX = re.compile(r"[0-9a-fA-F]+")
# Bits per character above which a string is taken for random: a random 40-character string of
# base64 characters scores about 4.8, English words and identifiers stay below 4.
ENTROPY_BITS = 4.0


def entropy(text: str) -> float:
    """Shannon entropy of `text`, in bits per character."""
    counts = [text.count(c) for c in set(text)]
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts) if text else 0.0


def _mixed(text: str) -> bool:
    """Letters of both cases and a digit, as generated keys have and words do not."""
    return (
        any(c.isdigit() for c in text) and any(c.isupper() for c in text) and any(c.islower() for c in text)
    )


def _provider_keys(text: str) -> Iterator[tuple[int, int, str]]:
    if "sk-" not in text:
        return
    for match in _PROVIDER_KEY.finditer(text):
        runs = _KEY_RUN.findall(match.group())
        if any(any(c.isdigit() for c in run) and any(c.isalpha() for c in run) for run in runs):
            yield match.start(), match.end(), PROVIDER_KEY


def _github_tokens(text: str) -> Iterator[tuple[int, int, str]]:
    if "github_pat_" not in text:
        return
    for match in _GITHUB_FINE_GRAINED.finditer(text):
        yield match.start(), match.end(), GITHUB_TOKEN


def _entropy_findings(text: str) -> Iterator[tuple[int, int, str]]:
    """AWS secret keys on their own, and random-looking values beside a secret-like name. A hex
    string is never taken for one (every commit id and checksum is one): a hex credential the
    harness holds is found by value, and one assigned to a name by the keyword detector."""
    for match in _AWS_SECRET_KEY.finditer(text):
        key = match.group()
        if _mixed(key) and entropy(key) >= ENTROPY_BITS and not encoded_text(key):
            yield match.start(), match.end(), AWS_SECRET_KEY
    for match in _BESIDE_A_NAME.finditer(text):
        value = match.group("value")
        if _HEX.fullmatch(value) or not looks_random(value) or entropy(value) < ENTROPY_BITS * 0.875:
            continue
        if match.group("name").lower() == "key" and names_a_lookup_key(text, match.start("name")):
            continue
        yield match.start("value"), match.end("value"), BESIDE_A_NAME


def _assignments(text: str) -> Iterator[tuple[int, int, str]]:
    lines_seen = set()
    for hit in _keyword().finditer(_ascii_lower(text)):
        line_start = text.rfind("\n", 0, hit.start()) + 1
        if line_start in lines_seen:
            continue
        lines_seen.add(line_start)
        line_end = text.find("\n", hit.end())
        line = text[line_start : len(text) if line_end == -1 else line_end].rstrip("\r")
        lowered = _ascii_lower(line)
        for detector in _keyword_detectors():
            for match in detector.pattern.finditer(line):
                group: int | str = detector.group or ("bare" if match.group("quoted") is None else "quoted")
                start, end = match.span(group)
                if end <= start:
                    continue
                # The name: after the value when a literal is compared with it (`"x" == password`).
                name = _keyword().search(lowered, end, match.end()) or _keyword().search(
                    lowered, match.start(), match.end()
                )
                secret = keyword_value(line, name.start() if name else match.start(), start, end)
                # The filters read the assignment and the rest of its line (`f(x["secret"])`).
                if secret is None or _is_not_a_value(line[secret[0] : secret[1]], line[match.start() :]):
                    continue
                yield line_start + secret[0], line_start + secret[1], detector.kind


def _merged(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    merged: list[tuple[int, int, str]] = []
    for start, end, kind in sorted(spans, key=lambda span: (span[0], -span[1])):
        if merged and start < merged[-1][1]:
            last_start, last_end, last_kind = merged[-1]
            merged[-1] = (last_start, max(last_end, end), last_kind)
        else:
            merged.append((start, end, kind))
    return merged


# --------------------------------------------------------------------------------------------------
# Redacting


def redact_text(
    text: str, held: tuple[HeldSecret, ...], *, assignments: bool, before: str = ""
) -> tuple[str, int]:
    """`text` with every held value (as it is, encoded, split: `belay.harness.held_values`) and
    every detected secret replaced by its marker. `before`: the end of the previous output of the
    same subagent, to find a held value split between the two. The detectors read the text as it
    is and, where its lines have escapes, colour codes or invisible characters, their reading too
    (`belay.harness.normalised`, without the lower-casing: the token formats are case-sensitive);
    a secret found in the reading is replaced in the span of the text it came from."""
    spans = _merged(held_spans(text, _pairs(held), before)) if held else []
    count = len(spans)
    text = _replaced(text, spans)
    spans = detect(text, assignments=assignments)
    regions = changed_regions(text)
    for region_start, region_end in regions:
        view = normalised(text[region_start:region_end])
        for start, end, kind in detect(view.text, assignments=assignments) if view.changed else ():
            start, end = view.original(start, end)
            spans.append((region_start + start, region_start + end, kind))
    spans = _merged(spans) if regions else spans
    return _replaced(text, spans), count + len(spans)


def _replaced(text: str, spans: list[tuple[int, int, str]]) -> str:
    if not spans:
        return text
    pieces, position = [], 0
    for start, end, kind in spans:
        pieces += [text[position:start], marker(kind)]
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


@functools.cache
def _pairs(held: tuple[HeldSecret, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((secret.value, secret.kind) for secret in held)


def redact_value(
    value: Any, held: tuple[HeldSecret, ...], *, assignments: bool, tail: str | None = None
) -> Redaction:
    """Every string inside `value` (dict values, list and tuple items, nested) redacted; keys and
    other types are kept as they are. With `tail` (the end of the subagent's previous output),
    a held value split between it and the first string, or between two strings, is found too, and
    the result's `tail` is what to pass with the next output."""
    total = 0

    def walk(item: Any) -> Any:
        nonlocal total, tail
        if isinstance(item, str):
            text, count = redact_text(item, held, assignments=assignments, before=tail or "")
            if tail is not None and item:
                tail = tail_of(tail, item, _pairs(held))
            total += count
            return text
        if isinstance(item, dict):
            return {key: walk(inner) for key, inner in item.items()}
        if isinstance(item, list | tuple):
            return type(item)(walk(inner) for inner in item)
        return item

    return Redaction(walk(value), total, tail or "")


# Scanning a few KiB takes microseconds, less than handing the value to a thread; a larger value is
# scanned in a thread, so that a long scan does not hold up the event loop (and the other subagents).
INLINE_SCAN_CHARS = 16 * 1024


async def scanned(scan: Callable[[Any], Redaction], value: Any) -> Redaction:
    """`scan(value)`: on the caller's thread when `value` is small, else in a thread."""
    if _within(value, INLINE_SCAN_CHARS):
        return scan(value)
    return await asyncio.to_thread(scan, value)


def _within(value: Any, limit: int) -> bool:
    """Whether `value` holds at most `limit` characters of strings and items, counted until the
    limit is passed."""
    pending, total = [value], 0
    while pending:
        item = pending.pop()
        total += len(item) if isinstance(item, str) else 1
        if total > limit:
            return False
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return True


# --------------------------------------------------------------------------------------------------
# What the harness holds


def is_credential_name(name: str) -> bool:
    return any(part in CREDENTIAL_NAME_PARTS for part in name.upper().split("_"))


def held_secrets(
    environment: Mapping[str, str], read_files: Callable[[str], list[str]] | None = None
) -> tuple[HeldSecret, ...]:
    """The credentials in an environment, longest value first. `read_files(path)` gives the
    contents of the file, or of each file in the directory, a `*_FILE`/`*_DIR` credential variable
    names (default: read them from disk)."""
    read = read_files or _read_secret_files
    found: dict[str, str] = {}
    for name, value in sorted(environment.items()):
        _hold(name, value, name, read, found)
    held = [HeldSecret(value, kind) for value, kind in found.items() if len(value) >= MIN_HELD_LENGTH]
    return tuple(sorted(held, key=lambda secret: (-len(secret.value), secret.value)))


def _hold(name: str, value: Any, kind: str, read: Callable[[str], list[str]], found: dict[str, str]) -> None:
    """What `found` (value -> kind) gains from one variable, or one field of a store spec given as
    JSON in a variable (`{"backend": "s3", "secret_key": ...}`, `"record_key_file": ...`)."""
    if not isinstance(value, str):
        return
    if is_credential_name(name) and name.upper().endswith(FILE_NAME_SUFFIXES):
        for content in read(value):
            found.setdefault(content.strip(), kind)
    elif is_credential_name(name):
        found.setdefault(value.strip(), kind)
    else:
        for start, end, _ in detect(value, assignments=False):
            found.setdefault(value[start:end], kind)
        spec = _json_object(value)
        for key, inner in spec.items():
            _hold(str(key), inner, f"{kind}.{key}", read, found)


def _json_object(value: str) -> dict[str, Any]:
    if not value.lstrip().startswith("{"):
        return {}
    try:
        parsed = json.loads(value)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _read_secret_files(path: str) -> list[str]:
    place = Path(path)
    try:
        files = sorted(p for p in place.iterdir() if p.is_file()) if place.is_dir() else [place]
        contents = []
        for file in files:
            if file.stat().st_size <= MAX_SECRET_FILE_BYTES:
                contents.append(file.read_bytes().decode())
        return contents
    except (OSError, UnicodeDecodeError):
        return []


@dataclass(frozen=True)
class Redactor:
    """What the tool runtime applies to requests (`arguments`) and results (`output`)."""

    held: tuple[HeldSecret, ...] = ()
    enabled: bool = True
    # The end of each subagent's last output (raw, in memory only), to find a held value split
    # between two of its outputs.
    tails: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_environment(cls, environment: Mapping[str, str] | None = None) -> Redactor:
        env = os.environ if environment is None else environment
        if env.get(REDACTION_ENV) == "off":
            return cls(enabled=False)
        return cls(held=held_secrets(env))

    def holding(self, value: str, kind: str) -> Redactor:
        """This redactor, holding one more value (a sandbox's token, learnt when it starts)."""
        if not self.enabled or len(value) < MIN_HELD_LENGTH or any(s.value == value for s in self.held):
            return self
        held = sorted((*self.held, HeldSecret(value, kind)), key=lambda s: (-len(s.value), s.value))
        return Redactor(tuple(held), self.enabled, self.tails)

    def arguments(self, arguments: dict[str, Any]) -> Redaction:
        if not self.enabled:
            return Redaction(arguments, 0)
        return redact_value(arguments, self.held, assignments=False)

    def output(self, output: Any, subagent: str | None = None) -> Redaction:
        """`output` redacted; with `subagent`, also a held value split between its last output
        and this one."""
        if not self.enabled:
            return Redaction(output, 0)
        if subagent is None:
            return redact_value(output, self.held, assignments=True)
        redacted = redact_value(output, self.held, assignments=True, tail=self.tails.get(subagent, ""))
        self.tails[subagent] = redacted.tail
        return redacted
