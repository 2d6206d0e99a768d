"""Does a served kernel's time depend on the values of its input? The decoder layer of
benchmarks/e2e_decoder.py runs once at --tokens; the inputs its q and o projections received are kept.
F.linear and cudal2.linear (the table of --store serving) are then timed on each projection's weight
with each of these A operands: randn, the q input, the o input (an attention output: a quarter of q's
spread), the o input times ten, and zeros. Each pair is one CUDA graph of 20 calls per contender,
cycling over four copies of the weight (cold in L2), the two replayed in 15 interleaved rounds; the
medians are printed. A kernel whose saving moved with the input's values would need the evaluator to
time it on the model's own activations; one that does not, moved inside the layer for another reason.

    python benchmarks/layer_inputs.py --store STORE [--tokens 128]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

from _rounds import interleaved  # noqa: E402
from e2e_decoder import HIDDEN, layers  # noqa: E402
from cudal2.route_check import graph_timer  # noqa: E402

COPIES, CALLS, ROUNDS = 4, 20, 15


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True, help="the store a decoder run searched into (e2e_decoder.py --store)")
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    if not Path(args.store).exists():
        sys.exit(f"layer_inputs.py: no store at {args.store}; pass the --store of an e2e_decoder.py run")

    import torch
    import torch.nn.functional as F

    import cudal2
    from cudal2 import ops
    from cudal2.bench.environment import record
    from cudal2.store.table import TunedTable

    ops.set_table(TunedTable.for_serving(args.store))
    plain, _ = layers()
    t = args.tokens
    kept = {}
    plain.q.register_forward_hook(lambda m, i, o: kept.setdefault("q input", i[0].clone()))
    plain.o.register_forward_hook(lambda m, i, o: kept.setdefault("o input", i[0].clone()))
    with torch.no_grad():
        plain(torch.randn(t, HIDDEN, device="cuda", dtype=torch.float16))
    env = record()
    print(f"{env.get('gpu_name')}, {env.get('gpu_uuid')}; torch {env.get('torch')}, Triton {env.get('triton')}; "
          f"{env.get('date')}; tokens {t}")
    for name in ("q input", "o input"):
        print(f"{name}: std {kept[name].float().std().item():.3f}")
    cases = {"randn": torch.randn(t, HIDDEN, device="cuda", dtype=torch.float16), **kept,
             "o input x10": (kept["o input"].float() * 10).half(),
             "zeros": torch.zeros(t, HIDDEN, device="cuda", dtype=torch.float16)}
    for w_name, weight in (("W_q", plain.q.weight), ("W_o", plain.o.weight)):
        weights = [weight.clone() for _ in range(COPIES)]
        for a_name, a in cases.items():
            xs = [a.clone() for _ in range(COPIES)]

            def cycling(op, xs=xs):
                turn = iter(range(1 << 40))
                return lambda: op(xs[(i := next(turn)) % COPIES], weights[i % COPIES])

            with torch.no_grad():
                both = interleaved({"torch": graph_timer(cycling(F.linear), CALLS),
                                    "cudal2": graph_timer(cycling(cudal2.linear), CALLS)}, ROUNDS)
            torch_us, ours_us = statistics.median(both["torch"]), statistics.median(both["cudal2"])
            print(f"{w_name} {a_name:12s} F.linear {torch_us:6.2f} us  cudal2.linear {ours_us:6.2f} us  "
                  f"saved {torch_us - ours_us:+.2f} us", flush=True)


if __name__ == "__main__":
    main()
