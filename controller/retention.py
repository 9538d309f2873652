"""How long a done job stays: in memory, then in the store, then nowhere.

A job is **done** when it was aborted, or when it has flows and every one of them finished (or was
aborted); it is done at its abort, or at its last flow's finish.  A job that declares more flows is not
done any more.  A controller that runs for weeks keeps in memory only what is live and what finished
lately, so its reads and its rounds cost what the live jobs cost, not what the history costs:

* a done job leaves memory :attr:`Retention.memory_s` after it was done, or sooner when more than
  :attr:`Retention.memory_jobs` done jobs are in memory (the longest done first);
* it stays in the store, readable by its id (``GET /v1/jobs/{job}`` and below), until
  :attr:`Retention.store_s` after it was done; then its rows are deleted;
* ``DELETE /v1/jobs/{job}`` removes a done job at once, from both.

A job that stays live for weeks (a training job runs iteration after iteration) would still keep every
EchelonFlow it ever ran: so an EchelonFlow is **done** as well when it has flows and every one of them is
done, and a done EchelonFlow leaves memory, stays in the store and is deleted from it under the same
settings, counted apart from the jobs (at most :attr:`Retention.memory_jobs` done EchelonFlows in memory),
whether its job is live or done.

Kept Python 3.9 compatible; stdlib only.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

#: Defaults of the controller settings ``retain_done_jobs``, ``retain_done_s``, ``archive_done_s``.
MEMORY_JOBS = 1000
MEMORY_S = 3600.0
STORE_S = 7 * 86400.0


@dataclass(frozen=True)
class Retention:
    """How many done jobs memory holds and for how long, and how long the store keeps them."""

    memory_jobs: int = MEMORY_JOBS
    memory_s: float = MEMORY_S
    store_s: float = STORE_S


#: The defaults.
DEFAULT = Retention()


class Done:
    """The done jobs (or EchelonFlows) in memory, in the order they were done."""

    def __init__(self) -> None:
        self._done_s: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._done_s)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._done_s

    def done_s(self, job_id: str) -> float | None:
        return self._done_s.get(job_id)

    def done(self, job_id: str, at_s: float) -> None:
        """``job_id`` is done at ``at_s``; jobs are kept in the order they became done (an agent's reported
        finish may lie a few seconds before an earlier job's: it then leaves a little later)."""
        self._done_s.pop(job_id, None)
        self._done_s[job_id] = at_s

    def undone(self, job_id: str) -> None:
        self._done_s.pop(job_id, None)

    def due(self, now_s: float, retention: Retention) -> list[tuple[str, float]]:
        """The jobs to leave memory now, longest done first, with when they were done."""
        out = []
        over = len(self._done_s) - retention.memory_jobs
        for job_id, done_s in self._done_s.items():
            if over <= 0 and done_s > now_s - retention.memory_s:
                break
            out.append((job_id, done_s))
            over -= 1
        return out
