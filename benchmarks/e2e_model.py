"""A transformers Llama with Llama-3-8B's dimensions (hidden 4096, MLP 14336, 32 query heads and 8
key-value heads of 128, vocabulary 128256), a few decoder layers, random fp16 weights (built from a
LlamaConfig: nothing is downloaded), untouched against the same model after cudal2.tune_model and
cudal2.route_linears: prefill and decode tokens/s in eager mode, under torch.compile and inside CUDA graphs.
--model qwen2.5-7b builds a transformers Qwen2 with Qwen2.5-7B's dimensions instead (hidden 3584, MLP 18944,
28 query heads and 4 key-value heads of 128, vocabulary 152064, q/k/v with biases): other shapes, and the
bias fused into the kernels.

    python benchmarks/e2e_model.py [--model llama3-8b] [--layers 2] [--batch 1] [--prompt 512] [--budget 4]
        [--store PATH] [--rounds 11] [--calls 10] [--modes eager,compile,graph] [--out-dir benchmarks/results]
    python benchmarks/e2e_model.py --smoke --out-dir DIR   # CPU, a tiny config, the recorded runner
    python benchmarks/e2e_model.py --aa [--modes eager] ...   # the untouched model against an untouched copy

1. cudal2.tune_model searches the GEMMs the model's nn.Linear layers run in a prefill of --prompt
   tokens per sequence and in a decode step (one token per sequence), lm_head included, at --budget
   each, the store resuming earlier runs (--budget 0: the store's results as they are). route_linears
   then sends each layer whose weight shape the table serves through cudal2.linear (in graph mode:
   route_linears(graphs=True), also the layers a kernel serves only in captured graphs).
   Before each mode is timed, cudal2.check_routes times each group of routed layers (one weight shape)
   inside the model, in that mode (eager wall time, or a CUDA graph), on the prefill and then on the
   decode step: where a group does not save time in a phase, its layers decline the row counts they
   were served at there (F.linear runs those) and keep those another phase serves; a phase in which no
   kernel served any of its calls is not timed (it runs the same kernels either way; --no-check-routes:
   skip).
2. Prefill: one forward of (batch, prompt) tokens, no cache, logits of the last token only (as
   generation computes them). Decode: one step of one token per sequence into a StaticCache that a
   prefill filled, at position --prompt, every call writing the same slot (so a CUDA graph replays it).
3. Both models are timed as benchmarks/e2e_decoder.py times its layers (cudal2.route_check's
   wall_timer and graph_timer, e2e_decoder's compare): --rounds interleaved rounds of --calls
   back-to-back calls, the order reversed every other round; tokens/s from each model's median, and
   the median of the per-round ratios untouched time / cudal2 time (above 1: cudal2 faster) with its
   quartiles.
Both models' logits are compared (relative error) before timing. Written: OUT-DIR/e2e_model_<gpu>_<date>.md
and .json (every round's time, the routed layers, the environment, the command).
--smoke runs the same path on the CPU in eager mode with a tiny config (2 layers, hidden 64), the
recorded runner's synthetic numbers and a few rounds: a check that the script works, not a figure.
--aa times the untouched model against its untouched copy in the same harness (no search, an empty table, so no
layer is routed and no route checked): how far from 1 a ratio reads with nothing changed, the error any figure
of this harness carries on this host.
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

from e2e_decoder import compare  # noqa: E402
from cudal2.route_check import graph_timer, wall_timer  # noqa: E402

# Llama-3-8B (meta-llama/Meta-Llama-3-8B's config.json)
LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                 vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=8192)
# Qwen2.5-7B (Qwen/Qwen2.5-7B's config.json); Qwen2's q, k and v projections have biases
QWEN25_7B = dict(hidden_size=3584, intermediate_size=18944, num_attention_heads=28, num_key_value_heads=4,
                 vocab_size=152064, rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=32768)
SMOKE = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
             max_position_embeddings=256)
# --model -> (transformers' config and model classes, the full model's dimensions, what the report calls it)
MODELS = {"llama3-8b": ("LlamaConfig", "LlamaForCausalLM", LLAMA3_8B, "Llama-3-8B dimensions"),
          "qwen2.5-7b": ("Qwen2Config", "Qwen2ForCausalLM", QWEN25_7B, "Qwen2.5-7B dimensions (q/k/v biases)")}
DEFAULT_MODEL = "llama3-8b"


def causal_lms(layers: int, smoke: bool, device: str, model: str = DEFAULT_MODEL):
    """(untouched, ours): two causal LMs of --model's architecture (a Llama by default) with the same random
    fp16 weights, in eval mode; smoke: its tiny dimensions."""
    import torch
    import transformers

    config_class, model_class, dims, _ = MODELS[model]
    config = getattr(transformers, config_class)(**(SMOKE if smoke else dims), num_hidden_layers=layers)
    torch.manual_seed(0)
    with torch.device(device):
        plain = getattr(transformers, model_class)(config).to(torch.float16).eval()
    plain.requires_grad_(False)
    return plain, copy.deepcopy(plain)


def _cache_keyword(model) -> str:
    """The forward's name for the KV cache: `cache` in transformers 5's later releases, `past_key_values` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def prefill_call(model, ids):
    """model's prefill of ids: logits of the last token, no cache kept."""
    return lambda: model(ids, use_cache=False, logits_to_keep=1).logits


