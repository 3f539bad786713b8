"""Suggestion generators: an OpenAI-compatible endpoint (a fake on 127.0.0.1), the packaged
SmolLM2 sampled locally, dedupe and scoring of suggestions."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
import pytest
from llm_servers import FakeLLMServer

from lingtest.tasks.adaptive.cases import CONTRACT
from lingtest.tasks.adaptive.generators import (HTTPGenerator, LocalGenerator, SamplingSettings,
                                       clean_completion, dedupe, make_generator, prompt_id,
                                       score_suggestions, suggestion_cases, suggestions_frame)
from lingtest.tasks.adaptive.prompts import PromptSettings, build_prompts, prompt_texts
from lingtest.tasks.adaptive.tree import new_tree, read_tree
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.schema import check_cases, check_results
from lingtest.tasks.models.llm import LLMSettings
from lingtest.tasks.models.sentiment import VaderModel

HOTEL_LINES = ("The towels were dirty", "Great pool, friendly lifeguard",
               "Sheets didn't seem clean", "The weather was nice", "")


def hotel_script(prompt: str, n: int, seed: int) -> list[str]:
    """Deterministic completions: line (seed + k) of HOTEL_LINES, as a server returns them
    (cut before the stop quote), one with a trailing second line."""
    return [HOTEL_LINES[(seed + k) % len(HOTEL_LINES)] + ("\nand more" if k == 1 else "")
            for k in range(n)]


@dataclass
class CompletionsServer(FakeLLMServer):
    """``FakeLLMServer`` (failures, Retry-After, recording) also serving ``/v1/completions``,
    answering with ``script(prompt, n, seed)``."""

    protocol: str = "openai"
    script: Callable[[str, int, int], list[str]] = hotel_script
    paths: list[str] = field(default_factory=list, init=False)

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any):
        self.paths.append(path)
        if method == "POST" and path == "/v1/completions":
            path = "/v1/chat/completions"  # the parent's route: same failure behaviour
        return super().handle(method, path, headers, body)

    def _reply(self, body: dict[str, Any]) -> dict[str, Any]:
        chat = "messages" in body
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        texts = self.script(prompt, body.get("n", 1), body.get("seed", 0))
        choices = [{"index": k, "finish_reason": "stop",
                    **({"message": {"role": "assistant", "content": t}} if chat
                       else {"text": t})} for k, t in enumerate(texts)]
        return {"id": "cmpl-test", "object": "text_completion", "model": body["model"],
                "choices": choices}


def _generator(server: CompletionsServer, api: str = "completions", **settings):
    llm = LLMSettings(**{"retries": 2, "backoff_s": 0.0, "timeout_s": 5.0, **settings})
    return HTTPGenerator("gpt-test", server.url, api, SamplingSettings(max_new_tokens=20), llm)


def test_clean_completion_cuts_at_stop_and_line_break():
    assert clean_completion(' Pool was cold" and then') == "Pool was cold"
    assert clean_completion("Pool was cold\n\"Next") == "Pool was cold"
    assert clean_completion('"') == ""


def test_http_generator_sends_adatest_sampling_and_parses_choices():
    with CompletionsServer() as server:
        generator = _generator(server)
        out = generator.complete(['"A"\n"', '"B"\n"'], n=3, seed=10)
    bodies = [r.body for r in server.generations()]
    assert server.paths == ["/v1/completions"] * 2
    assert {b["prompt"] for b in bodies} == {'"A"\n"', '"B"\n"'}
    assert all(b["temperature"] == 1.0 and b["top_p"] == 0.95 and b["stop"] == ['"']
               and b["n"] == 3 and "messages" not in b for b in bodies)
    assert sorted(b["seed"] for b in bodies) == [10, 11]
    # seed 10: lines 0,1,2; line 1 loses its second line
    assert out[0] == ["The towels were dirty", "Great pool, friendly lifeguard",
                      "Sheets didn't seem clean"]
    assert out[1] == ["Great pool, friendly lifeguard", "Sheets didn't seem clean",
                      "The weather was nice"]
    assert generator.generator_id == "openai:gpt-test"


def test_http_generator_retries_with_the_shared_request_loop():
    with CompletionsServer(fail_first=2, fail_status=503) as server:
        generator = _generator(server, concurrency=1)
        out = generator.complete(['"A"\n"'], n=1, seed=0)
    assert out == [["The towels were dirty"]]
    assert len(server.generations()) == 3  # two 503s retried, then the answer


def test_http_generator_chat_endpoint_and_total_failure():
    with CompletionsServer() as server:
        out = _generator(server, api="chat").complete(['"A"\n"'], n=1, seed=3)
    assert server.paths == ["/v1/chat/completions"]
    assert server.generations()[0].body["messages"][-1]["content"] == '"A"\n"'
    assert out == [["The weather was nice"]]
    with CompletionsServer(fail_first=99, fail_status=400) as server:
        with pytest.raises(LingtestError, match="every prompt failed.*HTTP 400"):
            _generator(server).complete(['"A"\n"'], n=1, seed=0)


def test_make_generator_specs_and_bad_settings():
    assert isinstance(make_generator("openai:m", base_url="http://127.0.0.1:9/v1"),
                      HTTPGenerator)
    assert make_generator("openai-chat:m", base_url="http://127.0.0.1:9/v1").api == "chat"
    with pytest.raises(LingtestError, match="top_p"):
        SamplingSettings(top_p=0)
    with pytest.raises(LingtestError, match="openai:<model>"):
        make_generator("hf:")


def test_dedupe_exact_and_against_the_topic():
    tree = new_tree([{"topic": "/Rooms", "input": "Sheets didn't seem clean", "label": "pass",
                      "output": "neg"},
                     {"topic": "/Pool", "input": "The towels were dirty", "label": "pass",
                      "output": "neg"}], ["a" * 32, "b" * 32])
    frame = suggestions_frame(["p0", "p1"], [["The towels were dirty", "Sheets didn't seem clean"],
                                             ["The towels were dirty", "New one"]], "g", 5)
    assert list(frame["seed"]) == [5, 5, 6, 6]
    assert frame["prompt_id"].iloc[2] == prompt_id("p1")
    kept = dedupe(frame, tree, "/Rooms")
    # the repeat goes, the /Rooms test goes; the /Pool test is another topic's
    assert list(kept["input"]) == ["The towels were dirty", "New one"]


def test_suggestions_scored_on_every_model_and_sorted_by_the_first():
    frame = suggestions_frame(["p"], [["The room was lovely", "The room was awful",
                                       "The room was a room"]], "g", 0)
    cases = suggestion_cases(frame, "/Rooms", ["should output pos"] * 3, round_no=2)
    check_cases(cases, CONTRACT)
    vader, banded = VaderModel(), VaderModel(neutral_band=(0.5, 0.5))
    banded.model_id = "vader-banded"
    ranked, results = score_suggestions(cases, [vader, banded])
    check_results(results, CONTRACT)
    assert len(results) == 6
    scores = ranked["vader score"].to_numpy()
    assert (np.diff(scores) <= 0).all() and "vader-banded score" in ranked.columns
    assert ranked["input"].iloc[0] == "The room was awful"
    assert ranked["vader verdict"].iloc[0] == "fail"
    assert pd.Series(ranked["provenance"]).str.contains('"round": 2').all()


@pytest.fixture(scope="module")
def smollm2():
    return LocalGenerator(sampling=SamplingSettings(max_new_tokens=12))


def test_smollm2_completes_a_real_prompt_deterministically(smollm2, mirror):
    tree = read_tree(mirror / "adatest" / "imdb_hotel_conversion.csv")
    settings = PromptSettings(prompt_diversity=False)
    items = build_prompts(tree, "/Rooms", np.random.default_rng(1), settings, repetitions=2)
    texts = prompt_texts(items, "/Rooms")
    first = smollm2.complete(texts, n=3, seed=4)
    again = smollm2.complete(texts[:1], n=3, seed=4)  # prompt 0 alone: same seed, same text
    assert [len(c) for c in first] and all(c for c in first)
    assert all(isinstance(s, str) and s and '"' not in s and "\n" not in s
               for c in first for s in c)
    assert again[0] == first[0]
    assert smollm2.generator_id.startswith("hf:HuggingFaceTB/SmolLM2-135M-Instruct@")


# Completions of LocalGenerator before its sampling moved into CausalLM.sample (a6ace69, the
# loop inlined in LocalGenerator.complete), seed 11, n 4, max_new_tokens 12, on this machine.
FIXED_PROMPTS = ['"The room was dirty"\n"The bed was too small"\n"',
                 '\n/Rooms:\n"The towels were clean"\n\n/Rooms:\n"']
BEFORE_THE_MOVE = [["The room was small", "The board was loose", "The man who refused to work",
                    "I needed a new wardrobe"],
                   ["The to-do list", "The new game was amazing", "The milks are delicious",
                    "They're already cleaned"]]


def test_smollm2_samples_as_before_for_a_fixed_seed(smollm2):
    """Same seed, same suggestions as the code before CausalLM.sample: a change in seeding or
    sampling arguments would change every adapt run's suggestions."""
    assert smollm2.complete(FIXED_PROMPTS, n=4, seed=11) == BEFORE_THE_MOVE
    raw = smollm2.lm.sample(FIXED_PROMPTS[0], 3, seed=5, temperature=1.0, top_p=0.95,
                            max_new_tokens=12, stop_strings=['"', "\n"])
    assert raw == ['The dead animals was dead"', 'The room was too small"', 'Overwhelmed"']


