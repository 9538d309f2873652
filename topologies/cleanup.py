"""State files and cleanup: remove exactly what a fabric created, also after its owner crashed.

Each fabric writes ``/run/echelon/fabric-<tag>.json`` *before* it creates anything, listing the bridges
and interfaces it is about to create, and updates it with the pids of the Mininet shells and the QoS/Queue
uuids as soon as they exist.  Processes are identified by pid plus kernel start time (field 22 of
``/proc/<pid>/stat``), so a reused pid is never killed.

What survives a SIGKILL of the owning process (no atexit, no signal handler runs): the OVS bridges and
their QoS/Queue rows (OVSDB keeps them), the root-namespace veth ends of switch ports, and the state file.
The Mininet shells lose their pty and exit on their own, taking the host namespaces and host-side veths
with them.  ``echelon fabric clean`` (:func:`clean`) removes the rest: everything tagged
``echelon-owner`` whose owner is no longer alive, plus what dead owners' state files list.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field

from echelonflow.fileio import write_json_atomic
from echelonflow.ownership import clean_abandoned, kill_recorded, same_process
from topologies import ovs

STATE_DIR = "/run/echelon"


def state_path(tag: str) -> str:
    return os.path.join(STATE_DIR, f"fabric-{tag}.json")


@dataclass
class FabricState:
    """What one fabric owns; saved as JSON in :data:`STATE_DIR`."""

    tag: str
    owner: dict[str, int]
    bridges: list[str] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    pids: list[dict[str, int]] = field(default_factory=list)
    qos: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)

    def save(self) -> None:
        os.makedirs(STATE_DIR, exist_ok=True)
        write_json_atomic(state_path(self.tag), self.__dict__)

    @classmethod
    def load(cls, path: str) -> FabricState:
        with open(path) as fh:
            data = json.load(fh)
        return cls(**data)

    def owner_alive(self) -> bool:
        return same_process(self.owner)


def list_states() -> list[FabricState]:
    if not os.path.isdir(STATE_DIR):
        return []
    states = []
    for name in sorted(os.listdir(STATE_DIR)):
        if name.startswith("fabric-") and name.endswith(".json"):
            try:
                states.append(FabricState.load(os.path.join(STATE_DIR, name)))
            except (OSError, ValueError, TypeError):
                continue  # half-written or foreign file: ignore rather than guess
    return states


def remove_state(state: FabricState) -> dict[str, int]:
    """Remove everything ``state`` lists (only bridges and rows still carrying its tag); return counts."""
    killed = kill_recorded(state.pids)
    ours = ovs.bridges_owned(state.tag)
    bridges = [b for b in state.bridges if b in ours] + [b for b in ours if b not in state.bridges]
    remove_bridges(bridges)
    rows = remove_rows(state.tag, set(state.qos), set(state.queues))
    ovs.delete_links(state.interfaces + state.bridges)
    with contextlib.suppress(FileNotFoundError):
        os.remove(state_path(state.tag))
    return {"processes": killed, "bridges": len(bridges), "rows": rows}


def remove_bridges(names: list[str]) -> None:
    ovs.vsctl_transactions([["--if-exists", "del-br", name] for name in names])


def remove_rows(tag: str, qos: set | None = None, queues: set | None = None) -> int:
    """Destroy QoS then Queue rows tagged ``tag`` ('' = any) or listed; QoS first (it references queues)."""
    qos_rows = set(ovs.rows_owned("QoS", tag)) | set(qos or ())
    queue_rows = set(ovs.rows_owned("Queue", tag)) | set(queues or ())
    return _destroy_rows(qos_rows, queue_rows)


def _destroy_rows(qos: set, queues: set) -> int:
    """Destroy the given QoS rows, then the Queue rows (a QoS references its queues); return how many."""
    cmds = [["--if-exists", "destroy", "QoS", u] for u in sorted(qos)]
    cmds += [["--if-exists", "destroy", "Queue", u] for u in sorted(queues)]
    if cmds:
        ovs.vsctl_transactions(cmds)
    return len(cmds)


def clean(include_alive: bool = False) -> dict[str, int]:
    """Remove every fabric whose owner is dead (all fabrics if ``include_alive``) and orphaned tagged rows,
    and end the controllers and agents of dead runs and remove their temporary folders
    (:func:`echelonflow.ownership.clean_abandoned`).

    Rows and bridges tagged by a fabric whose owner is still running are left alone, so ``clean`` is
    safe while another fabric is up.
    """
    totals = clean_abandoned()
    totals.update({"fabrics": 0, "bridges": 0, "rows": 0, "skipped_alive": 0})
    alive_tags = set()
    for state in list_states():
        if state.owner_alive() and not include_alive:
            alive_tags.add(state.tag)
            totals["skipped_alive"] += 1
            continue
        counts = remove_state(state)
        totals["fabrics"] += 1
        for key, value in counts.items():
            totals[key] += value
    orphans = [b for b, tag in ovs.bridges_owned().items() if tag not in alive_tags]
    remove_bridges(orphans)
    totals["bridges"] += len(orphans)
    qos = {u for u, tag in ovs.rows_owned("QoS").items() if tag not in alive_tags}
    queues = {u for u, tag in ovs.rows_owned("Queue").items() if tag not in alive_tags}
    totals["rows"] += _destroy_rows(qos, queues)
    return totals
