"""Importers: public workload traces turned into :class:`~echelonflow.model.Job` DAGs.

``coflow_benchmark`` reads the Coflow-Benchmark format (Facebook's 2010 MapReduce shuffles), ``chakra``
reads MLCommons Chakra execution traces.  Each checks its whole input before returning anything and
raises a one-line :class:`~echelonflow.errors.TraceError` naming the file, the place and the problem.
"""
