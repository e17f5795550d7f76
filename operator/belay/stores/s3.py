"""The artifact store on S3 (or any S3-compatible server), with boto3.

Objects live at `<prefix>blobs/<first two hex digits>/<sha256>`: the key is the content's hash, so
storing the same bytes twice stores them once (a HEAD comes first) and a reader checks every byte
it gets against the key it asked for.

Nothing half-written is ever visible under a content key:
- bytes whose hash is known up front go straight to their content key, with a single PUT or a
  multipart upload; S3 makes an object visible only when the PUT or CompleteMultipartUpload
  succeeds, and an interrupted multipart upload is aborted (or left as invisible parts);
- a stream is hashed while it uploads to `<prefix>tmp/<random>`; only once the upload is complete
  and the hash known is it copied to its content key (a server-side copy, atomic for the reader),
  and the temporary object is deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import boto3
import botocore.exceptions
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from pydantic import TypeAdapter, ValidationError

from belay.journal.events import ArtifactRef, DeclaredArtifact, canonical_json
from belay.stores.base import (
    MANIFEST_MEDIA_TYPE,
    ArtifactCorrupted,
    ArtifactNotFound,
    StoreError,
    StoreUnavailable,
)
from belay.stores.filesystem import check_address
from belay.stores.materialize import materialize_from

READ_CHUNK = 1024 * 1024
DEFAULT_PART_SIZE = 16 * 1024 * 1024

MANIFEST_ADAPTER: TypeAdapter[list[DeclaredArtifact]] = TypeAdapter(list[DeclaredArtifact])

# Failures that mean "could not reach the server", as opposed to an answer we did not like.
CONNECTION_ERRORS = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.ResponseStreamingError,
)
NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


def content_key(prefix: str, sha256: str) -> str:
    check_address(sha256)
    return f"{prefix}blobs/{sha256[:2]}/{sha256}"


def make_client(
    endpoint_url: str | None,
    access_key: str | None,
    secret_key: str | None,
    region: str = "us-east-1",
    *,
    connect_timeout: float = 3.0,
    read_timeout: float = 30.0,
) -> Any:
    """A boto3 S3 client with bounded timeouts and retries, so an unreachable server becomes a
    prompt error instead of a hang. Path-style addressing works with every S3-compatible server."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=region,
        config=Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"max_attempts": 3, "mode": "standard"},
            s3={"addressing_style": "path"},
            signature_version="s3v4",
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def read_up_to(source: BinaryIO, size: int) -> bytes:
    """`size` bytes, or fewer only at the end of the stream: pipes hand out short reads."""
    pieces: list[bytes] = []
    missing = size
    while missing > 0 and (piece := source.read(missing)):
        pieces.append(piece)
        missing -= len(piece)
    return b"".join(pieces)


