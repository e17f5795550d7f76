"""The guard against reading a store's records with another record key than they were written with.

A record is read only with the key it was written with (`belay.stores.integrity`): under any other
key (or none, where the records were keyed; or a key, where they were not) every event fails its
check, and the session would stand as `RecordCorrupt` though nothing was changed. The usual cause
is a new key, not damage: a chart upgrade that made a new key (`lookup` saw none, a GitOps render,
a release from before the key was on by default), or a key file that was lost.

So each store keeps the fingerprint of the key its records are written with (`EventStore.
keep_key_fingerprint`: an HMAC of a fixed label, never the key; one entry per store, written
once), and the operator and the harness compare it with the key they hold before they read or
write a record. A store that has records but no fingerprint yet (written before the fingerprint
was kept) has the first events of its records checked under the key instead: the fingerprint is
kept only when one of them reads.
"""

from __future__ import annotations

from belay.stores.base import EventStore, RecordCorrupt, RecordKeyMismatch

# What to set, said where the operator or a harness pod refuses.
IN_A_CLUSTER = (
    "set the chart's stores.recordKey.existingSecret to a Secret holding the key the records were "
    "written with (or stores.recordKey.enabled=false if they were written without one)"
)


def in_own_secret(secret: str) -> str:
    """What to set for a session's own stores: the key is in the Secret the session names."""
    return (
        f"set BELAY_RECORD_KEY in Secret {secret} to the key the records were written with (or "
        "remove it if they were written without one)"
    )


async def guard_record_key(store: EventStore, where: str, what_to_set: str) -> None:
    """Refuse (RecordKeyMismatch, one line naming `what_to_set`) when the key `store` holds is not
    the one its records were written with; keep the key's fingerprint where the store has none."""
    kept = await store.kept_key_fingerprint()
    if kept is None:
        await _check_a_record(store, where, what_to_set)
        kept = await store.keep_key_fingerprint()
    if kept != store.key_fingerprint():
        raise RecordKeyMismatch(
            f"RecordKeyMismatch: the records in {where} were written under another record key than "
            f"this process holds (nothing was read or written): {what_to_set}"
        )


# How many records are tried before a key that reads none of them is taken for another key.
RECORDS_TRIED = 8


async def _check_a_record(store: EventStore, where: str, what_to_set: str) -> None:
    """Records written before the store kept a fingerprint: whether their first events read under
    this key. The first event's link is a MAC under the key from the chain's start, so under the
    right key it reads whatever damage lies later in its record (a gap, a changed event: that
    record is RecordCorrupt, said where it is read), and under another key every record fails at
    its first event. One record that reads is enough; none of the first few: another key."""
    sessions = (await store.list_sessions())[:RECORDS_TRIED]
    failures: list[RecordCorrupt] = []
    for session in sessions:
        try:
            await store.read(session, 1, 1, limit=1)
            return
        except RecordCorrupt as error:
            failures.append(error)
    if failures:
        raise RecordKeyMismatch(
            f"RecordKeyMismatch: the record of session {sessions[0]!r} in {where} does not read under "
            f"the record key this process holds (written under another key, or damaged: "
            f"{failures[0].problem}); nothing was read or written: {what_to_set}"
        ) from failures[0]
