"""Priority queues and the DSCP mark that selects each: the one mapping every part uses.

The controller ranks flows into queues (queue 1 the most urgent scheduling class, queue 0 the default
class for unmarked traffic such as ARP and TCP ACKs), the switches and host shapers classify on DSCP,
and the agents put the mark into their sockets' ``IP_TOS``.  On Open vSwitch's userspace datapath
``set_queue`` does not pick the htb class (docs/platform.md), so the DSCP written here is what
actually decides a packet's queue: every side must derive it from these functions, or priority
silently turns off.

Queue ``q`` is marked with the class selector CSq (DSCP ``8 * q``); the IP TOS byte carries the DSCP
in its upper six bits.  Pure and Python 3.9 compatible (the controller imports it).
"""

from __future__ import annotations

#: Most queues per port (class selectors CS0..CS7).
MAX_QUEUES = 8
#: Queues per port unless told otherwise, the same on the fabric and in the controller (queue 0 for
#: unscheduled traffic, three scheduling classes).
DEFAULT_QUEUES = 4
_DSCP_PER_QUEUE = 8


def check_queues(queues: object) -> int:
    """``queues`` if it is a usable number of queues per port (2..8), else ValueError naming it."""
    if not isinstance(queues, int) or isinstance(queues, bool) or not 2 <= queues <= MAX_QUEUES:
        raise ValueError(f"queues must be an integer from 2 to {MAX_QUEUES}, got {queues!r}")
    return queues


def dscp_for_queue(queue: int) -> int:
    """DSCP that selects ``queue`` (class selector CS<queue>; queue 0 is unmarked, DSCP 0)."""
    if not isinstance(queue, int) or isinstance(queue, bool) or not 0 <= queue < MAX_QUEUES:
        raise ValueError(f"queue must be an integer from 0 to {MAX_QUEUES - 1}, got {queue!r}")
    return _DSCP_PER_QUEUE * queue


def queue_for_dscp(dscp: int) -> int:
    """The queue a DSCP value selects (inverse of :func:`dscp_for_queue`); ValueError if none does."""
    if not isinstance(dscp, int) or isinstance(dscp, bool) or dscp % _DSCP_PER_QUEUE:
        raise ValueError(f"DSCP {dscp!r} is not a class selector (a multiple of {_DSCP_PER_QUEUE} below 64)")
    queue = dscp // _DSCP_PER_QUEUE
    if not 0 <= queue < MAX_QUEUES:
        raise ValueError(f"DSCP {dscp!r} is not a class selector (a multiple of {_DSCP_PER_QUEUE} below 64)")
    return queue


def tos_for_dscp(dscp: int) -> int:
    """The IP TOS byte carrying ``dscp`` (DSCP is its upper six bits), as ``IP_TOS`` and tc take it."""
    if not isinstance(dscp, int) or isinstance(dscp, bool) or not 0 <= dscp <= 63:
        raise ValueError(f"DSCP must be an integer from 0 to 63, got {dscp!r}")
    return dscp << 2


def tos_for_queue(queue: int) -> int:
    """The IP TOS byte that selects ``queue`` (``iperf3 --tos``, tc's ``dsfield``, ``IP_TOS``)."""
    return tos_for_dscp(dscp_for_queue(queue))
