"""The operator: pure functions (desired objects, status, recovery, record writes, checkpoint
mirrors) and thin kopf handlers over them (`belay.controller.handlers`)."""
