"""S3 artifact store: put and get of 100 MiB, side by side with plain boto3.

The S3 server (versitygw) is started on loopback by the same code the test fixtures use. Both
sides use one boto3 client and the same transfer settings (part size, concurrency), so the ratios
isolate what the store adds: hashing, the HEAD that deduplicates, and verifying on read.

- put: the store's `put(bytes)` against boto3's `upload_fileobj` of the same bytes. Every store put
  is of fresh bytes (a new random prefix), so deduplication never skips an upload.
- get: the store's `get()` (parallel ranged GETs, hashed in order as they arrive, then checked)
  against boto3's `download_fileobj` of the same object into memory.
Runs alternate store and boto3, and each figure is the median.
"""

from __future__ import annotations

import io
import os
import statistics
import tempfile
import time
from pathlib import Path

from tests.testenv.s3 import S3Server

from belay.stores.s3 import DEFAULT_PART_SIZE, S3ArtifactStore
from bench.common import Figure

COMMAND = "python -m bench bench_s3"
SIZE = 100 * 1024 * 1024
RUNS = 7
BUCKET = "belay-bench"


def run() -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="belay-bench-s3-") as run_dir:
        server = S3Server(Path(run_dir))
        server.start()
        try:
            return measure(server)
        finally:
            server.stop()


def measure(server: S3Server) -> list[Figure]:
    client = server.client()
    store = S3ArtifactStore(BUCKET, client=client, prefix="store", create_bucket=True)
    transfer = store.transfer
    base = os.urandom(SIZE)

    put_store: list[float] = []
    put_plain: list[float] = []
    get_store: list[float] = []
    get_plain: list[float] = []
    for run_index in range(RUNS):
        # Fresh bytes every run (one differing block), so the store really uploads each time.
        data = os.urandom(16) + base[16:]

        started = time.perf_counter()
        ref = store.put(data)
        put_store.append(time.perf_counter() - started)

        plain_key = f"plain/object-{run_index}"
        started = time.perf_counter()
        client.upload_fileobj(io.BytesIO(data), BUCKET, plain_key, Config=transfer)
        put_plain.append(time.perf_counter() - started)

        started = time.perf_counter()
        fetched = store.get(ref.sha256)
        get_store.append(time.perf_counter() - started)

        started = time.perf_counter()
        buffer = io.BytesIO()
        client.download_fileobj(BUCKET, plain_key, buffer, Config=transfer)
        plain = buffer.getvalue()
        get_plain.append(time.perf_counter() - started)
        assert fetched == plain == data

    def mib_per_s(seconds: float) -> float:
        return SIZE / (1024 * 1024) / seconds

    put_s, put_p = statistics.median(put_store), statistics.median(put_plain)
    get_s, get_p = statistics.median(get_store), statistics.median(get_plain)
    settings = f"100 MiB, median of {RUNS}, {DEFAULT_PART_SIZE // (1024 * 1024)} MiB parts"
    return [
        Figure(
            "s3_put_ratio",
            put_p / put_s,
            "x",
            COMMAND,
            detail=f"store {mib_per_s(put_s):.0f} vs plain boto3 {mib_per_s(put_p):.0f} MiB/s ({settings})",
            goal=">= 0.8",
        ),
        Figure(
            "s3_get_ratio",
            get_p / get_s,
            "x",
            COMMAND,
            detail=f"store {mib_per_s(get_s):.0f} vs plain boto3 {mib_per_s(get_p):.0f} MiB/s ({settings})",
            goal=">= 0.8",
        ),
        Figure("s3_put_mib_per_s", mib_per_s(put_s), "MiB/s", COMMAND, detail=settings),
        Figure("s3_get_mib_per_s", mib_per_s(get_s), "MiB/s", COMMAND, detail=settings),
    ]
