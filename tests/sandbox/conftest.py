from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from belay.sandbox.local import LocalSandbox


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[LocalSandbox]:
    started = await LocalSandbox.start(tmp_path / "sandboxes", "worker", "none")
    yield started
    await started.stop()
