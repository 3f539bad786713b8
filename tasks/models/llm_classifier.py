"""An LLM as the sentiment classifier under test (capabilities, the CheckList comparison,
adaptive, ``lingtest test``), served (``openai:``/``openai-chat:``/``ollama:``), local
(``hf:``, a causal LM's hub id or folder) or the user's own (a ``python:`` object with
``generate``, e.g. a ``transformers`` text-generation pipeline from ``lingtest.test``).

Each text is put into a prompt template (``{text}``) and the model's answer is read against
label words (default: negative / neutral / positive). The probabilities come from the
model's own scores wherever it gives them (``scoring``):

- **next-token** (a local causal LM): P(label word | prompt) by teacher forcing each spelling
  of each label word (as written and capitalised) after the chat template's answer prompt,
  summed per label, then normalised over the labels. Exact; the share the label words got
  of the whole distribution is kept as the *label mass*.
- **logprobs** (a server that returns token log-probabilities: OpenAI-compatible chat with
  ``logprobs``/``top_logprobs``, Ollama's ``logprobs``): along the answer's greedy tokens,
  from the token where the answer's first label word begins (the first token, or after a
  lead-in such as "The sentiment is"), each alternative token that singles out one label
  (its text starts a label word, or a word starts with it) adds P(greedy prefix) · P(token)
  to that label, the lead-in given; normalised over the labels.
  Exact for the label the model chose, a lower bound for the others (a label reached only
  through tokens outside the top ``TOP_LOGPROBS`` is missed); the label mass says how much.
- **text** (a server without log-probabilities, ``scoring=text``, or a ``python:`` LLM, which
  returns text only): the first label word in the answer (whole word, any case) gets
  probability 1.

An answer whose text names no label word (and a call that failed after its retries) is an
``undefined`` verdict, whatever probability its alternative tokens gave the labels, with a NaN probability row: counted and shown, never read as a label. Answers go to
the answer store (the consistency store's schema, ``data/cache/llm-answers.sqlite``) the
moment they return, so a rerun asks nothing twice and a killed run loses no answer. (Not the
consistency stage's own database: that file is the consistency stage's DVC output.)
"""
from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.io import sha256_text
from lingtest.tasks.core.validate import param_path
from lingtest.tasks.models.label_maps import LABELS2, LABELS3
from lingtest.tasks.models.llm_http import OllamaLLM, OpenAILLM, public_url
from lingtest.tasks.models.model_spec import ModelRef
from lingtest.tasks.models.sentiment import DEFAULT_BAND, SentimentModel, _check_texts

DEFAULT_TEMPLATE = ("What is the sentiment of the following text? Answer with one word: "
                    "positive, negative or neutral.\n\nText: {text}")
DEFAULT_WORDS = {"neg": ("negative",), "neutral": ("neutral",), "pos": ("positive",)}
SCORINGS = ("auto", "logprobs", "text", "next-token")
TOP_LOGPROBS = 20   # OpenAI's largest top_logprobs
ANSWER_TOKENS = 16  # a one-word answer, or a short sentence that leads in to the label
ANSWERS_DB = Path("data") / "cache" / "llm-answers.sqlite"
# How a local LM's label words are read (part of its answer-store key: another reading, other
# last bits): one row per longest token prefix of the spellings, read at each position.
LABEL_ROWS = "per longest prefix"
SERVED_FORMS = ("openai", "openai-chat", "ollama")
LOCAL_LM_FORMS = ("hf", "hub", "folder")
USER_FORMS = ("python",)  # the user's own LLM object: generate(prompts) -> texts
_OPENERS = " \t\n\"'*`([:"  # what may precede the label word in an answer
_STORE_OPENING = threading.Lock()


@dataclass(frozen=True)
class Prompting:
    """What the model is asked and how its answer is read."""

    template: str
    words: dict[str, tuple[str, ...]]  # label → the words that name it, labels in order
    template_source: str               # "default", "models.llm_classifier" or the file
    scoring: str

    @property
    def labels(self) -> tuple[str, ...]:
        return LABELS3 if "neutral" in self.words else LABELS2

    def prompt(self, text: str) -> str:
        return self.template.replace("{text}", text)

    def describe(self) -> dict[str, Any]:
        return {"template": self.template_source, "template_sha256": sha256_text(self.template)[:16],
                "label_words": {k: list(v) for k, v in self.words.items()},
                "scoring": self.scoring}


