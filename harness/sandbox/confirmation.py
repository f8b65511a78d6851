"""How a child tells the harness that it is confined, before any code of an environment or a check runs in it.

Right after it has applied every confinement layer, a session or check process writes ``CONFINED`` on its channel:
a frame with no body and sequence number 0, which answers no request (the harness numbers its requests from 1).
Until that frame, only the harness's own code has run in the process, so whatever ends it is the sandbox's doing;
from that frame on, anything that ends it (an exit with any status, a crash, a stop) is the code's. The status
``UNCONFINED_STATUS`` of a child that could not confine itself therefore names the sandbox only before the
confirmation: code can call ``os._exit(UNCONFINED_STATUS)`` too. Standard library only: the zygote imports it.
"""

from __future__ import annotations

CONFIRMATION_SEQUENCE = 0
"""The sequence number of the confirmation frame; no request carries it."""
CONFINED = bytes(8)
"""The confirmation frame: a body length of 0 and ``CONFIRMATION_SEQUENCE``, both as 4-byte little-endian."""
UNCONFINED_STATUS = 70
CPU_EXHAUSTED_STATUS = 152
"""The exit status of a child whose code kept computing past its CPU-time limit (it caught the timeout): 128 plus
SIGXCPU, as a shell reports a process the CPU limit ended (the jail may not signal itself)."""
"""The exit status of a child whose confinement failed: it refused to run the code (``zygote._child``)."""

__all__ = ["CONFINED", "CONFIRMATION_SEQUENCE", "CPU_EXHAUSTED_STATUS", "UNCONFINED_STATUS"]
