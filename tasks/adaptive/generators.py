"""Suggestion generators of AdaTest's testing loop: an LM completes the prompt builder's
prompts (``prompts.prompt_texts``), each completion is one suggested test input.

Three generators, one interface (``complete(prompts, n, seed)`` → ``n`` completions per
prompt), named by the model spec grammar (``lingtest.tasks.models.model_spec``):

- ``LocalGenerator``: a causal LM as a raw completion model (no chat template), sampled with
  temperature 1.0 and top_p 0.95 as AdaTest's OpenAI generator, stopped at the closing
  ``"``, seeded per prompt (``seed + prompt index``) so a prompt's completions do not depend
  on the batch around it. Offline the packaged SmolLM2 (one instance per process, through
  ``lingtest.tasks.models.causal_lm.load_causal_lm``); online any Hugging Face causal LM by id.
- ``HTTPGenerator``: an OpenAI-compatible ``/completions`` endpoint (``n`` completions per
  request, ``stop='"'``), or ``/chat/completions`` for chat-only servers, through the
  consistency backends' request loop (``lingtest.tasks.models.llm_http.HTTPBackend``: timeouts,
  bounded back-off, Retry-After, scrubbed keys, the per-endpoint in-flight limit) over
  httpx; no ``openai`` package needed. The endpoint is the spec's ``@URL``, else
  ``--base-url``, else ``OPENAI_BASE_URL`` (none of them: refused, see
  ``llm_http.resolve_endpoint``); the key comes from ``#key_env=VAR``, else
  ``OPENAI_API_KEY``.
- ``UserGenerator``: the user's ``python:`` object with ``generate(prompts, n=, seed=)`` (one
  list of completions, or one string, per prompt) or a function ``prompt -> text`` (one
  completion per prompt; a list when it takes ``n``), named with its module's revision.

A completion is cut at the first stop quote and the first line break (a prompt line holds
one test), and stripped; empty ones are dropped. ``dedupe`` drops repeats (exact, after
stripping) and inputs the focus topic already holds (AdaTest's ``topic + input`` map);
``score_suggestions`` scores the suggestions on every model under test and sorts them by
the first model's failure score, worst first.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from lingtest.tasks.adaptive.cases import INPUT_B, METHOD, to_topic
from lingtest.tasks.adaptive.scoring import score_cases, score_column
from lingtest.tasks.adaptive.tree import TestTree
from lingtest.tasks.core.cases import case_id, provenance_json
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.llm import LLMSettings, accepted_keywords, parse_llm
from lingtest.tasks.models.llm_http import HTTPBackend, resolve_endpoint
from lingtest.tasks.models.model_spec import ModelRef, parse_model
from lingtest.tasks.models.sentiment import SentimentModel

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
QUOTE = '"'
SUGGESTION_COLUMNS = ["prompt_index", "prompt_id", "input", "generator", "seed"]
CHAT_INSTRUCTION = ("Continue the list with one new item in the same style. Write only the "
                    "item's text, then a closing double quote.")


@dataclass(frozen=True)
class SamplingSettings:
    """AdaTest's sampling: temperature 1.0, top_p 0.95, stop at the quote."""

    temperature: float = 1.0
    top_p: float = 0.95
    max_new_tokens: int = 32
    stop: str = QUOTE

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise LingtestError(f"adaptive sampling temperature = {self.temperature}: must be "
                                "> 0 (AdaTest samples at 1.0)")
        if not 0 < self.top_p <= 1:
            raise LingtestError(f"adaptive sampling top_p = {self.top_p}: must be in (0, 1]")
        if self.max_new_tokens < 1:
            raise LingtestError(f"adaptive sampling max_new_tokens = {self.max_new_tokens}: "
                                "must be >= 1")
        if not self.stop:
            raise LingtestError("adaptive sampling stop: must be a non-empty string, e.g. '\"'")


class Generator(Protocol):
    generator_id: str

    def complete(self, prompts: list[str], n: int, seed: int) -> list[list[str]]:
        """``n`` cleaned completions (possibly fewer, never empty strings) per prompt."""


