"""Is the CuTe DSL backend's code the same as at another git revision? Compiles a set of kernel
variants for sm_90a on the CPU in both trees and compares their PTX as programs.

    python tools/ptx_equivalence.py --against REV [--only ID ...] [--keep DIR]

Two PTX texts count as the same program when they are equal after kernel names are blanked,
virtual registers are renamed one to one, copies of a register that holds an immediate are read as
that immediate, and immediate moves are allowed to change places within their basic block. That
is what a restructuring of the kernel's Python that emits the same operations produces (the DSL
numbers registers and orders loop-carried values by how the code is written). Anything else is
reported with the first line that differs. The variants are the CPU compile tests' (tests/
test_cute_dsl.py) plus unit extents, shapes smaller than a tile, split-K edges, a stream-K grid in
lanes and a swap_ab case. A restructuring that keeps every variant the same program keeps
behaviour and speed; a change that does not needs its GPU tests and benchmarks run again.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REG = re.compile(r"%[a-z]+\d+")
MOV_IMM = re.compile(r"^(mov\.b\d+)\s+(%\w+), (-?\w+);$")
MOV_REG = re.compile(r"^(mov\.b\d+)\s+(%\w+), (%\w+);$")

EXTRA = [  # (id, problem kwargs, spec kwargs beyond the tests' BASE)
    ("m1-regs", dict(m=1, n=8, k=16, layout="NN"), dict(epilogue_path="registers")),
    ("m1-tma", dict(m=1, n=8, k=16, layout="NN"), dict(epilogue_path="tma_store")),
    ("n1-regs", dict(m=64, n=1, k=64, layout="NT"), dict(epilogue_path="registers")),
    ("small-8", dict(m=8, n=8, k=8, layout="NN"), dict(epilogue_path="registers")),
    ("small-100", dict(m=100, n=1000, k=40, layout="NN"), dict(epilogue_path="registers")),
    ("split-whole", dict(m=512, n=512, k=2048), dict(num_warps=8, block_m=64, stages=8, cluster_m=2,
                                                     decomposition="split_k", split_k=4, epilogue_path="registers")),
    ("split-edge", dict(m=520, n=504, k=2048), dict(num_warps=8, block_m=64, stages=8, cluster_m=2,
                                                    decomposition="split_k", split_k=4, epilogue_path="registers")),
    ("big-pingpong", dict(m=4096, n=4096, k=4096, layout="NT"),
     dict(warp_specialization="pingpong", stages=5, cluster_n=2)),
    ("streamk-lanes", dict(m=1024, n=16384, k=8192), dict(decomposition="stream_k", block_m=256, cluster_m=2)),
    ("raster-pad", dict(m=12288, n=256, k=16384), dict(block_m=256, stages=3)),
    ("swap-bias", dict(m=12288, n=256, k=4096, layout="NT", bias=True),
     dict(block_m=192, cluster_n=2, raster_order="along_n", swap_ab=True)),
]

# Run in each tree (its own cudal2 first on sys.path): compile every variant, keep its PTX.
DUMP = r'''
import glob, json, os, sys
out = sys.argv[1]
variants = json.loads(open(sys.argv[2]).read())
dump = os.environ["CUTE_DSL_DUMP_DIR"]
from cudal2.codegen.cute_dsl import CuteDslBackend
from cudal2.ir import Epilogue, GemmProblem, KernelSpec
backend = CuteDslBackend()
for vid, pkw, skw in variants:
    for f in glob.glob(os.path.join(dump, "*.ptx")):
        os.remove(f)
    epi = {k: pkw.pop(k) for k in ("alpha", "beta", "bias", "activation") if k in pkw}
    problem = GemmProblem(**pkw, epilogue=Epilogue(**epi))
    try:
        backend.compile(backend.render(problem, KernelSpec(**skw)))
    except Exception as e:
        print(f"{vid}: compile failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
        continue
    text = "\n".join(open(f).read() for f in sorted(glob.glob(os.path.join(dump, "*.ptx"))))
    open(os.path.join(out, vid + ".ptx"), "w").write(text)
'''


def variants() -> list[tuple[str, dict, dict]]:
    """The CPU compile tests' variants, then EXTRA, with full spec kwargs and plain-dict epilogues."""
    spec = importlib.util.spec_from_file_location("cute_dsl_tests", ROOT / "tests" / "test_cute_dsl.py")
    tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests)

    def plain(pkw: dict) -> dict:
        e = pkw.pop("epilogue", None)
        return {**pkw, **({} if e is None else {k: getattr(e, k) for k in ("alpha", "beta", "bias", "activation")})}

    out = [(vid, plain(dict(m=1032, n=968, k=1048, **pkw)), {**tests.BASE, **skw}) for vid, pkw, skw in tests.VARIANTS]
    out += [("split-" + vid, plain(dict(pkw)), {**tests.BASE, **tests.SPLIT, **skw})
            for vid, pkw, skw in tests.SPLIT_VARIANTS]
    out += [(vid, dict(pkw), {**tests.BASE, **skw}) for vid, pkw, skw in EXTRA]
    return out