class _HashingReader(io.RawIOBase):
    """Reads a stream once, front to back, hashing and counting what passes through. Not seekable,
    so boto3's transfer manager reads it in order."""

    def __init__(self, source: BinaryIO, already_read: bytes = b"") -> None:
        self._source = source
        self._pending = already_read
        self.hash = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        # Always a full `size` bytes until the end: the transfer manager makes a part of each read,
        # and S3 refuses parts below 5 MiB, so a short read from a pipe must not become a part.
        if size is None or size < 0:
            data = self._pending + self._source.read()
            self._pending = b""
        else:
            data, self._pending = self._pending[:size], self._pending[size:]
            if len(data) < size:
                data += read_up_to(self._source, size - len(data))
        self.hash.update(data)
        self.size += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class S3ArtifactStore:
    """`ArtifactStore` on an S3 bucket. Give it a ready boto3 client, or the endpoint settings."""

    def __init__(
        self,
        bucket: str,
        *,
        client: Any = None,
        endpoint_url: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str = "us-east-1",
        prefix: str = "",
        part_size: int = DEFAULT_PART_SIZE,
        max_concurrency: int = 8,
        create_bucket: bool = False,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = client or make_client(endpoint_url, access_key, secret_key, region)
        self.transfer = TransferConfig(
            multipart_threshold=part_size,
            multipart_chunksize=part_size,
            max_concurrency=max_concurrency,
            use_threads=True,
        )
        if create_bucket:
            self.ensure_bucket()

    # ----------------------------------------------------------------------------------------------

    def ensure_bucket(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except botocore.exceptions.ClientError as error:
            if _code(error) not in NOT_FOUND_CODES | {"NoSuchBucket"}:
                raise self._error("head bucket", error) from error
            self._call("create bucket", self.client.create_bucket, Bucket=self.bucket)

    def _error(self, action: str, error: Exception) -> StoreError:
        where = f"{self.client.meta.endpoint_url} bucket {self.bucket}"
        if isinstance(error, CONNECTION_ERRORS):
            return StoreUnavailable(f"S3 at {where} could not be reached to {action}: {error}")
        if isinstance(error, botocore.exceptions.ClientError) and _code(error) in NOT_FOUND_CODES:
            return ArtifactNotFound(f"{action}: not found in {where}")
        if isinstance(error, botocore.exceptions.ClientError):
            return StoreError(f"S3 at {where} refused to {action}: {error}")
        return StoreUnavailable(f"S3 at {where} failed to {action}: {error!r}")

    def _call(self, action: str, method: Any, **kwargs: Any) -> Any:
        try:
            return method(**kwargs)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
            raise self._error(action, error) from error

    def _ref(self, sha256: str, size: int, media_type: str) -> ArtifactRef:
        return ArtifactRef(
            sha256=sha256,
            size=size,
            media_type=media_type,
            uri=f"s3://{self.bucket}/{content_key(self.prefix, sha256)}",
        )

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            return dict(self.client.head_object(Bucket=self.bucket, Key=key))
        except botocore.exceptions.ClientError as error:
            if _code(error) in NOT_FOUND_CODES:
                return None
            raise self._error(f"look up {key}", error) from error
        except botocore.exceptions.BotoCoreError as error:
            raise self._error(f"look up {key}", error) from error

    # ----------------------------------------------------------------------------------------------
    # Writes

    def put(self, source: bytes | BinaryIO, *, media_type: str = "application/octet-stream") -> ArtifactRef:
        if isinstance(source, bytes | bytearray | memoryview):
            return self._put_bytes(bytes(source), media_type)
        # A stream that ends within one part is just bytes; a longer one is hashed as it uploads.
        head = read_up_to(source, self.transfer.multipart_threshold + 1)
        if len(head) <= self.transfer.multipart_threshold:
            return self._put_bytes(head, media_type)
        return self._put_stream(_HashingReader(source, head), media_type)

    def _put_bytes(self, data: bytes, media_type: str) -> ArtifactRef:
        sha256 = hashlib.sha256(data).hexdigest()
        key = content_key(self.prefix, sha256)
        existing = self._head(key)
        if existing is not None and existing["ContentLength"] == len(data):
            return self._ref(sha256, len(data), existing.get("ContentType", media_type))
        self._upload_bytes(data, key, media_type, sha256)
        return self._ref(sha256, len(data), media_type)

    def _upload_bytes(self, data: bytes, key: str, media_type: str, sha256: str) -> None:
        """Bytes in memory, uploaded by the store itself: one PUT, or the parts of a multipart upload
        in parallel, each sent as bytes. (The transfer manager would read a file-like body in 8 KiB
        blocks, each through its progress callbacks and a streamed checksum.) An upload that fails
        is aborted: no part of it is ever visible."""
        part_size = self.transfer.multipart_chunksize
        extra = {"ContentType": media_type, "Metadata": {"sha256": sha256}}
        action = f"upload {key}"
        if len(data) <= self.transfer.multipart_threshold:
            self._call(action, self.client.put_object, Bucket=self.bucket, Key=key, Body=data, **extra)
            return
        upload = self._call(
            action,
            self.client.create_multipart_upload,
            Bucket=self.bucket,
            Key=key,
            ChecksumAlgorithm="CRC32",
            **extra,
        )
        upload_id = upload["UploadId"]

        def upload_part(number: int) -> dict[str, Any]:
            start = (number - 1) * part_size
            answer = self._call(
                action,
                self.client.upload_part,
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=data[start : start + part_size],
                ChecksumAlgorithm="CRC32",
            )
            part = {"PartNumber": number, "ETag": answer["ETag"]}
            if "ChecksumCRC32" in answer:  # the server checked it; completing the upload names it
                part["ChecksumCRC32"] = answer["ChecksumCRC32"]
            return part

        try:
            numbers = range(1, -(-len(data) // part_size) + 1)
            with ThreadPoolExecutor(max_workers=self.transfer.max_request_concurrency) as pool:
                parts = list(pool.map(upload_part, numbers))
            self._call(
                action,
                self.client.complete_multipart_upload,
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
            )
        except BaseException:
            with contextlib.suppress(botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError):
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            raise

    def _put_stream(self, reader: _HashingReader, media_type: str) -> ArtifactRef:
        temporary = f"{self.prefix}tmp/{uuid.uuid4().hex}"
        try:
            self._upload(reader, temporary, media_type)
            sha256 = reader.hash.hexdigest()
            key = content_key(self.prefix, sha256)
            existing = self._head(key)
            if existing is None or existing["ContentLength"] != reader.size:
                self._call(
                    "copy to its content key",
                    self.client.copy,
                    CopySource={"Bucket": self.bucket, "Key": temporary},
                    Bucket=self.bucket,
                    Key=key,
                    ExtraArgs={
                        "ContentType": media_type,
                        "Metadata": {"sha256": sha256},
                        "MetadataDirective": "REPLACE",
                    },
                    Config=self.transfer,
                )
            return self._ref(sha256, reader.size, media_type)
        finally:
            self._delete_quietly(temporary)

    def _upload(self, body: _HashingReader, key: str, media_type: str) -> None:
        self._call(
            f"upload {key}",
            self.client.upload_fileobj,
            Fileobj=body,
            Bucket=self.bucket,
            Key=key,
            ExtraArgs={"ContentType": media_type},
            Config=self.transfer,
        )

    def delete(self, sha256: str) -> bool:
        key = content_key(self.prefix, sha256)
        if self._head(key) is None:
            return False
        self._call(f"delete {sha256}", self.client.delete_object, Bucket=self.bucket, Key=key)
        return True

    def _delete_quietly(self, key: str) -> None:
        # Best effort: a leftover temporary object is never visible under a content key, and a
        # lifecycle rule on `tmp/` (see docs/stores.md) collects it.
        with contextlib.suppress(botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError):
            self.client.delete_object(Bucket=self.bucket, Key=key)

    # ----------------------------------------------------------------------------------------------
    # Reads

    def exists(self, sha256: str) -> bool:
        return self._head(content_key(self.prefix, sha256)) is not None

    def open(self, sha256: str) -> Iterator[bytes]:
        key = content_key(self.prefix, sha256)
        response = self._call(f"read {sha256}", self.client.get_object, Bucket=self.bucket, Key=key)
        return self._verified_chunks(sha256, response["Body"])

    def _verified_chunks(self, sha256: str, body: Any) -> Iterator[bytes]:
        digest = hashlib.sha256()
        try:
            while chunk := body.read(READ_CHUNK):
                digest.update(chunk)
                yield chunk
        except (botocore.exceptions.BotoCoreError, OSError) as error:
            raise self._error(f"read {sha256}", error) from error
        finally:
            body.close()
        if digest.hexdigest() != sha256:
            raise ArtifactCorrupted(
                f"s3://{self.bucket}/{content_key(self.prefix, sha256)} does not hash to its key"
            )

    def get(self, sha256: str) -> bytes:
        """The whole artifact, verified. Large objects come as parallel ranged GETs; the parts are
        hashed in order as they arrive, so the hash runs while later parts still download, and
        each part is read once into the bytes that are joined at the end (the transfer manager's
        file interface would copy every chunk twice more)."""
        key = content_key(self.prefix, sha256)
        part_size = self.transfer.multipart_chunksize
        action = f"read {sha256}"
        try:
            first = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes=0-{part_size - 1}")
        except botocore.exceptions.ClientError as error:
            if _code(error) != "InvalidRange":
                raise self._error(action, error) from error
            # Only an empty object has no byte 0 to start a range at.
            first = self._call(action, self.client.get_object, Bucket=self.bucket, Key=key)
        except botocore.exceptions.BotoCoreError as error:
            raise self._error(action, error) from error
        parts = [self._read_body(action, first["Body"])]
        total = _object_size(first)
        digest = hashlib.sha256(parts[0])
        if total > len(parts[0]):
            # Every later range must come from the same object version as the first.
            ranges = [
                (start, min(start + part_size, total) - 1) for start in range(len(parts[0]), total, part_size)
            ]
            with ThreadPoolExecutor(max_workers=self.transfer.max_request_concurrency) as pool:
                pending = [
                    pool.submit(self._read_range, action, key, first["ETag"], start, end)
                    for start, end in ranges
                ]
                try:
                    for future in pending:
                        part = future.result()
                        digest.update(part)  # releases the GIL: later parts keep downloading
                        parts.append(part)
                finally:
                    for future in pending:
                        future.cancel()
        if digest.hexdigest() != sha256:
            raise ArtifactCorrupted(f"s3://{self.bucket}/{key} does not hash to its key")
        return b"".join(parts)

    def _read_range(self, action: str, key: str, etag: str, start: int, end: int) -> bytes:
        response = self._call(
            action,
            self.client.get_object,
            Bucket=self.bucket,
            Key=key,
            Range=f"bytes={start}-{end}",
            IfMatch=etag,
        )
        part = self._read_body(action, response["Body"])
        if len(part) != end - start + 1:
            raise StoreUnavailable(f"{action}: bytes {start}-{end} came back as {len(part)} bytes")
        return part

    def _read_body(self, action: str, body: Any) -> bytes:
        try:
            data: bytes = body.read()
            return data
        except (botocore.exceptions.BotoCoreError, OSError) as error:
            raise self._error(action, error) from error
        finally:
            body.close()

    def location(self, sha256: str, *, expires_in: int = 3600) -> str:
        key = content_key(self.prefix, sha256)
        if self._head(key) is None:
            raise ArtifactNotFound(f"no artifact {sha256} in s3://{self.bucket}")
        return str(
            self.client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_in
            )
        )

    # ----------------------------------------------------------------------------------------------
    # Manifests and restore

    def put_manifest(self, entries: Sequence[DeclaredArtifact]) -> ArtifactRef:
        body = canonical_json([entry.model_dump(mode="json") for entry in entries])
        return self.put(body, media_type=MANIFEST_MEDIA_TYPE)

    def get_manifest(self, sha256: str) -> list[DeclaredArtifact]:
        try:
            return MANIFEST_ADAPTER.validate_json(self.get(sha256))
        except ValidationError as error:
            raise StoreError(f"artifact {sha256} is not a manifest: {error}") from error

    def materialize(self, entries: Sequence[DeclaredArtifact], root: Path) -> list[Path]:
        return materialize_from(self, entries, root)


def _code(error: botocore.exceptions.ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _object_size(response: dict[str, Any]) -> int:
    """The whole object's size from a GET's answer: `Content-Range: bytes a-b/size` for a range."""
    content_range = response.get("ContentRange")
    if content_range:
        return int(content_range.rsplit("/", 1)[1])
    return int(response["ContentLength"])


def open_s3_artifact_store(spec: dict[str, Any]) -> S3ArtifactStore:
    """From a spec: `{"backend": "s3", "bucket": ..., "endpoint_url": ..., "access_key": ...,
    "secret_key": ..., "region": ..., "prefix": ...}`, or `{"backend": "s3", "url":
    "s3://bucket/prefix"}` with credentials and endpoint from the usual AWS environment."""
    if "url" in spec and "bucket" not in spec:
        from urllib.parse import urlsplit

        parts = urlsplit(spec["url"])
        spec = {**spec, "bucket": parts.netloc, "prefix": parts.path.strip("/")}
    return S3ArtifactStore(
        spec["bucket"],
        endpoint_url=spec.get("endpoint_url"),
        access_key=spec.get("access_key"),
        secret_key=spec.get("secret_key"),
        region=spec.get("region", "us-east-1"),
        prefix=spec.get("prefix", ""),
        create_bucket=bool(spec.get("create_bucket", False)),
    )
