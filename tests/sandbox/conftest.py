from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from belay.sandbox.local import LocalSandbox


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[LocalSandbox]:
    started = await LocalSandbox.start(tmp_path / "sandboxes", "worker", "none")
    yield started
    await started.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_sandbox(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalSandbox]:
    """One sandbox for a whole module, for tests that only touch paths of their own."""
    started = await LocalSandbox.start(tmp_path_factory.mktemp("shared"), "worker", "none")
    yield started
    await started.stop()