def prompting_for(ref: ModelRef, settings: dict | None, root: Path | None) -> Prompting:
    """The model's template, label words and scoring: its spec's ``#template=`` /
    ``#scoring=``, else ``models.llm_classifier`` under its name or spec, else the defaults."""
    from lingtest.tasks.core.sections import LLMClassifierParams

    mine = (settings or {}).get(ref.name) or (settings or {}).get(ref.bare)
    mine = mine if isinstance(mine, LLMClassifierParams) else LLMClassifierParams(**(mine or {}))
    key = f"models.llm_classifier[{ref.name!r}]"
    scoring = ref.options.get("scoring") or mine.scoring
    if scoring not in SCORINGS:
        raise LingtestError(f"model `{ref.spec}`: scoring={scoring!r}; expected one of "
                            f"{', '.join(SCORINGS)}")
    local = ref.form in LOCAL_LM_FORMS
    if scoring == "next-token" and not local:
        raise LingtestError(f"model `{ref.spec}`: scoring=next-token needs a local LM (hf:...); "
                            f"a served model gives logprobs or text")
    if scoring in ("logprobs", "next-token") and ref.form in USER_FORMS:
        raise LingtestError(f"model `{ref.spec}`: scoring={scoring}, but a python: LLM returns "
                            f"text only; fix: scoring=text (or auto)")
    if scoring in ("logprobs", "text") and local:
        raise LingtestError(f"model `{ref.spec}`: scoring={scoring} applies to served models; a "
                            f"local LM is scored by its next-token distribution (scoring=auto)")
    file = ref.options.get("template") or mine.template_file
    if file:
        path = param_path(file, root or Path.cwd())
        if not path.is_file():
            raise LingtestError(f"model `{ref.spec}`: template file {file} does not exist "
                                f"(relative paths start at the project root); fix: the path of "
                                f"a text file holding the prompt with {{text}}")
        template, source = path.read_text(encoding="utf-8"), str(file)
        if template.count("{text}") != 1:
            raise LingtestError(f"{file}: the template must hold {{text}} exactly once, where "
                                f"the text goes (found {template.count('{text}')})")
    else:
        template = mine.template or DEFAULT_TEMPLATE
        source = key if mine.template else "default"
    words = {label: tuple(w.strip() for w in ws if w.strip())
             for label, ws in (mine.labels or DEFAULT_WORDS).items()}
    words = {label: words[label] for label in LABELS3 if label in words}
    named = [w.lower() for ws in words.values() for w in ws]
    clash = sorted({w for w in named if named.count(w) > 1})
    if clash or not all(words.values()):
        raise LingtestError(f"{key}.labels: {'word ' + repr(clash[0]) + ' names two labels' if clash else 'a label without words'}; "
                            f"fix: one or more distinct words per label")
    return Prompting(template, words, source, scoring)


# --------------------------------------------------------------------------- reading answers

def first_label(text: str | None, words: dict[str, tuple[str, ...]]
                ) -> tuple[str, int] | None:
    """(the label whose word comes first in ``text``, where that word starts), whole words
    in any case; None if the text names none."""
    if not text:
        return None
    found = []
    for label, spellings in words.items():
        for word in spellings:
            match = re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text, re.IGNORECASE)
            if match:
                found.append((match.start(), -len(word), label))
    return (min(found)[2], min(found)[0]) if found else None


def parse_label(text: str | None, words: dict[str, tuple[str, ...]]) -> str | None:
    """The label whose word comes first in ``text``; None if none."""
    found = first_label(text, words)
    return found[0] if found else None


def token_at(tokens: list[dict], start: int) -> int | None:
    """The index of the answer token that holds character ``start`` of the answer's text
    (the tokens' texts joined), None when the tokens do not reach it."""
    seen = 0
    for index, position in enumerate(tokens):
        seen += len(str(position.get("token", "")))
        if seen > start:
            return index
    return None


