"""The cost model's view of one (problem, spec, device) triple: a fixed-order vector of numbers.

Four groups, each named by its prefix:
- `shape.`: M, N, K as logs, their divisibility, arithmetic intensity, the layout;
- `spec.`: every KernelSpec field, numbered (a choice by its place in the IR's own domain), so a
  field added to the IR becomes a feature without a change here;
- `fit.`: how the spec's tiles meet the shape on this device: tiles and waves over the SMs, the
  last wave's fill, padding waste, main-loop trips, the DRAM and tensor-core floors. These are
  the analytic terms of the rules proposer, kept as inputs; the model learns what they weigh;
- `device.`: SM count, L2 size, DRAM bandwidth, memory size, SM clock, power limit and shared
  memory a block (cudal2.ir.DeviceProfile.figures(): the live GPU's where there is one, a known
  part's by name for a measurement's GPU), so that one model learns from several GPUs and predicts
  for one it has not seen.

FEATURE_VERSION changes whenever the features change. A model records the names of its features and
is scored with those columns, by name (cost_model.READABLE_VERSIONS: versions whose every feature
keeps its meaning under its name); any other model is refused, never read with shifted columns.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

import numpy as np

from ..codegen.registry import BUILTIN
from ..ir import DTYPE_BYTES, DeviceProfile, GemmProblem, KernelSpec
from ..ir import Epilogue
from cudal2.proposers.space import ir_domain

FEATURE_VERSION = 2  # 2: the device's memory, clock, power and shared memory
# One one-hot column per backend that cudal2 itself registers, in registration order (append a new
# backend there, never reorder). A third-party backend has no column of its own (all zero): a shipped
# model cannot have learned it, and a column per installed backend would change the features.
BACKEND_CODES = tuple(BUILTIN)
# Fields that are not a property of the kernel's code, or are encoded apart.
_SKIP_FIELDS = ("backend", "arch", "shape_specialization")


@lru_cache(maxsize=None)
def _spec_fields() -> tuple[tuple[str, tuple | None], ...]:
    return tuple((name, ir_domain(name)) for name in KernelSpec.model_fields if name not in _SKIP_FIELDS)


@lru_cache(maxsize=None)
def _activations() -> tuple:
    import typing

    return typing.get_args(Epilogue.model_fields["activation"].annotation)


@lru_cache(maxsize=None)
def feature_names() -> tuple[str, ...]:
    shape = ("log_m", "log_n", "log_k", "log_flops", "log_intensity", "m_mod16", "n_mod16", "k_mod16",
             "m_mod128", "n_mod128", "k_mod64", "a_row_major", "b_row_major", "dtype_bytes", "bias", "activation", "beta")
    fit = ("tiles_m", "tiles_n", "log_tiles", "waves", "last_wave_fill", "pad_waste", "k_trips",
           "log_tile_work", "log_dram_floor_us", "log_mma_floor_us", "log_floor_us", "smem_kib")
    return (*(f"shape.{n}" for n in shape),
            *(f"spec.{n}" for n, _ in _spec_fields()),
            *(f"spec.backend_{b}" for b in BACKEND_CODES),
            *(f"fit.{n}" for n in fit),
            *(f"device.{n}" for n in DEVICE_FIGURES))


# DeviceProfile.figures() keys, in column order; the first two are those of version 1.
DEVICE_FIGURES = ("sm_count", "l2_mib", "dram_tbps", "mem_gib", "clock_mhz", "power_w", "smem_per_block_kib")


def _code(value, domain: tuple | None) -> float:
    if value is None:
        return -1.0
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return float(domain.index(value)) if domain and value in domain else -1.0


def _log2(x: float) -> float:
    return math.log2(max(x, 1e-30))


def features(problem: GemmProblem, spec: KernelSpec, device: DeviceProfile,
             device_row: Sequence[float] | None = None) -> list[float]:
    """One row, in feature_names() order (device_row: device_columns(device), computed once a matrix)."""
    m, n, k = problem.m, problem.n, problem.k
    eb = DTYPE_BYTES[problem.dtype]
    flops = 2.0 * m * n * k
    dram_bytes = eb * (m * k + n * k) + DTYPE_BYTES[problem.c_dtype] * m * n
    shape = [_log2(m), _log2(n), _log2(k), _log2(flops), _log2(flops / dram_bytes), float(m % 16 == 0),
             float(n % 16 == 0), float(k % 16 == 0), float(m % 128 == 0), float(n % 128 == 0), float(k % 64 == 0),
             float(problem.a_row_major), float(problem.b_row_major), float(eb), float(problem.epilogue.bias),
             _code(problem.epilogue.activation, _activations()), float(problem.epilogue.beta != 0)]
    spec_row, smem_kib = _spec_part(spec)
    tm, tn = -(-m // spec.block_m), -(-n // spec.block_n)
    split = spec.split_k if spec.decomposition == "split_k" else 1
    tiles = tm * tn * split
    sms = device.sm_count
    waves = tiles / sms
    last_fill = tiles / (math.ceil(waves) * sms)
    pad_waste = 1.0 - (m * n) / (tm * spec.block_m * tn * spec.block_n)
    k_trips = math.ceil(k / split / spec.block_k)
    # the device's reference rates scale the floors; a model learns on top of them
    dram_us = dram_bytes / (device.dram_tbps * 1e6)
    # the tensor cores see padded tiles, a wave at a time: each SM runs its tiles one after another
    per_sm_tflops = device.peak_tflops / sms
    mma_us = math.ceil(waves) * 2.0 * spec.block_m * spec.block_n * (k / split) / (per_sm_tflops * 1e6)
    fit = [float(tm), float(tn), _log2(tiles), waves, last_fill, pad_waste, float(k_trips),
           _log2(spec.block_m * spec.block_n * k_trips * spec.block_k), _log2(dram_us), _log2(mma_us),
           _log2(max(dram_us, mma_us)), smem_kib]
    return [*shape, *spec_row, *fit, *(device_row if device_row is not None else device_columns(device))]


def device_columns(device: DeviceProfile) -> list[float]:
    figures = device.figures()
    return [figures[n] for n in DEVICE_FIGURES]


@lru_cache(maxsize=1 << 16)
def _spec_part(spec: KernelSpec) -> tuple[tuple[float, ...], float]:
    """The `spec.` columns and the shared memory (KiB) of a spec, which no shape changes: a proposer
    ranks the same catalog on every shape it meets."""
    fields = spec.to_dict()
    row = (*(_code(fields[name], domain) for name, domain in _spec_fields()),
           *(float(spec.backend == b) for b in BACKEND_CODES))
    return row, spec.smem_bytes() / 1024.0


def matrix(problem: GemmProblem, specs: Sequence[KernelSpec], device: DeviceProfile) -> np.ndarray:
    """(len(specs), features) float64 rows for one problem."""
    if not specs:
        return np.zeros((0, len(feature_names())))
    device_row = device_columns(device)
    return np.array([features(problem, s, device, device_row) for s in specs], dtype=np.float64)
