"""What one etcd transaction can hold, and the check of a batch against it."""

from __future__ import annotations

from collections.abc import Sequence

from belay.journal.events import EventDraft
from belay.stores.base import MAX_PAYLOAD_BYTES, PayloadTooLarge

# etcd refuses requests above --max-request-bytes (1.5 MiB by default) and transactions with more
# than --max-txn-ops operations (128 by default). A batch is one transaction, so it must fit both.
MAX_BATCH_BYTES = 1024 * 1024
MAX_BATCH_EVENTS = 100
MAX_TXN_OPERATIONS = 128


def check_batch_size(drafts: Sequence[EventDraft], encoded: Sequence[bytes]) -> None:
    """Refuse, before anything is sent, a batch etcd could not hold in one transaction.
    `encoded` are the events' stored bytes."""
    if len(drafts) > MAX_BATCH_EVENTS:
        raise PayloadTooLarge(
            f"a batch of {len(drafts)} events is above the {MAX_BATCH_EVENTS}-event limit of one "
            "etcd transaction: append it in smaller batches"
        )
    for index, draft in enumerate(drafts):
        if draft.payload_size > MAX_PAYLOAD_BYTES:
            raise PayloadTooLarge(
                f"event {index} ({draft.type}) has a {draft.payload_size}-byte payload, above the "
                f"{MAX_PAYLOAD_BYTES}-byte limit: store the bytes as an artifact and reference its sha256"
            )
    total = sum(map(len, encoded))
    if total > MAX_BATCH_BYTES:
        raise PayloadTooLarge(
            f"a batch of {total} bytes is above the {MAX_BATCH_BYTES}-byte limit of one etcd "
            "transaction: store large payloads as artifacts or append in smaller batches"
        )
