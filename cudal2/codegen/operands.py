"""The checks every backend's kernel makes of a call's tensors before it launches anything: a
(M, K) and a (K, N) matrix, each operand's shape, strides and dtype as the problem's layout and
dtypes want them at the call's extents, C where beta reads it, the bias where the problem has one,
one CUDA device. Each mismatch is one line that names the tensor, what it is, what was expected and
how to get it; a backend adds its own (alignment, vector widths) and raises them together."""

from __future__ import annotations

from ..ir import GemmProblem

def torch_dtype(name: str):
    """The torch dtype of an IR dtype name ("float16", "bfloat16", "float32")."""
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[name]


def call_extents(label: str, a, b) -> tuple[int, int, int]:
    """(M, N, K) of a @ b, or a ValueError prefixed by label for anything that is not two matrices
    of matching inner extent with at least one element each."""
    for name, t in (("a", a), ("b", b)):
        if not (hasattr(t, "shape") and hasattr(t, "stride") and hasattr(t, "dim")):
            raise ValueError(f"{label}: {name} is a {type(t).__name__}, expected a torch.Tensor")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"{label}: a {tuple(a.shape)} and b {tuple(b.shape)} are not (M, K) and (K, N) matrices")
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    if min(m, n, k) < 1:
        raise ValueError(f"{label}: empty operands (M={m}, N={n}, K={k}); call torch for an empty product")
    return m, n, k


def same_strides(t, strides) -> bool:
    """Strides equal where they matter: the stride of a size-1 dimension never addresses anything,
    and torch gives such views arbitrary ones (a (64, 1) view of a contiguous (1, 64) tensor has
    strides (1, 1))."""
    return all(have == want for have, want, size in zip(t.stride(), strides, t.shape) if size > 1)


def operand_strides(p: GemmProblem, m: int, n: int, k: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The strides of the (M, K) operand A and the (K, N) operand B that problem p's layout wants."""
    return (k, 1) if p.a_row_major else (1, m), (n, 1) if p.b_row_major else (1, k)


def operand_errors(p: GemmProblem, a, b, c, bias, m: int, n: int, k: int) -> list[str]:
    """Every way a, b, c (None: the kernel allocates D) and bias differ from what problem p's
    layout, dtypes and epilogue want at extents m x n x k."""
    dt, out = torch_dtype(p.dtype), torch_dtype(p.c_dtype)
    a_strides, b_strides = operand_strides(p, m, n, k)
    want = {"a": ((m, k), a_strides, dt),
            "b": ((k, n), b_strides, dt),
            "c": ((m, n), (n, 1), out), "bias": ((n,), (1,), out)}
    errors = []
    for name, t in (("a", a), ("b", b), ("c", c), ("bias", bias)):
        if t is None:
            continue
        if not (hasattr(t, "stride") and hasattr(t, "dtype")):
            errors.append(f"{name} is a {type(t).__name__}, expected a torch.Tensor")
            continue
        shape, strides, dtype = want[name]
        if tuple(t.shape) != shape:
            errors.append(f"{name} has shape {tuple(t.shape)}, expected {shape}")
        elif not same_strides(t, strides):
            how = {"a": f"layout {p.layout} wants A {'row' if p.a_row_major else 'column'}-major",
                   "b": f"layout {p.layout} wants B {'row' if p.b_row_major else 'column'}-major"}.get(name, "contiguous")
            errors.append(f"{name} has strides {tuple(t.stride())}, expected {strides} ({how})")
        if t.dtype != dtype:
            errors.append(f"{name} has dtype {t.dtype}, expected {dtype}")
    if c is None and p.epilogue.beta != 0.0:
        errors.append(f"beta={p.epilogue.beta:g} reads C, but c is None: pass c (shape ({m}, {n}))")
    if p.epilogue.bias and bias is None:
        errors.append(f"the problem has a bias: pass bias of shape ({n},) and dtype {out}")
    elif bias is not None and not p.epilogue.bias:
        errors.append("bias given but the problem has none: render with epilogue.bias=True or drop it")
    return errors


def device_errors(tensors) -> list[str]:
    """One CUDA device for every tensor given (None: absent)."""
    present = [t for t in tensors if t is not None]
    devices = {str(t.device) for t in present}
    if len(devices) > 1:
        return [f"tensors are on different devices: {sorted(devices)}"]
    if present and present[0].device.type != "cuda":
        return [f"tensors are on {present[0].device}; the kernel runs on a CUDA GPU: move them there"]
    return []
