"""A local causal LM (offline: SmolLM2-135M-Instruct, or Gemma 3 270M, from a packaged GGUF)
behind one small interface.

Used for greedy answers (consistency testing), for whole-sentence log-probabilities and
next-word proposals (the offline substitute for BERT fill-mask in capability testing).
Loading the GGUF costs 20–40 s (transformers parses it and de-quantises to float32), so
``load_causal_lm`` keeps one instance per (id, device, offline) per process (and one per
engine: ``lingtest.tasks.models.lm_engines``), and the first load in any process writes the
de-quantised weights as a safetensors copy (``converted_dir``) that later processes read in
under a second, bit for bit the same model.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.io import held_flock
from lingtest.tasks.models.encoders import pick_device
from lingtest.tasks.models.json_stop import JSONAnswerStop, StoppingCriteriaList, json_end, looping
from lingtest.tasks.models.registry import (Resolution, assemble_gguf, hub_offline, lingtest_cache,
                                   loaded_revision, resolve, transformers_classes)

log = logging.getLogger(__name__)
_CACHE: dict[tuple[str, str, bool], "CausalLM"] = {}
_CACHE_LOCK = threading.Lock()


def json_answers(model_id: str, texts: list[str], at_cap: list[bool],
                 max_new_tokens: int) -> list[str]:
    """Each generated text cut just past its complete JSON answer (``json_end``), with the
    rows that looped or hit the cap unfinished (``at_cap``: its last token was neither EOS
    nor padding) logged; shared by every engine, so their answers are cut alike."""
    ends = [json_end(text) for text in texts]
    looped = [end is None and looping(text) for end, text in zip(ends, texts)]
    capped = sum(end is None and not loop and cap
                 for end, loop, cap in zip(ends, looped, at_cap))
    if sum(looped):
        log.info("%s: %d of %d answers stopped in a repetition loop",
                 model_id, sum(looped), len(texts))
    if capped:  # prose or a JSON value that never closes
        log.warning("%s: %d of %d answers reached max_new_tokens=%d unfinished",
                    model_id, capped, len(texts), max_new_tokens)
    return [text[:end or len(text)] for text, end in zip(texts, ends)]


class CausalLM:
    """Greedy generation, text scoring and next-word candidates from one causal LM."""

    engine = "transformers"  # which engine runs it (``lingtest.tasks.models.lm_engines``)

    def __init__(self, resolution: Resolution, model, tokenizer, device: torch.device,
                 load_seconds: float = 0.0):
        self.resolution = resolution
        self.model_id = resolution.model_id
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.load_seconds = load_seconds
        self.revision = loaded_revision(resolution, model.config)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self._start = self._start_ids()
        self._word_ids: dict[bool, tuple[np.ndarray, list[str]]] = {}
        self._lock = threading.Lock()  # one forward pass at a time on the shared instance

    # ------------------------------------------------------------------ prompts

    def _start_ids(self) -> list[int]:
        """Token(s) a whole text is conditioned on, so its first word is scored too: nothing
        when the tokenizer adds a BOS itself, else the document separator the model was
        pre-trained with (``<|endoftext|>`` for GPT-2-style vocabularies such as SmolLM2's),
        else BOS, else EOS."""
        probe = self.tokenizer("a")["input_ids"]
        if probe and probe[0] in self.tokenizer.all_special_ids:
            return []
        tok = self.tokenizer
        for candidate in (tok.convert_tokens_to_ids("<|endoftext|>")
                          if "<|endoftext|>" in tok.get_vocab() else None,
                          tok.bos_token_id, tok.eos_token_id):
            if candidate is not None:
                return [int(candidate)]
        raise LingtestError(f"model `{self.model_id}`: tokenizer has no BOS/EOS token to start "
                            f"a text with")

    def _prompt_ids(self, prompt: str, chat: bool, system: str | None) -> list[int]:
        if not chat:
            return self._start + self.tokenizer(prompt)["input_ids"]
        if not self.tokenizer.chat_template:
            raise LingtestError(f"model `{self.model_id}` has no chat template; call with "
                                f"chat=False")
        messages = ([{"role": "system", "content": system}] if system else [])
        messages.append({"role": "user", "content": prompt})
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                 tokenize=True, return_dict=True)["input_ids"]
        return list(ids)

    # ------------------------------------------------------------------ generation

    def generate(self, prompt: str, max_new_tokens: int = 32, chat: bool = True,
                 system: str | None = None) -> str:
        """Greedy continuation of one prompt (chat template applied when ``chat``); only the
        new text, stripped."""
        return self.generate_batch([prompt], max_new_tokens, chat, system, batch_size=1)[0]

    def generate_batch(self, prompts: list[str], max_new_tokens: int = 32, chat: bool = True,
                       system: str | None = None, batch_size: int = 8,
                       stop_after_json: bool = False) -> list[str]:
        """Greedy continuations of several prompts, left-padded batches of ``batch_size``;
        ``stop_after_json``: each row ends with its complete JSON answer
        (``lingtest.tasks.models.json_stop``), so a large ``max_new_tokens`` costs nothing then."""
        if max_new_tokens < 1:
            raise LingtestError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
        answers: list[str] = []
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(prompts), batch_size):
            rows = [self._prompt_ids(p, chat, system) for p in prompts[start:start + batch_size]]
            width = max(len(r) for r in rows)
            ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=self.device)
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows],
                                device=self.device)
            stop = [JSONAnswerStop(self.tokenizer, width)] if stop_after_json else []
            with self._lock, torch.inference_mode():
                out = self.model.generate(
                    input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                    do_sample=False, num_beams=1, temperature=None, top_p=None, top_k=None,
                    pad_token_id=pad, stopping_criteria=StoppingCriteriaList(stop))
            texts = [self.tokenizer.decode(row[width:], skip_special_tokens=True)
                     for row in out]
            if stop_after_json:  # a row that stopped keeps going until the batch is done
                full = out.shape[1] - width >= max_new_tokens
                texts = json_answers(self.model_id, texts, [
                    full and int(row[-1]) not in (pad, self.tokenizer.eos_token_id)
                    for row in out], max_new_tokens)
            answers += [text.strip() for text in texts]
        return answers

    def sample(self, prompt: str, n: int, seed: int, temperature: float = 1.0,
               top_p: float = 0.95, max_new_tokens: int = 32,
               stop_strings: list[str] | None = None, chat: bool = False) -> list[str]:
        """``n`` sampled continuations of one prompt (raw completion unless ``chat``), seeded
        with torch's generator under the instance's lock; only the new text, undecorated."""
        ids = torch.tensor([self._prompt_ids(prompt, chat=chat, system=None)],
                           device=self.device)
        with self._lock, torch.inference_mode():  # one forward pass at a time
            torch.manual_seed(seed)
            rows = self.model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                temperature=temperature, top_p=top_p, top_k=None,
                max_new_tokens=max_new_tokens, num_return_sequences=n,
                stop_strings=stop_strings, tokenizer=self.tokenizer,
                pad_token_id=self.tokenizer.pad_token_id)
        return [self.tokenizer.decode(row[ids.shape[1]:], skip_special_tokens=True)
                for row in rows]

    # ------------------------------------------------------------------ scoring

    def _forward_logprobs(self, rows: list[list[int]]) -> list[torch.Tensor]:
        """Per row, log p(token_i | tokens_<i) for i >= 1 (right-padded batch)."""
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=self.device)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows],
                            device=self.device)
        with self._lock, torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        picked = logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        return [picked[i, : len(r) - 1].cpu() for i, r in enumerate(rows)]

    def next_logprobs(self, rows: list[list[int]]) -> torch.Tensor:
        """log p(next token | row) for each row of token ids, a float64 (rows, vocab) tensor
        (``last_logprobs`` at the last position)."""
        return self.last_logprobs(rows, 1)[:, 0]

    def last_logprobs(self, rows: list[list[int]], last: int) -> torch.Tensor:
        """log p(next token | row[:len(row) - last + 1 + k]) for k < ``last``, a float64
        (rows, last, vocab) tensor: one left-padded forward pass keeping only the last
        ``last`` positions' logits, so no vocabulary-wide softmax is paid for every prompt
        token (an LLM classifier's label words, teacher-forced after its prompt)."""
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=self.device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows],
                            device=self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with self._lock, torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                                logits_to_keep=last).logits[:, -last:]
        return torch.log_softmax(logits.double(), dim=-1).cpu()

    def score(self, texts: list[str], batch_size: int = 16) -> np.ndarray:
        """Sum of token log-probabilities of each whole text (float64, natural log), each
        conditioned only on the start token; higher is more probable."""
        if isinstance(texts, str):
            raise LingtestError("score() takes a list of texts, not one string")
        scores = np.zeros(len(texts), dtype=np.float64)
        rows = [self._start + self.tokenizer(t)["input_ids"] for t in texts]
        scorable = [i for i, row in enumerate(rows) if len(row) > 1]  # else nothing to predict
        for start in range(0, len(scorable), batch_size):
            chunk = scorable[start:start + batch_size]
            for i, row_logp in zip(chunk, self._forward_logprobs([rows[j] for j in chunk])):
                scores[i] = float(row_logp.double().sum())
        return scores

    def token_logprobs(self, texts: list[str], batch_size: int = 16
                       ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text, each token's start offset (characters) and log p(token | all before it),
        so a caller can sum the log-probability of any word-aligned stretch of the text."""
        if not getattr(self.tokenizer, "is_fast", False):
            raise LingtestError(f"model `{self.model_id}`: token offsets need a fast tokenizer")
        enc = [self.tokenizer(t, return_offsets_mapping=True) for t in texts]
        rows = [self._start + e["input_ids"] for e in enc]
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            found = self._forward_logprobs(chunk) if max(map(len, chunk)) > 1 else \
                [torch.zeros(0)] * len(chunk)
            for e, row, logp in zip(enc[start:start + batch_size], chunk, found):
                offsets = np.array([o[0] for o in e["offset_mapping"]], dtype=np.int64)
                # logp[i] scores row[i + 1]; the text's own first token is unscored only when
                # the tokenizer put a BOS there itself (no start token of ours)
                first = len(row) - len(offsets)
                if first == 0:
                    offsets = offsets[1:]
                    first = 1
                out.append((offsets, logp.double().numpy()[first - 1:]))
        return out

    # ------------------------------------------------------------------ next words

    def _word_table(self, sentence_start: bool) -> tuple[np.ndarray, list[str]]:
        """Token ids that begin a whole alphabetic word, with the word: after a space
        ('Ġword' / '▁word') mid-sentence; without the marker at the start of a text."""
        if sentence_start not in self._word_ids:
            special = set(self.tokenizer.all_special_ids)
            ids, words = [], []
            for token, idx in sorted(self.tokenizer.get_vocab().items(), key=lambda kv: kv[1]):
                if idx in special:
                    continue
                marked = token[:1] in ("Ġ", "▁")
                word = token[1:] if marked else token
                if marked != sentence_start and word.isalpha() and word.isascii():
                    ids.append(idx)
                    words.append(word)
            self._word_ids[sentence_start] = (np.asarray(ids, dtype=np.int64), words)
        return self._word_ids[sentence_start]

    def next_token_candidates(self, prefix: str, k: int = 10) -> list[tuple[str, float]]:
        """Top-k next whole words after ``prefix`` with their log-probabilities (of the
        word's first token, which for most common words is the whole word). A left-context
        stand-in for fill-mask: callers re-score candidates on the whole sentence (`score`)."""
        if k < 1:
            raise LingtestError(f"k must be >= 1 (got {k})")
        prefix = prefix.rstrip()
        row = self._start + (self.tokenizer(prefix)["input_ids"] if prefix else [])
        ids = torch.tensor([row], device=self.device)
        with self._lock, torch.inference_mode():
            logits = self.model(input_ids=ids, logits_to_keep=1).logits[0, -1].float()
        logp = torch.log_softmax(logits, dim=-1).cpu().numpy()
        word_ids, words = self._word_table(sentence_start=not prefix)
        values = logp[word_ids]
        top = np.argsort(-values, kind="stable")[:k]
        return [(words[i], float(values[i])) for i in top]

    def next_token_candidates_batch(self, prefixes: list[str], k: int = 10,
                                    batch_size: int = 16) -> list[list[tuple[str, float]]]:
        """``next_token_candidates`` for many prefixes, right-padded batches of ``batch_size``
        (each row read at its own last token, so positions match the unbatched call)."""
        if k < 1:
            raise LingtestError(f"k must be >= 1 (got {k})")
        prefixes = [p.rstrip() for p in prefixes]
        rows = [self._start + (self.tokenizer(p)["input_ids"] if p else []) for p in prefixes]
        out: list[list[tuple[str, float]]] = []
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            width = max(len(r) for r in chunk)
            ids = torch.tensor([r + [pad] * (width - len(r)) for r in chunk], device=self.device)
            mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in chunk],
                                device=self.device)
            last = torch.tensor([len(r) - 1 for r in chunk], device=self.device)
            with self._lock, torch.inference_mode():
                hidden = self.model.model(input_ids=ids, attention_mask=mask).last_hidden_state
                logits = self.model.lm_head(hidden[torch.arange(len(chunk)), last]).float()
            logp = torch.log_softmax(logits, dim=-1).cpu().numpy()
            for i, prefix in enumerate(prefixes[start:start + batch_size]):
                word_ids, words = self._word_table(sentence_start=not prefix)
                values = logp[i][word_ids]
                top = np.argsort(-values, kind="stable")[:k]
                out.append([(words[j], float(values[j])) for j in top])
        return out

    def word_table(self, sentence_start: bool) -> tuple[np.ndarray, list[str]]:
        """Token ids that begin a whole alphabetic word, with the word (see ``_word_table``)."""
        return self._word_table(sentence_start)

    def text_pass(self, text: str) -> "TextPass":
        """One forward pass over ``text`` (after the start token), kept for what S²LCT asks of
        a seed: the next-token distribution at every word gap, and the log-probabilities of
        variants of the text scored on its cached keys and values."""
        ids = self._start + self.tokenizer(text)["input_ids"]
        with self._lock, torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids], device=self.device), use_cache=True)
        logp = torch.log_softmax(out.logits[0].float(), dim=-1)
        return TextPass(self, text, ids, logp, out["cache"])

    # ------------------------------------------------------------------ recording

    def parameters(self) -> dict[str, object]:
        """What produced the outputs, for result rows, the store and reports."""
        template = self.tokenizer.chat_template or ""
        return {
            "model_id": self.model_id, "revision": self.revision,
            "source": self.resolution.source, "gguf_file": self.resolution.gguf_file,
            "dtype": str(self.model.dtype).replace("torch.", ""), "device": str(self.device),
            "decoding": {"do_sample": False, "num_beams": 1, "strategy": "greedy"},
            "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest()[:16],
            "start_token_ids": self._start,
        }

    def __repr__(self) -> str:
        return f"CausalLM({self.model_id!r}, revision={self.revision!r}, device={self.device})"


class TextPass:
    """A text's forward pass: ``logp[i]`` is log P(next token | ids[:i + 1]) over the vocabulary.

    Why: S²LCT inserts one word into a seed at many gaps. The proposals at a gap are the
    next-token distribution after the words before it, which this one pass holds for every
    gap; each filled sentence shares the seed's tokens up to its insertion, so only its
    tokens from there on need a forward pass, on the seed's cached keys and values. The
    result equals scoring the filled sentence whole (to float rounding)."""

    def __init__(self, model: CausalLM, text: str, ids: list[int], logp: torch.Tensor,
                 cache):
        self.model, self.text, self.ids, self.logp, self.cache = model, text, ids, logp, cache
        picked = torch.tensor(ids[1:], device=logp.device)
        # log P(token | all before it) for each of the text's tokens after the start
        self._token_logprobs = logp[:-1].gather(-1, picked.unsqueeze(-1)).squeeze(-1) \
            .double().cpu().numpy()

    def token_logprobs(self) -> np.ndarray:
        """log P(token | all before it) for each of the text's tokens after the start
        (computed once with the pass: the seed's score and every fill's read it)."""
        return self._token_logprobs

    def next_logprobs(self, cut: int) -> np.ndarray | None:
        """log P(next token | text[:cut].rstrip()) over the vocabulary, when that prefix's
        tokens begin the text's tokens (true at a space for GPT-2-style tokenizers); else None."""
        ids = self.model._start + self.model.tokenizer(self.text[:cut].rstrip())["input_ids"]
        if not ids or ids != self.ids[:len(ids)]:
            return None
        return self.logp[len(ids) - 1].cpu().numpy()

    def variants(self, texts: list[str], after: int | None = None
                 ) -> list[tuple[list[int], int, np.ndarray]]:
        """Per variant text: its token ids (start token first), ``n`` the length of the token
        prefix it shares with this text (≥ 1), and log P(token | all before it) for its tokens
        from ``n`` on — computed on this text's cached keys and values, so only those tokens
        run. ``after``: for a variant that is this text with tokens inserted at ``n``, stop
        that many tokens past the insertion (the rest is this text's own tokens, whose
        log-probabilities the caller may take as unchanged); None: to the end. Variants
        sharing a prefix length run as one right-padded batch."""
        tok, start, base = self.model.tokenizer, self.model._start, self.ids
        rows = [start + tok(t)["input_ids"] for t in texts]
        shared, ends = [], []
        for row in rows:
            n = 0
            while n < min(len(row), len(base)) - 1 and row[n] == base[n]:
                n += 1
            n = max(n, 1)
            grown = len(row) - len(base)
            pure = grown > 0 and row[n + grown:] == base[n:]
            shared.append(n)
            ends.append(min(len(row), n + grown + after) if pure and after is not None
                        else len(row))
        out: list[tuple[list[int], int, np.ndarray] | None] = [None] * len(rows)
        pad = tok.pad_token_id
        device = self.logp.device
        for n in sorted(set(shared)):
            group = [i for i, s in enumerate(shared) if s == n]
            tails = [rows[i][n:ends[i]] for i in group]
            width = max(len(t) for t in tails)
            logits = None
            if width > 1:
                cache = copy.deepcopy(self.cache)
                cache.crop(n - len(base))
                cache.batch_repeat_interleave(len(group))
                ids = torch.tensor([t[:-1] + [pad] * (width - len(t)) for t in tails],
                                   device=device)
                mask = torch.tensor([[1] * (n + len(t) - 1) + [0] * (width - len(t))
                                     for t in tails], device=device)
                with self.model._lock, torch.inference_mode():
                    logits = self.model.model(input_ids=ids, cache=cache,
                                              attention_mask=mask).logits.float()
                logits = torch.log_softmax(logits, dim=-1)
            for row_at, i in enumerate(group):
                tail = tails[row_at]
                first = [float(self.logp[n - 1, tail[0]])]
                rest = [] if len(tail) < 2 else logits[row_at, :len(tail) - 1].gather(
                    -1, torch.tensor(tail[1:], device=device).unsqueeze(-1)
                ).squeeze(-1).double().cpu().tolist()
                out[i] = (rows[i], n, np.array(first + rest, dtype=np.float64))
        return out


CONVERTED_FORMAT = 2  # 2: the copy records each file's sha256, checked on every load
CONVERTED_MARKER = "lingtest-converted.json"


def converted_root() -> Path:
    """Where de-quantised copies of GGUF models live: ``$LINGTEST_CACHE/converted``, default
    ``~/.cache/lingtest/converted`` (shared by every project of the user, like the HF cache)."""
    return lingtest_cache() / "converted"


def converted_dir(res: Resolution) -> Path | None:
    """The copy's folder for a GGUF model with a pinned revision, keyed by the revision (the
    GGUF's hash) and the transformers version that de-quantised it; None otherwise."""
    if not res.gguf_file or not res.revision:
        return None
    import transformers

    key = hashlib.sha256(f"{CONVERTED_FORMAT}|{res.model_id}|{res.gguf_file}|{res.revision}|"
                         f"{transformers.__version__}".encode()).hexdigest()[:16]
    return converted_root() / f"{res.model_id.replace('/', '__')}-{key}"


def _write_converted(model, tokenizer, folder: Path, res: Resolution) -> None:
    """Save the de-quantised weights (the GGUF quantizer refuses ``save_pretrained``: it is
    detached first; the tensors are already float32) into a temporary sibling, then rename, so
    a reader never sees half a copy. A failure only costs the next process a GGUF load."""
    if any(t.is_meta for t in model.state_dict().values()):
        return  # a weight never materialised: nothing trustworthy to copy
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        model.hf_quantizer, model.is_quantized = None, False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / CONVERTED_MARKER).write_text(json.dumps(
            {"model_id": res.model_id, "gguf_file": res.gguf_file, "revision": res.revision,
             "sha256": _file_digests(staging)}))
        os.replace(staging, folder)
    except OSError:  # another process renamed its copy first, or the disk is full
        shutil.rmtree(staging, ignore_errors=True)


def _file_digests(folder: Path) -> dict[str, str]:
    """sha256 of every file of a converted copy but its marker (~1 s for SmolLM2's 540 MB)."""
    from lingtest.tasks.core.io import sha256_file

    return {p.name: sha256_file(p) for p in sorted(folder.iterdir())
            if p.is_file() and p.name != CONVERTED_MARKER}


def damaged_files(copy: Path) -> list[str]:
    """Files of a converted copy whose bytes are not the ones written at conversion (a copy
    damaged mid-tensor still loads, silently giving NaN scores and empty answers)."""
    try:
        recorded = json.loads((copy / CONVERTED_MARKER).read_text())["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return [CONVERTED_MARKER]
    found = _file_digests(copy)
    return sorted(name for name in set(recorded) | set(found)
                  if recorded.get(name) != found.get(name))


def _from_pretrained(source: str, offline: bool, **extra):
    AutoModelForCausalLM, AutoTokenizer = transformers_classes("AutoModelForCausalLM",
                                                               "AutoTokenizer")

    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=offline, **extra)
    model = AutoModelForCausalLM.from_pretrained(source, local_files_only=offline, **extra)
    return _head_tied(model, source), tokenizer


def _head_tied(model, source: str):
    """A GGUF without an output tensor means, in llama.cpp's convention, that the output
    layer is the token embedding (Gemma 3's is tied); transformers once left such a head on
    the meta device in the test suite (``lm_head.weight`` MISSING), so the head is tied to the
    embedding here whenever it alone is missing. Any other parameter missing is one error
    naming it."""
    missing = [name for name, p in model.named_parameters() if p.is_meta]
    if not missing:
        return model
    embedding = model.get_input_embeddings()
    if missing == ["lm_head.weight"] and embedding is not None and \
            tuple(model.lm_head.weight.shape) == tuple(embedding.weight.shape):
        model.lm_head.weight = embedding.weight
        return model
    raise LingtestError(f"{source}: parameters {missing[:5]} are not in the checkpoint; "
                        "delete the file and reinstall the model's package")


def _from_gguf_or_hub(res: Resolution, source: str, offline: bool, extra: dict):
    """The original files: a chunked package's GGUF is assembled first (once per cache)."""
    assemble_gguf(res)
    if not res.gguf_file:
        return _from_pretrained(source, offline, **extra)
    with _gguf_parsed_once():
        return _from_pretrained(source, offline, **extra)


_GGUF_LOCK = threading.Lock()


@contextlib.contextmanager
def _gguf_parsed_once():
    """transformers parses a GGUF three times (config, tokenizer, weights); parsing Gemma 3's
    262k-token vocabulary takes ~25 s on 2 cores each time. While converting, ``gguf``'s
    reader is memoised by path, so the file is parsed once (one conversion at a time), and
    its tensor-name map by (architecture, layers): transformers builds one per module of
    the model (SmolLM2: 397 identical maps, 3.3 s), and only reads them."""
    import functools

    import gguf

    original, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[str, object] = {}

    def read_once(path, *args, **kwargs):
        key = str(Path(path).resolve())
        if args or kwargs or key not in readers:
            readers[key] = original(path, *args, **kwargs)
        return readers[key]

    with _GGUF_LOCK:
        gguf.GGUFReader, gguf.get_tensor_name_map = read_once, functools.cache(name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = original, name_map


@contextlib.contextmanager
def _one_conversion(copy: Path | None):
    """Processes that load one GGUF model at once (two stages, two Dask workers) wait for
    the first one's copy instead of each de-quantising it (20-60 s of CPU): an ``flock`` on
    ``<copy>.lock``, which the kernel drops when its holder dies."""
    if copy is None:
        yield
        return
    copy.parent.mkdir(parents=True, exist_ok=True)
    with held_flock(copy.parent / f"{copy.name}.lock"):
        yield


def _load(res: Resolution, device: torch.device, offline: bool) -> CausalLM:
    source = res.path if res.source != "hub" else res.model_id
    extra = {"gguf_file": res.gguf_file} if res.gguf_file else {}
    copy = converted_dir(res)
    began = time.perf_counter()
    try:
        with hub_offline(offline), _one_conversion(copy):
            if copy is not None and (copy / CONVERTED_MARKER).is_file():
                try:
                    damaged = damaged_files(copy)
                    if damaged:
                        log.warning("%s: %s not as written at conversion (damaged on disk); "
                                    "converting %s again", copy, ", ".join(damaged), res.model_id)
                        raise OSError(f"damaged copy: {damaged}")
                    model, tokenizer = _from_pretrained(str(copy), True)
                except Exception:  # noqa: BLE001 - a damaged copy (any reader error): convert again
                    shutil.rmtree(copy, ignore_errors=True)
                    model, tokenizer = _from_gguf_or_hub(res, source, offline, extra)
                    _write_converted(model, tokenizer, copy, res)
            else:
                model, tokenizer = _from_gguf_or_hub(res, source, offline, extra)
                if copy is not None:
                    _write_converted(model, tokenizer, copy, res)
    except (OSError, ValueError, ImportError) as exc:
        raise LingtestError(f"model `{res.model_id}` ({res.source}, {source}) failed to load: "
                            f"{exc}") from exc
    model.eval().to(device)
    return CausalLM(res, model, tokenizer, device, time.perf_counter() - began)


def load_causal_lm(model_id: str, offline: bool = True, device: str = "auto",
                   engine: str = "transformers", precision: str = "float32") -> CausalLM:
    """The process-wide instance for (id, device, offline), loading it on first use, run by
    ``engine`` at ``precision`` (``models.lm_engine`` / ``lm_precision``:
    ``lingtest.tasks.models.lm_engines``)."""
    res = resolve(model_id, "causal_lm", offline=offline).require()
    dev = pick_device(device)
    key = (res.model_id if res.source != "local" else str(Path(res.path)), str(dev), offline)
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = _load(res, dev, offline)
        lm = _CACHE[key]
    if engine == "transformers" and precision == "float32":
        return lm
    from lingtest.tasks.models.lm_engines import on_engine

    return on_engine(lm, engine, precision)
