"""A local causal LM on CTranslate2: the ``CausalLM`` surface, with greedy generation,
sequence scoring and next-token log-probabilities run by the engine; the same greedy answers
and scores as transformers at float32, float rounding apart (benchmarks/bench_lm_engine.py).

``models.lm_engine`` picks it (``engine_for``): ``auto`` uses it where it is installed, the
device is the CPU and CTranslate2 converts the model's architecture, else transformers, and
says which; ``ctranslate2`` requires it. ``models.lm_precision`` int8 / int16 quantise the
engine's copy (other answers: named in the identity and every report).

Why a subclass: the engine covers what the stages spend their time on (answers, scores);
what it has no call for (S²LCT's text passes, which reuse one sentence's cached keys and
values for many fills, and next-word tables) stays on the transformers model the engine's
copy was made from, so the surface is whole either way. Seeded sampling (AdaTest's
suggestions) stays on transformers too: CTranslate2's ``set_random_seed`` does not make its
sampling repeatable (two draws with one seed differ here; OpenNMT/CTranslate2 issue #1757),
and one seed must give one set of suggestions.

The engine's copy is converted once from the float32 weights (a packaged GGUF's de-quantised
copy, ``causal_lm.converted_dir``, else the model's own folder) into ``$LINGTEST_CACHE/
ctranslate2/<model>-<revision>-ct2-<version>-<precision>/``, keyed by everything that changes
its bytes, and its files' sha256 are checked on every open (a damaged copy is converted again).
"""
from __future__ import annotations

import gc
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import torch

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.causal_lm import (CONVERTED_MARKER, CausalLM, _file_digests, _one_conversion,
                                    converted_dir, damaged_files, json_answers)
from lingtest.tasks.models.encoders import pick_device
from lingtest.tasks.models.json_stop import json_end, looping
from lingtest.tasks.models.registry import lingtest_cache

log = logging.getLogger(__name__)
ENGINES = ("auto", "transformers", "ctranslate2")
PRECISIONS = ("float32", "int8", "int16")
INSTALL = "pip install 'lingtest[engines]'"
_ON_ENGINE: dict[tuple[int, str, str], CausalLM] = {}
_ON_ENGINE_LOCK = threading.Lock()


def _installed() -> str | None:
    """CTranslate2's version, or None when it is not installed."""
    try:
        import ctranslate2
    except ImportError:
        return None
    return ctranslate2.__version__


def _planned(engine: str, precision: str, device: str) -> tuple[dict[str, str] | None, str]:
    """(``planned_engine``'s record, why): the choice the settings make before the model
    is loaded, with the reason a transformers choice gets."""
    if engine not in ENGINES:
        raise LingtestError(f"models.lm_engine: {engine!r} is not one of {ENGINES}")
    if precision not in PRECISIONS:
        raise LingtestError(f"models.lm_precision: {precision!r} is not one of {PRECISIONS}")
    version = _installed()
    why = ("models.lm_engine: transformers" if engine == "transformers" else
           "auto: CTranslate2 is not installed" if engine == "auto" and version is None else
           f"auto: the device is {pick_device(device)} (the engine is used on the CPU only)"
           if engine == "auto" and str(pick_device(device)) != "cpu" else "")
    if why:
        if precision != "float32":
            raise LingtestError(f"models.lm_precision: {precision} needs the CTranslate2 engine "
                                f"(models.lm_engine: {engine}); fix: lm_precision: float32, or "
                                f"{INSTALL} and lm_engine: auto / ctranslate2")
        return None, why
    if version is None:
        raise LingtestError(f"models.lm_engine: ctranslate2 is not installed; fix: {INSTALL}, "
                            f"or lm_engine: auto / transformers")
    return {"engine": f"ctranslate2 {version}", "precision": precision}, ""


def planned_engine(engine: str, precision: str, device: str) -> dict[str, str] | None:
    """The engine a load with these settings will use, known without loading the model
    (answer-store identities): None for transformers, so identities from before the engine
    existed still hold; else its name, version and precision. ``auto`` on a model whose
    architecture the engine does not convert falls back at load time (``engine_for``); that
    is fixed by the model and the version, so one identity still means one engine."""
    return _planned(engine, precision, device)[0]