def decode_call(model, runner, ids, prompt: int):
    """A decode step of runner (model, or model compiled) at position prompt, into a StaticCache that a
    prefill of ids (prompt tokens per sequence) filled; every call writes the same slot."""
    import torch
    from transformers import StaticCache

    batch = ids.shape[0]
    cache = StaticCache(config=model.config, max_cache_len=prompt + 1)
    kw = _cache_keyword(model)
    with torch.no_grad():
        model(ids, use_cache=True, **{kw: cache})
    token = ids[:, -1:].clone()
    position = torch.tensor([prompt], device=ids.device)
    position_ids = position.expand(batch, 1).clone()
    # transformers 5 counts the cache's length in a tensor of each layer, which a step advances: set back
    # in place (a kernel, so a CUDA graph replays it); earlier releases take cache_position instead
    lengths = [layer.cumulative_length for layer in getattr(cache, "layers", ())
               if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor)]

    def step():
        for length in lengths:
            length.fill_(prompt)
        return runner(token, use_cache=True, cache_position=position, position_ids=position_ids, logits_to_keep=1,
                      **{kw: cache}).logits

    return step


def tune(ours, ids, budget: int, store: str, runner) -> dict[str, list[str]]:
    """tune_model on ours' prefill and decode GEMMs; the layers route_linears routes for eager and compiled
    calls, and those it routes for captured CUDA graphs only."""
    import torch

    import cudal2

    class Call(torch.nn.Module):  # what tune_model runs once to see the GEMMs: the model with keywords
        def __init__(self, model, **kwargs):
            super().__init__()
            self.model, self.kwargs = model, kwargs

        def forward(self, x):
            return self.model(x, **self.kwargs).logits

    if budget > 0:
        for example in (ids, ids[:, -1:]):  # prefill, then one decode step's shapes
            cudal2.tune_model(Call(ours, use_cache=False, logits_to_keep=1), example, budget=budget, store=store,
                              runner=runner, progress=False)
    else:
        from cudal2.store.table import TunedTable

        cudal2.set_table(TunedTable.for_serving(store))
    routed = {"eager": cudal2.route_linears(ours), "graphs_only": cudal2.route_linears(ours, graphs=True)}
    cudal2.route_linears(ours)
    return routed


def checked_routes(ours, ids, prompt: int, graphs: bool, rounds: int, calls: int, timer=None) -> list[dict]:
    """cudal2.check_routes on the model's prefill, then on its decode step: a group of routed layers that
    loses inside the model in a phase declines the row counts it was served at there, and keeps the other
    phase's (a model serves both with one routing)."""
    import dataclasses

    import torch

    import cudal2

    class Step(torch.nn.Module):  # the model (its layers) and one phase's call
        def __init__(self, model, fn):
            super().__init__()
            self.model, self.fn = model, fn

        def forward(self):
            return self.fn()

    out = []
    for phase, fn in (("prefill", prefill_call(ours, ids)), ("decode", decode_call(ours, ours, ids, prompt))):
        for check in cudal2.check_routes(Step(ours, fn), graphs=graphs, rounds=rounds, calls=calls, timer=timer):
            row = dataclasses.asdict(check)
            row["layers"] = [name.removeprefix("model.") for name in check.layers]  # (names in ours, not in Step)
            out.append({"phase": phase, **row})
    return out


