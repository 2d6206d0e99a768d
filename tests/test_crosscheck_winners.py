"""benchmarks/crosscheck_winners.py's retime report, on the CPU with rows as a GPU run writes them."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import crosscheck_winners  # noqa: E402


def _run(uuid, rows):
    return {"gpu": "NVIDIA H200", "date": "2026-11-29", "command": "python benchmarks/crosscheck_winners.py x.md",
            "versions": "torch 2.11", "gpu_uuid": uuid, "rows": rows}


def test_retime_report_gives_both_geomeans_and_whether_the_machine_changed():
    earlier = _run("GPU-a", [{"shape": "1x2x3-float16-NT", "spec": "s", "eval_layer": 1.0},
                             {"shape": "4x5x6-float16-NT", "spec": "t", "eval_layer": 1.21}])
    now = _run("GPU-b", [{"shape": "1x2x3-float16-NT", "spec": "s", "earlier": 1.0, "now": 1.0},
                         {"shape": "4x5x6-float16-NT", "spec": "t", "earlier": 1.21, "now": 1.1}])
    md = crosscheck_winners.retime_markdown(now, earlier)
    assert "another machine" in md
    assert "earlier 1.1000, now 1.0488, ratio 0.9535 (within 1%: no)" in md
    now["gpu_uuid"] = "GPU-a"
    now["rows"][1]["now"] = 1.2
    md = crosscheck_winners.retime_markdown(now, earlier)
    assert "the same machine" in md and "(within 1%: yes)" in md


def test_retime_report_keeps_a_winner_that_failed_as_a_row_without_a_ratio():
    earlier = _run("GPU-a", [{"shape": "1x2x3-float16-NT", "spec": "s", "eval_layer": 1.0}])
    now = _run("GPU-a", [{"shape": "1x2x3-float16-NT", "spec": "s", "earlier": 1.0, "status": "wrong: max error"}])
    md = crosscheck_winners.retime_markdown(now, earlier)
    assert "wrong: max error" in md and "Geomean" not in md


def test_a_row_label_names_its_problem_again():
    from cudal2 import GemmProblem

    p = GemmProblem(m=33, n=6144, k=4096, layout="NT")
    assert crosscheck_winners.problem_of(p.label()) == p


def test_paired_timers_never_put_one_contender_first_after_each_pause():
    """Two contenders taking turns (_rounds.interleaved): every round replays floor, A, B, floor or floor, B, A,
    floor, whatever number of warm-up rounds ran before restart(); each timer returns its own replay less the
    floor's, per replay."""
    from _rounds import interleaved

    replayed, ms = [], {"floor": 10.0, "A": 13.0, "B": 12.0}

    def replay_ms(graph):
        replayed.append(graph)
        return ms[graph]

    timers, restart = crosscheck_winners.paired_timers({"A": "A", "B": "B"}, "floor", replay_ms, per_replay=2)
    for warmup in (0, 1, 2, 3):
        for _ in range(warmup):
            for timer in timers.values():
                timer()
        restart()
        replayed.clear()
        got = interleaved(timers, 4)
        assert got == {"A": [1.5] * 4, "B": [1.0] * 4}
        rounds = [replayed[i:i + 4] for i in range(0, 16, 4)]
        assert rounds == [["floor", "A", "B", "floor"], ["floor", "B", "A", "floor"]] * 2, (warmup, rounds)
