"""A kernel's own fp32 workspace (split-K partial sums, stream-K partial tiles and flags), with a
guard zone at each end of the part a call uses.

The evaluator's guard zones surround the buffers it hands a kernel; a workspace is the kernel's
own allocation, so it carries its own guards, and the checks ask `intact()` after each checked call
(cudal2.bench.correctness). A split-K kernel whose cluster overhung the output once wrote past its
workspace: the evaluator caught it only through a neighbouring buffer's guards, naming the wrong
kernel.

The tail guard follows the part the latest call uses, re-laid when a shape-generic kernel meets
another shape (a fill then, never on a call of the same shape, so a CUDA graph captures none). A
zeroed workspace (its kernel expects zeros where it reads: stream-K flags, atomic split-K) keeps
its tail guard at the end of the allocation instead, since moving it would leave the pattern where
a larger call expects zeros.

Streams. A workspace serves one call at a time: two calls that overlap on the GPU would sum each other's
partials. cuBLAS keeps a workspace per stream; here each launch that uses the workspace first asks
`follow_stream`, which reads the current stream's handle (one call) and, where the workspace's previous
launch on that device went to another stream, makes the current stream wait for all the work that stream
had been given (an event). Calls that alternate between streams are thereby serialized, not corrupted;
calls on one stream pay the handle read only. Not covered: a CUDA graph replayed on one stream while
another stream uses the same kernel (the capture records the launch; its replay's stream is not known
here), and two threads that launch the same kernel on two streams at the same moment (the read and the
launch are not one atomic step).
"""

from __future__ import annotations

from typing import Any

# fp32 elements at each end: 256 bytes, which keeps the used part 256-byte aligned (the caching
# allocator's blocks start 512-byte aligned)
GUARD = 64
# The guard's int32 pattern: as fp32 a NaN with a payload that no partial sum or flag takes by chance
PATTERN = 0x7FC0DEAD

# torch._C._cuda_getCurrentRawStream(index): the current stream's raw handle there (0: the legacy default
# stream); looked up at a workspace's first launch, before any call of follow_stream reads it
_raw_stream = None


class Workspace:
    """One kernel's workspace on each device it runs on, allocated on first use and grown (never
    shrunk) for a larger call. A launch that uses it calls follow_stream first (see the module's doc)."""

    def __init__(self, zeroed: bool = False):
        self.zeroed = zeroed
        self._on: dict[Any, list] = {}  # device -> [whole buffer with guards, elements the latest call uses]
        # Buffers a larger call replaced. Kept: a launcher bound before (cudal2.matmul's, a C++ slot's, a
        # CUDA graph's recorded launch) holds the old address and runs on it, stream-ordered as ever.
        self._retired: list = []
        self._stream_on: dict[int, tuple] = {}  # CUDA device index -> (raw handle, Stream) of the latest launch there

    def for_call(self, device, elements: int):
        """The first `elements` fp32 of the workspace on device, between its guards (None for 0)."""
        import torch

        if elements <= 0:
            return None
        key = (device.type, device.index if device.index is not None or device.type != "cuda"
               else torch.cuda.current_device())
        held = self._on.get(key)
        if held is None or held[0].numel() < 2 * GUARD + elements:
            if held is not None:
                self._retired.append(self._on.pop(key)[0])
            size = 2 * GUARD + elements
            whole = torch.zeros(size, dtype=torch.float32, device=device) if self.zeroed else \
                torch.empty(size, dtype=torch.float32, device=device)
            bits = whole.view(torch.int32)
            bits[:GUARD].fill_(PATTERN)
            bits[-GUARD:].fill_(PATTERN)
            held = self._on[key] = [whole, elements]
        whole, used = held
        if used != elements and not self.zeroed:
            whole.view(torch.int32)[GUARD + elements:2 * GUARD + elements].fill_(PATTERN)
            held[1] = elements
        return whole[GUARD:GUARD + elements]

    def follow_stream(self, index: int) -> None:
        """Before a launch on CUDA device `index`'s current stream that uses this workspace: where the
        latest such launch went to another stream, make the current stream wait for that stream's work
        so far (see the module's doc). Not while a CUDA graph captures: the capture only records the
        launch, and a captured stream cannot wait on work outside the capture."""
        latest = self._stream_on.get(index)
        if latest is None or latest[0] != _raw_stream(index):
            self._follow(index, latest)

    def follow_device(self, device) -> None:
        """follow_stream for a call's torch.device (nothing for a CPU one: the Triton interpreter's)."""
        import torch

        if device.type == "cuda":
            self.follow_stream(device.index if device.index is not None else torch.cuda.current_device())

    def _follow(self, index: int, latest) -> None:
        global _raw_stream
        import torch

        with torch.cuda.device(index):
            if torch.cuda.is_current_stream_capturing():
                return
        _raw_stream = torch._C._cuda_getCurrentRawStream
        current = torch.cuda.current_stream(index)
        if latest is not None:
            done = torch.cuda.Event()
            done.record(latest[1])
            current.wait_event(done)
        self._stream_on[index] = (current.cuda_stream, current)

    def body(self, device):
        """The whole allocation on device between its guards (None before the first call there)."""
        for (kind, index), (whole, _) in self._on.items():
            if kind == device.type and device.index in (None, index):
                return whole[GUARD:-GUARD]
        return None

    def intact(self) -> bool:
        """Whether every guard still holds its pattern (reads the device: for checks, not calls)."""
        import torch

        for whole, used in self._on.values():
            bits = whole.view(torch.int32)
            tail = bits[-GUARD:] if self.zeroed else bits[GUARD + used:2 * GUARD + used]
            if not (bool((bits[:GUARD] == PATTERN).all()) and bool((tail == PATTERN).all())):
                return False
        return True

