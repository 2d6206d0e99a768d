"""Deliberately cheating kernels, each with the Kernel signature kernel(a, b, c=None, bias=None) -> c.

The evaluator must catch every one of them (tests/test_bench_cheats.py on the CPU where the
cheat is visible there, tests/test_gpu_bench.py on the GPU). They are written in torch so
that the same code runs on CPU tensors and on the GPU. `honest` is the control: it must pass.
"""
