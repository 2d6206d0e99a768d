"""Triton backend: KernelSpec -> a rendered Triton module -> a callable Kernel.

Two kernel families, one template each under templates/triton/:
  matmul      pointer loads (masked), any arch, any M, N, K and all four layouts
  matmul_tma  device-side TMA tensor descriptors (sm_90/sm_90a; 16-byte aligned leading dims)
Both cover data-parallel and persistent grids, grouped rasterization, and split-K with any of three
reductions: fp32 workspace [split_k, M, N] + reduce kernel; serial (the same partials, summed in
slice order by the slice that finishes its tile last, counted per tile in the workspace: one
launch); or fp32 atomics into [M, N] + epilogue kernel. Every spec value is baked into the rendered text as a compile-time constant,
so the text is the kernel: readable, golden-tested, and hashed. The shape is baked in too
(M, N, K constexprs), unless the spec asks for shape_specialization="dynamic": then M, N and K
are arguments, one module serves every shape of its dtype, layout and epilogue, and Triton
compiles it once per alignment class (and, for pointer loads, per tile evenness).

Workspace (split-K only) belongs to the Kernel object: allocated on the first call, reused by
every later call (a dynamic kernel's grows to the largest M x N it has served), like cuBLAS's
workspace; `Kernel.workspace_bytes` says how much. The atomic
buffer is zeroed once at allocation, and the epilogue kernel zeroes each tile after reading it,
so no memset runs per call. A launch on another stream than the workspace's previous one waits for
that stream first (cudal2.codegen.workspace), and the TMA descriptors' scratch is one buffer per stream.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from threading import Lock
from typing import Any

from ..ir import ARCHS, Capabilities, GemmProblem, KernelSpec, options
from ..ir.footprint import SERIAL_COUNTERS, serial_split_k_elements, serial_split_k_violation
from .base import Backend, Source
from .operands import call_extents, operand_errors, operand_strides, torch_dtype
from .workspace import Workspace
from . import triton_launch
from .. import paths

_ALL_BLOCKS = [16, 32, 64, 128, 256]
_ACTIVATION_TEXT = {"none": "{}", "relu": "relu({})", "gelu": "gelu({})", "silu": "silu({})"}


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _fix_interpreter() -> None:
    """Two bugs of Triton's CPU interpreter, fixed for the interpreter only (the GPU path is
    untouched); idempotent.
    - bf16 operands of tl.dot are multiplied as their uint16 storage bits (3.9 at least): widen
      them to fp32 (exact) before the interpreter's numpy matmul.
    - scalar tensors used as loop bounds (tl.range(tl.program_id(0), ...)) fail int() on
      numpy >= 2.3 because they hold a 1-element array (3.6; fixed upstream by 3.9)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if not getattr(builder.create_dot, "_cudal2", False):
        original_dot = builder.create_dot

        def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
            def widen(x):
                if x.dtype.scalar == tl.bfloat16 and x.data.dtype == np.uint16:
                    wide = (x.data.astype(np.uint32) << 16).view(np.float32)
                    return interpreter.TensorHandle(wide, tl.float32)
                return x
            return original_dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

        create_dot._cudal2 = True
        builder.create_dot = create_dot

    patch_tensor = getattr(interpreter, "_patch_lang_tensor", None)
    if patch_tensor is not None and not getattr(patch_tensor, "_cudal2", False):
        def _patch_lang_tensor(tensor, scope):
            patch_tensor(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(())))

        _patch_lang_tensor._cudal2 = True
        interpreter._patch_lang_tensor = _patch_lang_tensor


def cache_dir() -> Path:
    """Where rendered modules are written: triton/ in cudal2's cache folder (cudal2.paths.cache_dir)."""
    return paths.cache_dir() / "triton"


