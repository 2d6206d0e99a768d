"""cudal2.tune_model on CPU: the GEMMs of a model's nn.Linear layers are found, searched and put in
the table cudal2.linear reads (a recorded runner stands in for the GPU: its numbers are synthetic)."""

import torch

import cudal2
from cudal2.model_tuning import linear_gemms
from cudal2.tuner.recorded import RecordedRunner


class TwoLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(64, 256, bias=False)
        self.down = torch.nn.Linear(256, 64)
        self.again = torch.nn.Linear(64, 256, bias=False)  # the same GEMM as up
        self.skip = torch.nn.Linear(64, 64).float()  # fp32: cudal2.linear leaves it to torch

    def forward(self, x):
        return self.down(self.up(x)) + self.again(x)[..., :64] + self.skip(x.float()).half()


def model():
    m = TwoLayer().half()
    m.skip.float()
    return m


def test_the_gemms_of_every_fp16_linear_layer_are_found_once_each():
    gemms = linear_gemms(model(), torch.randn(2, 3, 64, dtype=torch.float16))
    assert [(g.problem.m, g.problem.n, g.problem.k, g.problem.layout, g.problem.epilogue.bias) for g in gemms] == [
        (6, 256, 64, "NT", False), (6, 64, 256, "NT", True)]
    assert gemms[0].layers == ("up", "again") and gemms[0].calls == 2
    assert all(not h for m in model().modules() for h in (m._forward_pre_hooks,))  # hooks are removed


def test_tune_model_searches_each_gemm_and_fills_the_table(tmp_path):
    runner = RecordedRunner()
    try:
        table = cudal2.tune_model(model(), torch.randn(6, 64, dtype=torch.float16), budget=3, proposer="learned",
                                  store=tmp_path / "s.db", runner=runner, progress=False)
        labels = {e.problem.label() for e in table}
        assert labels == {"6x256x64-float16-NT", "6x64x256-float16-NT-a1b0-bias"}
        assert len(runner.calls) >= 6  # three measurements per GEMM (and the confirmation rounds)
        assert cudal2.ops.tuned_table() is table  # what cudal2.linear uses from now on
    finally:
        cudal2.set_table(None)