def clean_completion(text: str, stop: str = QUOTE) -> str:
    """The suggestion in a raw completion: up to the first stop string and line break."""
    text = text.split(stop, 1)[0]
    return text.split("\n", 1)[0].strip()


def _cleaned(texts: list[str], stop: str) -> list[str]:
    return [t for t in (clean_completion(x, stop) for x in texts) if t]


class LocalGenerator:
    """A Hugging Face causal LM sampled locally (see the module docstring)."""

    def __init__(self, model_id: str = SMOLLM2, offline: bool = True, device: str = "auto",
                 sampling: SamplingSettings = SamplingSettings()):
        from lingtest.tasks.models.causal_lm import load_causal_lm

        self.lm = load_causal_lm(model_id, offline=offline, device=device)
        self.sampling = sampling
        self.generator_id = f"hf:{self.lm.model_id}@{self.lm.revision}"

    def complete(self, prompts: list[str], n: int, seed: int) -> list[list[str]]:
        if n < 1:
            raise LingtestError(f"completions per prompt = {n}: must be >= 1")
        lm, s = self.lm, self.sampling
        out = []
        for index, prompt in enumerate(prompts):
            texts = lm.sample(prompt, n, seed + index, temperature=s.temperature, top_p=s.top_p,
                              max_new_tokens=s.max_new_tokens, stop_strings=[s.stop, "\n"])
            out.append(_cleaned(texts, s.stop))
        return out


class HTTPGenerator(HTTPBackend):
    """An OpenAI-compatible completions (``api="completions"``) or chat endpoint."""

    backend = "openai-completions"

    def __init__(self, model: str, base_url: str | None = None, api: str = "completions",
                 sampling: SamplingSettings = SamplingSettings(),
                 settings: LLMSettings = LLMSettings(), ref: ModelRef | None = None):
        if api not in ("completions", "chat"):
            raise LingtestError(f"adaptive generator api {api!r}: use 'completions' or 'chat'")
        prefix = "openai" if api == "completions" else "openai-chat"
        ref = ref or parse_model(f"{prefix}:{model}", GENERATOR_KEY)
        end = resolve_endpoint(ref, base_url, GENERATOR_KEY)
        super().__init__(f"{prefix}:{ref.target}", ref.target, end.base_url, settings,
                         end.key(), end.key_env, ref.name)
        self.api, self.sampling = api, sampling
        self.generator_id = f"{prefix}:{ref.target}"
        self._n, self._seeds = 1, {}
        self.errors: list[str] = []

    def _endpoint(self) -> str:
        return "/completions" if self.api == "completions" else "/chat/completions"

    def _body(self, prompt: str) -> dict[str, Any]:
        s = self.sampling
        body: dict[str, Any] = {"model": self.model, "temperature": s.temperature,
                                "top_p": s.top_p, "max_tokens": s.max_new_tokens, "n": self._n,
                                "stop": [s.stop], "seed": self._seeds.get(prompt, 0)}
        if self.api == "completions":
            body["prompt"] = prompt
        else:
            body["messages"] = [{"role": "system", "content": CHAT_INSTRUCTION},
                                {"role": "user", "content": prompt}]
        return body

    def _text(self, payload: dict[str, Any]) -> str | None:
        """All choices' texts as one JSON list (the request loop carries one string)."""
        try:
            choices = payload["choices"]
            texts = [c["text"] if self.api == "completions" else c["message"]["content"]
                     for c in choices]
        except (KeyError, IndexError, TypeError):
            return None
        return json.dumps(texts) if all(isinstance(t, str) for t in texts) else None

    def complete(self, prompts: list[str], n: int, seed: int) -> list[list[str]]:
        if n < 1:
            raise LingtestError(f"completions per prompt = {n}: must be >= 1")
        self._n = n
        self._seeds = {p: seed + i for i, p in reversed(list(enumerate(prompts)))}
        responses = self.answer(prompts)
        self.errors = [r.error for r in responses if r.error]
        if prompts and len(self.errors) == len(prompts):
            raise LingtestError(f"adaptive generator {self.generator_id} at "
                                f"{self.endpoint()['base_url']}: every prompt failed; last "
                                f"error: {self.errors[-1]}")
        stop = self.sampling.stop
        return [_cleaned([t.lstrip(QUOTE) for t in json.loads(r.text)], stop) if r.text else []
                for r in responses]

    def parameters(self) -> dict:
        return {**super().parameters(), "api": self.api, "top_p": self.sampling.top_p,
                "temperature": self.sampling.temperature, "stop": self.sampling.stop}


