"""A held value is found however a tool's output spells it: JSON-escaped (`\\/`, `\\u002f`), HTML
entities, ANSI colour codes inside it (as `grep --color` prints a match), zero-width characters
between its letters, UTF-16 read as UTF-8, upper-cased. Each on its own: without holding the value
the text keeps it (the check can fail), held it is gone, and exactly its span is replaced (what
is around it is kept as it was)."""

from __future__ import annotations

import html
import json
import os
import re
import urllib.parse
from pathlib import Path

import pytest

from belay.harness.normalised import normalised
from belay.harness.redaction import REDACTION_ENV, Redactor, held_secrets, marker, redact_text
from tests.scripted import write_scripted_session
from tests.security.test_redaction import belay

NAME = "OPENAI_API_KEY"
# Of no vendor's format, with `/` and `+` (which JSON and HTML escape) and both cases.
VALUE = "Zq8v/N2mW4tR7+pL1xC9bH3sD6fJ0gA5yU"


def _json_slash(value: str) -> str:
    return value.replace("/", "\\/")


def _json_unicode(value: str) -> str:
    return "".join(f"\\u{ord(c):04x}" if not c.isalnum() else c for c in value)


def _json_every_character(value: str) -> str:
    return "".join(f"\\u{ord(c):04X}" for c in value)


def _html_entities(value: str) -> str:
    return value.replace("/", "&#47;").replace("+", "&plus;")


def _html_hex(value: str) -> str:
    return "".join(f"&#x{ord(c):x};" for c in value)


def _grep_color(value: str) -> str:
    """As `grep --color=always` prints a match of a part of the value, and a colour change mid-way."""
    half = len(value) // 2
    return f"{value[:half]}\x1b[01;31m\x1b[K{value[half:]}\x1b[m\x1b[K"


def _zero_width(value: str) -> str:
    return "\u200b".join(value[:10]) + "\u200d" + value[10:-3] + "\ufeff" + value[-3:]


def _utf16(value: str) -> str:
    """UTF-16 (little-endian, with its byte-order mark) read as UTF-8, as a sandbox decodes output."""
    return ("\ufeff" + value).encode("utf-16-le").decode(errors="replace")


def _utf16_big_endian(value: str) -> str:
    return value.encode("utf-16-be").decode(errors="replace")


def _double_json(value: str) -> str:
    return json.dumps(json.dumps({"note": value}).replace("/", "\\/"))[1:-1]


ENCODINGS = {
    "json slash": _json_slash,
    "json unicode escapes": _json_unicode,
    "json every character escaped": _json_every_character,
    "json inside json": _double_json,
    "html entities": _html_entities,
    "html hex references": _html_hex,
    "ansi colour codes inside": _grep_color,
    "zero-width characters": _zero_width,
    "utf-16": _utf16,
    "utf-16 big-endian": _utf16_big_endian,
    "url percent-encoded": lambda value: "".join(f"%{b:02X}" for b in value.encode()),
    "c hex escapes": lambda value: value.replace("/", "\\x2f").replace("+", "\\x2b"),
    "octal escapes": lambda value: value.replace("/", "\\057"),
    "html without semicolons": lambda value: value.replace("/", "&#47").replace("+", "&#43"),
    "backspace overstrike": lambda value: "".join(f"{c}\b{c}" for c in value),
    "underlined": lambda value: "".join(f"_\b{c}" for c in value),
    "8-bit csi": lambda value: value[:10] + "\x9b31m" + value[10:] + "\x9b0m",
    "tag characters": lambda value: "\U000e0041".join(value[:6]) + value[6:],
    "variation selectors": lambda value: "\ufe0f".join(value[:6]) + value[6:],
    "fullwidth": lambda value: "".join(chr(ord(c) + 0xFEE0) for c in value),
    "upper case": str.upper,
    "lower case": str.lower,
    "swapped case": str.swapcase,
    "escaped and upper case": lambda value: _json_slash(value.upper()),
}


def _readable(text: str) -> str:
    """What a person reading `text` sees, by the test's own means: escapes read, colour codes,
    overstrikes and invisible characters dropped, fullwidth forms as ASCII, lower case."""
    for _ in range(3):
        text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
        text = re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), text)
        text = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)
        text = urllib.parse.unquote(text)
        text = html.unescape(text.replace("\\/", "/").replace('\\"', '"').replace("\\\\", "\\"))
    text = re.sub(r"[\x1b\x9b]\[?[0-9;]*[A-Za-z]|.\x08", "", text)
    text = "".join(chr(ord(c) - 0xFEE0) if "\uff01" <= c <= "\uff5e" else c for c in text)
    return re.sub("[\x00\u200b-\u200d\ufeff\ufe0f\U000e0041]", "", text).lower()


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_a_held_value_is_found_however_the_output_spells_it(encoding: str) -> None:
    spelled = ENCODINGS[encoding](VALUE)
    text = f"before: {spelled} :after\n"
    assert VALUE.lower() in _readable(text)
    unheld = Redactor().output(text).value
    assert VALUE.lower() in _readable(unheld), "without holding it, the value stays: the check can fail"

    redacted = Redactor(held=held_secrets({NAME: VALUE})).output(text)

    assert VALUE.lower() not in _readable(redacted.value), redacted.value
    assert redacted.count == 1
    if encoding not in ("json inside json",):
        # Exactly the span the value was printed in: the text around it is kept as it was.
        assert redacted.value.startswith("before: ") and redacted.value.endswith(" :after\n"), redacted.value
    assert f"[REDACTED:{NAME}" in redacted.value


