"""How well the rules proposer's model ranks kernels that were measured on a GPU. Runs on the CPU.

    python benchmarks/model_agreement.py [--results benchmarks/results] [--worst 10] [--tolerance 0.03]

The cute_dsl_vs_cublas.py tables in the results folder hold many configurations timed side by side on
one shape. This script turns each configuration label back into its KernelSpec. Labels are looked up in
CONFIG_SETS; a label that is not there, or that means two different specs, is skipped. It keeps the
offline rows whose status is ok, and groups them by table and shape (one run's kernels on one shape).
Two figures come out:

- agreement: over all pairs of one group whose measured times differ by more than the tolerance, the
  share that the rules' model time (RulesProposer.model_time_us) puts in the same order;
- top-pick regret: for each group, the measured time of the kernel the model ranks first, divided by
  the group's best measured time (geometric mean over groups; 1.0 means the model's first pick won).

With --winners REPORT (a search_48.py .json report), it also counts the shapes whose recorded winner
is among the rules proposer's first --proposals specs for that shape (same backend, tile, swap, cluster,
decomposition and warp specialization): a change that ranks the tables better can still push a measured
winner out of the first proposals.

Change the model, run this again, and compare. Each table comes from the template of its own date (and
commit), so a few old rows time kernels that have changed since.
"""

from __future__ import annotations

import argparse
import itertools
import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cute_dsl_vs_cublas import BASE, CONFIG_SETS, parse_shape  # noqa: E402

from cudal2.ir import GemmProblem, KernelSpec  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SHAPE = re.compile(r"^(\d+x\d+x\d+)(?:-([NT]{2}))?$")


@dataclass(frozen=True)
class Measured:
    source: str  # results file name
    table: int  # which table of that file (one run of cute_dsl_vs_cublas.py)
    shape: str  # as the table gives it: MxNxK or MxNxK-LAYOUT
    label: str
    us: float
    spec: dict


def known_specs() -> tuple[dict[str, dict], set[str]]:
    """Every configuration label of cute_dsl_vs_cublas.py's CONFIG_SETS -> its spec fields, and the labels
    that name different specs in different sets (ambiguous, so never used)."""
    specs: dict[str, dict] = {}
    ambiguous: set[str] = set()
    for configs in CONFIG_SETS.values():
        for label, overrides in configs.items():
            fields = {**BASE, **overrides}
            # compared as specs, so that a field left at its default and the same field given match
            if KernelSpec(**specs.setdefault(label, fields)) != KernelSpec(**fields):
                ambiguous.add(label)
    return specs, ambiguous


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def read_tables(folder: Path, specs: dict[str, dict], ambiguous: set[str]) -> tuple[list[Measured], set[str]]:
    """The offline, ok rows of every evaluator table in `folder`/*.md with a known label; and the labels
    skipped as unknown or ambiguous."""
    rows: list[Measured] = []
    skipped: set[str] = set()
    for path in sorted(folder.glob("*.md")):
        header: list[str] | None = None
        table = 0
        for line in path.read_text().splitlines():
            if not line.startswith("|"):
                header = None
                continue
            cells = _cells(line)
            if cells[:1] == ["shape"]:
                header = cells if {"config", "kernel us"} <= set(cells) else None
                table += 1
                continue
            if header is None or len(cells) != len(header) or set(line) <= set("|-: "):
                continue
            row = dict(zip(header, cells))
            label = row["config"]
            if (label.startswith("baseline") or row.get("mode", "offline") != "offline"
                    or row.get("status", "ok").split()[:1] != ["ok"] or not SHAPE.match(row["shape"])):
                continue
            if label not in specs or label in ambiguous:
                skipped.add(label)
                continue
            try:
                us = float(row["kernel us"])
            except ValueError:
                continue
            rows.append(Measured(path.name, table, row["shape"], label, us, specs[label]))
    return rows, skipped


@dataclass
class Agreement:
    pairs: int
    agreeing: int
    groups: int
    regret_geomean: float
    worst: list[tuple[float, str, str, str, str]]  # (regret, file, shape, model's pick, measured best)

    @property
    def share(self) -> float:
        return self.agreeing / self.pairs if self.pairs else float("nan")


