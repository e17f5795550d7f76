"""Belay: long-lived AI agent sessions whose record outlives every pod."""

__version__ = "0.1.0"