class TritonBackend(Backend):
    name = "triton"
    # 2: M, N and K are kernel arguments (constexprs unless the spec asks for dynamic); 3: a dynamic
    # kernel's offsets are int32 unless launch() says WIDE; 4: and its K loop is straight code where
    # launch() finds K within one BLOCK_K step (ONE_K); 5: its tile arithmetic divides by run-time
    # tile counts with a multiply and a shift (fast_div)
    version = "5"
    requirements = ("triton>=3.6",)  # as the `triton` extra
    capabilities = Capabilities(
        options=options(
            block_m=_ALL_BLOCKS, block_n=_ALL_BLOCKS, block_k=_ALL_BLOCKS,
            num_warps=[1, 2, 4, 8, 16],  # Triton needs a power of two
            stages=[1, 2, 3, 4, 5, 6, 7, 8],
            mma=["auto"],  # Triton picks mma.sync or wgmma itself
            cluster_m=[1], cluster_n=[1],
            load_path=["pointer", "tma"],  # cp.async is Triton's own choice for pipelined pointer loads
            warp_specialization=["none"],
            producer_registers=[None], consumer_registers=[None],
            smem_swizzle=["auto"], smem_padding=[0],
            raster_order=["along_m", "along_n"],
            decomposition=["data_parallel", "split_k"],
            split_k_reduction=["atomic", "workspace", "serial"],
            persistent=[False, True],
            epilogue_path=["registers"], epilogue_subtile=[1],
            swap_ab=[False],  # the templates compute D = A @ B as written
            shape_specialization=["auto", "dynamic", "static"],  # auto: static (see dynamic())
            **{"problem.accumulator": ["float32"],
               "problem.dtype": ["float16", "bfloat16"],
               "problem.layout": ["NN", "NT", "TN", "TT"]},
        ),
        # Atomic split-K passes the interpreter but loses updates on H100 with Triton 3.6 (3-8% of
        # the elements of about a fifth of the tiles wrong at 1000^3 with 64x64 tiles; see
        # docs/triton_backend.md). Withdrawn on Hopper until that is understood; unmeasured on sm_80.
        per_arch={"sm_80": options(load_path=["pointer"]),
                  "sm_90": options(split_k_reduction=["workspace", "serial"]),
                  "sm_90a": options(split_k_reduction=["workspace", "serial"])},
    )
    templates = {"matmul": "matmul.py.j2", "matmul_tma": "matmul_tma.py.j2"}

    def __init__(self) -> None:
        self._modules: dict[str, Any] = {}
        self._lock = Lock()

    # --- rendering ------------------------------------------------------------------------
    def family(self, problem: GemmProblem, spec: KernelSpec) -> str:
        return "matmul_tma" if spec.load_path == "tma" else "matmul"

    def dynamic(self, spec: KernelSpec) -> bool:
        """Whether the spec's kernel takes M, N and K at run time (one module for every shape of
        a problem class). "auto" is static here: on the H100 the dynamic kernels measured a few
        percent slower than the static ones, while compiling was a small part of a Triton search's
        time (benchmarks/results/tune_speed_h100_2026-11-25.md)."""
        return spec.shape_specialization == "dynamic"

    def shape_key(self, problem: GemmProblem, spec: KernelSpec) -> str:
        return problem.class_key() if self.dynamic(spec) else problem.key()

    def variant_key(self, problem: GemmProblem, spec: KernelSpec) -> str:
        """Triton's JIT compiles an integer argument as the constant 1, as a multiple of 16, or
        plain; a dynamic kernel also takes as constexprs whether its offsets need 64 bits (WIDE)
        and, without split-K, whether K is one BLOCK_K step (ONE_K), and a dynamic pointer kernel
        the tile evenness of M, N and K. An extent that is no leading dimension ("a") is not
        specialized at all."""
        if not self.dynamic(spec):
            return ""
        extents = "".join("a" if name in _unspecialized(problem) else "1" if x == 1 else "d" if x % 16 == 0 else "n"
                          for name, x in zip("MNK", problem.shape))
        width = ("w" if _wide(problem, spec) else "") + ("k" if _one_k(problem, spec) else "")
        if self.family(problem, spec) != "matmul":
            return extents + width
        tiles = (spec.block_m, spec.block_n, spec.block_k)
        return extents + "-" + "".join("e" if x % t == 0 else "r" for x, t in zip(problem.shape, tiles)) + width

    def context(self, problem: GemmProblem, spec: KernelSpec) -> dict[str, Any]:
        m, n, k = problem.shape
        e = problem.epilogue
        dynamic = self.dynamic(spec)
        split = spec.split_k if spec.decomposition == "split_k" else 1
        serial = split > 1 and spec.split_k_reduction == "serial"  # (its tiles' counters, no second kernel)
        # A static kernel leaves out the masks its shape does not need, and widens offsets to int64
        # only where some extent product reaches 2**31. A dynamic one masks every edge (but for the
        # EVEN_* variants) and takes its width from its extents: the kernel casts M, N and K to int64
        # on entry where launch() says a product reaches 2**31 (WIDE), so every term that multiplies
        # an extent is int64 there and int32 elsewhere (64-bit offsets cost the small tiles of the
        # dynamic kernels up to a quarter of their speed on the H100).
        even_m, even_n, even_k = (False, False, False) if dynamic else (
            m % spec.block_m == 0, n % spec.block_n == 0, k % spec.block_k == 0)
        wide = not dynamic and _wide(problem, spec)

        a_mask = [c for c, need in (("offs_m[:, None] < M", not even_m), ("offs_k[None, :] < K", not even_k)) if need]
        b_mask = [c for c, need in (("offs_k[:, None] < K", not even_k), ("offs_n[None, :] < N", not even_n)) if need]
        # Offsets of a tile's first K step: the unit-stride term stays int32 (widening it hides its
        # contiguity from Triton's vectorizer); the other is widened where offsets may pass 2**31.
        widen = ".to(tl.int64)" if wide else ""  # (also the epilogue's)
        a_offsets = (f"offs_m[:, None]{widen} * K + offs_k[None, :]" if problem.a_row_major
                     else f"offs_m[:, None] + offs_k[None, :]{widen} * M")
        b_offsets = (f"offs_k[:, None]{widen} * N + offs_n[None, :]" if problem.b_row_major
                     else f"offs_k[:, None] + offs_n[None, :]{widen} * K")
        formula = "alpha * A @ B" if e.alpha != 1.0 else "A @ B"
        if e.beta != 0.0:
            formula += " + beta * C"
        if e.bias:
            formula += " + bias"
        formula = _ACTIVATION_TEXT[e.activation].format(formula)
        extent = "M, N" if dynamic else f"{m}, {n}"
        if split == 1:
            workspace_doc = "unused (None)"
        elif spec.split_k_reduction == "workspace":
            workspace_doc = f"fp32 [{split}, {extent}]: one partial sum per K slice"
        elif serial:
            workspace_doc = (f"fp32: {SERIAL_COUNTERS} tile counters, all zero on entry (and left zero), then "
                             f"[{split}, {extent}]: one partial sum per K slice")
        else:
            workspace_doc = f"fp32 [{extent}], all zeros on entry (and left all zeros)"
        summary = (f"{spec.block_m}x{spec.block_n}x{spec.block_k} warps={spec.num_warps} stages={spec.stages} "
                   f"load={spec.load_path} group={spec.raster_group}/{spec.raster_order} "
                   + (f"split_k={split}/{spec.split_k_reduction} " if split > 1 else "")
                   + ("persistent" if spec.persistent else "data-parallel") + f" arch={spec.arch}"
                   + (" shapes=dynamic" if dynamic else " shapes=static"))
        return dict(
            backend_version=self.version, family=self.family(problem, spec), spec_summary=summary,
            dynamic=dynamic, problem_class=problem.class_label(), extent="" if dynamic else ": tl.constexpr",
            # a dynamic pointer kernel is also compiled per tile evenness of the shape (masks cost
            # the pointer loads about 8% on the H100; TMA loads need none)
            **_even_flags(dynamic and self.family(problem, spec) == "matmul", spec),
            **_divisor_args(dynamic, split, _unspecialized(problem) if dynamic else ()),
            wide_param=", WIDE: tl.constexpr" if dynamic else "", wide_arg=", WIDE=wide" if dynamic else "",
            wide_pass=", WIDE" if dynamic else "",
            # and whether K is one BLOCK_K step (not for split-K, whose slices take their own steps)
            one_k_param=", ONE_K: tl.constexpr" if dynamic and split == 1 else "",
            one_k_arg=", ONE_K=one_k" if dynamic and split == 1 else "",
            one_k_pass=", ONE_K" if dynamic and split == 1 else "",
            formula=formula, M=m, N=n, K=k,
            a_row_major=problem.a_row_major, b_row_major=problem.b_row_major,
            a_offsets=a_offsets, b_offsets=b_offsets,
            a_step="BLOCK_K" if problem.a_row_major else "BLOCK_K * M",
            b_step="BLOCK_K * N" if problem.b_row_major else "BLOCK_K",
            alpha=repr(float(e.alpha)), beta=repr(float(e.beta)),
            has_alpha=e.alpha != 1.0, has_beta=e.beta != 0.0, bias=e.bias, activation=e.activation,
            split_k=split, reduction=spec.split_k_reduction,
            # the serial reduction counts each output tile's finished slices
            tile_param=", tile_id" if serial else "",
            serial_counters=SERIAL_COUNTERS,
            tile_arg=", pid_m * tl.cdiv(N, BLOCK_N) + pid_n" if serial else "",
            even_k=even_k, along_m=spec.raster_order == "along_m",
            wide=widen, slice_elements="M * N",
            a_mask=f", mask={' & '.join(f'({c})' for c in a_mask)}, other=0.0" if a_mask else "",
            b_mask=f", mask={' & '.join(f'({c})' for c in b_mask)}, other=0.0" if b_mask else "",
            workspace_doc=workspace_doc,
        )

    # --- compiling ------------------------------------------------------------------------
    def usable(self) -> tuple[bool, str]:
        import importlib.util

        if importlib.util.find_spec("triton") is None:
            return False, "triton is not installed"
        return True, ""

    def compiled_as(self) -> str:
        # the interpreter replaces triton.jit: the module imports, and nothing is lowered to GPU code
        return "imported (interpreter)" if interpreting() else "compiled"

    def toolchain_version(self) -> str:
        import triton

        return f"triton-{triton.__version__}" + ("-interpreter" if interpreting() else "")

    def module(self, source: Source):
        """Write the source to the cache dir (once) and import it; cached per process."""
        key = self.cache_key(source)
        with self._lock:
            if key in self._modules:
                return self._modules[key]
            path = cache_dir() / f"{key}.py"
            if not path.exists() or path.read_text() != source.text:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(source.text)
                os.replace(tmp, path)  # atomic: concurrent workers never read half a file
            name = f"cudal2_triton_{key}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # Triton's JIT looks functions up through their module
            spec.loader.exec_module(module)
            self._modules[key] = module
            return module

    def compile(self, source: Source) -> "TritonKernel":
        if source.backend != self.name:
            raise ValueError(f"source was rendered by backend {source.backend!r}, not {self.name!r}")
        return TritonKernel(source, self.module(source))

    def precompile(self, source: Source) -> None:
        """Compile ahead, so that the timing process finds the binary in Triton's disk cache.

        With a CUDA driver present (a CPU worker process on the GPU machine): JITFunction.warmup,
        the JIT's own path, so the later launch hits the same cache entry. Without one: an
        ahead-of-time compile for spec.arch (compile_ahead) that proves the kernel lowers to
        PTX/cubin; whether the JIT on the GPU machine reuses that cache entry is not guaranteed.
        Under the interpreter: nothing to do."""
        if interpreting():
            return
        import torch

        if not torch.cuda.is_available():
            self.compile_ahead(source)
            return
        p = source.problem
        split = source.spec.decomposition == "split_k"
        self.module(source).warmup(torch_dtype(p.dtype), torch_dtype(p.dtype), torch_dtype(p.c_dtype),
                                   torch_dtype(p.c_dtype) if p.epilogue.bias else None,
                                   torch.float32 if split else None, *p.shape)

    def compile_ahead(self, source: Source, arch: str | None = None) -> dict[str, Any]:
        """Compile the rendered kernels for `arch` (default spec.arch) with no GPU present, using
        the ptxas Triton ships. Returns {kernel name: triton CompiledKernel} (see .asm["ptx"]).
        Needs TRITON_INTERPRET unset when the module is first imported."""
        import torch
        import triton
        from triton.backends.compiler import GPUTarget

        if interpreting():
            raise RuntimeError("compile_ahead needs TRITON_INTERPRET unset (the interpreter replaces triton.jit)")
        p, spec = source.problem, source.spec
        target = GPUTarget("cuda", {"sm_80": 80, "sm_90": 90, "sm_90a": 90}[arch or spec.arch], 32)
        dt = {name: torch_dtype(name) for name in (p.dtype, p.c_dtype)}
        split = spec.decomposition == "split_k"
        # tensors by dtype (None for None), the extents by value (their alignment class is part of
        # the specialization; a static kernel's are constexprs)
        args = {"a_ptr": dt[p.dtype], "b_ptr": dt[p.dtype], "c_ptr": dt[p.c_dtype],
                "bias_ptr": dt[p.c_dtype] if p.epilogue.bias else None, "ws_ptr": torch.float32 if split else None,
                "M": p.m, "N": p.n, "K": p.k,
                "EVEN_M": p.m % spec.block_m == 0, "EVEN_N": p.n % spec.block_n == 0, "EVEN_K": p.k % spec.block_k == 0,
                "WIDE": _wide(p, spec), "ONE_K": _one_k(p, spec)}
        module = self.module(source)
        if self.dynamic(spec):
            args.update(zip(_divisor_names(spec.split_k if split else 1), module.divisors(p.m, p.n)))
        # the launch options exactly as launch() passes them (they are part of Triton's cache key)
        kernels = [("matmul_kernel", dict(num_warps=spec.num_warps, num_stages=spec.stages))]
        if split:
            kernels.append(("splitk_epilogue_kernel", dict(num_warps=4)))
        out = {}
        for name, launch_options in kernels:
            fn = getattr(module, name)
            src, options = _jit_source(fn, [args[a] for a in fn.arg_names], launch_options, target)
            out[name] = triton.compile(src, target=target, options=options)
        return out


