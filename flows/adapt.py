"""``lingtest adapt``: AdaTest's loop with a person in it, as a Prefect flow (not a stage).

Each round suggests tests for a topic and pauses the run (``pause_flow_run`` with a form,
one input key per round); the reviewer picks suggestions in the Prefect UI (or a script
resumes the run through the API with a ``run_input``) and the picks are written to the tree.
With ``oracle`` set the rounds run unattended (``review.run_round``, ``labeler=oracle:<id>``).
It cannot sit inside ``dvc repro`` (a paused run waits for a person), so it is a command of its
own; the tree it writes lives under ``inputs/adaptive/``, a tracked input of the stages.
"""
from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger
from prefect.flow_runs import pause_flow_run

from lingtest.tasks.adaptive.generators import make_generator
from lingtest.tasks.adaptive.membership import TopicMembership
from lingtest.tasks.adaptive.prompts import PromptSettings, minilm_embed
from lingtest.tasks.adaptive.review import ModelOracle, run_round
from lingtest.tasks.adaptive.review_form import apply_review, review_input, review_markdown, suggest
from lingtest.tasks.adaptive.tree import read_tree, write_tree
from lingtest.tasks.core.secrets import MaskedURL, plain_url
from lingtest.tasks.models.llm import LLMSettings
from lingtest.tasks.models.sentiment import load_sentiment_model

HTTP_KEYS = ("timeout_s", "retries", "backoff_s", "concurrency")


def http_parameters(params) -> dict:
    """The project's HTTP settings (``embedding_endpoints.endpoint_settings``) as the
    flow's ``http`` parameter: plain values a flow run stores."""
    from lingtest.tasks.models.embedding_endpoints import endpoint_settings

    settings = endpoint_settings(params)
    return {key: getattr(settings, key) for key in HTTP_KEYS}


@flow(name="adapt", log_prints=True)
def adapt_flow(tree_path: str, topic: str, rounds: int = 1,
               generator: str = "HuggingFaceTB/SmolLM2-135M-Instruct",
               base_url: MaskedURL | str | None = None, model: str = "vader",
               reviewer: str = "reviewer",
               oracle: str | None = None, seed: int = 0, prompts: int | None = None,
               completions: int | None = None, top: int = 20,
               binary_labels: list[str] | None = None, offline: bool = True,
               root: str = ".", review_timeout_s: int = 3600,
               poll_interval_s: int = 5, diversity: bool = True,
               oracle_min_confidence: float = 0.8,
               oracle_topic_filter: bool = True, pass_tokens: int | None = None,
               encoder_precision: str = "fp32", encoder_backend: str = "torch",
               label_maps: dict | None = None, names: dict | None = None,
               llm_classifier: dict | None = None, lm_engine: str = "transformers",
               lm_precision: str = "float32", http: dict | None = None) -> list[dict]:
    """``rounds`` rounds on ``topic`` of the tree at ``tree_path``; each round's counts.
    ``diversity`` (AdaTest's default) fills each prompt with tests unlike those already in it
    (1 − max cosine similarity of MiniLM embeddings); off, the picks follow the scores alone.
    ``oracle_min_confidence``: the ``--oracle`` model labels only what it is this sure of
    (``ModelOracle``); it abstains on the rest and on inputs that do not read as tests.
    ``oracle_topic_filter``: suggestions the tree's nearest topic puts elsewhere are off topic
    for the oracle (``TopicMembership``, MiniLM). ``pass_tokens``: the classifiers' floor of
    tokens per pass (``runtime.pass_tokens``; lower is faster on small calls);
    ``encoder_precision`` / ``encoder_backend``: their path (``runtime.encoder_*``);
    ``label_maps`` / ``names``: ``models.label_map`` / ``models.names`` for both models;
    ``llm_classifier``: ``models.llm_classifier`` (an LLM under test, prompted);
    ``lm_engine`` / ``lm_precision``: ``models.lm_*`` (a local LM under test's engine);
    ``http``: a served LLM under test's HTTP settings, ``LLMSettings`` keywords (the
    project's ``consistency.timeout_s`` / ``retries`` / ``backoff_s`` / ``concurrency``:
    ``http_parameters``; None: the defaults).
    ``base_url``: a ``MaskedURL`` keeps a password in it out of the run's stored parameters."""
    logger = get_run_logger()
    base_url = plain_url(base_url)
    path = Path(tree_path)
    tree = read_tree(path)
    encoder_path = {"precision": encoder_precision, "backend": encoder_backend,
                    "label_maps": label_maps, "names": names,
                    "llm_classifier": llm_classifier, "seed": seed,
                    "lm_engine": lm_engine, "lm_precision": lm_precision,
                    "http": LLMSettings(**http) if http else None}
    under_test = load_sentiment_model(model, (0.5, 0.5), offline, Path(root), pass_tokens,
                                      **encoder_path)
    suggester = make_generator(generator, offline=offline, base_url=base_url, root=Path(root))
    labels = tuple(binary_labels) if binary_labels else None
    settings = PromptSettings(prompt_diversity=diversity)
    # one encoder for every round: prompt diversity and the oracle's topic membership
    embed = minilm_embed(offline) if diversity or (oracle and oracle_topic_filter) else None
    reference_model = (load_sentiment_model(oracle, (0.5, 0.5), offline, Path(root),
                                            pass_tokens, **encoder_path) if oracle else None)
    history = []
    for round_no in range(1, rounds + 1):
        round_seed = seed + 1000 * (round_no - 1)
        if oracle:
            membership = TopicMembership(tree, embed) if oracle_topic_filter else None
            # the tree grows each round, so its topic membership is rebuilt; the model is not
            reference = ModelOracle(reference_model, oracle_min_confidence, membership)
            result = run_round(tree, topic, suggester, reference, [under_test], round_no,
                               round_seed, settings=settings, prompts=prompts,
                               completions=completions, embed=embed if diversity else None,
                               path=path, binary_labels=labels)
            tree, counts = result.tree, result.counts
        else:
            shown = suggest(tree, topic, suggester, under_test, round_seed, prompts,
                            completions, settings=settings, top=top,
                            binary_labels=labels, embed=embed)
            form = review_input(list(shown["input"])).with_initial_data(
                description=review_markdown(shown, topic, round_no, under_test.model_id))
            picked = pause_flow_run(wait_for_input=form, timeout=review_timeout_s,
                                    poll_interval=poll_interval_s, key=f"round-{round_no}")
            tree, counts = apply_review(tree, shown, picked, topic, reviewer, round_no,
                                        under_test.model_id)
            write_tree(tree, path)
        logger.info("adapt round %d: %s", round_no, counts)
        history.append(counts)
        if counts.get("stop"):
            break
    return history
