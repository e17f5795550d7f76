"""One handler per event class, each returning the fields of `SessionState` it changes."""