def agreement(rows: list[Measured], model=None, tolerance: float = 0.03) -> Agreement:
    """Compare measured times with `model(problem, spec_fields) -> us` (default: the rules' ranking)."""
    if model is None:
        from cudal2.proposers.rules import RulesProposer

        rules = RulesProposer(backends=sorted({r.spec["backend"] for r in rows}) or ("cute_dsl",))
        model = rules.model_time_us
    groups: dict[tuple[str, int, str], list[tuple[float, float, str]]] = defaultdict(list)
    for r in rows:
        fields = KernelSpec(**r.spec).to_dict()
        groups[(r.source, r.table, r.shape)].append((r.us, model(parse_shape(r.shape), fields), r.label))
    pairs = agreeing = 0
    logs: list[float] = []
    worst = []
    for (source, _table, shape), items in groups.items():
        for (us_a, model_a, _), (us_b, model_b, _) in itertools.combinations(items, 2):
            if abs(us_a - us_b) <= tolerance * min(us_a, us_b):
                continue
            pairs += 1
            agreeing += (us_a < us_b) == (model_a < model_b)
        best = min(items)
        pick = min(items, key=lambda t: t[1])
        regret = pick[0] / best[0]
        logs.append(math.log(regret))
        worst.append((regret, source, shape, pick[2], best[2]))
    worst.sort(reverse=True)
    geomean = math.exp(sum(logs) / len(logs)) if logs else float("nan")
    return Agreement(pairs, agreeing, len(groups), geomean, worst)


def _variant(s: KernelSpec) -> tuple:
    return (s.backend, s.block_m, s.block_n, s.swap_ab, s.decomposition, s.cluster_m, s.cluster_n,
            s.warp_specialization)


def winners_proposed(report: Path, proposals: int = 12) -> tuple[int, int, list[str]]:
    """(shapes whose winner's variant the rules propose among their first `proposals`, shapes, the
    shapes where they do not). The rules propose for every backend the report's winners use."""
    from retime_winners import load_winners

    from cudal2.proposers.rules import RulesProposer

    rows = load_winners(report)
    rules = RulesProposer(backends=sorted({r["spec_json"]["backend"] for r in rows}))
    missed = []
    for r in rows:
        problem = GemmProblem(m=r["m"], n=r["n"], k=r["k"])
        offered = {_variant(p.spec) for p in rules.propose(problem, n=proposals)}
        if _variant(KernelSpec.from_dict(r["spec_json"])) not in offered:
            missed.append(f"{r['m']}x{r['n']}x{r['k']}")
    return len(rows) - len(missed), len(rows), missed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder of results tables (*.md)")
    ap.add_argument("--worst", type=int, default=10, help="list the groups with the largest top-pick regret")
    ap.add_argument("--tolerance", type=float, default=0.03,
                    help="pairs whose measured times are closer than this (relative) are not counted")
    ap.add_argument("--winners", type=Path, default=None, help="a search_48.py .json report: are its winners "
                    "among the rules' first proposals?")
    ap.add_argument("--proposals", type=int, default=12, help="how many proposals count for --winners")
    args = ap.parse_args(argv)
    specs, ambiguous = known_specs()
    rows, skipped = read_tables(args.results, specs, ambiguous)
    if not rows:
        raise SystemExit(f"no evaluator table rows with a known configuration label under {args.results}")
    a = agreement(rows, tolerance=args.tolerance)
    print(f"{len(rows)} measured kernels in {a.groups} groups (one table's kernels on one shape); "
          f"{len(skipped)} labels skipped (not in CONFIG_SETS, or ambiguous)")
    print(f"agreement: {a.agreeing} of {a.pairs} pairs ({a.share:.3f}) in the measured order "
          f"(pairs within {args.tolerance:.0%} not counted)")
    print(f"top-pick regret: geometric mean {a.regret_geomean:.3f} (measured time of the model's first pick "
          "over the group's best)")
    for regret, source, shape, pick, best in a.worst[:args.worst]:
        print(f"  {regret:5.2f}  {source}  {shape}: model picks '{pick}', measured best '{best}'")
    if args.winners:
        hit, total, missed = winners_proposed(args.winners, args.proposals)
        print(f"winners of {args.winners.name} among the rules' first {args.proposals} proposals: {hit} of {total}"
              + (f" (not: {', '.join(missed)})" if missed else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
