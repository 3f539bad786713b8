"""Boundary coverage: exact BoundCov / SActCov on a hand-set network, hooks, curves, plot."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from lingtest.tasks.capabilities.coverage import (
    CURVE_COLUMNS,
    activations,
    boundcov,
    bounds,
    bounds_from_activations,
    coverage_curve,
    default_layers,
    sactcov,
)
from lingtest.tasks.capabilities.coverage_report import plot_coverage_curve
from lingtest.tasks.core.errors import LingtestError


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


# --------------------------------------------------------------------------- like-for-like

def test_lc_map_names_released_mft_tests(mirror):
    """ALiCT's LC→test map points at MFT tests that exist in CheckList's released suite."""
    import gzip
    import json

    from lingtest.tasks.capabilities.coverage import LC_TO_CHECKLIST

    path = mirror / "checklist" / "sentiment_suite.json.gz"  # the mirror fixture: no skip
    types = {t["name"]: t["type"] for t in json.loads(gzip.decompress(path.read_bytes()))}
    assert sorted(LC_TO_CHECKLIST) == sorted(f"LC{i}" for i in range(1, 12))
    assert {types.get(test) for test in LC_TO_CHECKLIST.values()} == {"MFT"}


def test_paired_coverage_uses_the_smaller_size_of_each_pair():
    from lingtest.tasks.capabilities.coverage import PAIR_COLUMNS, paired_coverage

    b, suites = curve_inputs()
    ours, theirs = suites["s2lct"], suites["checklist"]
    table = paired_coverage(b, {"LC1": ("t1", ours, theirs[:12]),
                                "LC2": ("t2", ours[:7], theirs),
                                "LC3": ("t3", ours[:0], theirs)}, seed=2, repeats=2)
    assert list(table.columns) == PAIR_COLUMNS
    assert table["capability"].tolist() == ["LC1", "LC2"]  # an empty side has no comparison
    assert table["size"].tolist() == [12, 7]
    assert table[["s2lct_texts", "checklist_texts"]].values.tolist() == [[40, 12], [7, 30]]
    # the smaller side is used whole
    lc1, lc2 = table.iloc[0], table.iloc[1]
    assert lc1["checklist_boundcov"] == pytest.approx(boundcov(b, theirs[:12]))
    assert lc2["s2lct_sactcov"] == pytest.approx(sactcov(b, ours[:7]))


def test_length_summary_quartiles():
    from lingtest.tasks.capabilities.coverage_report import LENGTH_COLUMNS, length_summary

    table = length_summary({"a": ["one", "one two", "one two three", "one two three four"],
                            "b": []}).set_index("suite")
    assert list(table.reset_index().columns) == LENGTH_COLUMNS
    assert table.loc["a", ["texts", "mean", "min", "median", "max"]].tolist() == [
        4, 2.5, 1, 2.5, 4]
    assert table.loc["a", "p25"] == 1.75 and table.loc["b", "texts"] == 0


def test_coverage_pairs_sample_the_test_to_the_capability_size():
    from lingtest.tasks.capabilities.coverage import LC_TO_CHECKLIST
    from lingtest.tasks.capabilities.model_tasks import coverage_pairs

    suite = pd.DataFrame({"capability": ["LC1"] * 3 + ["LC99"],
                          "text": ["a b", "a b", "c d", "x"]})
    checklist = pd.DataFrame({"test": [LC_TO_CHECKLIST["LC1"]] * 5 + ["other"],
                              "texts": [[f"t{i}"] for i in range(5)] + [["o"]]})
    pairs = coverage_pairs(suite, checklist, ["LC1", "LC2", "LC99"], seed=4)
    assert list(pairs) == ["LC1"]  # LC2 has no cases, LC99 no CheckList test
    test, ours, theirs = pairs["LC1"]
    assert test == "neutral words in context" and ours == ["a b", "c d"]
    assert len(theirs) == 2 and set(theirs) <= {f"t{i}" for i in range(5)}
    assert coverage_pairs(suite, checklist, ["LC1"], seed=4)["LC1"] == pairs["LC1"]


def test_coverage_task_measures_a_hub_checkpoint(tmp_path):
    """Any model with hidden states gets curves, not only the fine-tuned MiniLM: here a tiny
    randomly initialised BERT classifier saved as a Hugging Face checkpoint."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from lingtest.tasks.capabilities import coverage
    from lingtest.tasks.capabilities.model_tasks import coverage_curve as coverage_task
    from lingtest.tasks.capabilities.model_tasks import has_hidden_states, neuron_bounds
    from lingtest.tasks.models import registry
    from lingtest.tasks.models.sentiment import load_sentiment_model

    minilm = registry.resolve("sentence-transformers/all-MiniLM-L6-v2", "encoder").require()
    config = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=8, num_labels=2)
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(minilm.path).save_pretrained(tmp_path)
    model = load_sentiment_model(str(tmp_path))
    assert has_hidden_states(model)
    train = ["a fine film", "a dull film", "the plot is thin", "good acting"]
    suites = {"S²LCT": ["not a fine film at all", "what a film", "dull"],
              "CheckList": ["I love it", "I hate it"]}
    pairs = {"LC2": ("Sentiment-laden words in context", ["what a film", "dull"],
                     ["I love it", "I hate it"])}
    low_high = neuron_bounds.fn(model, train, None)
    curve, by_lc, info = coverage_task.fn(model, low_high, suites, pairs, [1, 5], 2, 0)
    assert set(curve["model_id"]) == {tmp_path.name} and sorted(curve["size"].unique()) == [1, 2]
    assert by_lc[["capability", "size"]].values.tolist() == [["LC2", 2]]
    assert info["neurons"] == 16 and info["layers"] == 2
    assert curve[["boundcov", "sactcov"]].stack().between(0, 1).all()

    # only the drawn texts run, and a text's flags do not depend on which others run: the
    # curve equals the one over every text's flags
    texts = [f"film number {i} was {'good' if i % 2 else 'dull'}" + " indeed" * (i % 4)
             for i in range(60)]
    big = {"S²LCT": texts[:12], "CheckList": texts[5:]}
    sampled, _, info = coverage_task.fn(model, low_high, big, {}, [3, 6], 2, 1)
    assert info["texts run (drawn or paired)"] < len(set(texts))
    every = {name: coverage.text_corner_flags(model.model, model.tokenizer, t, low_high)
             for name, t in big.items()}
    full = coverage.coverage_curve(low_high, every, [3, 6, 12], 1, 2)
    pd.testing.assert_frame_equal(sampled.drop(columns="model_id"), full, check_exact=True)
    alone = [coverage.text_corner_flags(model.model, model.tokenizer, [t], low_high)
             for t in texts[5:9]]
    together = every["CheckList"].take([0, 1, 2, 3])
    assert np.array_equal(np.concatenate([f.upper for f in alone]), together.upper)
    assert np.array_equal(np.concatenate([f.lower for f in alone]), together.lower)


