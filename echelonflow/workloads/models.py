"""Model configurations -> the bytes and compute times of a training job under one kind of parallelism.

The multi-tenant generator (``echelonflow.workloads.multitenant``) builds its jobs from real model
shapes rather than hand-picked numbers, so the ratio of communication to computation is the one a
cluster sees.  A :class:`ModelConfig` holds what sets both: parameter count, layers, hidden size,
sequence length, micro-batch, bytes per element, forward FLOPs per sample.  :func:`job_params` turns a
model, a parallelism and a host count into one existing generator's parameters.

Arithmetic (per micro-batch of ``b`` sequences of length ``s``, hidden size ``h``):

* Transformer layer forward FLOPs ``24 b s h^2 + 4 b s^2 h`` (the dense GEMMs plus attention scores;
  Narayanan et al., SC '21, without the logits layer); backward = 2 x forward; a layer holds ``12 h^2``
  parameters.  ResNet-50: 8.2 GFLOPs forward per 224x224 image (4.1 G multiply-adds).
* Compute seconds = FLOPs / (accelerator FLOP/s x utilisation).
* Data parallel (``ring``, ``ps``): every iteration moves the whole gradient, ``params x
  bytes_per_element``; ring in ``RING_BUCKETS`` buckets.
* ``fsdp``: per unit of ``layers / units`` layers, that unit's parameters are all-gathered before its
  forward and backward and reduce-scattered after its backward (FSDP wraps groups of layers).
* ``gpipe`` / ``1f1b``: ``hosts`` stages of ``layers / hosts`` layers each; activations (and their
  gradients) of ``b s h x bytes_per_element`` per micro-batch cross each stage boundary.
* ``megatron``: tensor parallel over ``hosts``; Megatron all-reduces ``b s h x bytes_per_element`` twice
  per layer in each pass.  Layers are coalesced into ``units`` groups (one all-reduce per group and
  pass carrying the group's bytes), which keeps bytes and compute and cuts the flow count.

Pure and Python 3.9 compatible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from echelonflow.errors import UserError

#: Default accelerator: an A100's dense FP16/BF16 peak, at a utilisation large runs report.
ACCELERATOR_FLOPS = 312e12
UTILISATION = 0.4
#: Buckets of a data-parallel gradient all-reduce, and layer groups of FSDP and coalesced Megatron.
RING_BUCKETS = 4
UNITS = 4

PARALLELISMS = ("ring", "ps", "fsdp", "gpipe", "1f1b", "megatron")
_GENERATOR_OF = {
    "ring": "ring_allreduce",
    "ps": "parameter_server",
    "fsdp": "fsdp",
    "gpipe": "gpipe",
    "1f1b": "1f1b",
    "megatron": "megatron",
}


@dataclass(frozen=True)
class ModelConfig:
    """One model's shape and the batch it trains with; ``layers == 0`` marks a non-transformer (CNN)."""

    name: str
    params: float  # parameter count
    layers: int
    hidden: int
    seq_len: int
    micro_batch: int  # samples per micro-batch (per worker for data parallelism)
    bytes_per_element: int
    forward_flops_per_sample: float = 0.0  # non-transformers only; transformers derive it
    parallelisms: tuple[str, ...] = PARALLELISMS
    micro_batches: int = 4  # pipeline micro-batches per iteration

    def layer_forward_flops(self) -> float:
        """Forward FLOPs of one transformer layer for one micro-batch."""
        b, s, h = self.micro_batch, self.seq_len, self.hidden
        return 24.0 * b * s * h * h + 4.0 * b * s * s * h

    def forward_flops(self) -> float:
        """Forward FLOPs of the whole model for one micro-batch."""
        if self.layers:
            return self.layers * self.layer_forward_flops()
        return self.micro_batch * self.forward_flops_per_sample

    def layer_param_bytes(self) -> int:
        return 12 * self.hidden * self.hidden * self.bytes_per_element

    def activation_bytes(self) -> int:
        """One micro-batch's activations at a layer boundary (also an all-reduce in Megatron)."""
        return self.micro_batch * self.seq_len * self.hidden * self.bytes_per_element


MODELS: dict[str, ModelConfig] = {
    m.name: m
    for m in (
        ModelConfig("resnet50", 25.6e6, 0, 0, 0, 32, 4, forward_flops_per_sample=8.2e9,
                    parallelisms=("ring", "ps")),
        ModelConfig("bert-large", 340e6, 24, 1024, 512, 8, 2),
        ModelConfig("gpt2-xl", 1.56e9, 48, 1600, 1024, 4, 2),
        ModelConfig("gpt-13b", 13e9, 40, 5120, 2048, 1, 2, micro_batches=8),
    )
}


def model(name: Any) -> ModelConfig:
    if not isinstance(name, str) or name not in MODELS:
        raise UserError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    return MODELS[name]


def job_params(
    config: ModelConfig,
    parallelism: str,
    hosts: int,
    iterations: int,
    accelerator_flops: float = ACCELERATOR_FLOPS,
    utilisation: float = UTILISATION,
) -> tuple[str, dict[str, Any]]:
    """``(generator name, its params)`` for ``config`` trained with ``parallelism`` on ``hosts`` hosts."""
    if parallelism not in config.parallelisms:
        raise UserError(
            f"model {config.name!r} cannot use parallelism {parallelism!r}; "
            f"it supports {', '.join(config.parallelisms)}"
        )
    minimum = 3 if parallelism == "ps" else 2
    if hosts < minimum:
        raise UserError(f"{config.name}/{parallelism} needs at least {minimum} hosts, got {hosts}")
    if parallelism in ("gpipe", "1f1b") and hosts > config.layers:
        raise UserError(f"{config.name}/{parallelism}: {hosts} stages for {config.layers} layers")
    flop_s = accelerator_flops * utilisation
    forward_s = config.forward_flops() / flop_s
    params: dict[str, Any] = {"iterations": iterations}
    if parallelism in ("ring", "ps"):
        params["bytes"] = int(config.params * config.bytes_per_element)
        params.update(forward_s=forward_s, backward_s=2 * forward_s)
        if parallelism == "ring":
            params["buckets"] = RING_BUCKETS
    elif parallelism == "fsdp":
        units = min(UNITS, config.layers)
        unit_forward_s = forward_s / units
        params.update(layers=units, param_bytes=config.layer_param_bytes() * config.layers // units,
                      forward_s=unit_forward_s, backward_s=2 * unit_forward_s)
    elif parallelism in ("gpipe", "1f1b"):
        stage_forward_s = forward_s / hosts
        params.update(micro_batches=config.micro_batches, activation_bytes=config.activation_bytes(),
                      forward_s=stage_forward_s, backward_s=2 * stage_forward_s)
    else:  # megatron
        units = min(UNITS, config.layers)
        unit_forward_s = forward_s / units / hosts
        params.update(layers=units,
                      activation_bytes=2 * config.activation_bytes() * config.layers // units,
                      forward_s=unit_forward_s, backward_s=2 * unit_forward_s)
    return _GENERATOR_OF[parallelism], params
