"""The ``echelon`` command line: dispatch to each part's sub-command module (``cli.main``).

It sits above every other package (it names the simulator's, the emulation's, the controller's, the
fabric's and the reports' sub-commands), so it lives outside the core, which imports none of them.
"""
