import math

import pytest

from cudal2.search.aggregates import aggregate, markdown


def test_aggregate_statistics():
    a = aggregate([2.0, 0.5, 1.0, None, 4.0])
    assert a.n == 4 and a.missing == 1
    assert a.geomean == pytest.approx(math.exp((math.log(2) + math.log(0.5) + 0 + math.log(4)) / 4))
    assert a.mean == pytest.approx(7.5 / 4) and a.median == pytest.approx(1.5)
    assert (a.min, a.max, a.slower) == (0.5, 4.0, 1)
    assert aggregate([None, None]) is None and aggregate([]) is None
    with pytest.raises(ValueError, match="positive"):
        aggregate([1.0, 0.0])


def test_markdown_table():
    text = markdown({"torch": aggregate([1.1, 0.9]), "cublaslt_autotune": None})
    assert "| torch | 2 | 0.995 | 1.000 | 1.000 | 0.900 | 1.100 | 1 |" in text
    assert "| cublaslt_autotune | 0 |" in text
