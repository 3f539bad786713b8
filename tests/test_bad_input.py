"""Bad-input sweep: every reader, CLI command and parameter fails with one clear error.

Each case runs ``lingtest ...`` in-process against a throw-away project; the contract
(exit status 2, exactly one ``lingtest: error:`` line naming the file/line/key, no traceback,
nothing under data/, reports/ or inputs/ created or changed, no flow started) is
``bad_input_harness.assert_one_clear_error``, shared with ``test_bad_input_reliability.py``.
"""
from __future__ import annotations

import pytest

from bad_input_harness import (NOT_UTF8, REVIEW_TREE, _snapshot,  # noqa: F401
                               assert_one_clear_error, lingtest, project, run)
from lingtest.tasks.models.sentiment import MINILM_CONFIG


LEX = "inputs/models/lex.py"
LEXICON = b"""import numpy as np
THRESHOLD = 0.5
class WordCount:
    labels = ["bad", "good"]
    def predict_proba(self, texts):
        return np.tile([0.5, 0.5], (len(texts), 1))
def unlabelled(texts):
    return np.tile([0.5, 0.5], (len(texts), 1))
"""


ENCODER = b"""import numpy as np
def embed(texts):
    return np.ones((len(texts), 4))
"""


def _checklist_suite() -> bytes:
    """A two-test CheckList table as the data stage writes it (Parquet bytes)."""
    import io

    import pandas as pd

    frame = pd.DataFrame({"test": ["used to, but now", "single neutral words"],
                          "type": "MFT", "capability": "Temporal", "description": "",
                          "example_id": [0, 0], "texts": [["I used to hate it, now I love it."],
                                                          ["the"]],
                          "label": [2, 1], "expectation": "label == labels[i]"})
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


CHECKLIST_SUITE = _checklist_suite()




def py(attr: str, file: str = "lex") -> str:
    return f"python:inputs/models/{file}.py:{attr}"


