"""e2e_decoder.py's layer in graph mode, with one projection (or group) served at a time: the layer's saving per
forward (nn.Linear's time less cudal2's, median of the per-round differences and quartiles, twice), at 16 and 128
tokens. Which projection's kernel gains or loses inside the layer, where e2e_decoder.py's served_alone times the
groups only. Then q's and o's kernels in e2e_decoder.stream_savings_us's regimes (after the prelude, after a GEMM,
between GEMMs, after the MLP's GEMMs): which neighbours a loss in the layer needs.

    python benchmarks/projection_savings.py STORE > OUT.log

STORE: the store of an e2e_decoder.py run (the table is TunedTable.for_serving(STORE)). Prints one line per
(tokens, group, repeat). Needs a CUDA GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

TOKENS = (16, 128)
GROUPS = (("q",), ("o",), ("q", "o"), ("k", "v"))
ROUNDS, CALLS = 21, 20


def main() -> None:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).exists():
        sys.exit("projection_savings.py: pass the store of an e2e_decoder.py run (python benchmarks/"
                 "projection_savings.py STORE)")
    import torch

    if not torch.cuda.is_available():
        sys.exit("projection_savings.py times CUDA graphs, and torch sees none here; run it on a GPU")
    import cudal2
    from cudal2 import ops
    from cudal2.store.table import TunedTable
    from e2e_decoder import HIDDEN, layer_saving, layers, routed_projections, serving_only, stream_savings_us

    ops.set_table(TunedTable.for_serving(sys.argv[1]))
    plain, ours = layers()
    cudal2.route_linears(ours, graphs=True)
    print("routed", list(routed_projections(ours)))
    for t in TOKENS:
        x = torch.randn(t, HIDDEN, device="cuda", dtype=torch.float16)
        for group in GROUPS:
            with serving_only(ours, group):
                for rep in range(2):
                    saving = layer_saving(plain, ours, x, ROUNDS, CALLS)
                    print(t, group, rep, "saving us %.2f (%.2f to %.2f)" % saving, flush=True)
        for name in ("q", "o"):  # the same kernel in e2e_decoder's stream regimes, MLP included
            regimes = stream_savings_us(t, getattr(plain, name), ROUNDS, CALLS)
            print(t, name, "stream regimes, saving us a call:",
                  ", ".join(f"{r} {v:.2f}" for r, v in regimes.items()), flush=True)


if __name__ == "__main__":
    main()
