"""The event store on etcd v3, for clusters: `EtcdEventStore` (docs/stores.md, "etcd event store").

Its parts, bottom to top: `keys` (the key layout), `credentials` and `authentication` (TLS, client
certificates, an etcd user's password), `connection` (the gRPC channels, deadlines and retries),
`limits` (what one transaction holds), `wire` (the append's transaction as wire bytes), `segments`
(archived ranges of a record in the artifact store), `reads` (chained reads across segments and
etcd), `batching` (appends of several sessions in one transaction), `appends` (one append, one
transaction), `archiving`, `leases`, `watches`, `deletion`, and `store`, which puts them together.
"""

from belay.stores.etcd.appends import Snapshot
from belay.stores.etcd.connection import grpc_target
from belay.stores.etcd.keys import SessionKeys, prefix_range_end
from belay.stores.etcd.limits import MAX_BATCH_EVENTS, check_batch_size
from belay.stores.etcd.segments import ARCHIVE_KEEP_EVENTS, SEGMENT_EVENTS, segment_lines
from belay.stores.etcd.store import EtcdEventStore, archive_closed, open_etcd_event_store

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
