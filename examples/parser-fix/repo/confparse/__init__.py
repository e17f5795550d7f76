"""A small parser for INI-style configuration text."""

from confparse.parser import ParseError, parse

__all__ = ["ParseError", "parse"]
