"""Users' own encoders in the contrastive stage: a python: hashing bag-of-words model and a
sentence-transformers model with a Dense layer (built here from the packaged MiniLM) run
through the stage under their display names; a python: module edit is a cache miss; every
bad spec or bad output is one clear error; repair refuses what it cannot train; the default
MiniLM keeps its bytes and store key."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.contrastive.embedding import EmbeddingStore, embed_texts
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.any_encoder import (OWN_ENCODE, check_contrastive_encoder, check_encoder,
                                      check_repairable, load_any_encoder)
from lingtest.tasks.models.model_spec import parse_model

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
ROW_KEYS = {"id", "name", "kind", "source", "revision", "pooling", "path"}
HASHING = '''"""A bag-of-words encoder: words hashed into N_FEATURES columns, L2-normalised."""
from sklearn.feature_extraction.text import HashingVectorizer

N_FEATURES = {n}


class HashingEncoder:
    def __init__(self):
        self.vectorizer = HashingVectorizer(n_features=N_FEATURES, alternate_sign=False,
                                            norm="l2")

    def encode(self, texts):
        return self.vectorizer.transform(texts).toarray()
'''
BAD_OUTPUTS = '''import numpy as np


def flat(texts):
    return np.ones(len(texts))


def extra_row(texts):
    return np.ones((len(texts) + 1, 3))


def with_nan(texts):
    out = np.ones((len(texts), 3))
    out[[i for i, t in enumerate(texts) if t.startswith("bad")], 1] = np.nan
    return out


def raises(texts):
    raise RuntimeError("the service is down")


def as_lists(texts):
    return [[float(len(t)), float(t.count("e")), 1.0] for t in texts]


NOT_A_MODEL = 3
'''
WORDS = ("good bad fine film movie plot actor story great awful boring funny dull sad happy "
         "long short slow fast warm cold music scene ending script").split()


def dense_folder(path: Path) -> Path:
    """A sentence-transformers model with a Dense layer (384 → 64, seeded) on the packaged
    MiniLM's transformer, saved to ``path``."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Pooling, Transformer

    from lingtest.tasks.models.registry import resolve, transformer_dir

    torch.manual_seed(0)
    base = transformer_dir(Path(resolve(MINILM, "encoder").path))
    model = SentenceTransformer(modules=[Transformer(str(base)), Pooling(384, "mean"),
                                         Dense(384, 64)], device="cpu")
    model.save(str(path))
    return path


# --------------------------------------------------------------------------- checks

@pytest.fixture(scope="module")
def dense(tmp_path_factory) -> Path:
    """The Dense folder, built once for the checks and the stage (never written to)."""
    return dense_folder(tmp_path_factory.mktemp("encoders") / "minilm-dense")


@pytest.fixture(scope="module")
def user_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user")
    (root / "models").mkdir()
    (root / "models" / "hashing.py").write_text(HASHING.format(n=512))
    (root / "models" / "bad.py").write_text(BAD_OUTPUTS)
    return root


@pytest.mark.parametrize("spec, match", [
    ("python:models/absent.py:Encoder", r"absent\.py does not exist; fix: the path of a \.py"),
    ("python:models/hashing.py:Hasher", r"has no attribute `Hasher`; it defines: .*HashingEnc"),
    ("python:models/bad.py:NOT_A_MODEL", r"`NOT_A_MODEL` is a int, with no encode\(texts\) "
                                         r"method and not callable; fix: name a function"),
    ("python:no_such_module_xyz:encode", r"cannot import module `no_such_module_xyz`.*fix: "
                                         r"install it"),
    ("someorg/no-such-encoder", r"`someorg/no-such-encoder` \(encoder\) is missing: offline"
                                r".*fix: "),
    ("vader", r"`vader` is a built-in classifier, not a sentence encoder; fix: encoder specs"),
    ("openai-chat:gpt-4o@http://127.0.0.1:9/v1", r"is a `openai-chat:` model \(a chat API\), "
                                                 r"not a sentence encoder"),
])
def test_each_bad_spec_is_one_clear_error_before_any_weights_load(user_root, spec, match,
                                                                   loads_no_weights):
    ref = parse_model(spec, "contrastive.encoders", root=user_root)
    check_encoder(parse_model(MINILM), True, user_root)  # a good one passes without weights
    with pytest.raises(LingtestError, match=match):
        check_encoder(ref, True, user_root)


def test_a_folder_without_weights_is_one_clear_error(tmp_path):
    folder = tmp_path / "empty-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(LingtestError, match=r"holds no model weights.*fix: point"):
        check_encoder(parse_model(str(folder)), True, tmp_path)


