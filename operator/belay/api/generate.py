"""`python -m belay.api.generate`: write the CRD YAML for every API model to `crds/` and to the
chart's `crds/` folder (`make crds`). With `--check`, write nothing and exit 1 when a committed
file differs from what the models generate."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from belay.api.crd import rendered_crds

OUTPUT_DIRS = (Path("crds"), Path("charts/belay/crds"))


def stale_files(root: Path) -> list[Path]:
    """Files under root that are missing or differ from the generated text."""
    expected = rendered_crds()
    stale = []
    for folder in OUTPUT_DIRS:
        for name, text in expected.items():
            path = root / folder / name
            if not path.is_file() or path.read_text() != text:
                stale.append(path)
    return stale


def write_all(root: Path) -> list[Path]:
    written = []
    for folder in OUTPUT_DIRS:
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, text in rendered_crds().items():
            path = root / folder / name
            path.write_text(text)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m belay.api.generate", description=__doc__)
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    parser.add_argument("--check", action="store_true", help="fail if the committed files drifted")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.root)
        for path in stale:
            print(f"out of date: {path} (run `make crds`)", file=sys.stderr)
        return 1 if stale else 0
    for path in write_all(args.root):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