class UserGenerator:
    """A ``python:`` suggestion generator (see the module docstring). Keywords it is given
    when its signature takes them: ``n``, ``seed`` (a function: ``seed + prompt index``, as
    the local generator seeds), ``temperature``, ``top_p``, ``max_new_tokens``, ``stop``.
    Its raw texts are cleaned like every generator's (cut at the stop quote and line break),
    at most ``n`` kept per prompt. An exception, a non-string or not one entry per prompt is
    one LingtestError naming the generator and the first bad prompt: a round has no store
    to retry from, so a broken generator stops it."""

    def __init__(self, user, sampling: SamplingSettings = SamplingSettings()):
        from lingtest.tasks.models.user_code import batch_protocol, protocol_method

        self.user, self.sampling = user, sampling
        self.batched = batch_protocol(user, "generate")
        self._fn = protocol_method(user, "generate")
        self.generator_id = f"python:{user.ref.name}@{user.revision}"

    def _keywords(self, n: int, seed: int) -> dict:
        s = self.sampling
        return accepted_keywords(self._fn, {"n": n, "seed": seed, "temperature": s.temperature,
                                            "top_p": s.top_p,
                                            "max_new_tokens": s.max_new_tokens, "stop": s.stop})

    def _texts(self, value: object, prompt: str) -> list[str]:
        texts = [value] if isinstance(value, str) else value
        if not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts):
            raise self.user.fail(f"gave {type(value).__name__} {value!r:.60} for prompt "
                                 f"{prompt!r:.80}; fix: return a str or a list of str")
        return list(texts)

    def complete(self, prompts: list[str], n: int, seed: int) -> list[list[str]]:
        if n < 1:
            raise LingtestError(f"completions per prompt = {n}: must be >= 1")
        if not prompts:
            return []
        if self.batched:
            try:
                raw = self._fn(list(prompts), **self._keywords(n, seed))
            except Exception as exc:
                raise self.user.fail(f"generate() raised {type(exc).__name__}: {exc} (first "
                                     f"prompt {prompts[0]!r:.80})") from exc
            if isinstance(raw, str) or not hasattr(raw, "__len__") or len(raw) != len(prompts):
                count = len(raw) if hasattr(raw, "__len__") and not isinstance(raw, str) \
                    else type(raw).__name__
                raise self.user.fail(f"generate() gave {count} entries for {len(prompts)} "
                                     f"prompts (first prompt {prompts[0]!r:.80}); fix: one "
                                     f"list of completions per prompt, in order")
            values = list(raw)
        else:
            values = []
            for index, prompt in enumerate(prompts):
                try:
                    values.append(self._fn(prompt, **self._keywords(n, seed + index)))
                except Exception as exc:
                    raise self.user.fail(f"raised {type(exc).__name__}: {exc} on prompt "
                                         f"{prompt!r:.80}") from exc
        return [_cleaned(self._texts(v, p), self.sampling.stop)[:n]
                for v, p in zip(values, prompts)]


GENERATOR_KEY = "--generator"