def _wide(problem: GemmProblem, spec: KernelSpec) -> bool:
    """Whether some offset of the kernel for problem may pass 2**31 elements (then it needs 64-bit
    offsets): an operand's, the output's, or the split-K workspace's. (A dynamic kernel's launch()
    asks the same of each call, against its module's WIDE_FROM.)"""
    m, n, k = problem.shape
    split = spec.split_k if spec.decomposition == "split_k" else 1
    return max(m * k, k * n, m * n * split) >= 2**31


def _one_k(problem: GemmProblem, spec: KernelSpec) -> bool:
    """Whether a kernel without split-K (whose slices take their own steps) runs all of K in one
    BLOCK_K step, its K loop then straight code. (A dynamic kernel's launch() asks the same of
    each call.)"""
    split = spec.split_k if spec.decomposition == "split_k" else 1
    return split == 1 and problem.k <= spec.block_k


def _divisor_names(split: int) -> list[str]:
    """The (magic, shift) kernel arguments of a dynamic kernel's run-time divisors (see the
    template's fast_div and launch's divisors)."""
    return [f"{d}_{part}" for d in ("group", "last", "tiles")[:3 if split > 1 else 2] for part in ("magic", "shift")]


def _divisor_args(dynamic: bool, split: int, extents: Sequence[str]) -> dict[str, str]:
    """Template text that threads a dynamic kernel's divisors from launch() to the tile arithmetic,
    and the kernels' do_not_specialize list: the divisors (Triton would otherwise compile a variant
    per value that happens to be 1 or a multiple of 16) and the extents that are no leading
    dimension (_unspecialized)."""
    if not dynamic:
        return dict(divs="", divs_arg="", jit_options="")
    names = _divisor_names(split)
    return dict(divs="".join(f", {n}" for n in names), divs_arg=", *divs",
                jit_options=f"(do_not_specialize={[*extents, *names]!r})")