def label_masses(tokens: list[dict], words: dict[str, tuple[str, ...]]) -> dict[str, float]:
    """Per label, the probability of the answers that single it out, from the answer's
    tokens (each ``{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}``): see the
    module docstring. Labels no token reached get 0."""
    spellings = [(label, w.lower()) for label, ws in words.items() for w in ws]
    mass = dict.fromkeys(words, 0.0)
    prefix, prefix_logp = "", 0.0
    for position in tokens:
        chosen = str(position.get("token", ""))
        options = [(str(o.get("token", "")), o.get("logprob")) for o in
                   position.get("top_logprobs") or [] if isinstance(o, dict)]
        if chosen not in [t for t, _ in options]:
            options.append((chosen, position.get("logprob")))
        going_on = None
        for token, logp in options:
            if not isinstance(logp, (int, float)) or not math.isfinite(logp):
                continue
            candidate = (prefix + token.lower()).lstrip(_OPENERS)
            if not candidate:  # a leading space or quote: the word is still to come
                if token == chosen:
                    going_on = candidate
                continue
            fits = {label for label, word in spellings
                    if word.startswith(candidate) or candidate.startswith(word)}
            if len(fits) == 1:
                mass[next(iter(fits))] += math.exp(prefix_logp + logp)
            elif len(fits) > 1 and token == chosen:  # e.g. "ne": negative or neutral
                going_on = candidate
        if going_on is None:
            break
        chosen_logp = position.get("logprob")
        if not isinstance(chosen_logp, (int, float)):
            break
        prefix, prefix_logp = going_on, prefix_logp + chosen_logp
    return mass


@dataclass
class Tally:
    """How this model's answers were obtained in this process (for the report)."""

    asked: int = 0          # prompts sent (or scored) now
    stored: int = 0         # answers read from the answer store
    failed: int = 0         # calls that failed after their retries (undefined, asked again)
    by_method: dict[str, int] = field(default_factory=dict)  # logprobs / text / next-token
    undefined: int = 0
    label_mass: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        mass = [m for m in self.label_mass if m == m]
        return {"asked now": self.asked, "from the answer store": self.stored,
                "failed calls": self.failed, "undefined": self.undefined,
                "probabilities from": dict(sorted(self.by_method.items())),
                "mean label mass": round(float(np.mean(mass)), 4) if mass else None}


def label_rows(token_ids: list[tuple[int, ...]]
               ) -> tuple[list[tuple[int, ...]], int, dict[tuple[int, ...], tuple[int, int]]]:
    """How to read label spellings of ``token_ids`` teacher-forced after a prompt: the rows
    to run (each prompt + one longest token prefix), how many last positions to keep, and
    for each prefix its (row, kept position) holding log p(next token | prompt + prefix)."""
    prefixes = list(dict.fromkeys(ids[:j] for ids in token_ids for j in range(len(ids))))
    longest = [p for p in prefixes
               if not any(len(q) > len(p) and q[:len(p)] == p for q in prefixes)]
    last = max(map(len, longest)) + 1
    return longest, last, {p: next((k, last - 1 - len(m) + len(p))
                                   for k, m in enumerate(longest) if m[:len(p)] == p)
                           for p in prefixes}


def spelled_logprobs(next_logp: Mapping[tuple[int, ...], np.ndarray],
                     spelled: Sequence[tuple[str, tuple[int, ...]]]) -> dict[str, float]:
    """Per label, log P(any of its spellings | prompt): each spelling's tokens scored
    teacher-forced (``next_logp[prefix]``: log p(next token | prompt + prefix)), its
    spellings' probabilities summed."""
    scores: dict[str, list[float]] = {}
    for label, ids in spelled:
        scores.setdefault(label, []).append(
            sum(float(next_logp[ids[:j]][tok]) for j, tok in enumerate(ids)))
    return {label: float(np.logaddexp.reduce(v)) for label, v in scores.items()}