def make_generator(spec: str, offline: bool = True, base_url: str | None = None,
                   sampling: SamplingSettings = SamplingSettings(),
                   settings: LLMSettings = LLMSettings(), root=None,
                   names: dict[str, str] | None = None) -> Generator:
    """``openai:<model>[@URL]`` (completions), ``openai-chat:<model>[@URL]``,
    ``python:<module or file.py>:<attr>``, ``hf:<id>`` or a bare id (``root``: where a
    relative ``python:`` file is)."""
    ref = parse_llm(spec, GENERATOR_KEY, names, root)
    if ref.form in ("openai", "openai-chat"):
        return HTTPGenerator(ref.target, base_url, "completions" if ref.form == "openai"
                             else "chat", sampling, settings, ref)
    if ref.form == "python":
        from lingtest.tasks.models.user_code import load_user_object
        return UserGenerator(load_user_object(ref, root), sampling)
    if ref.form == "ollama":
        raise LingtestError(f"{GENERATOR_KEY} {spec}: suggestions need a completions API; "
                            f"fix: openai:{ref.target}@http://HOST:11434/v1 (Ollama's "
                            f"OpenAI-compatible API)")
    return LocalGenerator(ref.target, offline=offline, sampling=sampling)


def prompt_id(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:12]


def suggestions_frame(prompts: list[str], completions: list[list[str]], generator_id: str,
                      seed: int) -> pd.DataFrame:
    """One row per completion, in prompt order, with where it came from."""
    rows = [{"prompt_index": i, "prompt_id": prompt_id(p), "input": text,
             "generator": generator_id, "seed": seed + i}
            for i, (p, texts) in enumerate(zip(prompts, completions)) for text in texts]
    return pd.DataFrame(rows, columns=SUGGESTION_COLUMNS)


def dedupe(suggestions: pd.DataFrame, tree: TestTree, topic: str) -> pd.DataFrame:
    """First occurrence of each input, minus inputs already in ``topic`` of ``tree``."""
    known = set(tree.frame.loc[tree.frame["topic"] == topic, "input"])
    keep = ~suggestions["input"].duplicated() & ~suggestions["input"].isin(known)
    return suggestions[keep].reset_index(drop=True)


def suggestion_cases(suggestions: pd.DataFrame, topic: str, expectations: list[str],
                     round_no: int = 0) -> pd.DataFrame:
    """The suggestions as cases of the shared contract, one expectation text each."""
    if len(expectations) != len(suggestions):
        raise LingtestError(f"suggestion_cases: {len(expectations)} expectations for "
                            f"{len(suggestions)} suggestions")
    rows = []
    for (_, s), expect in zip(suggestions.iterrows(), expectations):
        rows.append({"case_id": case_id(METHOD, [s["input"]], expect), "method": METHOD,
                     "topic": to_topic(topic), "input": s["input"], INPUT_B: "",
                     "expectation": expect,
                     "provenance": provenance_json(round=round_no, prompt_id=s["prompt_id"],
                                                   generator=s["generator"],
                                                   seed=int(s["seed"]))})
    return pd.DataFrame(rows, columns=["case_id", "method", "topic", "input", INPUT_B,
                                       "expectation", "provenance"])


def score_suggestions(cases: pd.DataFrame, models: list[SentimentModel]) -> tuple[
        pd.DataFrame, pd.DataFrame]:
    """(cases with ``<model> score`` / ``<model> output`` / ``<model> verdict`` columns,
    sorted by the first model's failure score, worst first; the contract result rows)."""
    if not models:
        raise LingtestError("score_suggestions: no model under test; name at least one")
    ranked, results = cases.reset_index(drop=True).copy(), []
    for model in models:
        scored = score_cases(ranked, model)
        results.append(scored)
        ranked[score_column(model.model_id)] = scored["score"].to_numpy()
        ranked[f"{model.model_id} output"] = scored["output"].to_numpy()
        ranked[f"{model.model_id} verdict"] = scored["verdict"].to_numpy()
    first = score_column(models[0].model_id)
    order = np.argsort(-ranked[first].fillna(-np.inf).to_numpy(), kind="stable")
    return ranked.iloc[order].reset_index(drop=True), pd.concat(results, ignore_index=True)
