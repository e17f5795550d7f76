"""The S3 artifact store when the object store goes away in the middle of a large upload.

The S3 server process is really stopped, from inside the upload: a botocore hook fires before the
third part is sent and stops the server, so the remaining parts meet a closed port."""

from __future__ import annotations

import hashlib
import io
import random
import uuid
from typing import Any

import pytest

from belay.stores.base import ArtifactNotFound, StoreUnavailable
from belay.stores.s3 import S3ArtifactStore, content_key
from tests.testenv.s3 import S3Server

pytestmark = pytest.mark.testenv

PART = 5 * 1024 * 1024  # the smallest part S3 accepts
SIZE = 8 * PART + 12345
BUCKET = "belay-faults"


class ReadOnlyStream(io.RawIOBase):
    """A stream that can only be read front to back, like a pipe or an HTTP body."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        return self._data.read(-1 if size is None else size)


def stop_server_before_part(store: S3ArtifactStore, server: S3Server, part_number: int) -> list[int]:
    """Stops the S3 server just before the given part number is sent; returns the parts seen."""
    parts_seen: list[int] = []

    def before_upload_part(params: dict[str, Any], **_: Any) -> None:
        parts_seen.append(int(params["PartNumber"]))
        if int(params["PartNumber"]) == part_number and server.process.running():
            server.stop()

    store.client.meta.events.register("before-parameter-build.s3.UploadPart", before_upload_part)
    return parts_seen


def visible_keys(server: S3Server, prefix: str) -> list[str]:
    client = server.client()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


@pytest.mark.parametrize("source_kind", ["bytes", "stream"])
def test_a_server_stopped_mid_upload_leaves_no_half_written_artifact(
    s3_server: S3Server, source_kind: str
) -> None:
    data = random.Random(7).randbytes(SIZE)
    sha256 = hashlib.sha256(data).hexdigest()
    prefix = f"faults-{uuid.uuid4().hex[:12]}"
    store = S3ArtifactStore(
        BUCKET, client=s3_server.client(), prefix=prefix, part_size=PART, create_bucket=True
    )
    parts_seen = stop_server_before_part(store, s3_server, part_number=3)

    source = data if source_kind == "bytes" else ReadOnlyStream(data)
    with pytest.raises(StoreUnavailable, match="could not be reached"):
        store.put(source)
    assert 3 in parts_seen, "the fault must land inside the multipart upload"
    assert not s3_server.process.running()

    s3_server.start()
    assert not store.exists(sha256)
    assert [k for k in visible_keys(s3_server, f"{prefix}/") if k.startswith(f"{prefix}/blobs/")] == []
    with pytest.raises(ArtifactNotFound):
        store.get(sha256)

    # After the restart the store is consistent and the same upload goes through whole.
    fresh = S3ArtifactStore(BUCKET, client=s3_server.client(), prefix=prefix, part_size=PART)
    ref = fresh.put(data if source_kind == "bytes" else ReadOnlyStream(data))
    assert ref.sha256 == sha256 and ref.size == SIZE
    assert fresh.get(sha256) == data
    assert [k for k in visible_keys(s3_server, f"{prefix}/")] == [content_key(fresh.prefix, sha256)]
