"""Expert rules: the proposals a seasoned GEMM engineer writes down before measuring anything.

Every candidate is built from the backend's declared search space (space.py) and ranked by
a small analytical model of one GPU (wave quantization over the SMs, the per-step balance
of tensor-core work and tile loads, pipeline depth, split-K reduction traffic, a DRAM floor).
The model only orders candidates; measurement decides. What differs between backends is
plain data (`Preferences`), in the spirit of tinygrad's list of named search options.

The rules, each visible in a proposal's reasoning:
- tile shape from M, N, K and the SM count: count the tiles, prefer counts that fill whole
  waves, do not pad a tiny dimension up to a large tile;
- split-K when the tile grid cannot fill one wave and K is deep;
- stages from the shared memory left after the tiles (KernelSpec.smem_bytes vs the arch);
- TMA (and persistent scheduling past one wave) on sm_90 when the operands' leading
  dimensions are 16-byte aligned;
- the rasterization group from the L2 size: the group that minimises the operand panels one
  wave touches, or the default when both operands fit in L2 anyway.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from cudal2.bench.results import CandidateResult
from cudal2.ir import ARCHS, DTYPE_BYTES, DeviceProfile, GemmProblem, KernelSpec
from cudal2.ir.spec import OPERAND_BYTES, PRODUCER_WARPS, REGISTER_RESERVE, epilogue_smem_bytes, stage_bytes
from cudal2.proposers.proposal import Proposal, seen_key, seen_keys
from . import space
from .factors import factors
from .rules_data import DEFAULT_PREFERENCES, PREFERENCES, Preferences, Throughput, _cdiv, _measured_factor
from ..ir.hardware import DEFAULT_ARCH
from cudal2.codegen import get_backend


# How much a candidate's score grows for each earlier pick that shares its tile size class
# (_width_class) or its whole variant; this is what keeps a ranked list diverse.
SAME_TILE_PENALTY = 0.25
SAME_VARIANT_PENALTY = 0.05
# Statuses that say "this configuration is broken here", not "it is slow".
FAILED = ("compile_error", "crash", "timeout", "incorrect")
KEEP_PER_TILE = 6
# Stream-K proposals per call: stream-K rarely beats the data-parallel kernels beside it, and the
# model, which counts the last wave's idle SMs but not the cycles stream-K adds to every SM, would
# otherwise rank half the list of a ragged deep-K grid stream-K once clusters multiply its variants.
MAX_STREAM_K = 2
# Tile-size caps, as multiples of the next power of two of M, N, K. The last level also
# varies what the rules would otherwise decide alone (stages, raster group and order), for
# backends whose declared space is too small to give n specs otherwise.
WIDEN = (1, 4, 16, 1 << 20)
EXHAUSTIVE = WIDEN[-1]


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _width_class(width: int) -> int:
    """A width's step on a half-octave scale (..., 64, 96, 128, 192, 256): each of those widths has its
    own, and a width between them shares the nearest one's (160-208 with 192, 224 and 240 with 256)."""
    return round(2 * math.log2(width))


@dataclass(frozen=True)
class _Grid:
    """How one tile covers the output: tiles along M and N, all tiles, K tiles, resident slots."""

    gm: int
    gn: int
    tiles: int
    k_tiles: int
    slots: int  # CTAs resident at once on the GPU
    note: str

@dataclass(frozen=True)  # kept across calls for a problem (RulesProposer._enumerated): never changed
class _Candidate:
    fields: dict[str, Any]
    time_us: float
    notes: list[str]

    @property
    def tile(self) -> tuple:
        f = self.fields
        return (f["backend"], f["block_m"], f["block_n"], f.get("swap_ab", False))

    @property
    def size_class(self) -> tuple:
        """The tile up to neighbouring widths: what the diversity penalty counts, so that a list drawn
        from every width spans tile sizes rather than 224, 240 and 256 of one."""
        f = self.fields
        return (f["backend"], _width_class(f["block_m"]), _width_class(f["block_n"]), f.get("swap_ab", False))

    @property
    def variant(self) -> tuple:
        f = self.fields
        return (f["backend"], f["decomposition"], f["load_path"], f["persistent"])

    @property
    def family(self) -> tuple:
        f = self.fields
        return (f["backend"], f["block_m"], f["block_n"], f["block_k"], f["num_warps"], f["stages"],
                f["load_path"])


