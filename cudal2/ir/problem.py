"""GemmProblem: what is computed, independent of how.

D = activation(alpha * op(A) @ op(B) + beta * C + bias), with
  A of logical shape (M, K), B of logical shape (K, N), C and D of shape (M, N) row-major,
  bias of shape (N,) broadcast over rows (the nn.Linear convention).

Layout letters, A's first: 'N' means the operand is row-major in its logical shape
(A: stride (K, 1); B: stride (N, 1)); 'T' means it is stored transposed, i.e. column-major
(A: stride (1, M), the view `At.t()` of a contiguous (K, M) tensor; B: stride (1, K), the
view `W.t()` of a contiguous (N, K) weight, as in nn.Linear). So "NT" is `x @ W.t()`.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Literal

from pydantic import Field, model_validator

from . import footprint
from .errors import SpecError, Violation
from .model import IR_VERSION, IRModel

Dtype = Literal["float16", "bfloat16"]
Layout = Literal["NN", "NT", "TN", "TT"]
Activation = Literal["none", "relu", "gelu", "silu"]

# Largest extent one dimension may have: index arithmetic in the kernels is int32 per
# dimension and int64 only for the full offset, so keep each extent below 2**31.
MAX_EXTENT = 2**31 - 1


class Epilogue(IRModel):
    alpha: float = 1.0
    beta: float = 0.0
    bias: bool = False
    activation: Activation = "none"


class GemmProblem(IRModel):
    m: int = Field(description="rows of A and D")
    n: int = Field(description="columns of B and D")
    k: int = Field(description="reduction extent")
    dtype: Dtype = Field("float16", description="dtype of A and B (and C unless out_dtype is set)")
    out_dtype: Dtype | None = Field(None, description="dtype of C/D; defaults to dtype")
    layout: Layout = Field("NN", description="storage of A then B: N row-major, T column-major")
    accumulator: Literal["float32", "float16"] = "float32"
    epilogue: Epilogue = Epilogue()

    @model_validator(mode="after")
    def _check(self) -> "GemmProblem":
        bad: list[Violation] = []
        for name in ("m", "n", "k"):
            v = getattr(self, name)
            if v <= 0:
                bad.append(Violation(name, v, "must be a positive integer",
                                     f"give the real extent of {name.upper()} (>= 1)"))
            elif v > MAX_EXTENT:
                bad.append(Violation(name, v, f"exceeds {MAX_EXTENT} (int32 indexing)",
                                     "split the problem into several GEMMs"))
        if not bad:
            # A GEMM whose tensors no GPU cudal2 targets can hold is refused here, with no GPU and
            # no arch in sight; the search checks the target GPU's free memory (cudal2.api).
            too_big = footprint.unholdable(self)
            if too_big is not None:
                bad.append(too_big)
        if bad:
            raise SpecError(bad, what="GemmProblem")
        return self

    @property
    def nbytes(self) -> int:
        """Bytes of A, B, D (and C and the bias where the epilogue reads them); see ir.footprint."""
        return footprint.problem_bytes(self)

    # ---- derived views -------------------------------------------------------------------
    @property
    def c_dtype(self) -> str:
        return self.out_dtype or self.dtype

    @property
    def a_row_major(self) -> bool:
        return self.layout[0] == "N"

    @property
    def b_row_major(self) -> bool:
        return self.layout[1] == "N"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    def class_key(self) -> str:
        """Key of the problem's class: everything but M, N and K (dtypes, layout, accumulator,
        epilogue). A kernel compiled for any shape serves every problem of one class."""
        fields = {name: value for name, value in json.loads(self.to_json()).items() if name not in ("m", "n", "k")}
        payload = f"GemmProblemClass:v{IR_VERSION}:{json.dumps(fields, sort_keys=True, separators=(',', ':'))}"
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def class_label(self) -> str:
        """label() with MxNxK for the extents: 'MxNxK-float16-NT'."""
        return "MxNxK" + self.label()[len(f"{self.m}x{self.n}x{self.k}"):]

    def leading_dims(self) -> dict[str, int]:
        """Elements between consecutive rows (row-major) or columns (column-major)."""
        return {
            "a": self.k if self.a_row_major else self.m,
            "b": self.n if self.b_row_major else self.k,
            "c": self.n,
        }

    def label(self) -> str:
        e = self.epilogue
        tail = "" if e == Epilogue() else f"-a{e.alpha:g}b{e.beta:g}{'-bias' if e.bias else ''}" + (
            f"-{e.activation}" if e.activation != "none" else "")
        return f"{self.m}x{self.n}x{self.k}-{self.dtype}-{self.layout}{tail}"

    @classmethod
    def parse(cls, shape: str | tuple | list | "GemmProblem", **kw) -> "GemmProblem":
        """Accept (m, n, k), "MxNxK", "M,N,K" or a GemmProblem."""
        if isinstance(shape, GemmProblem):
            return shape.replace(**kw) if kw else shape
        if isinstance(shape, str):
            parts = re.split(r"[x,X* ]+", shape.strip())
            try:
                dims = [int(p) for p in parts if p]
            except ValueError:
                dims = []
            if len(dims) != 3:
                raise SpecError(Violation("shape", shape, "expected three integers M x N x K",
                                          "write it as 4096x4096x4096"), what="GemmProblem")
        else:
            if isinstance(shape, (set, frozenset, dict)):
                raise SpecError(Violation("shape", sorted(shape) if isinstance(shape, (set, frozenset)) else shape,
                                          "a set or mapping has no order of M, N and K",
                                          "pass a tuple (M, N, K)"), what="GemmProblem")
            dims = list(shape)
            if any(isinstance(d, bool) for d in dims):
                raise SpecError(Violation("shape", shape, "True and False are not dimensions",
                                          "pass three integers (M, N, K)"), what="GemmProblem")
            if len(dims) != 3:
                raise SpecError(Violation("shape", shape, "expected (M, N, K)",
                                          "pass a tuple of three integers"), what="GemmProblem")
        m, n, k = dims
        return cls(m=m, n=n, k=k, **kw)
