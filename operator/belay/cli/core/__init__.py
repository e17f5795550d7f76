"""What the commands mean, written once for both command lines: `belay` (the embedded runtime,
which records decisions in the session record) and `kubectl belay` (a cluster, where they go into
the AgentSession's spec for the operator to record). Each front end only reads where it stands,
calls these, carries out what they return and prints."""
