"""Multi-tenant DDL workloads (model arithmetic, Poisson arrivals at a load, seeded placement) and the
per-job lower bound; checked against numbers recomputed here from their definitions."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from echelonflow.bounds import lower_bound_s
from echelonflow.errors import ScenarioError, UserError
from echelonflow.model import ComputeTask, FlowTask, Job
from echelonflow.results import JobResult, Results
from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler
from echelonflow.topology import build
from echelonflow.workloads import generate as generate_job
from echelonflow.workloads import models, multitenant
from simulator.engine import simulate

ECHELON = str(Path(sys.executable).parent / "echelon")
K8_OS4 = build("fattree", 10e9, k=8, oversubscription=4)
SPEC = {"jobs": 10, "load": 0.3, "seed": 7, "iterations": 2}


def shape(workload: multitenant.Workload) -> list:
    return [(j.job_id, j.arrival_s, j.hosts, list(j.tasks.values())) for j in workload.jobs]


def test_same_seed_same_workload_other_seed_another() -> None:
    one = multitenant.generate(SPEC, K8_OS4)
    assert shape(one) == shape(multitenant.generate(dict(SPEC), K8_OS4))
    other = multitenant.generate({**SPEC, "seed": 8}, K8_OS4)
    assert [j.hosts for j in other.jobs] != [j.hosts for j in one.jobs]
    assert [j.arrival_s for j in other.jobs] != [j.arrival_s for j in one.jobs]


def test_arrival_rate_is_the_load_on_the_host_links() -> None:
    """lambda = load x hosts x rate / 8 / E[wire bytes], E over the mix computed here from the generators."""
    workload = multitenant.generate(SPEC, K8_OS4)
    payloads = []
    for model_name, parallelism, hosts in multitenant.DEFAULT_MIX:
        name, params = models.job_params(models.MODELS[model_name], parallelism, hosts, 2)
        job = generate_job(name, "x", [f"h{i + 1}" for i in range(hosts)], params)
        payloads.append(sum(f.size_bytes for f in job.flows))
    mean_wire = statistics.fmean(payloads) * (9014 / 8948)  # 9000-byte MTU: 8948 payload per 9014 on the wire
    assert workload.mean_wire_bytes == pytest.approx(mean_wire)
    assert workload.arrival_rate_per_s == pytest.approx(0.3 * 128 * 10e9 / 8 / mean_wire)
    assert workload.jobs[0].arrival_s == 0.0
    arrivals = [j.arrival_s for j in workload.jobs]
    assert arrivals == sorted(arrivals)


def test_other_load_same_jobs_arrivals_scaled() -> None:
    """Loads compare like for like: one seed gives the same jobs on the same hosts at every load."""
    low = multitenant.generate(SPEC, K8_OS4)
    high = multitenant.generate({**SPEC, "load": 0.9}, K8_OS4)
    assert [(j.job_id, j.hosts) for j in low.jobs] == [(j.job_id, j.hosts) for j in high.jobs]
    for a, b in zip(low.jobs[1:], high.jobs[1:]):
        assert b.arrival_s == pytest.approx(a.arrival_s / 3)


def test_poisson_gaps_have_the_asked_mean() -> None:
    """1,000 small jobs: the mean gap is 1 / lambda within 10 % (about 3 standard errors)."""
    topology = build("bigswitch", 1e9, hosts=3000)
    small = {"model": "resnet50", "parallelism": "ps", "hosts": 3}
    spec = {"jobs": 1000, "load": 0.5, "seed": 3, "mix": [small]}
    workload = multitenant.generate(spec, topology)
    gaps = [b.arrival_s - a.arrival_s for a, b in zip(workload.jobs, workload.jobs[1:])]
    assert statistics.fmean(gaps) == pytest.approx(1 / workload.arrival_rate_per_s, rel=0.1)
    # exponential: the standard deviation equals the mean
    assert statistics.pstdev(gaps) == pytest.approx(statistics.fmean(gaps), rel=0.15)
    # offered load recovered from the drawn workload: bytes asked for over the time they arrived in
    sent_bits = 8 * sum(topology.wire_bytes(sum(f.size_bytes for f in j.flows)) for j in workload.jobs[:-1])
    assert sent_bits / workload.jobs[-1].arrival_s / (3000 * 1e9) == pytest.approx(0.5, rel=0.1)


@pytest.mark.parametrize("placement", ["random", "packed"])
def test_each_job_on_its_own_hosts(placement: str) -> None:
    workload = multitenant.generate({**SPEC, "placement": placement}, K8_OS4)
    used = [h for job in workload.jobs for h in job.hosts]
    assert len(used) == len(set(used)) and set(used) <= set(K8_OS4.hosts)
    for job, kind in zip(workload.jobs, workload.kinds):
        assert len(job.hosts) == kind.hosts
    in_order = {f"h{i + 1}" for i in range(len(used))}
    assert (set(used) == in_order) == (placement == "packed")  # packed: the first hosts, in order


def test_k16_fat_tree_with_oversubscription() -> None:
    topology = build("fattree", 100e9, k=16, oversubscription=2)
    workload = multitenant.generate({"jobs": 100, "load": 1.0, "seed": 1}, topology)
    assert len(workload.jobs) == 100
    assert {k.label for k in workload.kinds} == {f"{m}/{p}" for m, p, _ in multitenant.DEFAULT_MIX}
    assert max(int(h[1:]) for j in workload.jobs for h in j.hosts) > 512  # spread over the 1,024 hosts


def test_model_arithmetic() -> None:
    """Bytes and compute times of each parallelism, recomputed from the model shapes."""
    flop_s = 312e12 * 0.4
    bert = models.MODELS["bert-large"]
    layer_flops = 24 * 8 * 512 * 1024**2 + 4 * 8 * 512**2 * 1024
    name, p = models.job_params(bert, "ring", 8, 1)
    assert name == "ring_allreduce" and p["bytes"] == 680_000_000 and p["buckets"] == 4
    assert p["forward_s"] == pytest.approx(24 * layer_flops / flop_s)
    assert p["backward_s"] == pytest.approx(2 * p["forward_s"])
    name, p = models.job_params(bert, "megatron", 4, 1)
    assert p["layers"] == 4 and p["activation_bytes"] == 2 * 8 * 512 * 1024 * 2 * 6
    assert p["forward_s"] == pytest.approx(6 * layer_flops / flop_s / 4)
    name, p = models.job_params(bert, "fsdp", 4, 1)
    assert p["param_bytes"] == 12 * 1024**2 * 2 * 6
    gpt = models.MODELS["gpt-13b"]
    name, p = models.job_params(gpt, "1f1b", 8, 3)
    assert name == "1f1b" and p["iterations"] == 3 and p["micro_batches"] == 8
    assert p["activation_bytes"] == 2048 * 5120 * 2
    gpt_layer = 24 * 2048 * 5120**2 + 4 * 2048**2 * 5120
    assert p["forward_s"] == pytest.approx(5 * gpt_layer / flop_s)
    resnet = models.MODELS["resnet50"]
    name, p = models.job_params(resnet, "ps", 5, 1, accelerator_flops=100e12, utilisation=0.5)
    assert name == "parameter_server" and p["bytes"] == 102_400_000
    assert p["forward_s"] == pytest.approx(32 * 8.2e9 / 50e12)
    job = generate_job(name, "r", ["h1", "h2", "h3", "h4", "h5"], p)
    assert sum(f.size_bytes for f in job.flows) == 8 * 102_400_000  # 4 workers push and pull


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"load": 0.5}, "multi_tenant: jobs: missing"),
        ({"jobs": 3}, "multi_tenant: load: missing"),
        ({"jobs": 0, "load": 0.5}, "multi_tenant: jobs: must be an integer >= 1, got 0"),
        ({"jobs": 3, "load": -1}, "multi_tenant: load: must be a number > 0, got -1"),
        ({"jobs": 3, "load": float("nan")}, "multi_tenant: load: must be a number > 0, got nan"),
        ({"jobs": 3, "load": True}, "multi_tenant: load: must be a number > 0, got true"),
        ({"jobs": 3, "load": 0.5, "seed": 1.5}, "multi_tenant: seed: must be an integer >= 0, got 1.5"),
        ({"jobs": 3, "load": 0.5, "utilisation": 2},
         "multi_tenant: utilisation: must be a number > 0 and <= 1, got 2"),
        ({"jobs": 3, "load": 0.5, "placement": "nearby"},
         "multi_tenant: placement: must be one of random, packed, got 'nearby'"),
        ({"jobs": 3, "load": 0.5, "speed": 1},
         "multi_tenant: speed: unknown field (allowed: jobs, load, seed, mix,"),
        ({"jobs": 3, "load": 0.5, "mix": []}, "multi_tenant: mix: must be a non-empty array"),
        ({"jobs": 3, "load": 0.5, "mix": ["gpt-13b"]}, "multi_tenant: mix[0]: must be 'model/parallelism'"),
        ({"jobs": 3, "load": 0.5, "mix": ["llama/ring"]}, "mix[0]: unknown model 'llama'"),
        ({"jobs": 3, "load": 0.5, "mix": ["resnet50/gpipe"]}, "cannot use parallelism 'gpipe'"),
        ({"jobs": 3, "load": 0.5, "mix": [{"model": "gpt2-xl", "parallelism": "gpipe", "hosts": 64}]},
         "64 stages for 48 layers"),
        ({"jobs": 3, "load": 0.5, "mix": [{"model": "resnet50", "parallelism": "ps", "hosts": 2}]},
         "needs at least 3 hosts"),
        ({"jobs": 20, "load": 0.5, "mix": ["gpt-13b/1f1b"]}, "20 jobs need 160 hosts"),
        ("jobs=3", "multi_tenant: must be an object of parameters, got 'jobs=3'"),
        ({"jobs": 3, "load": 0.5, "mix": [{"model": "resnet50", "parallelism": "ps", "host": 2}]},
         "multi_tenant: mix[0].host: unknown field (allowed: model, parallelism, hosts)"),
        ({"jobs": 3, "load": 0.5, "mix": [5]},
         "multi_tenant: mix[0]: must be 'model/parallelism' or an object {model, parallelism, hosts}, got 5"),
    ],
)
def test_bad_parameters_one_line(spec, message: str) -> None:
    with pytest.raises(UserError) as caught:
        multitenant.generate(spec, K8_OS4)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_bundled_scenario_and_cli(tmp_path: Path) -> None:
    scenario = load_scenario("multitenant-k8")
    assert scenario.topology.name == "fattree8-os4"
    assert len(scenario.jobs) == 6 and scenario.jobs[0].arrival_s == 0 and scenario.jobs[1].arrival_s > 0
    out = subprocess.run([ECHELON, "simulate", "multitenant-k8", "--scheduler", "echelon", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    run = document["runs"][0]
    assert set(run["jobs"]) == {j.job_id for j in scenario.jobs}
    for job in scenario.jobs:  # each job carries its lower bound, and no schedule beat it
        numbers = run["jobs"][job.job_id]
        assert numbers["lower_bound_s"] == pytest.approx(lower_bound_s(job, scenario.topology), rel=1e-12)
        assert 0 < numbers["lower_bound_s"] <= numbers["completion_s"]
    reread = Results.from_json_dict(document).runs[0].jobs
    assert {k: v.lower_bound_s for k, v in reread.items()} == {
        k: v["lower_bound_s"] for k, v in run["jobs"].items()}
    assert "lower_bound_s" not in JobResult(1.0, 1.0).to_json_dict()  # absent where nobody computed it
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"topology": {"kind": "fattree", "k": 4, "rate_mbps": 10},
                               "jobs": [{"multi_tenant": {"jobs": 3, "load": 0}}]}))
    out = subprocess.run([ECHELON, "simulate", str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "jobs[0].multi_tenant" in out.stderr and "load: must be a number > 0" in out.stderr
    bad.write_text(json.dumps({"topology": {"kind": "fattree", "k": 4, "rate_mbps": 10},
                               "jobs": [{"multi_tenant": {"jobs": 3, "load": 1}, "seed": 2}]}))
    with pytest.raises(ScenarioError, match="seed: unknown field"):
        load_scenario(str(bad))


# ----------------------------------------------------------------------------- lower bound
IDEAL = build("two_hosts", 8e6, mtu_bytes=None)  # 1 MB/s, payload only


def job_of(*tasks) -> Job:
    job = Job("j")
    for task in tasks:
        job.add(task)
    return job


def test_bound_is_the_critical_path() -> None:
    job = job_of(ComputeTask("c", "h1", 1.0), FlowTask("f", "h1", "h2", 2_000_000, ("c",)),
                 ComputeTask("d", "h2", 0.5, ("f",)))
    assert lower_bound_s(job, IDEAL) == pytest.approx(3.5)


def test_bound_counts_a_hosts_compute_and_its_link() -> None:
    computes = job_of(ComputeTask("a", "h1", 1.0), ComputeTask("b", "h1", 2.0))
    assert lower_bound_s(computes, IDEAL) == pytest.approx(3.0)  # one at a time on h1
    flows = job_of(FlowTask("f", "h1", "h2", 1_000_000), FlowTask("g", "h1", "h2", 1_000_000))
    assert lower_bound_s(flows, IDEAL) == pytest.approx(2.0)  # both share h1's uplink
    framed = build("two_hosts", 8e6)
    assert lower_bound_s(flows, framed) == pytest.approx(2.0 * 9014 / 8948)


@pytest.mark.parametrize("scheduler", ["fair", "coflow", "echelon", "aalo"])
def test_no_scheduler_beats_the_bound(scheduler: str) -> None:
    workload = multitenant.generate({"jobs": 4, "load": 1.0, "seed": 2}, K8_OS4)
    result = simulate(K8_OS4, workload.jobs, get_scheduler(scheduler), alone_runs=False)
    for job in workload.jobs:
        bound = lower_bound_s(job, K8_OS4)
        assert math.isfinite(bound) and bound > 0
        assert result.jobs[job.job_id].completion_s >= bound * (1 - 1e-9)
