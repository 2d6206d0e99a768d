"""The shape sets and their one train/validation split (cudal2/data/shapes/split.json)."""

from __future__ import annotations

from cudal2 import shapes


def test_the_committed_split_is_the_one_drawn_with_the_fixed_seed():
    assert shapes.load_split() == shapes.draw_split()


def test_train_and_validation_are_disjoint_and_cover_each_set():
    split = shapes.load_split()
    for name in shapes.SETS:
        every = {s.label for s in shapes.shapes(name)}
        train, validation = set(split[name]["train"]), set(split[name]["validation"])
        assert not train & validation
        assert train | validation == every
        assert 0.2 < len(validation) / len(every) < 0.3


def test_serving_weights_are_never_on_both_sides():
    """A validation layer's weight (N, K) is seen by no fit at any token count."""
    train = {(s.n, s.k) for s in shapes.shapes("serving", "train")}
    validation = {(s.n, s.k) for s in shapes.shapes("serving", "validation")}
    assert train and validation and not train & validation


def test_serving_shapes_are_nn_linear_layers_of_the_named_models():
    serving = shapes.serving_shapes()
    assert all(s.layout == "NT" for s in serving)
    assert {s.m for s in serving} == set(shapes.token_counts()) and 1 in {s.m for s in serving}
    assert any(s.m % 2 for s in serving if s.m > 1)  # odd token counts too
    layers = shapes.model_layers()
    assert layers["Llama-3-8B"] == {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
                                    "down": (4096, 14336), "lm_head": (128256, 4096)}
    by_label = {s.label: s for s in serving}
    assert by_label["1x6144x4096-float16-NT"].where == "Llama-3-8B qkv"
    assert len(by_label) == len(serving)  # each shape once


def test_grid_is_the_1000_shapes_and_every_shape_is_a_valid_problem():
    grid = shapes.grid_shapes()
    assert len(grid) == 1000 and len({s.label for s in grid}) == 1000
    for s in grid[::97] + shapes.serving_shapes()[::53]:
        p = s.problem()
        assert p.label() == s.label
