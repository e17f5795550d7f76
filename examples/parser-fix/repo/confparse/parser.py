"""Parse `key = value` lines grouped in `[section]` blocks.

Blank lines and lines starting with `#` or `;` are ignored. Keys before the first section header
belong to the section named "default". A value may be wrapped in double quotes to keep leading or
trailing spaces.
"""

DEFAULT_SECTION = "default"
COMMENT_PREFIXES = ("#", ";")


class ParseError(ValueError):
    def __init__(self, line_number, message):
        super().__init__(f"line {line_number}: {message}")
        self.line_number = line_number


def _unquote(value):
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def parse(text):
    """Return {section: {key: value}} for the configuration in `text`."""
    sections = {DEFAULT_SECTION: {}}
    current = sections[DEFAULT_SECTION]
    for line_number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(COMMENT_PREFIXES):
            continue
        if line.startswith("["):
            if not line.endswith("]") or len(line) == 2:
                raise ParseError(line_number, f"malformed section header {line!r}")
            current = sections.setdefault(line[1:-1].strip(), {})
            continue
        if "=" not in line:
            raise ParseError(line_number, f"expected 'key = value', got {line!r}")
        key, value = line.split("=")
        key = key.strip()
        if not key:
            raise ParseError(line_number, "empty key")
        current[key] = _unquote(value.strip())
    return sections