def measure(plain, ours, ids, prompt: int, modes, rounds: int, calls: int, on_gpu: bool,
            check: bool = True) -> dict:
    """Both models' tokens/s per mode and phase. On the CPU (--smoke) every layer a kernel serves anywhere
    is routed, so that the routed forward runs (the op runs torch there). check: before a mode is timed,
    cudal2.check_routes keeps only the routed layers that win inside the model (eager and graph modes;
    compiled calls follow the eager check)."""
    import torch

    import cudal2

    wall, graph = wall_timer, graph_timer if on_gpu else None  # (wall_timer has nothing to synchronize on the CPU)
    tokens = {"prefill": ids.numel(), "decode": ids.shape[0]}
    rows, routed, declined, checks = {}, {}, {}, {}
    with torch.no_grad():
        want, got = prefill_call(plain, ids)().float(), prefill_call(ours, ids)().float()
        rel_error = float((got - want).norm() / want.norm())
        for mode in modes:
            cudal2.route_linears(ours, graphs=mode == "graph" or not on_gpu)
            if check:
                checks[mode] = checked_routes(ours, ids, prompt, mode == "graph", rounds, calls,
                                              None if on_gpu else wall_timer)
            routed[mode] = sorted(name for name, m in ours.named_modules() if type(m).__name__ == "RoutedLinear")
            declined[mode] = {name: sorted(n // m.in_features for n in m._cudal2_declined)
                              for name, m in ours.named_modules()
                              if type(m).__name__ == "RoutedLinear" and m._cudal2_declined}
            for phase in ("prefill", "decode"):
                timers = {}
                for name, model in (("torch", plain), ("cudal2", ours)):
                    runner = torch.compile(model, dynamic=False) if mode == "compile" else model
                    fn = prefill_call(runner, ids) if phase == "prefill" else decode_call(model, runner, ids, prompt)
                    timers[name] = (graph if mode == "graph" else wall)(fn, calls)
                both = rows.setdefault(mode, {})[phase] = compare(timers, rounds)
                for name in timers:
                    both[name]["tokens_per_s"] = tokens[phase] / both[name]["us"] * 1e6
    cudal2.route_linears(ours)
    return {"rel_error": rel_error, "modes": rows, "routed_per_mode": routed, "declined_rows_per_mode": declined,
            "route_checks": checks}


def _kept_cell(check: dict) -> str:
    """A route check's verdict: yes, or no with the row counts its layers declined (no alone in files made
    when a lost group went back to nn.Linear whole)."""
    if check["kept"]:
        return "yes"
    rows = check.get("declined_rows")
    return f"no: F.linear at {'/'.join(map(str, rows))} rows" if rows else "no"


def report(result: dict, args, env: dict, command: str, tuned_routed: dict[str, list[str]]) -> str:
    def ratio(d):
        return f"{d['ratio']:.3f} ({d['ratio_q1']:.3f} to {d['ratio_q3']:.3f})"

    what = "a tiny config on the CPU, recorded runner (synthetic: a check, not a figure)" if args.smoke else \
        f"{MODELS[getattr(args, 'model', DEFAULT_MODEL)][3]}, {args.layers} layers, random fp16 weights"
    tuning = "no tuning" if getattr(args, "aa", False) else f"tuning budget {args.budget}"
    family = MODELS[getattr(args, "model", DEFAULT_MODEL)][0].removesuffix("Config")  # (transformers' class's name)
    lines = [f"# A transformers {family}, untouched against cudal2.tune_model + route_linears ({env['date']})", "",
             f"`{command}`", "", f"{env.get('gpu_name', 'CPU')}; torch {env.get('torch', '?')}, transformers "
             f"{env.get('transformers', '?')}. {what}; batch {args.batch}, prompt {args.prompt} tokens, {tuning}.", "",
             *(["**A/A run: the untouched model against an untouched copy** (an empty table: nothing tuned, routed "
                "or checked); every ratio below is the harness's own error on this host.", ""]
               if getattr(args, "aa", False) else []),
             f"Layers routed through cudal2.linear: {', '.join(tuned_routed['eager']) or 'none'}; in graph mode "
             f"also (a kernel serves them only in captured CUDA graphs): {', '.join(tuned_routed['graphs_only']) or 'none'}.",
             "",
             f"tokens/s from the median of {args.rounds} rounds of {args.calls} calls, the two models taking turns; "
             "cudal2 / untouched: the median of the per-round time ratios, with its quartiles (above 1: cudal2 "
             "faster).", "",
             "| mode | phase | untouched tokens/s | cudal2 tokens/s | cudal2 / untouched (25% to 75%) |",
             "|---|---|---:|---:|---:|"]
    for mode, phases in result["modes"].items():
        for phase, both in phases.items():
            lines.append(f"| {mode} | {phase} | {both['torch']['tokens_per_s']:.1f} | "
                         f"{both['cudal2']['tokens_per_s']:.1f} | {ratio(both)} |")
    checks = [(mode, c) for mode, cs in result.get("route_checks", {}).items() for c in cs]
    if checks:
        lines += ["", "Each group of routed layers timed inside the model (cudal2.check_routes: the forward with only "
                  "that group served against none, median us saved a call, quartiles; floor: what two timers of the "
                  "forward with none served read apart); a group whose lower quartile is not above the floor in a "
                  "phase runs F.linear at the row counts it was served at there (declined), and keeps the other "
                  "phase's; a group no kernel served a call of in a phase is not timed there (\"none served\": the "
                  "same kernels run either way):", "",
                  "| mode | phase | weight | layers | saving us (25% to 75%) | floor us | kept |",
                  "|---|---|---|---|---:|---:|---|"]
        for mode, c in checks:
            floor = f"{c['floor_us']:.2f}" if "floor_us" in c else "-"
            saving = (f"{c['saving_us']:.2f} ({c['saving_q1_us']:.2f} to {c['saving_q3_us']:.2f})"
                      if c.get("served", True) else "none served")
            lines.append(f"| {mode} | {c['phase']} | {c['weight_shape'][0]}x{c['weight_shape'][1]} | "
                         f"{len(c['layers'])} | {saving} | {floor} | {_kept_cell(c)} |")
        lines += ["", "Routed while timed, per mode: " + "; ".join(
            f"{mode}: {', '.join(names) or 'none'}" for mode, names in result["routed_per_mode"].items())]
        declined = result.get("declined_rows_per_mode") or {}
        if any(declined.values()):
            lines += ["", "Of those, F.linear at the row counts check_routes declined: " + "; ".join(
                f"{mode}: " + ", ".join(f"{name} at {'/'.join(map(str, counts))} rows" for name, counts in layers.items())
                for mode, layers in declined.items() if layers)]
    lines += ["", f"Relative error of cudal2's prefill logits: {result['rel_error']:.1e}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, choices=sorted(MODELS),
                    help="whose dimensions (and architecture) the random model has")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers (Llama-3-8B has 32)")
    ap.add_argument("--batch", type=int, default=1, help="sequences")
    ap.add_argument("--prompt", type=int, default=512, help="prefill tokens per sequence; decode attends to them")
    ap.add_argument("--budget", type=int, default=4, help="search budget per GEMM (0: the store as it is)")
    ap.add_argument("--store", default=None, help="store for the searches (default: the results file's, .db)")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--modes", default="eager,compile,graph")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--smoke", action="store_true", help="CPU, a tiny config, the recorded runner, eager, 3 rounds")
    ap.add_argument("--aa", action="store_true",
                    help="A/A: the untouched model against an untouched copy (an empty table: nothing routed or tuned)")
    ap.add_argument("--no-check-routes", action="store_true",
                    help="time the routing route_linears sets, without cudal2.check_routes' check inside the model")
    args = ap.parse_args(argv)

    import torch

    from cudal2.bench.environment import record

    if args.smoke:
        args.prompt, args.rounds, args.calls, args.modes, args.budget = min(args.prompt, 16), 3, 2, "eager", 2
        device, runner, tag = "cpu", "recorded", "cpu-smoke"
        import os

        from cudal2 import ops

        os.environ.setdefault(ops.ENV_OP_BACKENDS, "triton,cute_dsl")  # (the default, cute_dsl, needs tvm-ffi)
    else:
        if not torch.cuda.is_available():
            sys.exit("e2e_model: no CUDA GPU here; its figures need one (--smoke runs the path on the CPU)")
        device, runner = "cuda", None
        tag = torch.cuda.get_device_name().lower().replace("nvidia ", "").split()[0]
    modes = tuple(args.modes.split(","))
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 8)  # two models, two phases
    named = "" if args.model == DEFAULT_MODEL else f"{args.model.replace('.', '_')}_"  # (no dot: a suffix)
    stem = args.out_dir / f"e2e_model_{'aa_' if args.aa else ''}{named}{tag}_{_dt.date.today().isoformat()}"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    store = args.store or str(stem.with_suffix(".db"))

    plain, ours = causal_lms(args.layers, args.smoke, device, args.model)
    ids = torch.randint(0, plain.config.vocab_size, (args.batch, args.prompt), device=device,
                        generator=torch.Generator(device).manual_seed(0))
    if args.aa:  # an empty table: route_linears routes nothing, so "ours" runs the untouched model's code
        from cudal2.store.table import TunedTable

        import cudal2

        cudal2.set_table(TunedTable())
        routed = {"eager": [], "graphs_only": []}
    else:
        routed = tune(ours, ids, args.budget, store, runner)
    result = measure(plain, ours, ids, args.prompt, modes, args.rounds, args.calls, on_gpu=not args.smoke,
                     check=not args.no_check_routes)
    env = record() if not args.smoke else {"date": _dt.date.today().isoformat(), "torch": torch.__version__}
    import transformers

    env["transformers"] = transformers.__version__
    command = "python3 benchmarks/e2e_model.py " + " ".join(sys.argv[1:] if argv is None else argv)
    stem.with_suffix(".md").write_text(report(result, args, env, command, routed))
    stem.with_suffix(".json").write_text(json.dumps(
        {"command": command, "env": env, "model": args.model, "layers": args.layers, "batch": args.batch,
         "prompt": args.prompt, "budget": args.budget, "rounds": args.rounds, "calls": args.calls, "smoke": args.smoke, "aa": args.aa,
         "routed": routed, **result}, indent=1, default=str))
    print(stem.with_suffix(".md").read_text())
    return stem


if __name__ == "__main__":
    main()
