"""Every CUDAL2_* environment variable cudal2 reads, in one place: its name, type, default and what
it sets (VARIABLES), and their values now (settings()).

settings() reads them afresh on each call (a few dictionary look-ups), so a variable set while the
process runs (a test's monkeypatch, a caller's os.environ) counts from then on. Modules read
settings() instead of os.environ. docs/environment.md's table is markdown_table()
(tests/test_environment_doc.py checks both, and that the package reads no other CUDAL2_* variable).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Variable:
    """One environment variable: its name, the type settings() gives it, what it sets, and what
    holds when it is unset (both as docs/environment.md says them)."""

    name: str
    type: type
    help: str
    default: str


# In docs/environment.md's order. The numbers of the LLM client are kept as text: the client checks
# their ranges and names the variable in its error (an unrelated command never fails on them).
VARIABLES: tuple[Variable, ...] = (
    Variable("CUDAL2_CACHE_DIR", str, "the cache folder: rendered kernels, the default store `store.db`, the "
             "recorded runner's `recorded.db`", "the user cache folder (platformdirs)"),
    Variable("CUDAL2_STORE", str, "the default store: a file path (SQLite) or a SQLAlchemy URL (PostgreSQL); "
             "never the recorded runner's", "`<cache>/store.db`"),
    Variable("CUDAL2_TABLE", str, "a tuned-table JSON file (`cudal2 export`) that `cudal2.matmul`/`linear` "
             "serve from instead of the default store", "the default store's table"),
    Variable("CUDAL2_STORE_TIMEOUT", str, "seconds `cudal2.matmul`/`linear` wait for the default store's table "
             "before they run torch with a warning (more than 0)", "`5`"),
    Variable("CUDAL2_OP_BACKENDS", str, "a comma list of the backends whose kernels the op launches",
             "those with a bound launch path: `cute_dsl` and `triton`"),
    Variable("CUDAL2_NATIVE_LAUNCH", bool, "`0`: compiled graphs call the Python op instead of the C++ launch "
             "path (for comparison)", "`1`"),
    Variable("CUDAL2_NATIVE_FRONT", bool, "`0`: `cudal2.linear` is the op's Python function instead of its C "
             "front (a call the op sends to torch pays a Python frame), and the front's probe (C++ against torch's "
             "headers, built in a thread) is not built", "`1`"),
    Variable("CUDAL2_TVM_FFI", bool, "`0`: CuTe DSL kernels launch without apache-tvm-ffi", "`1`"),
    Variable("CUDAL2_CUTE_DSL_DISK_CACHE", bool, "`0`: CuTe DSL kernels are compiled again instead of loaded "
             "from the cache folder", "`1`"),
    Variable("CUDAL2_COST_MODEL", str, "a cost model JSON file (`cudal2 train`) the learned proposer uses "
             "instead of the user's model of the GPU or the shipped one",
             "the user's model of the live GPU (`<cache>/models/`), else the shipped model of the arch"),
    Variable("CUDAL2_LLM_PROVIDER", str, "`openai` or `anthropic`: the LLM proposer's client", "`openai`"),
    Variable("CUDAL2_LLM_MODEL", str, "the LLM proposer's model name", "none: the LLM proposer asks for one"),
    Variable("CUDAL2_LLM_BASE_URL", str, "the LLM endpoint (an OpenAI-compatible server)", "the provider's"),
    Variable("CUDAL2_LLM_API_KEY", str, "the LLM endpoint's key; never printed or stored",
             "`OPENAI_API_KEY` or `ANTHROPIC_API_KEY`"),
    Variable("CUDAL2_LLM_TIMEOUT", str, "seconds an LLM request may take (more than 0, at most a day)",
             "docs/faults.md"),
    Variable("CUDAL2_LLM_RETRIES", str, "extra attempts after the first (0 to 100)", "docs/faults.md"),
    Variable("CUDAL2_LLM_BACKOFF", str, "seconds before the first retry, doubling per retry (0 to an hour)",
             "docs/faults.md"),
    Variable("CUDAL2_NVCC", str, "the nvcc the CUDA C++ backend compiles with",
             "`nvcc` on PATH, then `$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`"),
    Variable("CUDAL2_CUTLASS_INCLUDE", str, "the CUTLASS/CuTe headers the CUDA C++ backend includes",
             "the nvidia-cutlass wheel's"),
    Variable("CUDAL2_CUDA_ARCH", str, "the arch the CUDA C++ backend compiles for", "the visible GPU's, else the spec's"),
    Variable("CUDAL2_DEBUG", bool, "`1`: a bug's full traceback instead of its one line", "unset"),
    Variable("CUDAL2_PROFILE_WORKER", str, "a folder: the GPU worker process writes a cProfile of itself there",
             "unset"),
)
BY_NAME = {v.name: v for v in VARIABLES}


@dataclass(frozen=True)
class Settings:
    """The variables' values: text None where unset or empty (op_backends: empty is an empty list,
    so None only where unset), a switch on unless set to `0` (debug: off unless set, and not `0`)."""

    cache_dir: Optional[str]
    store: Optional[str]
    table: Optional[str]
    store_timeout: Optional[str]
    op_backends: Optional[str]
    native_launch: bool
    native_front: bool
    tvm_ffi: bool
    cute_dsl_disk_cache: bool
    cost_model: Optional[str]
    llm_provider: Optional[str]
    llm_model: Optional[str]
    llm_base_url: Optional[str]
    llm_api_key: Optional[str]
    llm_timeout: Optional[str]
    llm_retries: Optional[str]
    llm_backoff: Optional[str]
    nvcc: Optional[str]
    cutlass_include: Optional[str]
    cuda_arch: Optional[str]
    debug: bool
    profile_worker: Optional[str]


def _field(name: str) -> str:
    return name.removeprefix("CUDAL2_").lower()


def settings() -> Settings:
    """The variables as the environment holds them now."""
    values = {}
    for var in VARIABLES:
        raw = os.environ.get(var.name)
        if var.type is bool:
            values[_field(var.name)] = raw not in (None, "", "0") if var.name == "CUDAL2_DEBUG" else raw != "0"
        elif var.name == "CUDAL2_OP_BACKENDS":
            values[_field(var.name)] = raw
        else:
            values[_field(var.name)] = raw or None
    return Settings(**values)


def markdown_table() -> str:
    """docs/environment.md's table of the variables."""
    rows = ["| variable | what it sets | default |", "|---|---|---|"]
    rows += [f"| `{v.name}` | {v.help} | {v.default} |" for v in VARIABLES]
    return "\n".join(rows)


