"""Coflow-Benchmark import: the FB2010 trace shipped in data/; malformed traces fail in one line."""

from __future__ import annotations

import pytest

from echelonflow.data_files import data_path
from echelonflow.errors import TraceError
from echelonflow.importers.coflow_benchmark import BYTES_PER_MB, read_coflow_benchmark
from echelonflow.model import ComputeTask, FlowTask

FB2010 = "coflow-benchmark/FB2010-1Hr-150-0.txt"


@pytest.fixture(scope="module")
def fb2010():
    return read_coflow_benchmark(data_path(FB2010))


def test_fb2010_is_526_coflows_on_150_ports(fb2010) -> None:
    jobs, summary = fb2010
    assert (summary.ports, summary.coflows) == (150, 526)
    # 706,397 mapper-to-reducer pairs in the trace; those within one port never cross the switch.
    assert summary.flows + summary.local_flows_dropped == 706_397
    assert summary.flows == sum(len(job.flows) for job in jobs)
    assert summary.bytes_total - summary.bytes_dropped == sum(f.size_bytes for j in jobs for f in j.flows)
    assert [j.job_id for j in jobs][:3] == ["1", "2", "3"]
    arrivals = [j.arrival_s for j in jobs]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0 and arrivals[-1] == pytest.approx(3629.235)
    hosts = {h for j in jobs for h in j.hosts}
    assert hosts <= {f"h{i}" for i in range(1, 151)}


def test_fb2010_coflow_2_splits_its_reducer_over_both_mappers(fb2010) -> None:
    # Trace line: "2 10833 2 104 132 1 140:48.0"
    job = fb2010[0][1]
    assert job.job_id == "2" and job.arrival_s == pytest.approx(10.833)
    flows = sorted(job.flows, key=lambda f: f.src)
    assert [(f.src, f.dst, f.size_bytes) for f in flows] == [
        ("h105", "h141", 24 * BYTES_PER_MB), ("h133", "h141", 24 * BYTES_PER_MB)]
    assert {f.echelon_id for f in flows} == {"shuffle"} and job.echelon_kinds == {"shuffle": "coflow"}
    assert all(not f.deps for f in flows)


def test_a_coflow_entirely_within_one_port_is_a_zero_second_job(fb2010) -> None:
    # Trace line 1: "1 0 1 22 1 65:1.0" crosses the switch; find those that never do.
    local = [j for j in fb2010[0] if not j.flows]
    assert len(local) == 3
    for job in local:
        (task,) = job.tasks.values()
        assert isinstance(task, ComputeTask) and task.duration_s == 0.0


def test_bytes_split_exactly(tmp_path) -> None:
    trace = tmp_path / "t.txt"
    trace.write_text("4 1\n7 1500 3 0 1 2 1 3:1.0\n")
    (job,), summary = read_coflow_benchmark(trace)
    sizes = [f.size_bytes for f in job.flows]
    assert sum(sizes) == BYTES_PER_MB and max(sizes) - min(sizes) <= 1
    assert job.job_id == "7" and job.arrival_s == 1.5
    assert all(isinstance(f, FlowTask) and f.dst == "h4" for f in job.flows)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "line 1: empty"),
        ("150\n", "line 1: expected '<ports> <coflows>'"),
        ("2 x\n", "line 1: coflows: 'x' is not a whole number"),
        ("2 2\n1 0 1 0 1 1:1.0\n", "announces 2 coflows, the file has 1 lines"),
        ("2 1\n1 0 1\n", "expected '<id> <arrival_ms>"),
        ("2 1\n1 -5 1 0 1 1:1.0\n", "coflow '1': arrival_ms: must be a finite number >= 0"),
        ("2 1\n1 0 3 0 1 1:1.0\n", "announces 3 mappers"),
        ("2 1\n1 0 1 5 1 1:1.0\n", "coflow '1': mapper 0: port 5 is outside the trace's ports 0..1"),
        ("2 1\n1 0 1 0 2 1:1.0\n", "announces 2 reducers but gives 1"),
        ("2 1\n1 0 1 0 1 1=1.0\n", "reducer 0 entry '1=1.0' is not PORT:MB"),
        ("2 1\n1 0 1 0 1 1:nan\n", "reducer 0 MB: must be a finite number >= 0"),
        ("2 1\n1 0 2 0 0 1 1:1.0\n", "a mapper port is listed twice"),
        ("2 2\n1 0 1 0 1 1:1.0\n1 5 1 0 1 1:1.0\n", "line 3: coflow '1': duplicate coflow id"),
        ("2 1\na/b 0 1 0 1 1:1.0\n", "must not contain '/'"),
        # hostile input: more ports than a topology may have hosts (10^12 ports made 10^12 host names until
        # the process was killed for its memory), numbers Python reads but the format has not, ids the
        # registry would refuse
        ("20000 1\n1 0 1 0 1 1:1\n", "line 1: ports: 20,000 ports, more than the 16,384"),
        ("9" * 5000 + " 1\n", "line 1: ports: '99999"),
        ("2 1\n1 0 1 0 1 1:1_0\n", "reducer 0 MB: '1_0' is not a number"),
        ("2 1\n1 0 1_0 0 1 1:1\n", "number of mappers: '1_0' is not a whole number"),
        ("2 1\n-x 0 1 0 1 1:1.0\n", "line 2: coflow id: must be an id"),
        ("2 1\n" + "a" * 500 + " 0 1 0 1 1:1.0\n", "line 2: coflow id: must be an id"),
    ],
)
def test_malformed_traces_name_line_and_problem(tmp_path, text: str, problem: str) -> None:
    trace = tmp_path / "bad.txt"
    trace.write_text(text)
    with pytest.raises(TraceError) as caught:
        read_coflow_benchmark(trace)
    message = str(caught.value)
    assert problem in message and str(trace) in message and "\n" not in message
    assert len(message) < 300, message  # a refused value is quoted short


def test_unreadable_files_are_one_line(tmp_path) -> None:
    with pytest.raises(TraceError, match="coflow trace .*missing.txt: cannot read"):
        read_coflow_benchmark(tmp_path / "missing.txt")
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(TraceError, match="coflow trace .*bin.txt: not ASCII text"):
        read_coflow_benchmark(binary)