class RulesProposer:
    """Ranked, diverse, valid specs from expert heuristics; deterministic and offline.

    backends: which codegen backends to propose for; arch: the target (ARCHS key).
    device: the GPU's profile (default: the live device of arch, else the arch's reference part)."""

    name = "rules"

    def __init__(self, backends: Sequence[str] = ("triton",), arch: str = DEFAULT_ARCH, *,
                 device: DeviceProfile | None = None, preferences: Mapping[str, Preferences] | None = None):
        if isinstance(backends, str):
            backends = (backends,)
        if arch not in ARCHS:
            raise ValueError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
        self.arch = arch
        self.device = device or DeviceProfile.live(arch)
        self.hw = self.device.limits
        self.throughput = Throughput.of_device(self.device)
        self.preferences = {**PREFERENCES, **(preferences or {})}
        self.backends = []
        refused = []
        for b in backends:
            caps = get_backend(b).capabilities  # KeyError names the known backends
            (self.backends if space.backend_runs_on(caps, arch) else refused).append(b)
        if not self.backends:
            raise ValueError(f"none of the backends {list(backends)} supports {arch}"
                             f"; pick another arch or backend")
        self.refused_backends = refused
        # why candidates were dropped at validation in the last propose() (for debugging)
        self.dropped: list[tuple[dict, str]] = []
        # Each problem's candidates, enumerated once: an adaptive search asks for proposals again
        # and again for the same problem, and the enumeration is most of a proposal's cost.
        self._enumerated: dict[tuple, list[_Candidate]] = {}

    def __repr__(self) -> str:
        return f"RulesProposer(backends={self.backends}, arch={self.arch!r})"

    # ---- public -------------------------------------------------------------------------------
    def propose(self, problem: GemmProblem, history: Sequence[CandidateResult] = (), n: int = 8, *,
                pending: Sequence[KernelSpec] = ()) -> list[Proposal]:
        seen = seen_keys(history, pending)
        broken = Counter(_family_of(r.spec.to_dict()) for r in history if r.status in FAILED)
        out: list[Proposal] = []
        self.dropped = []
        tiles: Counter = Counter()
        variants: Counter = Counter()
        picks: Counter = Counter()  # proposals per backend
        stream_k_picks = 0
        taken: set[str] = set()
        # Tiles are first capped at the next power of two of each dimension (bigger ones only
        # pad); tiny problems have too few such tiles, so the cap is relaxed until n are found.
        for widen in WIDEN:
            pool: list[_Candidate] = []
            for backend in self.backends:
                pool.extend(self._candidates(problem, backend, widen))
            # configurations that already failed here are unlikely to work now (copies: the
            # enumeration is kept for the next call)
            pool = [replace(c, time_us=c.time_us * 1.5 ** broken[c.family],
                            notes=[*c.notes, f"{broken[c.family]} similar spec(s) failed before"])
                    if broken[c.family] else c for c in pool]
            pool = _best_per_tile(pool, KEEP_PER_TILE if widen != EXHAUSTIVE else len(pool))
            while len(out) < n and pool:
                # Several backends take turns (the one with fewest picks goes next): each model
                # ranks its own backend's kernels, and the times of two backends' models are not
                # calibrated against each other well enough to let one crowd the other out.
                have = {c.fields["backend"] for c in pool}
                turn = min(have, key=lambda b: (picks[b], self.backends.index(b)))
                i = min((j for j in range(len(pool)) if pool[j].fields["backend"] == turn), key=lambda j: (
                    pool[j].time_us * (1 + SAME_TILE_PENALTY * tiles[pool[j].size_class]
                                       + SAME_VARIANT_PENALTY * variants[pool[j].variant]), j))
                cand = pool.pop(i)
                stream_k = cand.fields["decomposition"] == "stream_k"
                if stream_k and stream_k_picks >= MAX_STREAM_K:
                    continue
                spec, why = space.validate(problem, cand.fields)
                if spec is None:
                    self.dropped.append((cand.fields, why))
                    continue
                key = seen_key(spec)
                if key in seen or key in taken:
                    continue
                taken.add(key)
                picks[spec.backend] += 1
                stream_k_picks += stream_k
                tiles[cand.size_class] += 1
                variants[cand.variant] += 1
                out.append(Proposal(spec=spec, source=self.name,
                                    reasoning="; ".join(cand.notes + [f"model {cand.time_us:.1f} us"])))
            if len(out) >= n:
                break
        return out

    # ---- candidate generation -------------------------------------------------------------------
    def _candidates(self, problem: GemmProblem, backend: str, widen: int) -> list[_Candidate]:
        """Every candidate of one backend for problem, enumerated once per problem; callers do not
        mutate them."""
        key = (problem.key(), backend, widen)
        if key not in self._enumerated:
            if len(self._enumerated) >= 64:  # a proposer kept for many problems stays small
                self._enumerated.clear()
            self._enumerated[key] = self._enumerate(problem, backend, widen)
        return self._enumerated[key]

    def _enumerate(self, problem: GemmProblem, backend: str, widen: int) -> list[_Candidate]:
        caps = get_backend(backend).capabilities
        pref = self.preferences.get(backend, DEFAULT_PREFERENCES)
        arch, hw = self.arch, self.hw
        base = space.base_fields(backend, caps, arch)
        for name, value in pref.fixed.items():
            if space.allows(caps, name, value, arch):
                base[name] = value
        m, n, k = problem.shape
        # a tile larger than the next power of two of a dimension only pads
        cap_m, cap_n, cap_k = (max(16, _pow2_at_least(x)) * widen for x in (m, n, k))
        bms = [b for b in space.widths(caps, "block_m", arch, pref.block_mn) if b <= cap_m]
        bns = [b for b in space.widths(caps, "block_n", arch, pref.block_mn) if b <= cap_n]
        bks = [b for b in space.prefer(caps, "block_k", arch, pref.block_k) if b <= cap_k]
        # fall back to the smallest allowed sizes when the caps leave nothing
        bms = bms or sorted(space.domain(caps, "block_m", arch))[:1]
        bns = bns or sorted(space.domain(caps, "block_n", arch))[:1]
        bks = bks or sorted(space.domain(caps, "block_k", arch))[:1]
        warps = space.prefer(caps, "num_warps", arch, pref.num_warps) or list(space.domain(caps, "num_warps", arch))
        loads = self._load_paths(problem, caps, pref)
        # With every declared width in play (pref.block_mn None) most tiles are ones the kernel cannot
        # split (cute_dsl cuts its M in rows of 64 per warpgroup): the backend is asked once per tile,
        # at the fewest stages (shared memory only grows with more), not once per variant.
        fewest = min(space.domain(caps, "stages", arch) or (base["stages"],))

        # Tall outputs (M >= 4N) also get swapped kernels (D^T = B^T A^T), cuBLAS's orientation for
        # them: the tensor core's M (rows of 64 per warpgroup) then runs along the short N and its N
        # (any multiple of 8) along M, which admits tiles of 96 or 192 rows. Which tiles the kernel
        # can split is the backend's to say: validation drops the rest.
        swaps = [False]
        if m >= 4 * n and n > 1 and space.allows(caps, "swap_ab", True, arch):
            swaps.append(True)
        out = []
        for swap, bm, bn, bk, w in itertools.product(swaps, bms, bns, bks, warps):
            tile = {**base, "block_m": bm, "block_n": bn, "block_k": bk, "num_warps": w,
                    **({"swap_ab": True} if swap else {})}
            consumer = w - PRODUCER_WARPS if tile["warp_specialization"] != "none" else w
            if consumer <= 0:
                continue
            acc = bm * bn // (consumer * 32)
            if acc > hw.regs_per_thread - REGISTER_RESERVE or acc < pref.min_acc_registers:
                continue
            if pref.block_mn is None and space.validate(problem, {**tile, "stages": fewest})[0] is None:
                continue
            for load, load_note in loads:
                out.extend(self._variants(problem, caps, pref, {**tile, "load_path": load}, load_note,
                                          exhaustive=widen == EXHAUSTIVE))
        return out

    def _load_paths(self, problem: GemmProblem, caps, pref: Preferences) -> list[tuple[str, str]]:
        allowed = space.prefer(caps, "load_path", self.arch, pref.load_path)
        lead = problem.leading_dims()
        aligned = all(lead[op] * DTYPE_BYTES[problem.dtype] % 16 == 0 for op in ("a", "b"))
        out = []
        if "tma" in allowed and self.hw.has_tma:
            if aligned:
                out.append(("tma", "TMA loads (leading dims 16-byte aligned)"))
        allowed = [p for p in allowed if p != "tma"]
        if allowed:
            why = "no TMA on " + self.arch if not self.hw.has_tma else (
                "pointer loads (TMA needs 16-byte aligned leading dims)" if not aligned else "pointer loads")
            out.append((allowed[0], why if allowed[0] == "pointer" else f"{allowed[0]} loads"))
            if out[0][0] == "tma" and len(out) == 2:
                out[1] = (allowed[0], f"{allowed[0]} loads, to compare with TMA")
        if not out and space.domain(caps, "load_path", self.arch):
            d = space.domain(caps, "load_path", self.arch)
            out.append((d[0], f"{d[0]} loads (the only path the backend declares)"))
        return out

    def _variants(self, problem: GemmProblem, caps, pref: Preferences, tile: dict, load_note: str,
                  exhaustive: bool = False) -> list[_Candidate]:
        """Every decomposition, cluster, warp role, stage count, persistence and raster of one tile."""
        grid = self._grid(problem, tile)
        decomps = self._decompositions(caps, pref, tile, grid)
        return self._expand(problem, caps, pref, tile, grid, decomps, load_note, exhaustive)

    def _grid(self, problem: GemmProblem, tile: dict) -> "_Grid":
        m, n, k = problem.shape
        bm, bn = tile["block_m"], tile["block_n"]
        gm, gn = _cdiv(m, bm), _cdiv(n, bn)
        tiles = gm * gn
        note = f"{self.hw.sm_count} SMs, {tiles} tile(s) of {bm}x{bn} -> {tiles / self.hw.sm_count:.2f} wave(s)"
        return _Grid(gm, gn, tiles, _cdiv(k, tile["block_k"]), self.hw.sm_count * self._occupancy(tile, stages=2),
                     note)

    def _decompositions(self, caps, pref: Preferences, tile: dict, grid: "_Grid") -> list[tuple[dict, str]]:
        """(fields, note) of each way to share the tile grid and K out: data-parallel, split-K,
        stream-K, each in the clusters that fit, and ping-pong where it measured ahead."""
        arch, hw = self.arch, self.hw
        bm, bn = tile["block_m"], tile["block_n"]
        gm, gn, tiles, kb, slots = grid.gm, grid.gn, grid.tiles, grid.k_tiles, grid.slots
        decomps: list[tuple[dict, str]] = [({"decomposition": "data_parallel", "split_k": 1}, "")]
        if tiles < slots and kb >= 4 and space.allows(caps, "decomposition", "split_k", arch):
            splits = []
            for s in space.prefer(caps, "split_k", arch, pref.split_k):
                if s > kb or kb / s < 2:
                    continue
                ctas = tiles * s
                fill = ctas / (_cdiv(ctas, hw.sm_count) * hw.sm_count)
                splits.append((-fill, s))
            for neg_fill, s in sorted(splits)[:3]:
                for red in space.prefer(caps, "split_k_reduction", arch, pref.split_k_reduction):
                    decomps.append(({"decomposition": "split_k", "split_k": s, "split_k_reduction": red},
                                    f"split_k={s} ({red}) fills {-neg_fill:.2f} of a wave"))
        # Stream-K evens out a ragged last wave (or a grid of fewer tiles than SMs): the k-iterations
        # of the leftover tiles are shared evenly by all CTAs, and partial tiles are summed by their
        # owner. It pays on deep-K shapes with few tiles and loses where the k-loop is short, so it is
        # offered only with enough k-tiles per tile and tiles enough that each is shared by at most
        # about three CTAs (its owner adds the others' partials one after another). Not offered
        # where the last wave is nearly full: what it saves there is less than the cycles it adds to
        # every SM (docs/results.md).
        dp_fill = tiles / (_cdiv(tiles, hw.sm_count) * hw.sm_count)
        if (dp_fill < 0.9 and kb >= 32 and 2 * tiles >= hw.sm_count
                and space.allows(caps, "decomposition", "stream_k", arch)):
            decomps.append(({"decomposition": "stream_k", "split_k": 1},
                            f"stream-K: {tiles} tile(s) fill {dp_fill:.2f} of their last wave; the leftover "
                            f"tiles' {kb} k-tiles each are shared by all {hw.sm_count} SMs"))
        # Clusters of two CTAs share one operand's tile through TMA multicast, halving its L2
        # reads; on Hopper that paid on large grids and on grids of one wave or less. Split-K gets
        # them beside its unclustered variants: cuBLAS runs its deep-K split-K kernels in clusters of
        # two, but whether one pays depends on the tile and the operand sizes (_measured_factor,
        # _split_k_cluster_pays). Stream-K works in clusters too: a cluster's CTAs walk the same
        # k-range of neighbouring tiles.
        clusters: list[tuple[int, int, str]] = [(1, 1, "")]
        if tiles >= 2:
            for cm, cn in ((1, 2), (2, 1)):
                if (space.allows(caps, "cluster_m", cm, arch) and space.allows(caps, "cluster_n", cn, arch)
                        and gm % cm == 0 and gn % cn == 0):
                    clusters.append((cm, cn, f"cluster {cm}x{cn}: TMA multicast of the shared operand tile"))
        epi_dp = next((e for e in pref.epilogue_path if space.allows(caps, "epilogue_path", e, arch)), None)

        def epilogue(dec: dict) -> dict:
            epi = "registers" if dec["decomposition"] == "split_k" else epi_dp
            ok = epi is not None and space.allows(caps, "epilogue_path", epi, arch)
            return {"epilogue_path": epi} if ok else {}

        decomps = [({**dec, **epilogue(dec), "cluster_m": cm, "cluster_n": cn},
                    "; ".join(x for x in (note, c_note) if x))
                   for dec, note in decomps
                   for cm, cn, c_note in clusters]
        # ping-pong: two consumer warpgroups on tiles of their own, only where it measured ahead, and
        # on grids that give every CTA two tiles at least (with one, the second warpgroup idles)
        if (tile["num_warps"] == PRODUCER_WARPS + 8 and tiles >= 2 * hw.sm_count and not tile.get("swap_ab")
                and space.allows(caps, "warp_specialization", "pingpong", arch)):
            decomps += [({**dec, "warp_specialization": "pingpong"},
                         "; ".join(x for x in (note, "ping-pong: one warpgroup's main loop runs under the "
                                               "other's epilogue") if x))
                        for dec, note in decomps
                        if dec["decomposition"] == "data_parallel"
                        and (bm, bn, dec["cluster_m"], dec["cluster_n"]) in pref.pingpong_variants]
        return decomps

    def _expand(self, problem: GemmProblem, caps, pref: Preferences, tile: dict, grid: "_Grid",
                decomps: list[tuple[dict, str]], load_note: str, exhaustive: bool) -> list[_Candidate]:
        """Each decomposition at its stage counts, persistence and rasters, with the model's time."""
        arch, hw = self.arch, self.hw
        tiles, kb, slots, grid_note = grid.tiles, grid.k_tiles, grid.slots, grid.note
        out = []
        for dec, dec_note in decomps:
            fields = {**tile, **dec}
            persist_opts = [False]
            if (dec["decomposition"] == "data_parallel" and tiles > slots
                    and space.allows(caps, "persistent", True, arch)):
                persist_opts.append(True)
            # a backend that only has a persistent kernel (cute_dsl) is persistent whatever the grid
            persist_opts = ([p for p in persist_opts if space.allows(caps, "persistent", p, arch)]
                            or [p for p in (True, False) if space.allows(caps, "persistent", p, arch)])
            # A warp-specialized kernel is persistent (cute_dsl's always are): its producer walks all of
            # the CTA's tiles through one pipeline, so stages beyond one tile's k-steps load the next tile
            # during this one's epilogue. On short-K shapes that paid (though not on the output-bound
            # 12288x8192x64; docs/results.md), so the depth is capped at the CTA's whole walk, not at one
            # tile's k-steps.
            walk = _cdiv(kb, dec["split_k"])
            if fields["warp_specialization"] != "none":
                walk *= _cdiv(tiles * dec["split_k"], hw.sm_count)
            for stages, stage_note in self._stage_options(caps, pref, fields, walk, exhaustive):
                for persistent in persist_opts:
                    f = {**fields, "stages": stages, "persistent": persistent}
                    if not space.allows(caps, "persistent", persistent, arch):
                        continue
                    if f["warp_specialization"] == "pingpong" and pref.pingpong_raster:
                        group, order = pref.pingpong_raster
                        raster_note = f"ping-pong: raster group {group} {order}, where it measured ahead"
                    else:
                        group, order, raster_note = self._raster(caps, problem, f)
                        if f["decomposition"] == "stream_k":
                            order, raster_note = self._stream_k_order(caps, problem, order, raster_note)
                    rasters = [(group, order, raster_note)]
                    if exhaustive:
                        rasters += [(g, o, f"raster group {g} {o} (variant)")
                                    for o in space.domain(caps, "raster_order", arch) or (order,)
                                    for g in space.prefer(caps, "raster_group", arch, pref.raster_group)
                                    if (g, o) != (group, order)]
                    for group, order, raster_note in rasters:
                        f = {**f, "raster_group": group, "raster_order": order}
                        time_us = self.model_time_us(problem, f)
                        notes = [grid_note]
                        if dec_note:
                            notes.append(dec_note)
                        notes += [stage_note, load_note]
                        if persistent:
                            notes.append(f"persistent: {hw.sm_count} resident blocks loop over {tiles} tiles")
                        notes.append(raster_note)
                        out.append(_Candidate(f, time_us, notes))
        return out

    def _stage_options(self, caps, pref: Preferences, fields: dict, k_steps: int,
                       exhaustive: bool = False) -> list[tuple[int, str]]:
        hw = self.hw
        per_stage = stage_bytes(fields)
        # the epilogue's staging may shrink as stages grow (cute_dsl), so each count is checked whole
        used = {s: s * per_stage + epilogue_smem_bytes({**fields, "stages": s})
                for s in space.domain(caps, "stages", self.arch)}
        allowed = [s for s, b in used.items() if b <= hw.smem_per_block - pref.smem_reserve]
        if not allowed:
            return []
        fit = max(allowed)
        # more stages than main-loop steps (the CTA's k-walk, see _variants) buy nothing
        most = pref.pingpong_max_stages if fields["warp_specialization"] == "pingpong" else pref.max_stages
        top = min(most, max(allowed), max(2, k_steps))
        picks = sorted({s for s in (top, min(top, 3)) if s in allowed} or {min(allowed)}, reverse=True)
        if exhaustive:
            picks += [s for s in sorted(allowed, reverse=True) if s not in picks]
        out = []
        for s in picks:
            out.append((s, f"{s} stages use {used[s] / 1024:.0f} KiB of {hw.smem_per_block / 1024:.0f} KiB shared memory"
                           + (f" (fits {fit})" if s < fit else "")))
        return out

    def _stream_k_order(self, caps, problem: GemmProblem, order: str, note: str) -> tuple[str, str]:
        """The raster order a stream-K kernel numbers its tiles in: along M where B is the larger
        operand, along N where A is, so that the CuTe DSL kernel's stream-K lanes keep the tiles that share
        the larger operand's panel at the same k (cute_dsl: scheduler._lanes; lanes that share the smaller
        operand instead measured slower; docs/results.md)."""
        m, n, _ = problem.shape
        want = "along_m" if n >= m else "along_n"
        if want == order or not space.allows(caps, "raster_order", want, self.arch):
            return order, note
        larger = "B" if want == "along_m" else "A"
        return want, f"{note}; stream-K tiles numbered {want}, so lanes keep the larger operand {larger} in step"

    def _raster(self, caps, problem: GemmProblem, f: dict) -> tuple[int, str, str]:
        """Grouped rasterization: with `group` tile-rows per group, one wave of S blocks reads
        group*block_m rows of A and S/group*block_n columns of B per k-step; the group that
        minimises that is sqrt(S*block_n/block_m). When A and B fit in L2 together, it does
        not matter and the default stays."""
        hw = self.hw
        m, n, k = problem.shape
        gm, gn = _cdiv(m, f["block_m"]), _cdiv(n, f["block_n"])
        elt = DTYPE_BYTES[problem.dtype]
        operands = (m * k + k * n) * elt
        order = "along_m" if gm >= gn else "along_n"
        if not space.allows(caps, "raster_order", order, self.arch):
            order = f["raster_order"]
        pref = self.preferences.get(f["backend"], DEFAULT_PREFERENCES)
        groups = space.prefer(caps, "raster_group", self.arch, pref.raster_group) or (f["raster_group"],)
        l2_mib = hw.l2_bytes / 2**20
        if operands <= hw.l2_bytes // 2:
            g = f["raster_group"] if f["raster_group"] in groups else groups[0]
            return g, order, f"A+B = {operands / 2**20:.1f} MiB fit in {l2_mib:.0f} MiB L2: raster group {g}"
        rows, bm, bn = (gm, f["block_m"], f["block_n"]) if order == "along_m" else (gn, f["block_n"], f["block_m"])
        best = math.sqrt(hw.sm_count * bn / bm)
        cands = [g for g in groups if g <= max(1, rows)] or [groups[0]]
        g = min(cands, key=lambda x: (abs(math.log(x / best)), x))
        panel = (g * bm + _cdiv(hw.sm_count, g) * bn) * k * elt
        return g, order, (f"A+B = {operands / 2**20:.0f} MiB exceed half of {l2_mib:.0f} MiB L2: raster group {g} "
                          f"{order} (one wave's panels {panel / 2**20:.1f} MiB)")

    # ---- the model ------------------------------------------------------------------------------
    def _occupancy(self, f: dict, stages: int | None = None) -> int:
        hw = self.hw
        stages = f["stages"] if stages is None else stages
        smem = stages * stage_bytes(f)
        threads = f["num_warps"] * 32
        regs = min(hw.regs_per_thread, f["block_m"] * f["block_n"] // threads + REGISTER_RESERVE)
        return max(1, min(4, hw.smem_per_sm // (smem + 1024), 2048 // threads, hw.regs_per_sm // (threads * regs)))

    def model_time_us(self, problem: GemmProblem, f: dict) -> float:
        """The time the rules rank a spec (given as its fields) by: the analytical model times what
        a GPU of the arch measured beyond it (_measured_factor). benchmarks/model_agreement.py checks
        this ranking against the recorded benchmark tables."""
        f = {"arch": self.arch, **f}  # the proposer's target where the fields do not name one
        return self._model_us(problem, f) * _measured_factor(problem, f)

    def _model_us(self, problem: GemmProblem, f: dict) -> float:
        """The analytical model's time; its constants are rows of factors.csv (the values and why)."""
        hw, tp = self.hw, self.throughput
        fx = factors(f.get("arch", self.arch), f["backend"])
        m, n, k = problem.shape
        bm, bn, bk, w = f["block_m"], f["block_n"], f["block_k"], f["num_warps"]
        split = f["split_k"]
        # a cluster takes whole clusters of CTA slots: where the grid's side does not divide by the
        # cluster's, the last cluster's other CTA has no tile (the rules propose no such cluster, but
        # recorded tables hold some)
        cm, cn = f.get("cluster_m", 1), f.get("cluster_n", 1)
        tiles = _cdiv(_cdiv(m, bm), cm) * cm * _cdiv(_cdiv(n, bn), cn) * cn
        kb_split = _cdiv(_cdiv(k, bk), split)
        occ = self._occupancy(f)
        slots = hw.sm_count * occ
        ctas = tiles * split
        waves = _cdiv(ctas, slots)
        stream_k = f["decomposition"] == "stream_k"
        if stream_k:
            waves = tiles / slots  # the last wave's k-iterations are spread over every SM

        flops_per_us = tp.tflops * 1e6 / hw.sm_count  # per SM
        l2_per_us = tp.l2_tbs * 1e6 / hw.sm_count
        consumer = w - PRODUCER_WARPS if f["warp_specialization"] != "none" else w
        # a warpgroup (4 warps) keeps the tensor cores fed, but a warp needs at least a 16x16
        # piece of the tile: extra warps on a small tile only duplicate work
        useful = min(consumer, max(1, bm * bn // 256))
        eff = min(1.0, useful / 4)
        acc = bm * bn // (consumer * 32)
        if acc > 128:
            eff *= fx["register_pressure_eff"]
        if hw.has_tma and bm < 64:
            eff *= fx["mma_sync_eff"]
        compute_step = 2 * bm * bn * bk / flops_per_us / eff
        load_step = (bm + bn) * bk * OPERAND_BYTES / l2_per_us
        step = max(compute_step, load_step) + fx["step_overhead_us"]
        if f["load_path"] == "tma":
            step *= fx["tma_step"]
        hide = fx.get(f"hide_stages_{f['stages']}", 1.0)
        if occ >= 2:
            hide = 1 + (hide - 1) / 2  # a second resident block hides latency too
        main = kb_split * step * hide * occ
        # the first stage's load; the others land while it is computed (counting every stage here
        # made deep pipelines look slower than they measured)
        prologue = fx["prologue_us"] + load_step
        out_bytes = 4 if split > 1 else DTYPE_BYTES[problem.c_dtype]
        epilogue = bm * bn * out_bytes / l2_per_us * occ
        if f["persistent"]:
            total = waves * main + (waves - 1) * epilogue * fx["persistent_epilogue_share"] + epilogue + prologue
        else:
            total = waves * (main + epilogue + prologue + fx["wave_overhead_us"])
        dram_per_us = tp.dram_tbs * 1e6
        mn_bytes = m * n * DTYPE_BYTES[problem.c_dtype]
        floor = ((m * k + k * n) * DTYPE_BYTES[problem.dtype] + mn_bytes) / dram_per_us
        total = max(total, floor)
        if stream_k:  # an owner reads its peers' fp32 partial tiles one after another through L2
            per_cta = max(1.0, tiles * kb_split / hw.sm_count if tiles < hw.sm_count else kb_split)
            peers = max(1, _cdiv(kb_split, int(per_cta)))
            total += peers * (bm * bn * 4 / l2_per_us + fx["stream_k_peer_us"])
        if split > 1:
            partial = split * m * n * 4
            if f["split_k_reduction"] == "workspace":
                total += 2 * partial / dram_per_us + fx["workspace_reduction_us"]  # write + read, a second kernel
            elif f["split_k_reduction"] == "serial":
                # the same bytes; the tile's last slice sums them in the same kernel, no second launch
                total += 2 * partial / dram_per_us + fx["serial_reduction_us"]
            else:
                # read-modify-write atomics on the output, zeroing it first, and contention on
                # the same lines; ranked after the fp32 workspace, which also rounds only once
                total += 2 * partial / dram_per_us + fx["atomic_reduction_us"]
        return total + tp.launch_us


def split_k_reduction_first(backend: str, arch: str) -> str | None:
    """The split-K reduction the model ranks first for backend on arch, or None where the backend splits K in
    none: of the reductions it allows, the one of least <reduction>_reduction_us (factors.csv). The model charges
    each the same bytes, so only that constant tells them apart."""
    caps = get_backend(backend).capabilities
    pref = PREFERENCES.get(backend, DEFAULT_PREFERENCES)
    allowed = space.prefer(caps, "split_k_reduction", arch, pref.split_k_reduction)
    fx = factors(arch, backend)
    return min(allowed, key=lambda r: fx[f"{r}_reduction_us"]) if allowed else None


def _family_of(f: dict) -> tuple:
    return (f["backend"], f["block_m"], f["block_n"], f["block_k"], f["num_warps"], f["stages"], f["load_path"])


def _best_per_tile(pool: list[_Candidate], keep: int) -> list[_Candidate]:
    """The `keep` fastest variants of each tile, fastest first (stable, so deterministic)."""
    pool = sorted(pool, key=lambda c: c.time_us)
    count: Counter = Counter()
    out = []
    for c in pool:
        if count[c.tile] < keep:
            count[c.tile] += 1
            out.append(c)
    return out
