"""Belay: long-lived AI agent sessions whose record outlives every pod."""

import os

# Belay starts its children with a preexec_fn (their parent-death signal), so by fork, not vfork:
# gRPC's fork handlers (the etcd store's client) would run in the child between fork and exec and
# can abort it (SIGABRT, "epoll_ctl failed"). No child uses this process's channels. gRPC reads this
# when it is first imported, which in Belay is after this package.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

__version__ = "0.1.0"