# (id, argv, {relative path: bytes written, or None: removed, before the run}, text the
# message must contain)
CASES: list[tuple[str, list[str], dict[str, bytes], str]] = [
    # ---- parameters: --set
    ("seed-negative", run("data", "seed=-1"), {}, "seed"),
    ("seed-text", run("data", "seed=abc"), {}, "seed"),
    ("seed-over-32-bits", run("data", "seed=4294967296"), {}, "seed"),
    ("unknown-top-key", run("data", "foo=1"), {}, "foo"),
    ("unknown-section-key", run("data", "data.bogus=1"), {}, "data.bogus"),
    ("device-tpu", run("data", "runtime.device=tpu"), {}, "runtime.device"),
    ("threads-zero", run("data", "runtime.threads=0"), {}, "runtime.threads"),
    ("assets-empty", run("data", "data.assets=[]"), {}, "data.assets"),
    ("assets-unknown", run("data", "data.assets=[nope]"), {}, "data.assets"),
    ("timeout-negative", run("data", "data.timeout_s=-1"), {}, "data.timeout_s"),
    ("llms-empty", run("consistency", "consistency.llms=[]"), {}, "consistency.llms"),
    ("band-inverted", run("capabilities", "capabilities.neutral_band=[0.7,0.3]"), {},
     "neutral_band"),
    ("band-above-one", run("capabilities", "capabilities.neutral_band=[0.2,1.5]"), {},
     "neutral_band"),
    ("band-one-value", run("capabilities", "capabilities.neutral_band=[0.2]"), {},
     "neutral_band"),
    ("alpha-range", run("contrastive", "contrastive.alpha=1.5"), {}, "contrastive.alpha"),
    ("distance-unknown", run("contrastive", "contrastive.distances=[l3]"), {}, "distances"),
    ("distances-empty", run("contrastive", "contrastive.distances=[]"), {}, "distances"),
    ("thresholds-empty", run("contrastive", "contrastive.thresholds=[]"), {}, "thresholds"),
    ("relation-unknown", run("contrastive", "contrastive.relations=[CR9]"), {}, "relations"),
    ("relations-empty", run("contrastive", "contrastive.relations=[]"), {}, "relations"),
    ("encoders-empty", run("contrastive", "contrastive.encoders=[]"), {}, "encoders"),
    ("models-encoders-empty", run("contrastive", "models.encoders=[]"), {}, "encoders"),
    ("sentiment-models-empty", run("capabilities", "capabilities.models=[]"), {},
     "capabilities.models"),
    ("coverage-size-zero", run("capabilities", "capabilities.coverage_sizes=[0,50]"), {},
     "coverage_sizes"),
    ("classifiers-range", run("contrastive", "contrastive.n_classifiers=20"), {},
     "n_classifiers"),
    ("classifiers-below-wilcoxon", run("contrastive", "contrastive.n_classifiers=4"), {},
     "contrastive.n_classifiers 4: a one-sided Wilcoxon test over 4 classifiers can never"),
    ("alpha-below-14-classifiers", run("contrastive", "contrastive.alpha=0.00001"), {},
     "fix: raise contrastive.alpha"),
    ("validate-classifiers", ["validate", "contrastive", "--set", "contrastive.n_classifiers=2"],
     {}, "fix: set contrastive.n_classifiers to 5 or more"),
    ("strength-zero", run("consistency", "consistency.strength=0"), {}, "consistency.strength"),
    ("generator-unknown", run("consistency", "consistency.generator=foo"), {}, "generator"),
    ("http-timeout-zero", run("consistency", "consistency.timeout_s=0"), {}, "timeout_s"),
    ("oracle-unknown", run("consistency", "consistency.oracle=loose"), {}, "consistency.oracle"),
    ("ipm-unknown", run("consistency", "consistency.ipm=wordnet"), {}, "consistency.ipm"),
    ("zero-division-unknown", run("consistency", "consistency.zero_division=inf"), {},
     "consistency.zero_division"),
    ("answered-share-above-one", run("consistency", "consistency.min_answered_share=1.5"), {},
     "consistency.min_answered_share"),
    ("max-new-tokens-zero", run("consistency", "consistency.max_new_tokens=0"), {},
     "consistency.max_new_tokens"),
    ("llm-seq2seq-missing", run("consistency", "consistency.llms=['seq2seq:nobody/no-t5']"), {},
     "`nobody/no-t5` (seq2seq) is missing"),
    ("classify-oracle-unknown", ["classify-answers", "inputs/a.csv", "--column", "r",
                                 "--oracle", "loose"], {"inputs/a.csv": b"r\nyes\n"},
     "classify-answers --oracle 'loose'"),
    ("parser-unknown", run("capabilities", "capabilities.parser=stanford"), {}, "parser"),
    ("insert-tags-punctuation", run("capabilities", "capabilities.insert_tags=[JJ,',']"), {},
     "capabilities.insert_tags"),
    ("insert-tags-unknown", run("capabilities", "capabilities.insert_tags=[ADJ]"), {},
     "not insertable PTB tags"),
    ("pass-to-fail-count-unknown", run("capabilities", "capabilities.pass_to_fail_count=paper"),
     {}, "capabilities.pass_to_fail_count"),
    ("pos-check-unknown", run("capabilities", "capabilities.pos_check=loose"), {},
     "capabilities.pos_check"),
    ("inserted-words-zero", run("capabilities", "capabilities.max_inserted_words=0"), {},
     "capabilities.max_inserted_words"),
    ("profile-unknown", run("data", "profile=nonexistent"), {}, "nonexistent"),
    ("set-no-equals", ["run", "data", "--set", "seed"], {}, "key=value"),
    ("set-empty-part", ["run", "data", "--set", ".seed=1"], {}, "empty part"),
    ("set-into-value", ["run", "data", "--set", "seed.x=1"], {}, "seed"),
    ("params-set-bad", ["params", "--set", "runtime.max_workers=0"], {}, "max_workers"),
    # ---- alerts (runtime.notify_url, runtime.alerts, serve --notify / --project): checked
    # before any server is looked for; a webhook URL is never echoed (its path is the token)
    ("notify-no-scheme", run("data", "runtime.notify_url=hooks.example.com/T0/B0/tok3n"), {},
     "runtime.notify_url"),
    ("notify-ftp", run("data", "runtime.notify_url=ftp://example.com/tok3n"), {},
     "http(s)://"),
    ("alert-no-measure", run("data", "runtime.alerts=[{above: 1}]"), {}, "runtime.alerts.0"),
    ("alert-no-bound", run("data", "runtime.alerts=[{cases: broken}]"), {}, "one bound"),
    ("alert-two-bounds", run("data", "runtime.alerts=[{metric: 'r.json:k', above: 1, "
                                     "below: 0}]"), {}, "one bound"),
    ("alert-metric-no-key", run("data", "runtime.alerts=[{metric: reports/m.json, above: 1}]"),
     {}, "FILE:KEY"),
    ("alert-metric-outside", run("data", "runtime.alerts=[{metric: '../m.json:k', above: 1}]"),
     {}, "inside"),
    ("alert-cases-below", run("data", "runtime.alerts=[{cases: broken, below: 1}]"), {},
     "above: N"),
    ("alert-cases-unknown", run("data", "runtime.alerts=[{cases: fixed, above: 1}]"), {},
     "runtime.alerts.0.cases"),
    ("alert-metric-unknown-file", run("data", "runtime.alerts=[{metric: 'reports/no.json:k', "
                                              "above: 1}]"), {}, "neither a metrics file"),
    ("alert-metric-missing-key", run("data", "runtime.alerts=[{metric: 'reports/metrics.json:"
                                             "nope', above: 1}]"), {}, "no number at nope"),
    ("serve-notify-bad", ["serve", "--notify", "hooks.example.com/T0/B0/tok3n"], {},
     "--notify ***"),
    ("serve-project-missing", ["serve", "--project", "/nonexistent/project"], {},
     "no params.yaml"),
    ("serve-alert-bad", ["serve"], {"params.yaml": b"runtime:\n  alerts: [{cases: broken}]\n"},
     "one bound"),
    # ---- parameter files
    ("params-bad-yaml", ["params"], {"params.yaml": b"seed: [1\n"}, "params.yaml"),
    ("params-top-list", ["params"], {"params.yaml": b"- 1\n- 2\n"}, "params.yaml"),
    ("params-not-utf8", ["params"], {"params.yaml": b"seed: 1\n# " + NOT_UTF8}, "params.yaml:2"),
    ("params-bad-value", ["run", "data"], {"params.yaml": b"seed: -4\n"}, "seed"),
    ("profile-bad-yaml", ["params", "--profile", "broken"],
     {"params/broken.yaml": b"data: {online: [\n"}, "broken.yaml"),
    ("profile-unknown-key", ["params", "--profile", "odd"],
     {"params/odd.yaml": b"data:\n  onlin: false\n"}, "data.onlin"),
    # ---- model ids (offline: nothing holds them)
    ("encoder-unknown", run("contrastive", "contrastive.encoders=[nobody/no-encoder]"), {},
     "nobody/no-encoder"),
    ("models-encoder-unknown", run("contrastive", "models.encoders=[nobody/enc]"), {},
     "nobody/enc"),
    ("sentiment-untrained", run("capabilities"), {"data/models/minilm-sst2/" + MINILM_CONFIG: None},
     "train-sentiment"),
    ("sentiment-unknown", run("capabilities", "capabilities.models=[vader,nobody/clf]"), {},
     "nobody/clf"),
    ("fill-unknown", run("capabilities", "capabilities.fill_model=nobody/lm"), {}, "nobody/lm"),
    ("fill-is-encoder", run("capabilities",
                            "capabilities.fill_model=sentence-transformers/all-MiniLM-L6-v2"),
     {}, "fill_model"),
    ("spacy-unknown", run("capabilities", "models.spacy=xx_no_pipeline"), {}, "xx_no_pipeline"),
    ("llm-unknown", run("consistency", "consistency.llms=[nobody/llm]"), {}, "nobody/llm"),
    ("llm-bad-prefix", run("consistency", "consistency.llms=['ftp:x']"), {}, "ftp:x"),
    ("llm-empty-name", run("consistency", "consistency.llms=['ollama:']"), {}, "ollama:"),
    # ---- COSTELLO suite JSON
    ("suite-missing", run("contrastive", "contrastive.suite=inputs/none.json"), {},
     "contrastive.suite"),
    ("suite-bad-json", run("contrastive", "contrastive.suite=inputs/s.json"),
     {"inputs/s.json": b'{"a": [1, 2,\n'}, "s.json"),
    ("suite-not-utf8", run("contrastive", "contrastive.suite=inputs/s.json"),
     {"inputs/s.json": b"{\n" + NOT_UTF8}, "s.json:2"),
    ("suite-wrong-shape", run("contrastive", "contrastive.suite=inputs/s.json"),
     {"inputs/s.json": b"[1, 2, 3]\n"}, "s.json"),
    ("suite-empty-object", run("contrastive", "contrastive.suite=inputs/s.json"),
     {"inputs/s.json": b"{}\n"}, "s.json"),
    ("suite-lacks-relations", run("contrastive", "contrastive.suite=inputs/s.json",
                                  "contrastive.relations=[CR4]"),
     {"inputs/s.json": b'{"SenWordFuzz": [["a", "b", "c"]]}\n'},
     "contrastive.relations ['CR4']: s.json holds none of them"),
    # ---- COSTELLO dictionary file
    ("dict-missing", run("contrastive", "contrastive.dictionary_file=inputs/none.txt"), {},
     "dictionary_file"),
    ("dict-not-utf8", run("contrastive", "contrastive.dictionary_file=inputs/d.txt"),
     {"inputs/d.txt": NOT_UTF8}, "d.txt"),
    ("dict-bad-json", run("contrastive", "contrastive.dictionary_file=inputs/d.json"),
     {"inputs/d.json": b'["a", "b"\n'}, "d.json"),
    ("dict-one-word", run("contrastive", "contrastive.dictionary_file=inputs/d.txt"),
     {"inputs/d.txt": b"only\n"}, "d.txt"),
    # ---- capability specs
    ("specs-dir-missing", run("capabilities", "capabilities.specs_dir=inputs/nospecs"), {},
     "specs_dir"),
    ("specs-dir-empty", run("capabilities", "capabilities.specs_dir=inputs/specs"),
     {"inputs/specs/README.txt": b"no specs here\n"}, "specs"),
    ("spec-bad-yaml", run("capabilities", "capabilities.specs_dir=inputs/specs"),
     {"inputs/specs/LC1.yaml": b"id: LC1\ndescription: [unclosed\n"}, "LC1.yaml"),
    ("spec-not-utf8", run("capabilities", "capabilities.specs_dir=inputs/specs"),
     {"inputs/specs/LC1.yaml": b"id: LC1\n" + NOT_UTF8}, "LC1.yaml"),
    ("spec-top-list", run("capabilities", "capabilities.specs_dir=inputs/specs"),
     {"inputs/specs/LC1.yaml": b"- a\n- b\n"}, "LC1.yaml"),
    ("spec-unknown-id", run("capabilities", "capabilities.capabilities=[LC99]"), {}, "LC99"),
    # ---- consistency questions
    ("questions-missing", run("consistency", "consistency.questions=inputs/none.jsonl"), {},
     "consistency.questions"),
    ("questions-bad-json", run("consistency", "consistency.questions=inputs/q.jsonl"),
     {"inputs/q.jsonl": b'{"question": "is it", "answer": true}\n{"question": \n'}, "q.jsonl:2"),
    ("questions-not-utf8", run("consistency", "consistency.questions=inputs/q.jsonl"),
     {"inputs/q.jsonl": b'{"question": "is it", "answer": true}\n' + NOT_UTF8}, "q.jsonl"),
    ("questions-no-answer", run("consistency", "consistency.questions=inputs/q.jsonl"),
     {"inputs/q.jsonl": b'{"question": "is it"}\n'}, "q.jsonl:1"),
    ("questions-empty", run("consistency", "consistency.questions=inputs/q.jsonl"),
     {"inputs/q.jsonl": b"\n"}, "q.jsonl"),
    # ---- guide import folder
    ("guide-missing", run("consistency", "consistency.import_dir=inputs/none"), {},
     "import_dir"),
    ("guide-empty", run("consistency", "consistency.import_dir=inputs/guide"),
     {"inputs/guide/notes.txt": b"x\n"}, "guide"),
    ("guide-bad-ca", run("consistency", "consistency.import_dir=inputs/guide"),
     {"inputs/guide/ca-1.csv": b"a,b\nx,y\n", "inputs/guide/synonyms-1.txt": b"is;it\n"},
     "guide"),
    ("guide-synonyms-not-utf8", run("consistency", "consistency.import_dir=inputs/guide"),
     {"inputs/guide/ca-1.csv": b"0,0\n1,1\n", "inputs/guide/synonyms-1.txt": NOT_UTF8,
      "inputs/guide/public_questions.jsonl": b'{"question": "is it", "answer": true}\n'},
     "synonyms-1.txt:1"),
    ("guide-no-sentences", run("consistency", "consistency.import_dir=inputs/guide"),
     {"inputs/guide/ca-1.csv": b"0,0\n1,1\n", "inputs/guide/synonyms-1.txt": b"['is']\n"},
     "public_questions.jsonl"),
    # ---- data stage
    ("mirror-not-a-folder", run("data", "data.mirror=inputs/nomirror"), {}, "data.mirror"),
    ("asset-missing-offline", run("data", "data.mirror=inputs/mirror", "data.online=false"),
     {"inputs/mirror/README": b"empty\n"}, "data.assets"),
    # ---- CLI
    ("stage-unknown", ["run", "nope"], {}, "nope"),
    ("validate-stage-unknown", ["validate", "nope"], {}, "unknown stage `nope`"),
    ("command-unknown", ["frobnicate"], {}, "frobnicate"),
    ("option-unknown", ["run", "data", "--sett", "seed=1"], {}, "--sett"),
    ("ca-values-text", ["covering-array", "--values", "a,b"], {}, "--values"),
    ("ca-check-missing", ["covering-array", "--values", "2,2", "--check", "inputs/none.csv"],
     {}, "none.csv"),
    ("ca-check-not-utf8", ["covering-array", "--values", "2,2", "--check", "inputs/ca.csv"],
     {"inputs/ca.csv": NOT_UTF8}, "ca.csv"),
    ("classify-missing", ["classify-answers", "inputs/none.csv", "--column", "r"], {},
     "none.csv"),
    ("classify-not-utf8", ["classify-answers", "inputs/a.csv", "--column", "r"],
     {"inputs/a.csv": b"r\n" + NOT_UTF8}, "a.csv"),
    ("classify-no-column", ["classify-answers", "inputs/a.csv", "--column", "zz"],
     {"inputs/a.csv": b"r\ntrue\n"}, "zz"),
    ("classify-column-parsed", ["classify-answers", "inputs/a.csv", "--column", "parsed"],
     {"inputs/a.csv": b"r\ntrue\n"}, "--column parsed"),
    ("ca-strength-zero", ["covering-array", "--values", "2,2", "--strength", "0"], {},
     "strength"),
    # ---- model specs of every kind of parameter (a user's own classifier module)
    ("classifier-file-missing", run("capabilities", f"capabilities.models=[{py('f', 'none')}]"), {},
     "inputs/models/none.py does not exist"),
    ("classifier-attribute-missing", run("adaptive", f"adaptive.models=[{py('nope')}]"),
     {LEX: LEXICON}, "has no attribute `nope`"),
    ("classifier-no-labels", run("capabilities", f"capabilities.models=[{py('unlabelled')}]"),
     {LEX: LEXICON}, "declares no labels"),
    ("classifier-labels-unmapped", run("capabilities", f"capabilities.models=[{py('WordCount')}]"),
     {LEX: LEXICON}, "models.label_map"),
    ("classifier-map-partial", run("capabilities", f"capabilities.models=[{py('WordCount')}]",
                                   "models.label_map={WordCount: {bad: neg}}"),
     {LEX: LEXICON}, "does not map the model's labels ['good']"),
    ("classifier-map-no-pos", run("adaptive", f"adaptive.models=[{py('WordCount')}]",
                                  "models.label_map={WordCount: {bad: neg, good: neg}}"),
     {LEX: LEXICON}, "maps no label onto pos"),
    ("classifier-syntax-error", run("capabilities", f"capabilities.models=[{py('f')}]"),
     {LEX: b"def f(texts:\n"}, "SyntaxError"),
    ("classifier-not-callable", run("capabilities", f"capabilities.models=[{py('THRESHOLD')}]"),
     {LEX: LEXICON}, "not callable"),
    ("classifier-import-error", run("adaptive", "adaptive.models=[python:no_such_pkg.mod:f]"), {},
     "cannot import module `no_such_pkg.mod`"),
    ("classifier-spec-malformed", run("capabilities", "capabilities.models=[python:lex.py]"), {},
     "expected python:MODULE:ATTR"),
    ("classifier-unknown-prefix", run("capabilities", "capabilities.models=[foo:bar]"), {},
     "unknown prefix `foo:`"),
    ("classifier-folder-missing", run("adaptive", "adaptive.models=[./no/such/folder]"), {},
     "model folder `./no/such/folder` does not exist"),
    ("classifier-folder-empty", run("capabilities", "capabilities.models=[inputs]"), {},
     "holds no model weights"),
    ("classifier-duplicate-names",
     run("capabilities", f"capabilities.models=[{py('WordCount')}, python:inputs/models/b.py:"
                         "WordCount]"), {LEX: LEXICON, "inputs/models/b.py": LEXICON}, "both named"),
    ("classifier-name-slash", run("capabilities", f"capabilities.models=[{py('WordCount')}#name=a/b]"),
     {LEX: LEXICON}, "contains `/`"),
    ("classifier-option-unknown", run("capabilities", "capabilities.models=[vader#nam=x]"), {},
     "unknown option 'nam'"),
    # an LLM is a prompted classifier; one without a server would go to the public API
    ("classifier-llm-without-server", run("adaptive", "adaptive.models=[openai:gpt-4o]"), {},
     "names no server and OPENAI_BASE_URL is not set"),
    ("classifier-is-an-embedding-server", run("adaptive", "adaptive.models=['tei:@http://127.0.0.1:9']"),
     {}, "not a sentiment classifier"),
    ("adaptive-models-unknown-hub", run("adaptive", "adaptive.models=[nobody/classifier]"), {},
     "adaptive.models"),
    ("debug-model-not-trainable", run("adaptive-debug", f"adaptive.debug.model={py('WordCount')}"),
     {LEX: LEXICON}, "fine-tunes lingtest's own classifier"),
    ("debug-topics-empty", run("adaptive-debug", "adaptive.debug.topics=[]"), {},
     "adaptive.debug.topics: empty"),
    ("adaptive-tree-missing", run("adaptive", "adaptive.trees=[inputs/none.csv]"), {},
     "adaptive.trees: "),
    ("adaptive-tree-before-data", run("adaptive", "adaptive.trees=[data/raw/adatest/x.csv]"),
     {}, "lingtest run data"),
    ("adaptive-tree-malformed", run("adaptive", "adaptive.trees=[inputs/t.csv]"),
     {"inputs/t.csv": b",topic,input\nab,/A,x,extra\n"}, "inputs/t.csv"),
    ("adaptive-scorer-missing",
     run("adaptive", "adaptive.models=[HuggingFaceTB/SmolLM2-135M-Instruct#scorer=nobody/x]"),
     {}, "nobody/x"),
    ("capabilities-none-listed", run("capabilities", "capabilities.capabilities=[]"), {},
     "at least 1 item"),
    ("debug-topics-repeated", run("adaptive-debug", "adaptive.debug.topics=[a, a]"), {},
     "appear twice"),
    ("debug-topics-unknown", run("adaptive-debug", "adaptive.debug.topics=[no such test]"),
     {"data/processed/checklist_suite.parquet": CHECKLIST_SUITE},
     "adaptive.debug.topics: ['no such test'] are no CheckList MFT test"),
    ("debug-topic-neutral-only",
     run("adaptive-debug", "adaptive.debug.topics=[single neutral words]"),
     {"data/processed/checklist_suite.parquet": CHECKLIST_SUITE}, "pick from ['used to"),
    ("debug-condition-unknown", run("adaptive-debug", "adaptive.debug.conditions=[humans]"), {},
     "adaptive.debug.conditions"),
    ("debug-rounds-zero", run("adaptive-debug", "adaptive.debug.rounds=0"), {},
     "adaptive.debug.rounds"),
    ("debug-seed-tests-zero", run("adaptive-debug", "adaptive.debug.seed_tests=0"), {},
     "adaptive.debug.seed_tests"),
    ("debug-oracle-similarity", run("adaptive-debug", "adaptive.debug.oracle_similarity=1.5"),
     {}, "adaptive.debug.oracle_similarity"),
    ("debug-corrections-missing",
     run("adaptive-debug", "adaptive.debug.conditions=[adatest-tree]",
         "adaptive.debug.corrections=inputs/none.csv"), {}, "inputs/none.csv does not exist"),
    ("debug-corrections-bad-label",
     run("adaptive-debug", "adaptive.debug.conditions=[adatest-tree]",
         "adaptive.debug.corrections=inputs/c.csv"),
     {"inputs/c.csv": b"tree,topic,input,old_label,new_label,reason\nt.csv,/a,b,pos,meh,r\n"},
     "new_label neg|pos|drop"),
    ("repair-model-not-tested", run("repair", "repair.models=[nobody/enc]"), {},
     "repair.models: `nobody/enc` is not among the encoders"),
    ("predictions-missing", run("capabilities", "capabilities.models=[predictions:s.csv]"), {},
     "s.csv does not exist; fix: lingtest export-suite"),
    ("predictions-format", run("adaptive", "adaptive.models=[predictions:inputs/s.xlsx]"),
     {"inputs/s.xlsx": b"x"}, "a predictions file is .csv, .jsonl, .parquet"),
    ("predictions-no-key", run("capabilities", "capabilities.models=[predictions:inputs/s.csv]"),
     {"inputs/s.csv": b"sentence,negative,positive\nok,0.5,0.5\n"}, "no text or text_id column"),
    ("predictions-one-label", run("capabilities", "capabilities.models=[predictions:inputs/s.csv]"),
     {"inputs/s.csv": b"text,positive\nok,0.5\n"}, "at least two"),
    ("predictions-not-probabilities",
     run("capabilities", "capabilities.models=[predictions:inputs/s.csv]"),
     {"inputs/s.csv": b"text,negative,positive\nok,0.5,0.5\nbad,2.0,-1.0\n"},
     "outside [0, 1] or a row not summing to 1"),
    ("predictions-scored-twice",
     run("capabilities", "capabilities.models=[predictions:inputs/s.csv]"),
     {"inputs/s.csv": b"text,negative,positive\nok,0.5,0.5\nok,0.4,0.6\n"},
     "1 texts scored twice, first 'ok'"),
    ("predictions-labels-unmapped",
     run("adaptive", "adaptive.models=[predictions:inputs/s.jsonl]"),
     {"inputs/s.jsonl": b'{"text": "ok", "bad": 0.5, "good": 0.5}\n'}, "models.label_map"),
    ("predictions-not-json", run("adaptive", "adaptive.models=[predictions:inputs/s.jsonl]"),
     {"inputs/s.jsonl": b'{"text": "ok", \n'}, "cannot be read as jsonl"),
    ("encoder-attribute-missing",
     run("contrastive", "contrastive.encoders=[python:inputs/models/enc.py:nope]"),
     {"inputs/models/enc.py": ENCODER}, "has no attribute `nope`"),
    ("encoder-no-vocabulary", run("contrastive", "contrastive.encoders=[python:inputs/models/"
                                                 "enc.py:embed]"),
     {"inputs/models/enc.py": ENCODER}, "contrastive.dictionary_file"),
    ("encoder-is-a-classifier", run("contrastive", "contrastive.encoders=[vader]"), {},
     "contrastive.encoders"),
    ("repair-python-encoder", run("repair", "contrastive.encoders=[python:inputs/models/enc.py:"
                                            "embed]", "repair.models=[embed]"),
     {"inputs/models/enc.py": ENCODER}, "repair.models"),
    ("llm-python-not-callable", run("consistency", "consistency.llms=[python:inputs/models/"
                                                   "lex.py:THRESHOLD]"),
     {LEX: LEXICON}, "consistency.llms"),
    ("llm-openai-no-server", run("consistency", "consistency.llms=[openai:gpt-x]"), {},
     "OPENAI_BASE_URL"),
    ("llm-key-variable-unset",
     run("consistency", "consistency.llms=['openai:m@http://127.0.0.1:9/v1#key_env="
                        "LINGTEST_NO_SUCH_KEY']"), {}, "LINGTEST_NO_SUCH_KEY"),
    ("llm-is-a-classifier", run("consistency", "consistency.llms=[vader]"), {},
     "consistency.llms"),
    ("adapt-generator-unknown-prefix",
     ["adapt", "--topic", "/Rooms", "--tree", "t.csv", "--generator", "gpt:x", "--oracle",
      "vader"], {}, "--generator"),
    ("adapt-review-timeout-zero",
     ["adapt", "--topic", "/Rooms", "--tree", "t.csv", "--oracle", "vader",
      "--review-timeout-s", "0"], {}, "--review-timeout-s 0"),
    ("adapt-top-zero", ["adapt", "--topic", "/Rooms", "--tree", "t.csv", "--top", "0"], {},
     "--top 0"),
    ("review-tree-missing", ["review", "inputs/none.csv"], {}, "inputs/none.csv: no tree at"),
    ("review-tree-malformed", ["review", "inputs/t.csv"],
     {"inputs/t.csv": b",topic,input,output,label,labeler,description\nt1,Rooms,a,pos,pass,a,\n"},
     "does not start with '/'"),
    ("review-port-out-of-range", ["review", "inputs/t.csv", "--port", "70000"],
     {"inputs/t.csv": REVIEW_TREE}, "--port 70000"),
    ("review-completions-zero", ["review", "inputs/t.csv", "--completions", "0"],
     {"inputs/t.csv": REVIEW_TREE}, "--completions 0"),
    ("review-model-is-an-llm", ["review", "inputs/t.csv", "--model", "openai:gpt-4o"],
     {"inputs/t.csv": REVIEW_TREE}, "--model"),
    ("review-second-generator-unknown-prefix",
     ["review", "inputs/t.csv", "--generator", "HuggingFaceTB/SmolLM2-135M-Instruct",
      "--generator", "gpt:x"],
     {"inputs/t.csv": REVIEW_TREE}, "--generator"),
    ("repair-default-python-encoder",
     run("repair", "contrastive.encoders=[python:inputs/models/enc.py:embed]"),
     {"inputs/models/enc.py": ENCODER}, "repair.models"),
    ("test-method-does-not-fit", ["test", "vader", "--methods", "contrastive"], {},
     "contrastive does not test vader"),
    ("test-method-unknown", ["test", "vader", "--methods", "nope"], {}, "unknown method `nope`"),
    ("test-kind-unknown", ["test", "python:inputs/models/lex.py:unlabelled"], {LEX: LEXICON},
     "cannot tell whether"),
    ("label-map-target-unknown", run("capabilities", "models.label_map={vader: {a: good}}"), {},
     "models.label_map"),
    ("label-map-on-builtin", run("capabilities", "models.label_map={vader: {neg: neg, pos: pos}}"),
     {}, "already predicts"),
]