def test_flag_rows_refuse_a_text_without_flags():
    from lingtest.tasks.capabilities.coverage import CornerFlags, FlagRows

    b, suites = curve_inputs()
    rows = FlagRows(CornerFlags.of(b, suites["s2lct"][:2]), np.array([1, -1, 0]))
    assert len(rows) == 3 and rows.take([2, 0]).upper.tolist() == CornerFlags.of(
        b, suites["s2lct"][[0, 1]]).upper.tolist()
    with pytest.raises(LingtestError, match="not computed"):
        rows.take([1])


def test_corner_flags_give_the_same_coverage_as_activations():
    """Bit-packed flags (streamed batch by batch) reproduce boundcov / sactcov exactly,
    including a neuron count that is not a multiple of 8."""
    from lingtest.tasks.capabilities.coverage import CornerFlags, corner_flags

    b, suites = curve_inputs()  # 6 neurons
    acts = suites["s2lct"]
    flags = CornerFlags.of(b, acts)
    assert flags.upper.shape == (40, 1)
    for rows in ([0], [3, 7, 11], list(range(40))):
        assert flags.take(rows).coverage() == pytest.approx(
            (boundcov(b, acts[rows]), sactcov(b, acts[rows])))
    net = hand_set_net()
    streamed = corner_flags(net, [torch.tensor([[2.0, 0.5]]), torch.tensor([[0.5, -1.0]])],
                            bounds(net, [TRAIN]))
    assert len(streamed) == 2 and streamed.coverage() == pytest.approx((4 / 6, 2 / 3))
    assert CornerFlags.concat([], 6).coverage() == (0.0, 0.0)
