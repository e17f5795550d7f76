"""The `belay` and `kubectl belay` command lines."""

from typing import Any

from typer.core import TyperOption

_display_type_rich = TyperOption.display_type_rich


def _flags_show_no_type(self: TyperOption, ctx: Any) -> str | None:
    """Typer's help prints a type after every option, `<bool>` after a flag, which takes no value
    and so has none to show."""
    return None if self.is_flag else _display_type_rich(self, ctx)


TyperOption.display_type_rich = _flags_show_no_type  # type: ignore[method-assign]