class LLMClassifier(SentimentModel):
    """An LLM asked to label each text (see the module docstring)."""

    per_text = True

    def __init__(self, ref: ModelRef, prompting: Prompting, root: Path, offline: bool = True,
                 device: str = "auto", seed: int = 0,
                 neutral_band: tuple[float, float] = DEFAULT_BAND, http=None,
                 lm_engine: tuple[str, str] = ("transformers", "float32")):
        super().__init__(ref.name, None, prompting.labels, neutral_band)
        self.ref, self.prompting, self.root = ref, prompting, Path(root)
        self.offline, self.device, self.seed = offline, device, seed
        self.lm_engine = lm_engine  # (models.lm_engine, lm_precision) for a local LM
        self.http = http  # the project's HTTP settings (timeouts, retries, concurrency)
        self.spec = ref.bare if ref.bare != ref.name else None
        self.local = ref.form in LOCAL_LM_FORMS
        self.user_code = ref.form in USER_FORMS
        self.tally = Tally()
        self._backend: Any = None
        self._store: Any = None
        self._model_key: int | None = None
        if self.local:
            from lingtest.tasks.models.registry import resolve

            res = resolve(ref.target, "causal_lm", offline=offline).require()
            self.revision = res.revision
        else:
            self.revision = self._served().revision()

    # ------------------------------------------------------------------ backends

    def _served(self):
        if self._backend is None:
            from dataclasses import replace

            from lingtest.tasks.models.llm import LLMSettings

            settings = replace(self.http or LLMSettings(), max_new_tokens=ANSWER_TOKENS,
                               temperature=0.0, seed=self.seed, offline=self.offline)
            if self.user_code:
                from lingtest.tasks.models.llm import UserLLM
                from lingtest.tasks.models.user_code import load_user_object

                self._backend = UserLLM(load_user_object(self.ref, self.root), settings)
            else:
                kind = OllamaLabels if self.ref.form == "ollama" else ChatLabels
                self._backend = kind(self.ref, settings, self.prompting.scoring != "text")
        return self._backend

    def _lm(self):
        if self._backend is None:
            from lingtest.tasks.models.causal_lm import load_causal_lm

            self._backend = load_causal_lm(self.ref.target, self.offline, self.device,
                                           *self.lm_engine)
        return self._backend

    def identity(self) -> dict[str, Any]:
        """What determines the answers: the answer store's model key."""
        served = {} if self.local else self._served().parameters()
        engine = self.engine()  # another engine: other last bits, so a new key
        return {"spec": self.ref.bare if not served else served["spec"],
                "revision": self.revision, **self.prompting.describe(), **served,
                "answer_tokens": None if self.local else ANSWER_TOKENS,
                "top_logprobs": None if self.local or self.user_code else TOP_LOGPROBS,
                **({"label_rows": LABEL_ROWS} if self.local else {}),
                **({"engine": engine} if engine else {})}

    def engine(self) -> dict[str, str] | None:
        """A local LM's engine when it is not transformers (``lm_engines.planned_engine``)."""
        if not self.local:
            return None
        from lingtest.tasks.models.lm_engines import planned_engine

        return planned_engine(*self.lm_engine, self.device)

    def _answers_store(self):
        with _STORE_OPENING:  # one instance's threads open it once (open_store: processes)
            if self._store is None:
                from lingtest.tasks.consistency.store import open_store
                from lingtest.tasks.core.secrets import redact_text

                self._store = open_store(f"sqlite:///{self.root / ANSWERS_DB}")
                # without a URL password, as the consistency store keys (answering.store_key)
                self._model_key = self._store.upsert_model(redact_text(self.ref.bare),
                                                           self.identity())
        return self._store

    # ------------------------------------------------------------------ answering

    def answers(self, texts: list[str]) -> list[str | None]:
        """Each text's stored or new answer (None: the call failed; asked again next run)."""
        prompts = [self.prompting.prompt(t) for t in texts]
        store = self._answers_store()
        distinct = list(dict.fromkeys(prompts))
        known = store.classifier_answers(self._model_key, distinct)
        todo = [p for p in distinct if p not in known]
        self.tally.stored += len(distinct) - len(todo)
        if todo:
            self.tally.asked += len(todo)
            known.update(self._local_answers(todo) if self.local else self._served_answers(todo))
        return [known.get(p) for p in prompts]

    def _served_answers(self, prompts: list[str]) -> dict[str, str]:
        from lingtest.tasks.models.llm import answer_each

        got: dict[str, str] = {}

        def keep(pairs) -> None:  # a python: LLM's bare text, stored as a server's reply
            fresh = {prompts[i]: json.dumps({"text": r.text}) if self.user_code else r.text
                     for i, r in pairs if r.text is not None}
            self.tally.failed += sum(r.text is None for _, r in pairs)
            if fresh:
                self._store.save_classifier_answers(self._model_key, fresh)
                got.update(fresh)

        answer_each(self._served(), prompts, keep)
        return got

    def _local_answers(self, prompts: list[str], batch: int = 8) -> dict[str, str]:
        """Label log-probabilities of each prompt from the local LM, stored per batch: each
        spelling's tokens teacher-forced after the prompt. One row per prompt and longest
        token prefix of the spellings (``LABEL_ROWS``), read at each of its last positions:
        one row per prompt when the multi-token spellings share their prefixes (SmolLM2's
        "Neutral" is two tokens, "neutral" one: one row, where one per prefix took two)."""
        lm = self._lm()
        spellings = [(label, variant) for label, ws in self.prompting.words.items()
                     for w in ws for variant in dict.fromkeys((w, w[:1].upper() + w[1:]))]
        token_ids = [tuple(lm.tokenizer(v, add_special_tokens=False)["input_ids"])
                     for _, v in spellings]
        longest, last, read_at = label_rows(token_ids)
        chat = bool(lm.tokenizer.chat_template)
        got: dict[str, str] = {}
        for start in range(0, len(prompts), batch):
            chunk = prompts[start:start + batch]
            heads = [lm._prompt_ids(p, chat=chat, system=None) for p in chunk]
            reads = lm.last_logprobs([head + list(m) for head in heads for m in longest], last)
            fresh = {}
            for n, prompt in enumerate(chunk):
                row = {pre: reads[n * len(longest) + k, at]
                       for pre, (k, at) in read_at.items()}
                fresh[prompt] = json.dumps({"label_logprobs": spelled_logprobs(
                    row, [(label, ids) for (label, _), ids in zip(spellings, token_ids)])})
            self._store.save_classifier_answers(self._model_key, fresh)
            got.update(fresh)
        return got

    def read(self, answer: str | None) -> tuple[np.ndarray | None, str | None, float]:
        """(probabilities over ``labels`` or None: undefined, how they were obtained, the
        label mass) of one stored answer."""
        if answer is None:
            return None, None, float("nan")
        reply = json.loads(answer)
        if "label_logprobs" in reply:
            logp = np.array([reply["label_logprobs"][label] for label in self.labels])
            mass = float(np.exp(logp).sum())
            return np.exp(logp - np.logaddexp.reduce(logp)), "next-token", mass
        text, tokens = reply.get("text"), reply.get("logprobs")
        found = first_label(text, self.prompting.words)
        if found is None:  # the answer names no label, whatever else the scores held
            return None, "logprobs" if tokens else "text", float("nan")
        label, start = found
        at = token_at(tokens, start) if tokens and self.prompting.scoring != "text" else None
        if at is not None:  # from the label word on, given the answer's lead-in
            masses = label_masses(tokens[at:], self.prompting.words)
            total = sum(masses.values())
            if total > 0:
                return np.array([masses[label] / total for label in self.labels]), \
                    "logprobs", total
        if self.prompting.scoring == "logprobs":
            raise LingtestError(f"model `{self.model_id}` ({self.ref.bare}): scoring=logprobs, "
                                f"but the server returned no token log-probabilities over the "
                                f"label words for the answer {str(text)[:80]!r}; fix: "
                                f"scoring=auto (the parsed answer where none are given)")
        return np.array([float(label == lab) for lab in self.labels]), "text", float("nan")

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        """Probabilities over ``labels``; an undefined answer's row is NaN."""
        texts = _check_texts(texts)
        out = np.full((len(texts), len(self.labels)), np.nan)
        for row, answer in enumerate(self.answers(texts)):
            probs, how, mass = self.read(answer)
            if how is not None:
                self.tally.by_method[how] = self.tally.by_method.get(how, 0) + 1
            self.tally.label_mass.append(mass)
            if probs is None:
                self.tally.undefined += 1
            else:
                out[row] = probs
        return out

    # ------------------------------------------------------------------ provenance

    def parameters(self) -> dict[str, object]:
        out = {**super().parameters(), "spec": self.ref.bare, **self.prompting.describe(),
               "probabilities": self.probability_rule()}
        engine = self.engine()
        if self.user_code:
            out["code"] = f"{self.ref.bare} @ {self.revision}"
        elif not self.local:
            out["endpoint"] = self._served().endpoint()["base_url"]
        elif engine:
            out["engine"] = " ".join(engine.values())
        return out

    def cache_token(self) -> dict[str, object]:
        return {**self.parameters(), "identity": self.identity()}

    def probability_rule(self) -> str:
        if self.local:
            return "next-token distribution over the label words (exact, normalised)"
        if self.prompting.scoring == "text" or self.user_code:
            return "parsed answer (probability 1); no label named: undefined"
        return ("token log-probabilities over the label words where the server returns "
                "them" + ("" if self.prompting.scoring == "logprobs" else
                          ", else the parsed answer (probability 1)")
                + "; no label named: undefined")

    def __getstate__(self) -> dict:
        """Without the HTTP client, the loaded LM and the database handle (rebuilt on use),
        so the model travels to Dask workers."""
        state = dict(self.__dict__)
        state.update(_backend=None, _store=None, _model_key=None)
        return state