def engine_for(lm: CausalLM, engine: str, precision: str) -> tuple[str, str]:
    """(the engine to run ``lm`` on, why), the settings' choice (``_planned``) checked
    against the loaded model: whether CTranslate2 converts its architecture."""
    planned, why = _planned(engine, precision, str(lm.device))
    if planned is None:
        return "transformers", why
    from ctranslate2.converters.transformers import _MODEL_LOADERS

    config, named = type(lm.model.config).__name__, f"CTranslate2 {_installed()}"
    if config not in _MODEL_LOADERS:
        if engine == "ctranslate2" or precision != "float32":
            raise LingtestError(f"model `{lm.model_id}`: {named} does not "
                                f"convert {config} models; fix: models.lm_engine: auto or "
                                f"transformers, lm_precision: float32")
        return "transformers", f"auto: {named} does not convert {config}"
    return "ctranslate2", (f"models.lm_engine: {engine}" if engine != "auto" else
                           f"auto: {named} converts {config}")


def on_engine(lm: CausalLM, engine: str, precision: str) -> CausalLM:
    """``lm`` as ``engine``/``precision`` run it (``engine_for``): itself on transformers
    (the log says why), else the process-wide ``CT2CausalLM`` over it, whose parameters do."""
    chosen, why = engine_for(lm, engine, precision)
    if chosen == "transformers":
        log.info("%s runs on transformers (%s)", lm.model_id, why)
        return lm
    key = (id(lm), engine, precision)
    with _ON_ENGINE_LOCK:
        if key not in _ON_ENGINE:
            _ON_ENGINE[key] = CT2CausalLM(lm, precision, torch.get_num_threads(), why)
        return _ON_ENGINE[key]


def ct2_dir(lm: CausalLM, precision: str) -> Path:
    """The engine copy's folder: model, revision, CTranslate2 version and precision."""
    import ctranslate2

    revision = re.sub(r"[^A-Za-z0-9._=-]+", "_", lm.revision or "unpinned")
    name = f"{lm.model_id.replace('/', '__')}-{revision}-ct2-{ctranslate2.__version__}-{precision}"
    return lingtest_cache() / "ctranslate2" / name


def _convert(source: str, folder: Path, precision: str) -> None:
    """Convert into a temporary sibling, record each file's sha256, then rename, so a reader
    never sees half a copy. The converter runs a full garbage collection per layer; with the
    process's older objects frozen it sweeps only the conversion's own (SmolLM2 in a process
    with lingtest loaded: 10.9 s → 6.1 s, the same model.bin)."""
    from ctranslate2.converters import TransformersConverter

    from lingtest.tasks.models.causal_lm import _head_tied
    from lingtest.tasks.models.registry import one_load

    class HeadTied(TransformersConverter):
        """The converter's own load, one load at a time in the process (``one_load``: a
        model loading beside it in a thread kept its tied head on the meta device), with a
        tied head that transformers left on the meta device tied to the embedding
        (``causal_lm._head_tied``; seen in the test suite)."""

        def load_model(self, model_class, model_name_or_path, **kwargs):
            with one_load():
                model = super().load_model(model_class, model_name_or_path, **kwargs)
            return _head_tied(model, str(model_name_or_path))

    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    gc.freeze()
    try:
        HeadTied(source, low_cpu_mem_usage=True).convert(
            str(staging), quantization=precision, force=True)
        (staging / CONVERTED_MARKER).write_text(json.dumps(
            {"source": source, "precision": precision, "sha256": _file_digests(staging)}))
        os.replace(staging, folder)
    finally:
        gc.unfreeze()
        shutil.rmtree(staging, ignore_errors=True)


def float32_source(lm: CausalLM) -> str:
    """What the engine converts: a GGUF model's de-quantised float32 copy (written when the
    model was loaded), else the model's own folder, else (online) its hub id."""
    res = lm.resolution
    if res.gguf_file:
        copy = converted_dir(res)
        if copy is None or not (copy / CONVERTED_MARKER).is_file():
            raise LingtestError(f"model `{lm.model_id}`: CTranslate2 converts the float32 copy "
                                f"of a GGUF model with a pinned revision, and there is none; "
                                f"fix: models.lm_engine: transformers")
        return str(copy)
    return res.path if res.source != "hub" else res.model_id


