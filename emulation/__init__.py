"""The emulation: a scenario run for real on a Mininet/OVS fabric with the controller and traffic agents.

Read it top-down, in the order ``echelon emulate`` (and ``echelon demo``) runs it:

* :mod:`emulation.command` (``echelon emulate``) and :mod:`emulation.demo_command` (``echelon demo``):
  arguments -> an :class:`~emulation.experiment.EmulationRequest`;
* :mod:`emulation.experiment`: the scenario simulated, then every scheduler emulated ``repeat`` times,
  the run folder kept current (:mod:`emulation.runfolder`), the table at the end; the time dilation it
  runs at is chosen by :mod:`emulation.dilation` (calibrated on the fabric by :mod:`emulation.calibrate`);
* :mod:`emulation.run`: one run, one scheduler: a rig, its phases, one result;
* :mod:`emulation.rig`: the fabric (``topologies.fabric``) and a controller (``controller.launcher``) for
  the run's phases; the controller fault;
* :mod:`emulation.phase`: one phase: the agents (:mod:`emulation.agents`) watched by the fidelity monitor
  (:mod:`emulation.monitor`) and, with ``--capture``, the wire capture (:mod:`emulation.capture`), with
  the faults acted out (:mod:`emulation.fault_injector`);
* :mod:`emulation.assemble`: the agents' documents -> the result shape the simulator writes; then
  ``reports`` renders the table, the CSV, fidelity.md and the plots.

Below it, ``traffic/`` is the agents' own runtime (what runs inside each Mininet host); the knobs are
:mod:`emulation.settings`, the error type :mod:`emulation.errors`, the progress lines
:mod:`emulation.progress`.
"""