# --------------------------------------------------------------------------- served backends

def _revision_of(backend, listed: dict | None) -> str:
    """What the server states of its model: Ollama's digest, or the weights an OpenAI-
    compatible server names as the entry's ``root`` (vLLM). Not ``created``: vLLM's and
    lmdeploy's model cards stamp it with each request's time, a new key every run."""
    stated = (listed or {}).get("digest") or (listed or {}).get("root")
    return f"endpoint {public_url(backend.base_url)} model {backend.model}" + (
        f" ({stated})" if stated else " (the server states no version)")


class ChatLabels(OpenAILLM):
    """OpenAI-compatible chat completions asking for token log-probabilities; the answer kept
    is the reply's text and those log-probabilities, as JSON."""

    def __init__(self, ref: ModelRef, settings, logprobs: bool):
        super().__init__(ref, settings, key="capabilities.models")
        self.logprobs = logprobs

    def _body(self, prompt: str) -> dict[str, Any]:
        body = super()._body(prompt)
        if self.logprobs:
            body.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
        return body

    def _text(self, payload: dict[str, Any]) -> str | None:
        text = super()._text(payload)
        try:
            tokens = payload["choices"][0].get("logprobs") or {}
        except (KeyError, IndexError, TypeError, AttributeError):
            tokens = {}
        content = tokens.get("content") if isinstance(tokens, dict) else None
        return json.dumps({"text": text or "", "logprobs": content or None})

    def _finish(self, payload: dict[str, Any]) -> str | None:
        """No cap warning: an answer longer than ``ANSWER_TOKENS`` is cut on purpose (the
        label comes first; a cut answer that names none is undefined, and counted)."""
        return None

    def revision(self) -> str:
        """The model's entry in ``GET /models`` where listed (``_revision_of``)."""
        import httpx

        try:
            with self._limit.slot():
                reply = self._client.get(f"{self.base_url}/models", timeout=5.0)
            listed = next((m for m in reply.json().get("data", [])
                           if m.get("id") == self.model), None) if reply.is_success else None
        except (httpx.HTTPError, ValueError, AttributeError):
            listed = None
        return _revision_of(self, listed)


