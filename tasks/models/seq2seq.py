"""A local encoder-decoder LM (T5 and kin) as an LLM backend: the guide lists a T5 model
beside Ollama and Llama (KomMKonLLM ``t5-flask-app``: ``AutoModelForSeq2SeqLM``, the prompt
stripped with newlines as spaces, the decoded output). Spec ``seq2seq:<hub id or folder>``.

Decoding is greedy (the guide's app uses 2 beams; greedy keeps a run reproducible and
batchable) and stops each row once its JSON answer is complete (``json_stop``), under the
``max_new_tokens`` cap. The model is resolved like every local model
(``lingtest.tasks.models.registry.resolve``, kind ``seq2seq``): a folder, the Hugging Face cache
offline, or the hub online.
"""
from __future__ import annotations

import logging
import threading

import torch

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.llm import (
    STOP_RULE,
    LLMResponse,
    LLMSettings,
    OnAnswer,
    answer_in_batches,
)
from lingtest.tasks.models.model_spec import ModelRef

log = logging.getLogger(__name__)


class Seq2SeqLLM:
    """Greedy answers of an ``AutoModelForSeq2SeqLM`` (no chat template: T5 has none)."""

    def __init__(self, ref: ModelRef, settings: LLMSettings):
        from lingtest.tasks.models.encoders import pick_device
        from lingtest.tasks.models.registry import (hub_offline, loaded_revision, resolve,
                                           transformers_classes)

        AutoModelForSeq2SeqLM, AutoTokenizer = transformers_classes("AutoModelForSeq2SeqLM",
                                                                    "AutoTokenizer")

        self.model_id, self.name, self.settings = ref.bare, ref.name, settings
        self.resolution = resolve(ref.target, "seq2seq", offline=settings.offline).require()
        source = self.resolution.path or ref.target
        extra = {"local_files_only": True} if settings.offline else {}
        try:
            with hub_offline(settings.offline):
                self.tokenizer = AutoTokenizer.from_pretrained(source, **extra)
                self.model = AutoModelForSeq2SeqLM.from_pretrained(source, **extra)
        except (OSError, ValueError) as error:
            raise LingtestError(f"consistency.llms: `{ref.spec}` is no loadable seq2seq "
                                f"model ({error}); fix: a folder or hub id of an "
                                "encoder-decoder model such as T5") from None
        self.revision = loaded_revision(self.resolution, self.model.config)  # hub: the commit
        self.device = pick_device(settings.device)
        self.model.to(self.device).eval()
        self._lock = threading.Lock()
        if settings.temperature > 0:
            log.warning("%s: the seq2seq backend decodes greedily; temperature=%s is ignored",
                        self.model_id, settings.temperature)

    def parameters(self) -> dict:
        """What fixes the answers: revision, greedy decoding, cap, stop rule, batch size."""
        return {"backend": "transformers-seq2seq", "spec": self.model_id,
                "model_id": self.resolution.model_id, "source": self.resolution.source,
                "revision": self.revision, "gguf_file": None, "dtype":
                str(self.model.dtype).removeprefix("torch."),
                "architecture": type(self.model).__name__,
                "decoding": {"strategy": "greedy", "do_sample": False, "num_beams": 1},
                "max_new_tokens": self.settings.max_new_tokens,
                "stop": STOP_RULE, "batch_size": self.settings.batch_size}

    def _generate(self, prompts: list[str]) -> list[str]:
        from lingtest.tasks.models.json_stop import JSONAnswerStop, StoppingCriteriaList, json_end

        texts = [p.strip().replace("\n", " ") for p in prompts]  # as the guide's T5 app
        batch = self.tokenizer(texts, return_tensors="pt", padding=True).to(self.device)
        # The decoder's ids start with one decoder-start token; new text follows it.
        stop = StoppingCriteriaList([JSONAnswerStop(self.tokenizer, 1)])
        with self._lock, torch.inference_mode():
            out = self.model.generate(input_ids=batch["input_ids"],
                                      attention_mask=batch["attention_mask"],
                                      max_new_tokens=self.settings.max_new_tokens,
                                      do_sample=False, num_beams=1, stopping_criteria=stop)
        decoded = self.tokenizer.batch_decode(out, skip_special_tokens=True)
        return [text[:json_end(text) or len(text)].strip() for text in decoded]

    def answer(self, prompts: list[str], on_answer: OnAnswer | None = None
               ) -> list[LLMResponse]:
        """Answers in prompt order, failures as error responses (``answer_in_batches``),
        each batch to ``on_answer`` as it returns."""
        return answer_in_batches(self.model_id, prompts, self.settings.batch_size,
                                 self._generate, on_answer)

    def __repr__(self) -> str:
        return f"Seq2SeqLLM({self.model_id!r}, {self.revision!r})"
