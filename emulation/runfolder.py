"""The run folder as an emulation fills it: results.json rewritten after every finished run.

``reports.runfolder`` writes the files; this keeps the emulation's bookkeeping around it: how many runs
are planned and done, and whether the folder is complete.  Nothing finished is lost: until the last run
the status says the folder is partial and why (still running; a run failed; Ctrl-C or SIGTERM), so a
reader of a folder left by a dead emulation knows what it holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from echelonflow.results import Results
from reports.runfolder import RunFolder, write_run_folder

#: The status of a folder whose emulation is under way (or died without a word, e.g. killed -9).
RUNNING = "still running, or the emulation died before finishing (e.g. killed)"


class Checkpoints:
    """Writes ``emulated`` and ``simulated`` to ``run_dir`` with the emulation's status."""

    def __init__(self, run_dir: str, emulated: Results, simulated: Results, repeat: int, plots: bool) -> None:
        self.run_dir, self.emulated, self.simulated = run_dir, emulated, simulated
        self.repeat, self.plots = repeat, plots
        self.planned = len(simulated.runs) * repeat

    def write(self, reason: str | None = RUNNING, complete: bool = False) -> RunFolder:
        """The folder as it stands; plots only once complete (they take seconds each)."""
        status: dict[str, Any] = {"complete": complete, "runs_done": len(self.emulated.runs),
                                  "runs_planned": self.planned, "repeat": self.repeat}
        if reason and not complete:
            status["reason"] = reason
        return write_run_folder(self.run_dir, self.emulated, [self.simulated], plots=self.plots and complete,
                                status=status)

    @contextlib.contextmanager
    def partial_on_stop(self) -> Iterator[None]:
        """Ctrl-C, or SIGTERM/SIGHUP unwinding the same way (``cli.main``), marks the folder partial
        with the reason, then goes on unwinding."""
        try:
            yield
        except (KeyboardInterrupt, SystemExit) as stop:
            signum = getattr(stop, "signum", None)
            if isinstance(stop, SystemExit):
                self.write(f"stopped (exit status {stop.code})")
            else:
                self.write(f"stopped by signal {signum}" if signum else "interrupted (Ctrl-C)")
            raise