def test_rows_for_lingtest_models_own_encode_and_python(user_root, dense):
    minilm = check_encoder(parse_model(MINILM), True, user_root)
    assert set(minilm) == ROW_KEYS and minilm["pooling"] == "mean+norm"
    assert minilm["name"] == MINILM and minilm["source"] == "package"
    user = check_encoder(parse_model("python:models/hashing.py:HashingEncoder"), True, user_root)
    assert set(user) == ROW_KEYS and user["name"] == "HashingEncoder"
    assert user["pooling"] == OWN_ENCODE and user["source"] == "python"
    assert user["revision"].startswith("python@sha256:")
    assert user["path"] == str(user_root / "models" / "hashing.py")
    row = check_encoder(parse_model(str(dense)), True)
    assert row["pooling"] == OWN_ENCODE and row["name"] == "minilm-dense"
    assert row["revision"].startswith("local@sha256:") and "+modules@sha256:" in row["revision"]


def test_a_model_without_vocabulary_needs_the_dictionary_file(user_root):
    ref = parse_model("python:models/bad.py:as_lists", "contrastive.encoders")
    with pytest.raises(LingtestError, match=r"`as_lists`.*has no vocabulary for the `vocab` "
                       r"dictionary.*fix: set contrastive\.dictionary_file"):
        check_contrastive_encoder(ref, True, user_root)
    assert check_contrastive_encoder(ref, True, user_root, "words.txt")["name"] == "as_lists"
    with pytest.raises(LingtestError, match=r"contrastive\.pooling `cls`.*own encode"):
        check_contrastive_encoder(ref, True, user_root, "words.txt", pooling="cls")


def test_repair_refuses_what_it_cannot_train(user_root, dense):
    with pytest.raises(LingtestError, match=r"repair\.models: `python:models/hashing\.py:"
                       r"HashingEncoder`.*python: encoder.*cannot train user code; fix: remove"):
        check_repairable(parse_model("python:models/hashing.py:HashingEncoder"), True, user_root)
    with pytest.raises(LingtestError, match=r"repair\.models: .*modules Transformer, Pooling, "
                       r"Dense, which run through their own encode"):
        check_repairable(parse_model(str(dense)), True)
    assert check_repairable(parse_model(MINILM))["pooling"] == "mean+norm"


# --------------------------------------------------------------------------- outputs

@pytest.mark.parametrize("attr, match, text", [
    ("flat", r"encode returned shape \(2,\) for 2 texts", "another fine one"),
    ("extra_row", r"encode returned 3 rows for 2 texts", "another fine one"),
    ("with_nan", r"encode returned NaN or inf for 1 of 1 texts", "bad"),
    ("raises", r"encode raised RuntimeError: the service is down", "another fine one"),
])
def test_a_bad_output_names_the_spec_and_text_and_stores_nothing(user_root, tmp_path, attr,
                                                                 match, text):
    """Texts go longest first, 2 per call: the call holding "bad" is the second; its error
    names the spec and the first bad text, and the first call's good rows are not stored."""
    spec = f"python:models/bad.py:{attr}"
    encoder = load_any_encoder(spec, root=user_root)
    store = EmbeddingStore(tmp_path / "store", encoder.model_id, encoder.revision,
                           encoder.cache_key)
    texts = ["a fine long one", "another fine one", "bad"]
    if attr != "with_nan":
        texts = texts[:2]  # these fail on the first call
    with pytest.raises(LingtestError, match=rf"model `{attr}` \({spec}\): {match} \(first bad "
                                            rf"input text: '{text}'\)") as caught:
        embed_texts(encoder, texts, store, batch_size=2)
    assert str(caught.value).count("\n") == 0
    assert store.missing(texts) == texts and not store.shard_files()


def test_a_function_returning_lists_is_an_encoder(user_root, tmp_path):
    encoder = load_any_encoder("python:models/bad.py:as_lists", root=user_root)
    store = EmbeddingStore.for_encoder(tmp_path / "store", encoder)
    vectors = embed_texts(encoder, ["one", "three", "one"], store)
    assert vectors.dtype == np.float32 and vectors.tolist() == [[3, 1, 1], [5, 2, 1], [3, 1, 1]]
    assert encoder.model_id == "as_lists" and encoder.pooling == OWN_ENCODE
    assert store.path.parent.name == "as_lists"


