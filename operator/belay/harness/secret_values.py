"""Whether what follows a secret's name is a secret, or code and configuration that only name one.

The keyword and entropy detectors (`belay.harness.redaction`) find a name (`password`, `api_key`,
`token`) and what follows it. Most of what follows such a name in source and configuration is not
a secret: a variable (`if password == expected`), a type (`api_key: str | None`), a field that
names something else (`secret_santa = ...`, `secretRef: belay-stores`, `password_file = ...`), a
Kubernetes Secret's name (`credentialsSecret: openai-keys`), a placeholder (`'xxx'`, `sekrit`), a
cache or database key (`Using cache key: Linux-pip-3f2a...`, `primary key: customerOrderId`). A
marker there corrupts the code the model reads, and may write back. So a finding stands only when
its value reads as one:

- **the name names a secret**: its last word is a credential noun (`DB_PASSWORD`, `client_secret`,
  `aws_secret_access_key`, `apiKey`), not a field about one (`secret_santa`, `secretRef`,
  `password_file`, `secrets_redacted`);
- **an unquoted value is a literal, not code**: a word of letters alone, or names joined by dots
  (`expected`, `self.password`, `None`, `str`), is a variable or a type, except in a `NAME=value`
  line of a `.env` file or a shell (`DB_PASSWORD=letmein`), where it is a literal; a comparison
  (`==`, `!=`) with one is always code; only the value's first word is taken (`pwd: expected bytes,
  got %s` is a message);
- **a quoted value looks made up**: 8 characters or more, not lower-case words alone (`'python'`,
  `"doesnotexist"`, `'geheim$parole'` are an example's), with no placeholder word in it (`test`,
  `example`, `dummy`, `changeme`, `your`, ...), at least 4 different characters (`'xxxxxxxx'`), at
  most one space (a prompt, `"Enter password: "`, is prose); a name ending in `secret` holding
  lower-case words joined by `-` holds the name of a Kubernetes Secret;
- **a random value beside a name looks generated** (`looks_random`): 16 letters and digits or
  more, with both cases and a digit, switching between upper case, lower case and digits at least
  once in every three characters, as random base62 does about twice in three and identifiers
  (`win32api.RegEnumKey`, `customerOrderId2024`) and cache keys of words and hex do not; and the
  word before `key` is not one that makes it a lookup key (`primary`, `cache`, `public`, ...).

Everything here is a pure function of its inputs.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import re

# The last word of a name that names a secret (lower case, words split at `_`, `-` and case).
CREDENTIAL_NOUNS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "pw",
        "pass",
        "passphrase",
        "passcode",
        "secret",
        "secrets",
        "key",
        "keys",
        "apikey",
        "authkey",
        "token",
        "tokens",
        "credential",
        "credentials",
        "creds",
        "contraseña",
        "contrasena",
    }
)
# A word before `key` that makes it a key of a table, a cache or a cipher's public half.
_LOOKUP_KEYS = frozenset(
    {
        "primary",
        "foreign",
        "unique",
        "composite",
        "sort",
        "partition",
        "cache",
        "idempotency",
        "lookup",
        "public",
        "dict",
        "map",
        "hash",
        "index",
        "routing",
        "row",
        "shard",
        "object",
        "field",
        "sorting",
        "registry",
        "enum",
    }
)
_COMPARISONS = ("==", "!=", "===", "!==", "<>")
# Words of a name: a run of capitals before a capitalised word, a capitalised or lower-case word,
# digits.
_NAME_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-zñ]+|[0-9]+")
_IDENTIFIER_CHAR = re.compile(r"[\w.\-]")
# Code that is not a literal: a name of letters (`expected`, `None`, `str`), or names joined by
# dots (`self._authkey`, `s3.secret_key`); a call, an index or a structure (`get(`, `x[0]`, `{`).
_NAME_OF_LETTERS = re.compile(r"[A-Za-z_]+")
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_CODE_PUNCTUATION = frozenset("()[]{}")
# A YAML tag (`!vault`, `!!str`).
_YAML_TAG = re.compile(r"!{1,2}[A-Za-z_]+")
# An option or an operator of letters (`-join`, `--from-env`).
_OPERATOR_WORD = re.compile(r"-{1,2}[A-Za-z][A-Za-z-]*")
# An environment file's or a shell's assignment: a line that begins with an upper-case name and
# `=` (`DB_PASSWORD=x`, `export API_KEY=x`), not indented as an argument of a call in code is.
_ENV_ASSIGNMENT = re.compile(r"(?:export\s+)?[A-Z_][A-Z0-9_]*=(?![=\s])")
# Stops a value at the end of its first word (unquoted), as code and prose around it go on.
_FIRST_WORD = re.compile(r"[^\s,;)\]}`]*")
# Words of letters and what joins them (`'doesnotexist'`, `'geheim$parole'`): an example's password.
_LOWER_CASE_WORDS = re.compile(r"[A-Za-zñ]+(?:[-_.$ ][A-Za-zñ]+)*")
# Words that make a quoted value a placeholder, as examples and tests write them.
_PLACEHOLDER_WORDS = re.compile(r"(?i)test|example|dummy|fake|sample|changeme|placeholder|your|xxxx")
# The name of a Kubernetes Secret: lower-case words joined by `-` (`belay-stores`, `openai-keys`).
_SECRET_OBJECT_NAME = re.compile(r"[a-z]+(?:-[a-z]+)+")
_QUOTES = "'\"`"
MIN_QUOTED_LENGTH = 8


def last_word(name: str) -> str:
    words = _NAME_WORDS.findall(name)
    return words[-1].lower() if words else ""


def name_at(line: str, position: int) -> tuple[int, int]:
    """The span of the name (letters, digits, `_`, `-` and `.`) that holds `line[position]`."""
    start = position
    while start > 0 and _IDENTIFIER_CHAR.match(line[start - 1]):
        start -= 1
    end = position
    while end < len(line) and _IDENTIFIER_CHAR.match(line[end]):
        end += 1
    return start, end


def keyword_value(line: str, name_position: int, value_start: int, value_end: int) -> tuple[int, int] | None:
    """Of a keyword finding in `line` (its name holding `name_position`, the value the detector
    took at `value_start:value_end`), the span of the secret, or None when the value is code, a
    placeholder or a name."""
    start, end = name_at(line, name_position)
    name = line[start:end].rsplit(".", 1)[-1]  # `self.password`: the attribute's own name
    if last_word(name) not in CREDENTIAL_NOUNS:
        return None
    quoted = value_start > 0 and line[value_start - 1] in _QUOTES
    # `"bar" == password`: a literal compared with a variable.
    operator = "==" if value_start < start else line[end:value_start].strip(" \t" + _QUOTES + "]@")
    value = line[value_start:value_end]
    if quoted:
        return (value_start, value_end) if _made_up(name, value) else None
    if operator in _COMPARISONS:
        return None
    first_word = _FIRST_WORD.match(value)
    value = first_word.group() if first_word else value
    if len(set(value)) < 4 or _CODE_PUNCTUATION & set(value) or _DOTTED_NAME.fullmatch(value):
        return None
    if _OPERATOR_WORD.fullmatch(value):  # `$password = -join (...)` in PowerShell
        return None
    if operator == ":" and _YAML_TAG.fullmatch(value):  # `password: !vault |` in Ansible
        return None
    env_literal = operator == "=" and _ENV_ASSIGNMENT.match(line) is not None
    if _NAME_OF_LETTERS.fullmatch(value) and not env_literal:
        return None
    if last_word(name) in ("secret", "secrets") and _SECRET_OBJECT_NAME.fullmatch(value):
        return None
    return value_start, value_start + len(value)


def _made_up(name: str, value: str) -> bool:
    """Whether a quoted value assigned to a credential's name reads as one (module docstring)."""
    if len(value) < MIN_QUOTED_LENGTH or len(set(value)) < 4 or value.count(" ") > 1:
        return False
    if last_word(name) in ("secret", "secrets") and _SECRET_OBJECT_NAME.fullmatch(value):
        return False
    return not _LOWER_CASE_WORDS.fullmatch(value) and _PLACEHOLDER_WORDS.search(value) is None


