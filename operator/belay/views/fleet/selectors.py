"""Label selectors for the local fleet, as kubectl takes them (the apiserver evaluates them in a
cluster)."""

from __future__ import annotations

from collections.abc import Mapping


class SelectorError(ValueError):
    pass


def selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    """Equality-based label selectors as kubectl takes them: `k=v`, `k==v`, `k!=v`, `k`, `!k`,
    joined by commas; every requirement must hold."""
    for raw in selector.split(","):
        requirement = raw.strip()
        if not requirement:
            continue
        if any(token in requirement for token in (" in ", " notin ", "(", ")")):
            raise SelectorError(f"set-based selectors are not supported here: {requirement!r}")
        if "!=" in requirement:
            key, value = (part.strip() for part in requirement.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in requirement:
            key, value = (part.strip() for part in requirement.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif requirement.startswith("!"):
            if requirement[1:].strip() in labels:
                return False
        elif requirement not in labels:
            return False
    return True