class OllamaLabels(OllamaLLM):
    """Ollama's generate API without the JSON format the consistency answers use, asking for
    log-probabilities (Ollama 0.12 and later return them)."""

    def __init__(self, ref: ModelRef, settings, logprobs: bool):
        super().__init__(ref, settings, key="capabilities.models")
        self.logprobs = logprobs

    def _body(self, prompt: str) -> dict[str, Any]:
        body = {k: v for k, v in super()._body(prompt).items() if k != "format"}
        if self.logprobs:
            body.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
        return body

    def _text(self, payload: dict[str, Any]) -> str | None:
        text = super()._text(payload)
        tokens = payload.get("logprobs")
        return json.dumps({"text": text or "", "logprobs": tokens if isinstance(tokens, list)
                           else None})

    def _finish(self, payload: dict[str, Any]) -> str | None:
        return None  # as ChatLabels: cut on purpose

    def revision(self) -> str:
        return _revision_of(self, {"digest": self.digest()})


# --------------------------------------------------------------------------- loading

def is_local_lm(ref: ModelRef) -> bool:
    """A local causal LM: a spec whose kind (``checks.infer_kind``: ``hf:``, or a hub id or
    folder its files or the registry call one) is an LLM, served forms aside."""
    if ref.form not in LOCAL_LM_FORMS:
        return False
    from lingtest.tasks.models.checks import infer_kind

    try:
        return infer_kind(ref, Path.cwd())[0] == "llm"
    except LingtestError:  # a hub id nothing here holds: the classifier loader says so
        return False


def is_user_llm(ref: ModelRef, root: Path | None = None) -> bool:
    """A ``python:`` object whose protocol is an LLM's (``generate``), not a classifier's."""
    if ref.form not in USER_FORMS:
        return False
    from lingtest.tasks.models.checks import infer_kind

    try:
        return infer_kind(ref, root or Path.cwd())[0] == "llm"
    except LingtestError:  # no protocol at all: the classifier's check names what is missing
        return False