def test_a_module_edit_changes_the_revision_and_cache_token(tmp_path):
    """The store key and a Prefect cache key (``caching.canonical`` of the encoder: its
    ``cache_token``) follow the module file: the same after a reload, new after an edit."""
    from lingtest.tasks.core.caching import canonical

    module = tmp_path / "hashing.py"
    module.write_text(HASHING.format(n=64))
    spec = "python:hashing.py:HashingEncoder"
    first, same = (load_any_encoder(spec, root=tmp_path) for _ in range(2))
    assert canonical(first) == canonical(same) and first.revision == same.revision
    assert (EmbeddingStore.for_encoder(tmp_path / "s", first).path
            == EmbeddingStore.for_encoder(tmp_path / "s", same).path)
    module.write_text(HASHING.format(n=32))
    edited = load_any_encoder(spec, root=tmp_path)
    assert edited.revision != first.revision and canonical(edited) != canonical(first)
    assert (EmbeddingStore.for_encoder(tmp_path / "s", edited).path
            != EmbeddingStore.for_encoder(tmp_path / "s", first).path)
    assert edited.encode(["a good film"]).shape == (1, 32)  # the edited code runs


def test_the_default_minilm_keeps_its_bytes_and_store_key(tmp_path):
    from lingtest.tasks.models.encoders import load_encoder

    texts = ["A gripping, well acted film.", "dull", "The plot never quite comes together."]
    old, new = load_encoder(MINILM, device="cpu"), load_any_encoder(MINILM, device="cpu")
    assert new.model_id == old.model_id == MINILM and new.cache_key == old.cache_key
    assert new.encode(texts).tobytes() == old.encode(texts).tobytes()
    assert (EmbeddingStore.for_encoder(tmp_path, new).path
            == EmbeddingStore.for_encoder(tmp_path, old).path)
    assert new.cache_token() == old.cache_token()


# --------------------------------------------------------------------------- the stage

SMALL = ["contrastive.max_seeds=2", "contrastive.dictionary_max_words=200",
         "contrastive.classifier_epochs=2", "contrastive.classifier_max_train=160",
         "contrastive.classifier_max_test=60", "contrastive.n_classifiers=6",
         "contrastive.dictionary_file=words.txt"]


def latest_states(task_run_name: str, n: int) -> list[str]:
    from test_contrastive_flow import latest_states as states

    return states(task_run_name, n)


@pytest.fixture(scope="module")
def own_run(data_project, tmp_path_factory, dense):
    """The stage on a sibling project with two own models: the hashing encoder (a python:
    file under the project root) and the Dense sentence-transformers folder."""
    from lingtest.flows.stage import run_stage
    from projects import sibling_project

    from lingtest.flows.registry import load_params

    workspace, overrides = data_project
    project = sibling_project(workspace, tmp_path_factory.mktemp("own") / "project")
    (project.root / "models").mkdir()
    (project.root / "models" / "hashing.py").write_text(HASHING.format(n=512))
    (project.root / "words.txt").write_text("\n".join(WORDS) + "\n")
    encoders = f"contrastive.encoders=[python:models/hashing.py:HashingEncoder, {dense}]"
    params = load_params(project.root, overrides + SMALL + [encoders])
    summary = run_stage("contrastive", params, project)
    return project, params, summary, dense, overrides + SMALL + [encoders]


def test_own_models_run_under_their_display_names(own_run):
    project, _, summary, dense, _ = own_run
    names = ["HashingEncoder", "minilm-dense"]
    results = pd.read_parquet(project.interim / "contrastive" / "results.parquet")
    assert list(dict.fromkeys(results["model_id"])) == names
    by_model = results.groupby("model_id")
    assert set(by_model.get_group("HashingEncoder")["dictionary"]) == {"vocab", "dataset"}
    assert set(by_model.get_group("minilm-dense")["dictionary"]) == {"vocab", "dataset", "user"}
    assert set(results["pooling"]) == {OWN_ENCODE}
    assert by_model.get_group("HashingEncoder")["revision"].str.startswith("python@sha256:").all()
    assert summary["embedded_now"]["HashingEncoder"] > 0
    reports = project.reports / "contrastive"
    for name in ("hashingencoder", "minilm-dense"):  # the display names, as slugs
        table2 = (reports / f"contrastive-table2-{name}.md").read_text()
        assert "| l2 " in table2 and "## Provenance" in table2
    files = [p.relative_to(reports).as_posix() for p in reports.rglob("*")]
    assert "contrastive-figure6/hashingencoder.png" in files
    assert not any(str(project.root) in f or str(dense) in f for f in files)
    metrics = json.loads((reports / "metrics.json").read_text())
    assert sorted(metrics) == [*names, "setting"]  # no "/" nor a path in a metric key
    assert metrics["HashingEncoder"]["CR1.N_V"] >= 0
    accuracy = pd.read_csv(reports / "contrastive-classifiers.csv")
    assert set(accuracy["model_id"]) == set(names) and (accuracy["count"] == 6).all()
    assert accuracy.loc[accuracy["task"] == "sentiment", "mean"].min() > 0.5