def _character_class(c: str) -> int:
    return 0 if c.isdigit() else 1 if c.isupper() else 2


def looks_random(value: str) -> bool:
    """Whether `value` reads as generated rather than written (module docstring)."""
    chars = [c for c in value if c.isascii() and c.isalnum()]
    if len(chars) < 16:
        return False
    upper = sum(c.isupper() for c in chars)
    lower = sum(c.islower() for c in chars)
    digits = sum(c.isdigit() for c in chars)
    if upper < 2 or lower < 2 or digits < 1:
        return False
    switches = sum(_character_class(a) != _character_class(b) for a, b in itertools.pairwise(chars))
    return switches * 3 >= len(chars) - 1


def names_a_lookup_key(text: str, name_start: int) -> bool:
    """Whether the `key` at `name_start` follows a word that makes it a table's or a cache's key
    (`primary key`, `Using cache key`, `public_key`, `cacheKey`)."""
    before = text[max(0, name_start - 40) : name_start]
    words = _NAME_WORDS.findall(before)
    return bool(words) and words[-1].lower() in _LOOKUP_KEYS


def encoded_text(value: str) -> bool:
    """Whether `value` is base64 of printable text (`YWJjZGVm...` in a test of base64), which a
    random key, decoded, is not."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    printable = sum(32 <= byte < 127 or byte in (9, 10, 13, 27) for byte in decoded)
    return bool(decoded) and printable >= 0.9 * len(decoded)


def placeholder_password(password: str) -> bool:
    """The password of a URL (`scheme://user:password@host`) that is a word of letters alone
    (`user:pass@`, `joe:password@`, `postgres:postgres@`), as examples and tests write them."""
    return password.isalpha()
