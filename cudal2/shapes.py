"""The shapes cudal2 measures, learns from and reports on, and their one train/validation split.

Two sets, both shipped in cudal2/data/shapes/:
- the grid: CUDA-L2's 1000 HGEMM shapes (M, N, K each a power of two, or 12288), layout NN;
- serving: the linear layers of public LLMs (llm_models.json: hidden, MLP and vocabulary widths)
  at token counts 1 to 16384, odd counts among them, layout NT as nn.Linear runs them.

The split was drawn once with SEED and is kept in split.json: rules, factors and models are fitted
and tuned on `train`; figures are reported on `validation`, which nothing is tuned on. Grid shapes
are split one by one. Serving shapes are split by weight matrix (N, K): every token count of a
validation weight is in validation, so a validation layer is one no fit has seen at any batch.

    python -m cudal2.shapes --check    # split.json is what this module draws (exit 1 if not)
    python -m cudal2.shapes --write    # draw it again (only to add shapes: it moves no old one)
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from .ir import GemmProblem

DATA = Path(__file__).resolve().parent / "data" / "shapes"
SPLIT_FILE = DATA / "split.json"
SEED = 20261125
VALIDATION_SHARE = 0.25
SETS = ("grid", "serving")


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    layout: str
    where: str = ""  # what it is: "Llama-3-8B gate_up" (serving) or "" (grid)

    @property
    def label(self) -> str:
        """The problem's label at fp16: '1x6144x4096-float16-NT'."""
        return f"{self.m}x{self.n}x{self.k}-float16-{self.layout}"

    def problem(self, dtype: str = "float16"):
        return GemmProblem(m=self.m, n=self.n, k=self.k, dtype=dtype, layout=self.layout)


def grid_shapes() -> list[Shape]:
    out = []
    for line in (DATA / "cuda_l2_grid.txt").read_text().splitlines():
        line = line.split("#", 1)[0].split()
        if line:
            m, n, k = map(int, line)
            out.append(Shape(m, n, k, "NN"))
    return out


def model_layers() -> dict[str, dict[str, tuple[int, int]]]:
    """{model: {layer: (N, K)}}: each linear layer's output and input width."""
    cfg = json.loads((DATA / "llm_models.json").read_text())
    out = {}
    for name, c in cfg["models"].items():
        q, kv = c["heads"] * c["head_dim"], c["kv_heads"] * c["head_dim"]
        out[name] = {"qkv": (q + 2 * kv, c["hidden"]), "o": (c["hidden"], q),
                     "gate_up": (2 * c["intermediate"], c["hidden"]), "down": (c["hidden"], c["intermediate"]),
                     "lm_head": (c["vocab"], c["hidden"])}
    return out


def token_counts() -> list[int]:
    return list(json.loads((DATA / "llm_models.json").read_text())["token_counts"])


def serving_shapes() -> list[Shape]:
    """Every (tokens, N, K) of every model's layers, once (the first model and layer to name a
    weight shape names it)."""
    seen: dict[tuple[int, int, int], Shape] = {}
    for model, layers in model_layers().items():
        for layer, (n, k) in layers.items():
            for m in token_counts():
                seen.setdefault((m, n, k), Shape(m, n, k, "NT", f"{model} {layer}"))
    return list(seen.values())


def draw_split(seed: int = SEED, share: float = VALIDATION_SHARE) -> dict:
    """The split as split.json holds it: {set: {"train": [labels], "validation": [labels]}}."""
    rng = random.Random(seed)
    grid = [s.label for s in grid_shapes()]
    validation = set(rng.sample(grid, round(share * len(grid))))
    split = {"grid": {"train": [x for x in grid if x not in validation],
                      "validation": [x for x in grid if x in validation]}}
    serving = serving_shapes()
    weights = sorted({(s.n, s.k) for s in serving})
    held = set(rng.sample(weights, round(share * len(weights))))
    split["serving"] = {"train": [s.label for s in serving if (s.n, s.k) not in held],
                        "validation": [s.label for s in serving if (s.n, s.k) in held]}
    return {"seed": seed, "validation_share": share,
            "how": "grid: by shape; serving: by weight matrix (N, K), every token count with it", **split}


def load_split() -> dict:
    """split.json: {set: {"train": [...], "validation": [...]}} plus how it was drawn."""
    try:
        return json.loads(SPLIT_FILE.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise RuntimeError(f"{SPLIT_FILE} cannot be read ({e}); restore it from git, or run "
                           "'python -m cudal2.shapes --write'") from None


def shapes(set_name: str, part: str | None = None) -> list[Shape]:
    """The shapes of a set ("grid" or "serving"), all or one part of the split ("train",
    "validation")."""
    if set_name not in SETS:
        raise ValueError(f"unknown shape set {set_name!r}; give one of {', '.join(SETS)}")
    every = grid_shapes() if set_name == "grid" else serving_shapes()
    if part is None:
        return every
    if part not in ("train", "validation"):
        raise ValueError(f"unknown part {part!r}; give train or validation")
    keep = set(load_split()[set_name][part])
    return [s for s in every if s.label in keep]


def main(argv: list[str]) -> int:
    drawn = draw_split()
    if argv == ["--write"]:
        SPLIT_FILE.write_text(json.dumps(drawn, indent=1) + "\n")
        print(f"wrote {SPLIT_FILE}")
        return 0
    if argv == ["--check"]:
        same = load_split() == drawn
        print(f"{SPLIT_FILE} {'is' if same else 'is NOT'} the split drawn with seed {SEED}")
        return 0 if same else 1
    for name in SETS:
        print(f"{name}: {len(drawn[name]['train'])} train, {len(drawn[name]['validation'])} validation")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
