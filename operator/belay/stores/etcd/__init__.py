"""The event store on etcd v3, for clusters: `EtcdEventStore` (docs/stores.md, "etcd event store")."""

from belay.stores.etcd.store import (
    ARCHIVE_KEEP_EVENTS,
    MAX_BATCH_EVENTS,
    SEGMENT_EVENTS,
    EtcdEventStore,
    SessionKeys,
    Snapshot,
    archive_closed,
    check_batch_size,
    grpc_target,
    open_etcd_event_store,
    prefix_range_end,
    segment_lines,
)

__all__ = [
    "ARCHIVE_KEEP_EVENTS",
    "MAX_BATCH_EVENTS",
    "SEGMENT_EVENTS",
    "EtcdEventStore",
    "SessionKeys",
    "Snapshot",
    "archive_closed",
    "check_batch_size",
    "grpc_target",
    "open_etcd_event_store",
    "prefix_range_end",
    "segment_lines",
]