def test_the_report_says_what_ran(own_run):
    project, _, _, dense, _ = own_run
    table2 = (project.reports / "contrastive" / "contrastive-table2-minilm-dense.md").read_text()
    assert "exact-length passes do not apply" in table2
    assert "minilm-dense: not applied (own encode" in table2
    assert "sentence-transformers modules Transformer, Pooling, Dense through its own encode" \
        in table2
    assert "HashingEncoder: contrastive.dictionary_file's words (the model has no vocabulary)" \
        in table2
    assert "6 MLPs" in table2 and "14 MLPs" not in table2
    assert "packaged all-MiniLM" not in table2
    assert "HashingEncoder (python `python:models/hashing.py:HashingEncoder`, python@sha256:" \
        in table2


def test_an_unchanged_module_is_a_hit_and_an_edited_one_a_miss(own_run):
    from lingtest.flows.stage import run_stage

    project, params, first, _, _ = own_run
    out = project.interim / "contrastive" / "results.parquet"
    before = pd.read_parquet(out)
    again = run_stage("contrastive", params, project)
    assert again["embedded_now"] == {"HashingEncoder": 0, "minilm-dense": 0}
    pd.testing.assert_frame_equal(before, pd.read_parquet(out))
    assert latest_states("classifiers-sentiment", 4) == ["Completed", "Completed",
                                                         "Cached", "Cached"]

    (project.root / "models" / "hashing.py").write_text(HASHING.format(n=256))
    edited = run_stage("contrastive", params, project)
    assert edited["embedded_now"]["HashingEncoder"] == first["embedded_now"]["HashingEncoder"]
    assert edited["embedded_now"]["minilm-dense"] == 0
    after = pd.read_parquet(out)
    mine = after["model_id"] == "HashingEncoder"
    old_revision = before.loc[before["model_id"] == "HashingEncoder", "revision"].iloc[0]
    assert after.loc[mine, "revision"].iloc[0] != old_revision
    assert not np.array_equal(after.loc[mine, "d_pos"].to_numpy(),
                              before.loc[before["model_id"] == "HashingEncoder",
                                         "d_pos"].to_numpy())
    # the hashing model's bank is trained again (new vectors), the Dense model's is cached
    assert sorted(latest_states("classifiers-sentiment", 2)) == ["Cached", "Completed"]
    stores = sorted(p.name for p in (project.data / "cache" / "embeddings" /
                                     "HashingEncoder").iterdir())
    assert len(stores) == 2  # one store key per revision


def test_lingtest_test_puts_a_new_encoder_beside_the_stored_ones(own_run):
    """``lingtest test`` on another python: encoder: its contrastive reports under
    runs/<name>/, the project's models beside it from their stored rows, the pipeline's
    files untouched."""
    import hashlib

    from lingtest.flows.own_models import Gates, plan, run_own_models

    project, params, _, _, sets = own_run

    def state() -> dict[str, str]:
        return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
                for top in (project.reports, project.interim) for p in sorted(top.rglob("*"))
                if p.is_file()}

    before = state()
    (project.root / "models" / "hash128.py").write_text(HASHING.format(n=128))
    the_plan = plan(["python:models/hash128.py:HashingEncoder#name=hash128"], None, None,
                    params, project.root)
    assert (the_plan.methods, the_plan.name) == (["contrastive"], "hash128")
    [comparison] = run_own_models(the_plan, sets, None, project.root, Gates(max_broken=10**6))
    assert state() == before
    assert comparison["baseline"] == ["HashingEncoder", "minilm-dense"]
    assert comparison["breaches"] == [] and comparison["shared"] > 0
    run = project.root / "runs" / "hash128" / "reports"
    assert (run / "contrastive" / "contrastive-table2-hash128.md").is_file()
    side = pd.read_csv(run / "contrastive-vs-baseline" / "hash128-contrastive-side-by-side.csv")
    assert {"hash128 fail %", "HashingEncoder fail %", "minilm-dense fail %"} <= set(side.columns)
    assert {"relation", "distance", "threshold_kind"} <= set(side.columns)
    stored = pd.read_parquet(project.interim / "contrastive" / "results.parquet")
    row = side[(side["relation"] == "all") & (side["distance"] == "l2")
               & (side["threshold_kind"] == "zero") & (side["dictionary"] == "vocab")].iloc[0]
    base = stored[(stored["model_id"] == "minilm-dense") & (stored["distance"] == "l2")
                  & (stored["threshold_kind"] == "zero") & (stored["dictionary"] == "vocab")]
    base = base[base["rule"] == row["rule"]] if "rule" in side.columns else base
    assert row["minilm-dense fail %"] == pytest.approx(
        round(100 * base["verdict"].eq("fail").mean(), 2))
