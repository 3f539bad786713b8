"""Parameter counts and download sizes of the models a run loads, read before any weight is:
exact from a model's ``config.json`` when its files are on this machine (the model built on
PyTorch's meta device, which allocates nothing), else from the architecture of the hub ids
the paper profile names (``HUB_ARCHITECTURE``). ``lingtest plan`` (``flows/run_estimate.py``)
says from these what a run downloads and what its model calls cost.

Download size = parameters × bytes per parameter of the checkpoint's dtype (float32 unless
the checkpoint is known to be stored otherwise); tokenizer and config files (≤ 2 MB) and a
classifier's head (≤ 0.6 M parameters) are left out.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from lingtest.tasks.core.errors import LingtestError

BYTES_PER_PARAMETER = {"float32": 4, "float16": 2, "bfloat16": 2}
BASE_CONFIGS = "the base checkpoint's config.json as published (its hyperparameters below)"


@dataclass(frozen=True)
class Architecture:
    """A published architecture: its transformers config class and the settings that differ
    from that class's defaults, the checkpoint's dtype, and where the figures come from."""

    config: str
    settings: dict = field(default_factory=dict)
    dtype: str = "float32"
    source: str = BASE_CONFIGS


# The architectures the paper profile's hub ids are built on. The settings are those of each
# base checkpoint's config.json (bert-base-uncased: 12 layers, hidden 768, 12 heads, FFN 3072,
# vocabulary 30522; the others as written); BertConfig() is bert-base-uncased itself.
ARCHITECTURES: dict[str, Architecture] = {
    "bert-base-uncased": Architecture("BertConfig"),
    "bert-base-cased": Architecture("BertConfig", {"vocab_size": 28996}),
    "bert-large-uncased": Architecture("BertConfig", {
        "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
        "intermediate_size": 4096}),
    "roberta-base": Architecture("RobertaConfig", {
        "vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1}),
    "roberta-large": Architecture("RobertaConfig", {
        "vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1,
        "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
        "intermediate_size": 4096}),
    "albert-base-v2": Architecture("AlbertConfig", {
        "embedding_size": 128, "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30000}),
    "distilbert-base-uncased": Architecture("DistilBertConfig"),
    "electra-small-discriminator": Architecture("ElectraConfig", {
        "embedding_size": 128, "hidden_size": 256, "num_hidden_layers": 12,
        "num_attention_heads": 4, "intermediate_size": 1024}),
    # Smith123/tiny-bert-sst2-distilled_L6_H128: 6 layers and hidden 128 from its id; heads 2
    # and FFN 512 as Google's BERT miniatures of that shape (bert_uncased_L-6_H-128_A-2).
    "bert-L6-H128": Architecture("BertConfig", {
        "hidden_size": 128, "num_hidden_layers": 6, "num_attention_heads": 2,
        "intermediate_size": 512}, source="its id (L6, H128) and Google's BERT miniature of "
        "that shape (A2, FFN 512)"),
    # SmolLM2-135M-Instruct's config.json (stored in bfloat16 on the hub); the packaged GGUF
    # holds the same model.
    "smollm2-135m": Architecture("LlamaConfig", {
        "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
        "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "tie_word_embeddings": True, "max_position_embeddings": 8192}, dtype="bfloat16"),
    # T5 v1.0 and Flan-T5 (T5 v1.1 layout: gated FFN, untied head), as their config.json.
    "t5-small": Architecture("T5Config", {"d_model": 512, "d_ff": 2048, "num_layers": 6,
                                          "num_heads": 8, "vocab_size": 32128}),
    "t5-base": Architecture("T5Config", {"d_model": 768, "d_ff": 3072, "num_layers": 12,
                                         "num_heads": 12, "vocab_size": 32128}),
    "flan-t5-small": Architecture("T5Config", {
        "d_model": 512, "d_ff": 1024, "d_kv": 64, "num_layers": 8, "num_decoder_layers": 8,
        "num_heads": 6, "vocab_size": 32128, "feed_forward_proj": "gated-gelu",
        "tie_word_embeddings": False}),
    "flan-t5-base": Architecture("T5Config", {
        "d_model": 768, "d_ff": 2048, "d_kv": 64, "num_layers": 12, "num_decoder_layers": 12,
        "num_heads": 12, "vocab_size": 32128, "feed_forward_proj": "gated-gelu",
        "tie_word_embeddings": False}),
    "flan-t5-large": Architecture("T5Config", {
        "d_model": 1024, "d_ff": 2816, "d_kv": 64, "num_layers": 24, "num_decoder_layers": 24,
        "num_heads": 16, "vocab_size": 32128, "feed_forward_proj": "gated-gelu",
        "tie_word_embeddings": False}),
}

# Each hub id the paper profile names (params/paper.yaml), on its architecture: the base
# model its id (and, where tests/standin_hub.py records one, its model card or public code)
# names; a fine-tune keeps its base's encoder, adding a head of at most 0.6 M parameters.
HUB_ARCHITECTURE: dict[str, str] = {
    "bert-base-uncased": "bert-base-uncased",
    "roberta-base": "roberta-base",
    "albert-base-v2": "albert-base-v2",
    "distilbert-base-uncased": "distilbert-base-uncased",
    "HuggingFaceTB/SmolLM2-135M-Instruct": "smollm2-135m",
    "distilbert-base-uncased-finetuned-sst-2-english": "distilbert-base-uncased",
    "textattack/bert-base-uncased-SST-2": "bert-base-uncased",
    "textattack/roberta-base-SST-2": "roberta-base",
    "textattack/albert-base-v2-SST-2": "albert-base-v2",
    "textattack/distilbert-base-uncased-SST-2": "distilbert-base-uncased",
    "textattack/bert-base-uncased-imdb": "bert-base-uncased",
    "textattack/roberta-base-imdb": "roberta-base",
    "textattack/albert-base-v2-imdb": "albert-base-v2",
    "textattack/distilbert-base-uncased-imdb": "distilbert-base-uncased",
    "textattack/bert-base-uncased-MRPC": "bert-base-uncased",
    "textattack/roberta-base-MRPC": "roberta-base",
    "textattack/albert-base-v2-MRPC": "albert-base-v2",
    "cardiffnlp/twitter-roberta-base-sentiment": "roberta-base",
    "cardiffnlp/twitter-roberta-base-sentiment-latest": "roberta-base",
    "lvwerra/distilbert-imdb": "distilbert-base-uncased",
    "aychang/roberta-base-imdb": "roberta-base",
    "Wakaka/bert-finetuned-imdb": "bert-base-cased",
    "monologg/electra-small-finetuned-imdb": "electra-small-discriminator",
    "bert-base-cased-finetuned-mrpc": "bert-base-cased",
    "gchhablani/bert-base-cased-finetuned-mrpc": "bert-base-cased",
    "gchhablani/bert-base-cased-finetuned-sst2": "bert-base-cased",
    "Alireza1044/albert-base-v2-sst2": "albert-base-v2",
    "ArnavL/roberta-base-imdb-0": "roberta-base",
    "Intel/bert-base-uncased-mrpc": "bert-base-uncased",
    "Motahar/distilbert-sst2-mahtab": "distilbert-base-uncased",
    "Smith123/tiny-bert-sst2-distilled_L6_H128": "bert-L6-H128",
    "assemblyai/bert-large-uncased-sst2": "bert-large-uncased",
    "aviator-neural/bert-base-uncased-sst2": "bert-base-uncased",
    "aypan17/roberta-base-imdb": "roberta-base",
    "cambridgeltl/sst_bert-base-uncased": "bert-base-uncased",
    "eugenecamus/distilbert-imdb-demo": "distilbert-base-uncased",
    "fabriceyhc/bert-base-uncased-imdb": "bert-base-uncased",
    "howey/bert-base-uncased-sst2": "bert-base-uncased",
    "howey/roberta-large-sst2": "roberta-large",
    "lvwerra/bert-imdb": "bert-base-uncased",
    "nateraw/bert-base-uncased-imdb": "bert-base-uncased",
    "ncduy/roberta-imdb-sentiment-analysis": "roberta-base",
    "sasha/autotrain-roberta-base-imdb-1275248777": "roberta-base",
    "sasha/autotrain-roberta-base-imdb-1275248779": "roberta-base",
    "wrmurray/roberta-base-finetuned-imdb": "roberta-base",
    "yoshitomo-matsubara/bert-large-uncased-mrpc": "bert-large-uncased",
    "t5-small": "t5-small", "google-t5/t5-small": "t5-small",
    "t5-base": "t5-base", "google-t5/t5-base": "t5-base",
    "google/flan-t5-small": "flan-t5-small", "google/flan-t5-base": "flan-t5-base",
    "google/flan-t5-large": "flan-t5-large",
    # KomMKonLLM's T5 backend (its t5-flask-app loads it): t5-base fine-tuned on TriviaQA
    "deep-learning-analytics/triviaqa-t5-base": "t5-base",
}
# Architectures whose tokenizer has bert-base-uncased's vocabulary (the packaged MiniLM's).
UNCASED_BERT_VOCABULARY = frozenset({"bert-base-uncased", "bert-large-uncased",
                                     "distilbert-base-uncased", "electra-small-discriminator",
                                     "bert-L6-H128"})


@dataclass(frozen=True)
class Size:
    """A model's weights: how many, how many a token passes through, and how stored."""

    parameters: int   # every weight of the base model (AutoModel), embeddings included
    compute: int      # weights one token is multiplied by: embeddings left out, ALBERT's
    #                   shared layer counted once per layer it serves
    lm_head: int      # vocabulary × hidden: the output layer a masked or causal LM adds
    hidden: int
    vocab: int
    dtype: str
    source: str       # "config.json" (exact) or the architecture it was taken from
    tokenizer: str | None = None  # a folder holding its tokenizer, when on this machine

    @property
    def download_bytes(self) -> int:
        return self.parameters * BYTES_PER_PARAMETER.get(self.dtype, 4)


