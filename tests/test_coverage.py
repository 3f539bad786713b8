"""Boundary coverage: exact BoundCov / SActCov on a hand-set network, hooks, curves, plot."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from tasks.capabilities.coverage import (
    CURVE_COLUMNS,
    activations,
    boundcov,
    bounds,
    bounds_from_activations,
    coverage_curve,
    default_layers,
    plot_coverage_curve,
    sactcov,
)
from tasks.core.errors import LingtestError


def hand_set_net() -> nn.Sequential:
    """Three neurons: x0, x1 and x0 + x1 (no bias)."""
    linear = nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    return nn.Sequential(linear)


TRAIN = torch.tensor([[0.0, 0.0], [1.0, 1.0]])  # bounds: n0 [0,1], n1 [0,1], n2 [0,2]


def test_bounds_are_training_min_and_max():
    low, high = bounds(hand_set_net(), [TRAIN])
    assert low.tolist() == [0.0, 0.0, 0.0]
    assert high.tolist() == [1.0, 1.0, 2.0]
    # the running min/max over several batches equals the bounds of all rows at once
    streamed = bounds(hand_set_net(), [TRAIN[:1], TRAIN[1:]])
    whole = bounds_from_activations(activations(hand_set_net(), [TRAIN]))
    for got, want in zip(streamed, whole):
        np.testing.assert_array_equal(got, want)


def test_exact_boundcov_and_sactcov():
    net = hand_set_net()
    b = bounds(net, [TRAIN])
    above = activations(net, [torch.tensor([[2.0, 0.5]])])     # n0 = 2 > 1, n2 = 2.5 > 2
    below = activations(net, [torch.tensor([[0.5, -1.0]])])    # n1 = -1 < 0, n2 = -0.5 < 0
    inside = activations(net, [torch.tensor([[0.5, 0.5]])])
    assert boundcov(b, inside) == 0.0 and sactcov(b, inside) == 0.0
    assert boundcov(b, above) == pytest.approx(2 / 6)
    assert sactcov(b, above) == pytest.approx(2 / 3)
    assert boundcov(b, below) == pytest.approx(2 / 6)
    assert sactcov(b, below) == 0.0
    both = np.vstack([above, below])
    assert boundcov(b, both) == pytest.approx(4 / 6)
    assert sactcov(b, both) == pytest.approx(2 / 3)
    # reaching a bound exactly is not leaving the range
    on_bound = activations(net, [torch.tensor([[1.0, 1.0]])])
    assert boundcov(b, on_bound) == 0.0


class TokenNet(nn.Module):
    """(batch, tokens, 1) output equal to the input ids: shows the masked token mean."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(1, 1, bias=False)
        with torch.no_grad():
            self.proj.weight.fill_(1.0)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.proj(input_ids.unsqueeze(-1).float())


def test_token_outputs_are_averaged_over_unmasked_tokens():
    batch = {"input_ids": torch.tensor([[1, 3, 100], [4, 4, 4]]),
             "attention_mask": torch.tensor([[1, 1, 0], [1, 1, 1]])}
    net = TokenNet()
    assert activations(net, [batch]).ravel().tolist() == [2.0, 4.0]
    assert not net.proj._forward_hooks, "hooks must be removed after recording"


def test_default_layers_pick_the_ffn_intermediate_of_a_bert_classifier():
    import transformers
    config = transformers.BertConfig(vocab_size=40, hidden_size=8, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=12,
                                     max_position_embeddings=16, num_labels=3)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    layers = default_layers(model)
    assert list(layers) == ["bert.encoder.layer.0.intermediate",
                            "bert.encoder.layer.1.intermediate"]
    batch = {"input_ids": torch.tensor([[2, 5, 7, 0], [2, 9, 0, 0]]),
             "attention_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])}
    acts = activations(model, [batch])
    assert acts.shape == (2, 24)
    # padding must not change a sentence's activations
    alone = activations(model, [{"input_ids": torch.tensor([[2, 9]]),
                                 "attention_mask": torch.tensor([[1, 1]])}])
    np.testing.assert_allclose(acts[1], alone[0], atol=1e-5)


def test_default_layers_fall_back_to_linear_modules():
    net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 3))
    assert list(default_layers(net)) == ["0", "2"]
    assert activations(net, [torch.zeros(5, 2)]).shape == (5, 7)


def curve_inputs() -> tuple:
    rng = np.random.default_rng(0)
    train = rng.normal(size=(50, 6))
    suites = {"s2lct": rng.normal(scale=2.0, size=(40, 6)),
              "checklist": rng.normal(scale=1.0, size=(30, 6))}
    return bounds_from_activations(train), suites


def test_coverage_curve_is_deterministic_for_a_seed():
    b, suites = curve_inputs()
    one = coverage_curve(b, suites, [5, 10, 30], seed=3)
    two = coverage_curve(b, suites, [5, 10, 30], seed=3)
    assert list(one.columns) == CURVE_COLUMNS
    assert len(one) == 6
    pd.testing.assert_frame_equal(one, two)
    # a sample as large as the suite is the whole suite, whatever the seed
    full = one[(one["suite"] == "checklist") & (one["size"] == 30)].iloc[0]
    assert full["boundcov"] == pytest.approx(boundcov(b, suites["checklist"]))
    assert full["sactcov"] == pytest.approx(sactcov(b, suites["checklist"]))
    # a sample's coverage never exceeds that of the whole suite
    s2 = one[one["suite"] == "s2lct"]
    assert (s2["boundcov"] <= boundcov(b, suites["s2lct"]) + 1e-12).all()


def test_coverage_curve_rejects_sizes_beyond_the_smallest_suite():
    b, suites = curve_inputs()
    with pytest.raises(LingtestError, match="30"):
        coverage_curve(b, suites, [31], seed=0)


def test_mismatched_activations_are_an_error():
    b, _ = curve_inputs()
    with pytest.raises(LingtestError, match="6 bounded neurons"):
        boundcov(b, np.zeros((2, 5)))


def test_plot_is_written_atomically(tmp_path):
    b, suites = curve_inputs()
    curve = coverage_curve(b, suites, [5, 10], seed=1)
    target = tmp_path / "fig" / "coverage.png"
    plot_coverage_curve(curve, target, title="coverage")
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in target.parent.iterdir()] == ["coverage.png"]
