"""What the S3 backend does beyond the shared conformance suite: multipart uploads of streams and
of bytes, short reads from pipes, deduplication before upload, parallel ranged reads, and where
objects land."""

from __future__ import annotations

import hashlib
import io
import random
import urllib.request
import uuid
from typing import Any

import botocore.exceptions
import pytest

from belay.stores.base import ArtifactCorrupted, StoreUnavailable
from belay.stores.s3 import S3ArtifactStore, content_key
from tests.testenv.s3 import S3Server

pytestmark = pytest.mark.testenv

PART = 5 * 1024 * 1024
BUCKET = "belay-s3-store"


class TricklingPipe(io.RawIOBase):
    """A read-once source that hands out at most `trickle` bytes per read, as a pipe does."""

    def __init__(self, data: bytes, trickle: int) -> None:
        self._data = io.BytesIO(data)
        self._trickle = trickle

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        limit = self._trickle if size is None or size < 0 else min(size, self._trickle)
        return self._data.read(limit)


def fresh_store(server: S3Server) -> S3ArtifactStore:
    return S3ArtifactStore(
        BUCKET,
        client=server.client(),
        prefix=f"store-{uuid.uuid4().hex[:12]}",
        part_size=PART,
        create_bucket=True,
    )


def keys(store: S3ArtifactStore) -> list[str]:
    pages = store.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=store.prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def count_requests(store: S3ArtifactStore, *operations: str) -> list[int]:
    """A list that grows by one for every request of these operations from here on (one list for
    all of them: two lists added together would be a copy that never grows)."""
    calls: list[int] = []

    def seen(**_: Any) -> None:
        calls.append(1)

    for operation in operations:
        store.client.meta.events.register(f"before-call.s3.{operation}", seen)
    return calls


def test_a_large_stream_from_a_pipe_lands_whole_under_its_hash(s3_server: S3Server) -> None:
    store = fresh_store(s3_server)
    data = random.Random(1).randbytes(3 * PART + 777)
    parts = count_requests(store, "UploadPart")

    ref = store.put(TricklingPipe(data, trickle=64 * 1024), media_type="application/x-tar")

    assert ref.sha256 == hashlib.sha256(data).hexdigest() and ref.size == len(data)
    assert ref.uri == f"s3://{BUCKET}/{content_key(store.prefix, ref.sha256)}"
    assert len(parts) == 4, "a stream longer than one part goes up as a multipart upload"
    # The temporary upload is gone; only the content key remains.
    assert keys(store) == [content_key(store.prefix, ref.sha256)]
    assert store.get(ref.sha256) == data
    assert b"".join(store.open(ref.sha256)) == data


def test_a_small_stream_read_in_short_pieces_is_one_plain_put(s3_server: S3Server) -> None:
    store = fresh_store(s3_server)
    data = random.Random(4).randbytes(PART - 10)
    puts = count_requests(store, "PutObject")
    multipart = count_requests(store, "CreateMultipartUpload", "CopyObject")
    ref = store.put(TricklingPipe(data, trickle=100_000))
    assert (len(puts), multipart) == (1, [])
    assert keys(store) == [content_key(store.prefix, ref.sha256)]
    assert store.get(ref.sha256) == data


def test_storing_known_bytes_again_uploads_nothing(s3_server: S3Server) -> None:
    store = fresh_store(s3_server)
    data = random.Random(2).randbytes(2 * PART + 5)
    first = store.put(data)
    uploads = count_requests(store, "UploadPart", "PutObject")
    second = store.put(data)
    assert second.sha256 == first.sha256
    assert uploads == []
    assert keys(store) == [content_key(store.prefix, first.sha256)]


def test_a_stream_of_bytes_already_stored_leaves_one_copy(s3_server: S3Server) -> None:
    store = fresh_store(s3_server)
    data = random.Random(3).randbytes(PART + 1)
    store.put(data)
    again = store.put(TricklingPipe(data, trickle=PART))
    assert keys(store) == [content_key(store.prefix, again.sha256)]


def test_a_location_is_a_presigned_url_that_needs_no_credentials(s3_server: S3Server) -> None:
    store = fresh_store(s3_server)
    ref = store.put(b"report body", media_type="text/plain")
    url = store.location(ref.sha256, expires_in=120)
    assert "X-Amz-Signature=" in url and "X-Amz-Expires=120" in url
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.read() == b"report body"
    tampered = url.replace(ref.sha256, hashlib.sha256(b"other").hexdigest())
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(tampered, timeout=10)


def test_a_large_object_is_read_as_parallel_ranges_joined_and_verified(s3_server: S3Server) -> None:
    store = fresh_store(s3_server)
    data = random.Random(7).randbytes(2 * PART + 12345)
    ref = store.put(data)
    gets = count_requests(store, "GetObject")
    assert store.get(ref.sha256) == data
    assert len(gets) == 3  # one per part: the first range tells the size, two more in parallel

    # One flipped byte in the last part, which only the final hash over all parts can see.
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    store.client.put_object(Bucket=BUCKET, Key=content_key(store.prefix, ref.sha256), Body=bytes(damaged))
    with pytest.raises(ArtifactCorrupted):
        store.get(ref.sha256)


def test_an_object_exactly_one_part_long_is_one_get(s3_server: S3Server) -> None:
    store = fresh_store(s3_server)
    data = random.Random(8).randbytes(PART)
    ref = store.put(data)
    gets = count_requests(store, "GetObject")
    assert store.get(ref.sha256) == data
    assert len(gets) == 1


def test_large_bytes_go_up_as_parts_straight_to_their_content_key(s3_server: S3Server) -> None:
    store = fresh_store(s3_server)
    data = random.Random(9).randbytes(3 * PART + 1)
    parts = count_requests(store, "UploadPart")
    staged = count_requests(store, "CopyObject", "PutObject")
    ref = store.put(data, media_type="application/x-tar")
    assert len(parts) == 4 and staged == []  # the hash is known first: no temporary object
    key = content_key(store.prefix, ref.sha256)
    assert keys(store) == [key]
    head = store.client.head_object(Bucket=BUCKET, Key=key)
    assert (head["ContentLength"], head["ContentType"]) == (len(data), "application/x-tar")
    assert head["Metadata"] == {"sha256": ref.sha256}
    assert store.get(ref.sha256) == data


def test_an_upload_of_bytes_that_fails_midway_is_aborted_and_leaves_nothing(s3_server: S3Server) -> None:
    store = fresh_store(s3_server)
    data = random.Random(10).randbytes(3 * PART + 1)

    def cut_the_third_part(params: dict[str, Any], **_: Any) -> None:
        if params.get("PartNumber") == 3:
            raise botocore.exceptions.ConnectionClosedError(endpoint_url=s3_server.endpoint_url)

    store.client.meta.events.register("provide-client-params.s3.UploadPart", cut_the_third_part)
    with pytest.raises(StoreUnavailable):
        store.put(data)
    assert keys(store) == []
    uploads = store.client.list_multipart_uploads(Bucket=BUCKET, Prefix=store.prefix)
    assert uploads.get("Uploads", []) == []