def is_llm_classifier(ref: ModelRef, root: Path | None = None) -> bool:
    """A spec that is tested as a classifier through a prompt."""
    return ref.form in SERVED_FORMS or is_local_lm(ref) or is_user_llm(ref, root)


def load_llm_classifier(ref: ModelRef, root: Path, settings: dict | None = None,
                        offline: bool = True, device: str = "auto", seed: int = 0,
                        neutral_band: tuple[float, float] = DEFAULT_BAND,
                        label_map: dict | None = None, http=None,
                        lm_engine: tuple[str, str] = ("transformers", "float32")
                        ) -> LLMClassifier:
    """The classifier for an LLM spec; one error for a bad template, option or label map.
    ``http``: the project's HTTP settings (``embedding_endpoints.endpoint_settings``);
    ``lm_engine``: (``models.lm_engine``, ``lm_precision``) for a local LM."""
    if label_map:
        raise LingtestError(f"models.label_map[{ref.name!r}]: an LLM classifier names its "
                            f"labels by words; fix: models.llm_classifier: {{{ref.name}: "
                            f"{{labels: {{neg: [...], pos: [...]}}}}}}")
    return LLMClassifier(ref, prompting_for(ref, settings, root), root, offline, device, seed,
                         neutral_band, http, lm_engine)


# --------------------------------------------------------------------------- reports

def llm_classifier_of(model) -> LLMClassifier | None:
    """``model`` (or the tested model it wraps) when it is an LLM classifier, else None."""
    inner = getattr(model, "model", model)
    return inner if isinstance(inner, LLMClassifier) else None


def answer_counts(model) -> dict[str, Any]:
    """A unit's by-product for the report when ``model`` (or the tested model it wraps) is
    an LLM classifier: what it is and how this unit's answers were obtained; else {}."""
    inner = llm_classifier_of(model)
    if inner is None:
        return {}
    params = inner.parameters()
    about = {key: params[key] for key in ("probabilities", "template", "template_sha256",
                                          "label_words", "endpoint", "engine", "code")
             if key in params}
    return {"llm_answers": {"model_id": inner.model_id, "about": about,
                            "tally": inner.tally.as_dict(),
                            "answers": inner.tally.asked + inner.tally.stored}}


def llm_provenance(extras: list[dict]) -> dict[str, str]:
    """One provenance line per LLM classifier, from its units' ``answer_counts``: the
    endpoint (no secret), template, label words, how probabilities were obtained, and the
    run's answers (asked now, from the store, failed calls, undefined)."""
    by_model: dict[str, list[dict]] = {}
    for extra in extras:
        if "llm_answers" in extra:
            by_model.setdefault(extra["llm_answers"]["model_id"], []).append(extra["llm_answers"])
    lines = {}
    for name, parts in by_model.items():
        about, tallies = parts[0]["about"], [p["tally"] for p in parts]
        total = {k: sum(t[k] for t in tallies) for k in
                 ("asked now", "from the answer store", "failed calls", "undefined")}
        how: dict[str, int] = {}
        for t in tallies:
            for method, n in t["probabilities from"].items():
                how[method] = how.get(method, 0) + n
        masses = [(t["mean label mass"], p["answers"]) for t, p in zip(tallies, parts)
                  if t["mean label mass"] is not None and p["answers"]]
        mass = (sum(m * n for m, n in masses) / sum(n for _, n in masses)) if masses else None
        words = "; ".join(f"{label}: {', '.join(ws)}" for label, ws in about["label_words"].items())
        lines[f"LLM classifier {name}"] = (
            (f"endpoint {about['endpoint']}; " if "endpoint" in about else
             f"python: LLM {about['code']}; " if "code" in about else
             f"local LM on {about['engine']}; " if "engine" in about else "local LM; ")
            + f"template {about['template']} (sha256 {about['template_sha256']}); label words "
            f"{words}; probabilities: {about['probabilities']}; answers: "
            + ", ".join(f"{n} {what}" for what, n in total.items())
            + "; probabilities from " + (", ".join(f"{m} {n}" for m, n in sorted(how.items()))
                                         or "none")
            + (f"; mean label mass {mass:.3f}" if mass is not None else "")
            + f" (answer store {ANSWERS_DB.as_posix()})")
    return lines