def _hidden(config) -> int:
    for name in ("hidden_size", "d_model", "dim", "n_embd"):
        if getattr(config, name, None):
            return int(getattr(config, name))
    return 0


def counts(config) -> tuple[int, int, int]:
    """(parameters, compute, lm_head) of ``AutoModel.from_config(config)`` built on the meta
    device: no memory is allocated and no weight is read."""
    import torch
    from torch import nn

    from lingtest.tasks.models.registry import transformers_classes

    (auto_model,) = transformers_classes("AutoModel")
    with torch.device("meta"):
        model = auto_model.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    tables = {id(m.weight): m.weight for m in model.modules() if isinstance(m, nn.Embedding)}
    compute = total - sum(weight.numel() for weight in tables.values())  # T5 shares one
    groups = getattr(config, "num_hidden_groups", None)
    if groups:  # ALBERT: one layer's weights serve every layer of its group
        shared = sum(p.numel() for name, p in model.named_parameters()
                     if "albert_layer_groups" in name)
        compute += shared * (config.num_hidden_layers // groups - 1)
    head = int(config.vocab_size) * _hidden(config)
    # an untied head is stored too (transformers 5 keeps T5 v1.1's as scale_decoder_outputs)
    if False in (getattr(config, "tie_word_embeddings", True),
                 getattr(config, "scale_decoder_outputs", True)):
        total += head
    return int(total), int(compute), head


@lru_cache(maxsize=None)
def architecture_size(name: str) -> Size:
    """The size of one of ``ARCHITECTURES``."""
    import transformers

    arch = ARCHITECTURES[name]
    config = getattr(transformers, arch.config)(**arch.settings)
    total, compute, head = counts(config)
    return Size(total, compute, head, _hidden(config), int(config.vocab_size), arch.dtype,
                f"{name}: {arch.source}")


def config_folder(path: str | None) -> Path | None:
    """The folder holding a model's config.json (a sentence-transformers model keeps it in
    its Transformer module's folder), or None."""
    if not path or not Path(path).is_dir():
        return None
    from lingtest.tasks.models.registry import transformer_dir

    folder = Path(path)
    for candidate in (folder, transformer_dir(folder)):
        if (candidate / "config.json").is_file():
            return candidate
    return None


@lru_cache(maxsize=None)
def _config_size(folder: str) -> Size:
    from lingtest.tasks.models.registry import transformers_classes

    (auto_config,) = transformers_classes("AutoConfig")
    config = auto_config.from_pretrained(folder)
    total, compute, head = counts(config)
    stored = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    dtype = str(stored.get("torch_dtype") or stored.get("dtype") or "float32")
    tokenizer = folder if any((Path(folder) / name).is_file() for name in (
        "tokenizer.json", "vocab.txt", "spiece.model", "vocab.json")) else None
    return Size(total, compute, head, _hidden(config), int(config.vocab_size),
                dtype if dtype in BYTES_PER_PARAMETER else "float32", "config.json", tokenizer)


def model_size(model_id: str, path: str | None = None) -> Size | None:
    """A model's size: from the config.json under ``path`` (or a GGUF model's float32 copy
    that lingtest converted earlier) when there is one, else from ``HUB_ARCHITECTURE``;
    None when neither knows it."""
    folder = config_folder(path) or _converted_copy(model_id, path)
    if folder is not None:
        return _config_size(str(folder))
    name = HUB_ARCHITECTURE.get(model_id)
    return architecture_size(name) if name else None


def _converted_copy(model_id: str, path: str | None) -> Path | None:
    """The float32 copy ``lingtest.tasks.models.causal_lm`` made of a packaged GGUF model, if made."""
    if not path:
        return None
    from lingtest.tasks.models.causal_lm import converted_dir
    from lingtest.tasks.models.registry import resolve

    try:
        res = resolve(model_id, "causal_lm", offline=True)
    except LingtestError:  # an id the registry does not know: no copy
        return None
    folder = converted_dir(res) if res.source == "package" else None
    return folder if folder is not None and (folder / "config.json").is_file() else None