def dump_tree(tree: Path, items: list, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "raw").mkdir(exist_ok=True)
    (out / "variants.json").write_text(json.dumps(items))
    env = {**os.environ, "PYTHONPATH": str(tree), "CUTE_DSL_ARCH": "sm_90a", "CUDAL2_CUTE_DSL_DISK_CACHE": "0",
           "CUDAL2_CACHE_DIR": str(out / "cache"), "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(out / "raw")}
    subprocess.run([sys.executable, "-c", DUMP, str(out), str(out / "variants.json")], env=env, cwd=out, check=True)


def _normalized(text: str) -> list[str]:
    """Kernel names blanked, register declarations dropped, branch labels unified, copies of an
    immediate read as the immediate."""
    text = re.sub(r"kernel_cutlass_\w+", "KERNEL", text)
    text = re.sub(r"\$L__BB\d+_\d+", "LBL", text)
    out, imm = [], {}
    for line in (ln.strip() for ln in text.splitlines()):
        if not line or line.startswith(".reg") or line.startswith("//"):
            continue
        m = MOV_REG.match(line)
        if m and m.group(3) in imm:
            line = f"{m.group(1)} {m.group(2)}, {imm[m.group(3)]};"
        m = MOV_IMM.match(line)
        if m:
            imm[m.group(2)] = m.group(3)
        elif len(line.split()) > 1:
            imm.pop(line.split()[1].rstrip(",;"), None)
        if line.endswith(":"):
            imm = {}
        out.append(re.sub(r"\s+", " ", line))
    return out


def same_program(a: list[str], b: list[str]) -> str:
    """"" when a and b are the same program (see the module's docstring), else why not."""
    sa, sb = [REG.sub("%R", x) for x in a], [REG.sub("%R", x) for x in b]
    block_a = [sum(1 for x in a[:i] if x.endswith(":")) for i in range(len(a))]
    block_b = [sum(1 for x in b[:j] if x.endswith(":")) for j in range(len(b))]
    pairs, left, right = [], [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, sa, sb, autojunk=False).get_opcodes():
        if tag == "equal":  # immediate moves pair up last: their order within a block is free
            for i, j in zip(range(i1, i2), range(j1, j2)):
                (left.append(i), right.append(j)) if MOV_IMM.match(a[i]) else pairs.append((i, j))
        else:
            left += range(i1, i2)
            right += range(j1, j2)
    if sorted(sa[i] for i in left) != sorted(sb[j] for j in right):
        return f"other instructions ({len(left)} lines against {len(right)})"
    fwd, back = {}, {}

    def agrees(x: str, y: str) -> bool:
        return all(fwd.get(r, s) == s and back.get(s, r) == r for r, s in zip(REG.findall(x), REG.findall(y)))

    def bind(x: str, y: str) -> None:
        for r, s in zip(REG.findall(x), REG.findall(y)):
            fwd[r], back[s] = s, r

    for i, j in pairs:
        if not agrees(a[i], b[j]):
            return f"registers differ at {a[i]!r} / {b[j]!r}"
        bind(a[i], b[j])
    used: set[int] = set()
    for i in left:
        j = next((j for j in right if j not in used and sb[j] == sa[i] and block_a[i] == block_b[j]
                  and agrees(a[i], b[j])), None)
        if j is None:
            return f"no counterpart for {a[i]!r}"
        used.add(j)
        bind(a[i], b[j])
    return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", required=True, help="git revision to compare the working tree with")
    ap.add_argument("--only", nargs="*", help="variant ids (default: all)")
    ap.add_argument("--keep", type=Path, help="keep the PTX here (default: a temporary folder)")
    args = ap.parse_args()
    items = [v for v in variants() if not args.only or v[0] in args.only]
    work = args.keep or Path(tempfile.mkdtemp(prefix="ptx_equivalence_"))
    old_tree = work / "tree"
    if not old_tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(old_tree), args.against], cwd=ROOT, check=True)
    try:
        dump_tree(old_tree, items, work / "old")
        dump_tree(ROOT, items, work / "new")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=ROOT, check=False)
    differ = 0
    for vid, _, _ in items:
        old, new = work / "old" / f"{vid}.ptx", work / "new" / f"{vid}.ptx"
        if not (old.exists() and new.exists()):
            verdict = "not compiled in " + ("either tree" if not (old.exists() or new.exists())
                                            else "the old tree" if not old.exists() else "the working tree")
        else:
            why = same_program(_normalized(old.read_text()), _normalized(new.read_text()))
            verdict = "same program" if not why else "DIFFERS: " + why
        differ += not verdict.startswith("same")
        print(f"{vid}: {verdict}")
    print(f"{len(items) - differ} of {len(items)} variants the same program as at {args.against}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