def _unspecialized(problem: GemmProblem) -> tuple[str, ...]:
    """The extents a dynamic kernel leaves unspecialized. Triton compiles an integer argument apart
    where it is 1 or a multiple of 16, for the alignment of the addresses it takes part in. M is
    no leading dimension where A is row-major (A's rows are K long, the output's N): it bounds
    masks only, so a new token count of a served weight finds its kernels compiled."""
    return ("M",) if problem.a_row_major else ()


def _even_flags(on: bool, spec: KernelSpec) -> dict[str, str]:
    """Template text for the EVEN_M/N/K constexprs of a dynamic pointer kernel (empty otherwise)."""
    if not on:
        return dict(even_params="", even_args="", even_launch="")
    return dict(even_params=", EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr",
                even_args=", EVEN_M, EVEN_N, EVEN_K",
                even_launch=(f", EVEN_M=M % {spec.block_m} == 0, EVEN_N=N % {spec.block_n} == 0, "
                             f"EVEN_K=K % {spec.block_k} == 0"))


def _jit_source(fn, args: list, launch_options: dict, target):
    """The ASTSource and options Triton's JIT would build for a launch with 16-byte aligned
    tensors of these dtypes (None for None arguments) and these integers, so an ahead-of-time
    compile lands on the JIT's own cache key. Uses the JIT's binder (present in Triton 3.6 to
    3.9); if its private API moved, falls back to building the specialization by hand."""
    from triton.compiler import ASTSource, make_backend
    from triton.runtime import jit

    backend = make_backend(target)
    try:
        binder = jit.create_function_from_signature(fn.signature, fn.params, backend)
        mocks = [a if isinstance(a, int) else jit.MockTensor.wrap_dtype(a) for a in args]
        bound, specialization, options = binder(*mocks, **launch_options)
        options, signature, constexprs, attrs = fn._pack_args(backend, launch_options, bound, specialization, options)
        return ASTSource(fn, signature, constexprs, attrs), options.__dict__
    except (AttributeError, TypeError):
        ty = {"torch.float16": "*fp16", "torch.bfloat16": "*bf16", "torch.float32": "*fp32"}
        names = fn.arg_names
        static = {p.name for p in fn.params if p.is_constexpr}

        def kind(name, a):
            if a is None or name in static or a == 1:  # Triton makes the integer 1 a constexpr
                return "constexpr"
            return "i32" if isinstance(a, int) else ty[str(a)]

        signature = {name: kind(name, a) for name, a in zip(names, args)}
        constexprs = {name: a for name, a in zip(names, args) if signature[name] == "constexpr"}
        attrs = {(i,): [["tt.divisibility", 16]] for i, (name, a) in enumerate(zip(names, args))
                 if signature[name] != "constexpr" and (not isinstance(a, int) or a % 16 == 0)}
        return ASTSource(fn, signature, constexprs, attrs), launch_options