@pytest.mark.parametrize("argv, files, needle", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_error(argv, files, needle, project, monkeypatch, capsys):
    assert_one_clear_error(argv, files, needle, project, monkeypatch, capsys)


def test_sweep_has_at_least_60_cases():
    assert len({c[0] for c in CASES}) == len(CASES) >= 60


def test_models_lists_every_configured_id(project, monkeypatch, capsys):
    sets = ["--set", "contrastive.encoders=[nobody/enc]", "--set",
            "consistency.llms=['ollama:llama3', nobody/llm]", "--set",
            "capabilities.fill_model=HuggingFaceTB/SmolLM2-135M-Instruct"]
    status, output, _ = lingtest(["models", *sets], monkeypatch, capsys)
    assert status == 0, output
    assert output.count("HuggingFaceTB/SmolLM2-135M-Instruct") >= 2  # causal_lm and fill_model
    for needle in ("models.encoders", "contrastive.encoders", "nobody/enc", "capabilities.models",
                   "vader", "lingtest/minilm-sst2", "capabilities.fill_model",
                   "consistency.llms", "ollama:llama3", "nobody/llm", "models.spacy"):
        assert needle in output, (needle, output)


def test_valid_inputs_reach_the_stage(project, monkeypatch, capsys):
    """Validation passes good input through (the recorder sees the stage start)."""
    (project / "inputs" / "q.jsonl").write_text('{"question": "is it so", "answer": true}\n')
    argv = run("consistency", "consistency.questions=inputs/q.jsonl",
               "consistency.llms=['ollama:llama3']")
    status, output, started = lingtest(argv, monkeypatch, capsys)
    assert (status, started) == (0, ["consistency"]), output


def test_review_on_a_port_in_use_is_one_clear_error(project, monkeypatch, capsys):
    """`lingtest review --port N` while something listens on N: one line naming the port
    and the fix, before any model loads; the tree is untouched."""
    import socket

    (project / "inputs" / "t.csv").write_bytes(REVIEW_TREE)
    before = _snapshot(project)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        status, output, _ = lingtest(["review", "inputs/t.csv", "--port", str(port),
                                      "--model", "vader", "--generator", "openai:gpt-test",
                                      "--base-url", "http://127.0.0.1:9/v1"],
                                     monkeypatch, capsys)
    assert status == 2 and "Traceback" not in output, output
    assert f"--port {port}: cannot listen on 127.0.0.1:{port}" in output
    assert "leave --port out for a free one" in output
    assert len(output.strip().splitlines()) <= 3, output
    assert _snapshot(project) == before