def open_ct2(lm: CausalLM, precision: str = "float32", threads: int = 0):
    """The ``ctranslate2.Generator`` for ``lm`` at ``precision``, converting it first when
    its copy is missing or damaged."""
    import ctranslate2

    if precision not in PRECISIONS:
        raise LingtestError(f"models.lm_precision: {precision!r} is not one of {PRECISIONS}")
    folder = ct2_dir(lm, precision)
    with _one_conversion(folder):
        if (folder / CONVERTED_MARKER).is_file() and damaged_files(folder):
            log.warning("%s: not as written at conversion; converting again", folder)
            shutil.rmtree(folder, ignore_errors=True)
        if not (folder / CONVERTED_MARKER).is_file():
            _convert(float32_source(lm), folder, precision)
    return ctranslate2.Generator(str(folder), device="cpu", compute_type=precision,
                                 inter_threads=1, intra_threads=threads)


class CT2CausalLM(CausalLM):
    """``CausalLM`` whose generation and scoring run on CTranslate2 (see the module doc)."""

    engine = "ctranslate2"

    def __init__(self, lm: CausalLM, precision: str = "float32", threads: int = 0,
                 why: str = "models.lm_engine: ctranslate2"):
        super().__init__(lm.resolution, lm.model, lm.tokenizer, lm.device, lm.load_seconds)
        self.precision, self.engine_reason = precision, why
        self.generator = open_ct2(lm, precision, threads)
        self._tokens = lm.tokenizer.convert_ids_to_tokens

    def generate_batch(self, prompts: list[str], max_new_tokens: int = 32, chat: bool = True,
                       system: str | None = None, batch_size: int = 8,
                       stop_after_json: bool = False) -> list[str]:
        """As ``CausalLM.generate_batch``; a row stops at EOS, or (``stop_after_json``) as
        soon as its answer is complete or loops, checked on each new token."""
        if max_new_tokens < 1:
            raise LingtestError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
        eos = self.tokenizer.eos_token_id
        answers: list[str] = []
        for start in range(0, len(prompts), batch_size):
            rows = [self._prompt_ids(p, chat, system) for p in prompts[start:start + batch_size]]
            new: list[list[int]] = [[] for _ in rows]

            def step(result) -> bool:
                new[result.batch_id].append(result.token_id)
                if not stop_after_json:
                    return False
                text = self.tokenizer.decode(new[result.batch_id], skip_special_tokens=True)
                return json_end(text) is not None or looping(text)

            with self._lock:
                self.generator.generate_batch(
                    [self._tokens(r) for r in rows], max_length=max_new_tokens, beam_size=1,
                    sampling_topk=1, end_token=[eos], include_prompt_in_result=False,
                    callback=step)
            texts = [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in new]
            if stop_after_json:
                texts = json_answers(self.model_id, texts, [
                    len(ids) >= max_new_tokens and ids[-1] != eos for ids in new],
                    max_new_tokens)
            answers += [text.strip() for text in texts]
        return answers

    def _forward_logprobs(self, rows: list[list[int]]) -> list[torch.Tensor]:
        """Per row, log p(token_i | tokens_<i) for i >= 1 (``score``, ``token_logprobs``)."""
        with self._lock:
            found = self.generator.score_batch([self._tokens(r) for r in rows],
                                               max_input_length=0)
        return [torch.tensor(f.log_probs, dtype=torch.float32) for f in found]

    def last_logprobs(self, rows: list[list[int]], last: int) -> torch.Tensor:
        """As ``CausalLM.last_logprobs``: the last ``last`` positions of each row, a float64
        (rows, last, vocab) tensor."""
        with self._lock:
            logits = np.asarray(self.generator.forward_batch(rows))
        at = np.array([range(len(r) - last, len(r)) for r in rows])
        kept = logits[np.arange(len(rows))[:, None], at]
        return torch.log_softmax(torch.from_numpy(kept).double(), dim=-1)

    def parameters(self) -> dict[str, object]:
        """The transformers record, plus the engine, its version, precision (the dtype is
        the engine's) and why it was chosen."""
        import ctranslate2

        return {**super().parameters(), "dtype": self.precision,
                "engine": f"ctranslate2 {ctranslate2.__version__}",
                "engine_reason": self.engine_reason}