GENERATORS = '''
class Lines:
    """Completions as a server gives them: text, the stop quote, then whatever follows."""

    revision = "r2"

    def generate(self, prompts, n, seed):
        return [[f'{p.strip().splitlines()[-2].strip(chr(34))} {seed} {k}" tail' for k in range(n + 1)]
                for p in prompts]


def one_line(prompt, seed):
    return f"Pool was cold {seed}\\nsecond line"


class Miscount:
    def generate(self, prompts, n):
        return [["a"]] * (len(prompts) + 1)


def nested(prompt):
    return [["not", "text"]]


def crash(prompt):
    raise ValueError("no model here")
'''


def test_python_generator_completes_through_make_generator(tmp_path):
    (tmp_path / "gens.py").write_text(GENERATORS, encoding="utf-8")
    prompts = ['"Sheets were dirty"\n"Bed was hard"\n"', '"Pool was cold"\n"Staff was rude"\n"']
    lines = make_generator("python:gens.py:Lines", root=tmp_path)
    out = lines.complete(prompts, n=2, seed=5)
    # cut at the stop quote, at most n kept per prompt; one call with every prompt
    assert out == [["Bed was hard 5 0", "Bed was hard 5 1"],
                   ["Staff was rude 5 0", "Staff was rude 5 1"]]
    assert lines.generator_id.startswith("python:Lines@python@sha256:")
    assert lines.generator_id.endswith("+r2")
    frame = suggestions_frame(prompts, out, lines.generator_id, 5)
    assert set(frame["generator"]) == {lines.generator_id}
    # a function: once per prompt, seeded seed + prompt index, cut at the line break
    func = make_generator("python:gens.py:one_line#name=pool", root=tmp_path)
    assert func.complete(prompts, n=3, seed=10) == [["Pool was cold 10"], ["Pool was cold 11"]]
    assert func.generator_id.startswith("python:pool@python@sha256:")
    (tmp_path / "gens.py").write_text(GENERATORS + "\n# edited\n", encoding="utf-8")
    assert make_generator("python:gens.py:Lines", root=tmp_path).generator_id \
        != lines.generator_id  # an edited module is another revision
    with pytest.raises(LingtestError, match=r"gave 3 entries for 2 prompts.*Sheets"):
        make_generator("python:gens.py:Miscount", root=tmp_path).complete(prompts, 1, 0)
    with pytest.raises(LingtestError, match=r"gave list \[\['not', 'text'\]\] for prompt "
                                            r"'\"Sheets"):
        make_generator("python:gens.py:nested", root=tmp_path).complete(prompts, 1, 0)
    with pytest.raises(LingtestError, match=r"python:gens.py:crash.*ValueError: no model here"
                                            r".*Sheets were dirty"):
        make_generator("python:gens.py:crash", root=tmp_path).complete(prompts, 1, 0)


def test_http_generator_endpoint_from_the_spec_and_key_from_key_env(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("GEN_KEY", "sk-generator-secret")
    with pytest.raises(LingtestError, match="public OpenAI API"):
        make_generator("openai:gpt-test")  # no @URL, --base-url or OPENAI_BASE_URL
    with CompletionsServer() as server:
        generator = make_generator(f"openai:gpt-test@{server.url}#key_env=GEN_KEY")
        assert generator.complete(['"A"\n"'], n=1, seed=0) == [["The towels were dirty"]]
        with pytest.raises(LingtestError, match="keep one of them"):
            make_generator(f"openai:gpt-test@{server.url}", base_url="http://127.0.0.1:9/v1")
    assert server.generations()[0].headers["authorization"] == "Bearer sk-generator-secret"
    assert "sk-generator-secret" not in repr(generator) + json.dumps(generator.parameters())