def test_the_exact_value_keeps_its_plain_marker_and_an_altered_one_says_so() -> None:
    held = held_secrets({NAME: VALUE})
    assert redact_text(f"k={VALUE}", held, assignments=True)[0] == f"k={marker(NAME)}"
    assert redact_text(f"k={VALUE.upper()}", held, assignments=True)[0] == f"k={marker(NAME + ' normalised')}"


def test_a_value_split_across_escaped_lines_of_json_is_found() -> None:
    """A value printed in two halves on two lines, inside a JSON string (`\\n` escaped)."""
    half = len(VALUE) // 2
    text = json.dumps({"log": f"{VALUE[:half]}\n{VALUE[half:]}\n"})
    redacted = Redactor(held=held_secrets({NAME: VALUE})).output(text).value
    assert VALUE[:half].lower() not in _readable(redacted) and VALUE[half:].lower() not in _readable(redacted)


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_the_reading_maps_back_to_exactly_the_span_it_came_from(encoding: str) -> None:
    spelled = ENCODINGS[encoding](VALUE)
    text = f"x {spelled} y"
    view = normalised(text)
    reading = view.text.lower()
    start = reading.find(VALUE.lower())
    assert start != -1
    original_start, original_end = view.original(start, start + len(VALUE))
    # Exactly the value: nothing before or after it in the text, nothing of it left out.
    assert _readable(text[original_start:original_end]) == VALUE.lower()


def test_text_without_escapes_reads_as_itself() -> None:
    text = "plain output, 100% & more\nC:\\path & co"
    view = normalised(text)
    assert view.text == text and not view.changed


# --------------------------------------------------------------------------------------------------
# A real `belay run`

SESSION = "spelled"
# What each command prints: a file the test wrote in that spelling, or a real `grep --color` and `tr`.
COMMANDS = {
    **{encoding: f"cat cfg/{index}.txt" for index, encoding in enumerate(ENCODINGS)},
    # Colour codes around matches inside the value, as a search for a piece of it prints them.
    "grep --color": "grep --color=always -E 'mW4|bH3' cfg/value.txt",
    "tr to upper case": "tr a-z A-Z < cfg/value.txt",
}


def spelled_session(directory: Path) -> Path:
    inputs = directory / "inputs"
    inputs.mkdir(parents=True)
    (inputs / "value.txt").write_text(VALUE + "\n")
    for index, encoding in enumerate(ENCODINGS):
        (inputs / f"{index}.txt").write_text(f"value: {ENCODINGS[encoding](VALUE)}\n")
    # UTF-16 as a file holds it, with its byte-order mark.
    utf16 = inputs / f"{list(ENCODINGS).index('utf-16')}.txt"
    utf16.write_bytes(f"value: {VALUE}\n".encode("utf-16"))
    steps = [
        {
            "id": "print",
            "title": "Print the value in every spelling",
            "actions": [
                {"tool": "run_command", "arguments": {"command": command}} for command in COMMANDS.values()
            ],
        }
    ]
    agent = {
        "name": "agent",
        "networkProfile": "none",
        "inputs": [{"source": str(inputs), "target": "cfg", "hostPath": True}],
    }
    return write_scripted_session(directory, SESSION, "Print the value.", [agent], {"agent": steps})


@pytest.mark.parametrize("redaction", ["on", "off"])
def test_a_held_value_in_every_spelling_never_reaches_the_record_of_a_real_run(
    tmp_path: Path, redaction: str
) -> None:
    manifest = spelled_session(tmp_path)
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8", NAME: VALUE}
    if redaction == "off":
        environment[REDACTION_ENV] = "off"
    home = tmp_path / "home"
    run = belay(home, environment, "run", str(manifest))
    assert run.returncode == 0, run.stdout + run.stderr
    events = belay(home, environment, "events", SESSION, "--json")
    assert events.returncode == 0, events.stderr
    results = [json.loads(line)["payload"] for line in events.stdout.splitlines() if '"tool_result"' in line]
    printed = [r["output"]["stdout"] for r in results if "stdout" in (r.get("output") or {})]
    assert len(printed) == len(COMMANDS)
    leaked = {
        name for name, stdout in zip(COMMANDS, printed, strict=True) if VALUE.lower() in _readable(stdout)
    }
    harness_log = (home / "sessions" / SESSION / "logs" / "harness.log").read_text()
    if redaction == "off":
        # The same check, with nothing between the tools and the record, finds every spelling.
        assert leaked == set(COMMANDS)
        return
    assert leaked == set()
    assert VALUE.lower() not in _readable(events.stdout) and VALUE.lower() not in _readable(harness_log)
    assert f"[REDACTED:{NAME} normalised]" in events.stdout
