"""Event and artifact stores: the protocols in `base`, the embedded backends, and `open_*_store`."""

from belay.stores.factory import open_artifact_store, open_event_store, parse_store_url

__all__ = ["open_artifact_store", "open_event_store", "parse_store_url"]