class TritonKernel:
    """kernel(a, b, c=None, bias=None) -> c.

    A static kernel (the default) serves the problem it was rendered for; a dynamic one any
    M, N, K of that problem's class (dtypes, layout, epilogue): the shape is read off a and b.
    Every tensor is checked (shape, dtype, layout strides, device; a TMA kernel's alignment), c
    is allocated when it is None, and the launch goes on the current stream: no host sync, no
    stream creation."""

    def __init__(self, source: Source, module) -> None:
        import torch

        self.source = source
        self.problem = p = source.problem
        self.spec = source.spec
        self.dynamic = source.spec.shape_specialization == "dynamic"
        self._launch = module.launch
        self._launches = module.launches
        self._torch = torch
        self._out_dtype = torch_dtype(p.c_dtype)
        self._split = self.spec.split_k if self.spec.decomposition == "split_k" else 1
        # zeroed for the atomic reduction (its epilogue kernel zeroes what it read, whatever the shape) and the serial
        # one (its tiles' counters, from which the last slice of each tile takes back what the call added)
        self._workspace = Workspace(zeroed=self._split > 1 and self.spec.split_k_reduction != "workspace")
        self._scratch: dict = {}  # (device, stream) -> global scratch for device-side TMA descriptors
        self._interpreted = interpreting()
        if self._interpreted:
            _fix_interpreter()
        self._set_allocator = None
        if self.spec.load_path == "tma" and not self._interpreted:
            import triton

            self._set_allocator = triton.set_allocator
        # SMs the persistent grid spans; read from the device on first call. Tests may set it.
        self.num_sms: int | None = ARCHS[self.spec.arch].sm_count if self._interpreted else None

    # --- memory -------------------------------------------------------------------------------
    def workspace_elements(self, m: int, n: int) -> int:
        if self._split == 1:
            return 0
        if self.spec.split_k_reduction == "serial":
            return serial_split_k_elements(m, n, self._split)
        return m * n * (self._split if self.spec.split_k_reduction == "workspace" else 1)

    @property
    def workspace_bytes(self) -> int:
        """Workspace of the problem the kernel was rendered for (a dynamic kernel sizes its own to
        each call's M and N, and keeps the largest)."""
        return 4 * self.workspace_elements(self.problem.m, self.problem.n)

    def _workspace_for(self, device, m: int, n: int):
        if self._split > 1 and self.spec.split_k_reduction == "serial":  # (a shape-generic kernel's call)
            too_many = serial_split_k_violation(m, n, self.spec.block_m, self.spec.block_n)
            if too_many is not None:
                raise ValueError(f"triton kernel for {self.problem.class_label()}: {too_many.limit}; "
                                 f"fix: {too_many.fix}")
        return self._workspace.for_call(device, self.workspace_elements(m, n))

    def workspace_intact(self) -> bool:
        """Whether the kernel kept inside its own workspace (cudal2.codegen.workspace)."""
        return self._workspace.intact()

    def _scratch_on(self, device):
        """Triton's allocator for launches on device: Triton asks it for size bytes per launch, on the launch's
        stream, and the kernel writes its descriptors there: one buffer per (device, stream) (launches on one
        stream reuse it in order; two streams' launches may overlap)."""
        def allocate(size: int, alignment: int, stream):
            held = self._scratch.get((device, stream))
            if held is None or held.numel() < size:
                held = self._scratch[device, stream] = self._torch.empty(size, dtype=self._torch.int8, device=device)
            return held
        return allocate

    # --- the call -------------------------------------------------------------------------------
    def __call__(self, a, b, c=None, bias=None):
        m, n, k = self._check(a, b, c, bias)
        if c is None:
            c = self._torch.empty((m, n), dtype=self._out_dtype, device=a.device)
        if self.num_sms is None:
            self.num_sms = self._torch.cuda.get_device_properties(a.device).multi_processor_count
        if self._set_allocator is not None:  # TMA: descriptors live in a scratch buffer we own
            self._set_allocator(self._scratch_on(a.device))
        ws = self._workspace_for(a.device, m, n)
        if ws is not None:
            self._workspace.follow_device(a.device)
        return self._launch(a, b, c, bias, ws, self.num_sms)

    def bind(self, m: int, n: int, k: int, device):
        """A launcher for calls of exactly m x n x k on device: run(a, b, d, bias) enqueues the GEMM
        into d on the current stream. The caller vouches once for what __call__ checks each time (see
        CuteDslKernel.bind); a and b may be any view of the operands' memory in the problem's layout,
        and a, b and d are 16-byte aligned (the op checks a and b on every call and allocates d; a
        bias's alignment is checked here, as Triton would).
        The first call launches through Triton's JIT; later ones relaunch the compiled kernels it got
        (triton_launch.CompiledLaunches), or take the JIT again where Triton would specialize them
        apart. run.compiled is those kept kernels once kept (None before, False where unavailable)."""
        p = self.problem
        if not self.dynamic and (m, n, k) != p.shape:
            raise ValueError(f"triton kernel for {p.label()} cannot run {m}x{n}x{k}: it was compiled for its shape")
        ws = self._workspace_for(device, m, n)
        if self.num_sms is None:
            self.num_sms = self._torch.cuda.get_device_properties(device).multi_processor_count
        a_strides, b_strides = operand_strides(p, m, n, k)
        launches, num_sms, set_allocator = self._launches, self.num_sms, self._set_allocator
        runtime = None if self._interpreted else triton_launch.triton_runtime()
        allocate = self._scratch_on(device) if set_allocator is not None else None
        # two streams never use the workspace at once (cudal2.codegen.workspace)
        follow = self._workspace.follow_stream if ws is not None and device.type == "cuda" else None
        index = device.index if device.index is not None or follow is None else self._torch.cuda.current_device()

        def run(a, b, d, bias):
            if follow is not None:
                follow(index)
            if set_allocator is not None:
                set_allocator(allocate)
            # the launchers read the operands' addresses only: a, b, d have the views' own
            if run.compiled and run.compiled.launch((a, b, d, bias), vouched=True):
                return
            operands = (a.as_strided((m, k), a_strides), b.as_strided((k, n), b_strides), d.view(m, n), bias)
            plans = launches(*operands, ws, num_sms)
            compiled = [kernel[grid](*args, **kwargs) for kernel, grid, args, kwargs in plans]
            if run.compiled is None:
                run.compiled = triton_launch.CompiledLaunches.keep(plans, compiled, operands, runtime) or False
                # what a call's host time depends on beyond the backend (the op times each path's launch
                # cost apart): Triton's JIT on every call where the kernels were not kept, and how many
                # kernels a call launches (split-K's reduction is a second one)
                run.launch_path = " ".join(([] if run.compiled else ["jit"]) + ([f"x{len(plans)}"] if len(plans) > 1
                                                                                  else []))
        run.compiled = None
        run.launch_path = None  # (known after the first call)
        return run

    def _shape_of(self, a, b) -> tuple[int, int, int]:
        """(m, n, k): the problem's, or for a dynamic kernel a's and b's (once they agree)."""
        if not self.dynamic or not (hasattr(a, "shape") and hasattr(b, "shape")):
            return self.problem.shape
        return call_extents(f"triton kernel for {self.problem.class_label()}", a, b)

    def _check(self, a, b, c, bias) -> tuple[int, int, int]:
        p = self.problem
        m, n, k = self._shape_of(a, b)
        label = p.class_label() if self.dynamic else p.label()
        errors = operand_errors(p, a, b, c, bias, m, n, k)
        if not errors:
            devices = {t.device for t in (a, b, c, bias) if t is not None}
            if len(devices) > 1:
                errors.append(f"tensors are on different devices: {sorted(map(str, devices))}")
            elif not self._interpreted and a.device.type != "cuda":
                errors.append(f"tensors are on {a.device}; compiled Triton kernels need CUDA tensors "
                              "(or set TRITON_INTERPRET=1 to run on the CPU)")
            elif self.spec.load_path == "tma":
                errors += [f"{name}: TMA needs a 16-byte aligned base address (data_ptr % 16 == 0)"
                           for name, t in (("a", a), ("b", b)) if t.data_ptr() % 16]
                if self.dynamic:  # a static kernel's shape passed these checks when it was rendered
                    lead = {"a": k if p.a_row_major else m, "b": n if p.b_row_major else k}
                    errors += [f"{name}: TMA needs rows of a multiple of 16 bytes (leading dimension {ld} "
                               f"elements); use a spec with load_path='pointer' for this shape"
                               for name, ld in lead.items() if ld * 2 % 16]
        if errors:
            raise ValueError(f"triton kernel for {label}: " + "; ".join(errors))
        return m, n, k
