"""Damaged stores are named, never trusted: the answer database (SQLite with garbage
mid-file) and an embedding-store shard give one error naming the file and the fix. (The
converted model copy is checked in test_models.py: a damaged one is converted again.)"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.core.errors import LingtestError


def damage(path, at: float = 0.5, size: int = 8192) -> None:
    """Overwrite ``size`` bytes in the middle of ``path`` with garbage (same length)."""
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    data[start:start + size] = (b"garbage!" * (size // 8 + 1))[:size]
    path.write_bytes(bytes(data))


def test_a_damaged_answer_database_is_named_with_the_fix(tmp_path):
    from sqlalchemy import select

    from lingtest.tasks.consistency.store import check_sqlite, open_store
    from lingtest.tasks.consistency.store_schema import Question

    path = tmp_path / "results.sqlite"
    url = f"sqlite:///{path}"
    questions = pd.DataFrame({"question_id": [f"q{i}" for i in range(3000)], "source": "t",
                              "question": [f"is {i} even?" for i in range(3000)],
                              "answer": True, "passage": "x" * 200})
    with open_store(url) as store:
        store.upsert_questions(questions)
    check_sqlite(url)  # intact: passes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.sqlite"]
    damage(path)
    before = path.read_bytes()

    with pytest.raises(LingtestError) as caught:
        check_sqlite(url)
    message = str(caught.value)
    assert message.startswith(f"{path}: the result database is damaged (")
    assert f"fix: move it away (mv {path} {path}.damaged)" in message
    assert "\n" not in message

    # met mid-run (no check before): the same one-line error, not SQLAlchemy's traceback
    with pytest.raises(LingtestError, match="the result database is damaged") as caught:
        with open_store(url) as store, store.engine.connect() as conn:
            conn.execute(select(Question.text)).all()
    assert str(path) in str(caught.value)
    assert path.read_bytes() == before  # nothing written into it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.sqlite"]


def test_the_consistency_flow_checks_the_database_before_rewriting_its_suite(tmp_path):
    """A run started without ``lingtest run``'s validation (a deployment) stops at
    ``check_inputs``, before ``build_suite`` rewrites the interim files."""
    import shutil

    from lingtest.tasks.consistency.method import ConsistencyMethod
    from lingtest.flows.registry import load_params
    from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace

    shutil.copy(PACKAGE_ROOT / "params.yaml", tmp_path / "params.yaml")
    questions = tmp_path / "inputs" / "q.jsonl"
    questions.parent.mkdir()
    questions.write_text('{"question": "is it so", "answer": true}\n')
    database = tmp_path / "data" / "consistency" / "results.sqlite"
    database.parent.mkdir(parents=True)
    database.write_bytes(b"not a database\n" * 500)
    method = ConsistencyMethod(load_params(tmp_path, [f"consistency.questions={questions}"]),
                               Workspace(tmp_path))
    with pytest.raises(LingtestError, match=f"{database} is not an SQLite database .* move "
                                            "it away"):
        method.check_inputs()


def test_a_database_in_use_is_not_called_damaged(tmp_path):
    """A writer holding the file: the check does not judge (nor wait forever)."""
    import sqlite3

    from lingtest.tasks.consistency.store import check_sqlite

    path = tmp_path / "results.sqlite"
    writer = sqlite3.connect(path)
    writer.execute("CREATE TABLE t (a TEXT)")
    writer.commit()
    writer.execute("BEGIN EXCLUSIVE")
    try:
        check_sqlite(f"sqlite:///{path}")
    finally:
        writer.rollback()
        writer.close()


@pytest.fixture
def shard_store(tmp_path):
    from lingtest.tasks.contrastive.embedding import EmbeddingStore

    texts = [f"sentence number {i} of the test" for i in range(400)]
    vectors = np.random.default_rng(0).normal(size=(len(texts), 384)).astype(np.float32)
    store = EmbeddingStore(tmp_path, "demo/encoder", "rev1", "mean", n_shards=16)
    assert store.add(texts, vectors) == len(texts)
    reopen = lambda: EmbeddingStore(tmp_path, "demo/encoder", "rev1", "mean", n_shards=16)  # noqa: E731
    assert np.array_equal(reopen().get(texts), vectors)
    return store, texts, reopen


def test_a_damaged_embedding_shard_is_named_with_the_fix(shard_store):
    store, texts, reopen = shard_store
    shard = store.shard_files()[3]
    damage(shard, size=1024)
    with pytest.raises(LingtestError) as caught:
        reopen().get(texts)
    message = str(caught.value)
    assert message.startswith(f"{shard}: unreadable embedding shard (BadZipFile: ")
    assert message.endswith("fix: delete it and rerun (its texts are embedded again)")
    shard.unlink()  # the fix: those texts are missing again, the others still served
    again = reopen()
    assert 0 < len(again.missing(texts)) < len(texts)


def test_non_finite_vectors_in_a_shard_are_refused(shard_store):
    """``add`` never stores NaN or inf, so a shard holding them was damaged."""
    store, texts, reopen = shard_store
    shard = store.shard_files()[0]
    with np.load(shard) as data:
        hashes, vectors = data["hashes"], data["vectors"].copy()
    vectors[1, 5] = np.nan
    with open(shard, "wb") as handle:
        np.savez(handle, hashes=hashes, vectors=vectors)
    with pytest.raises(LingtestError, match=r"unreadable embedding shard \(1 vectors not "
                                            r"finite\); fix: delete it"):
        reopen().get(texts)


def _rewrite(shard, **members) -> None:
    """``shard`` rewritten as a valid npz with these members (the others as they were)."""
    with np.load(shard) as data:
        kept = {name: data[name] for name in data.files}
    with open(shard, "wb") as handle:
        np.savez(handle, **{**kept, **members})


def test_zeroed_vectors_in_a_valid_shard_are_refused(shard_store):
    """A shard rewritten whole (valid zip, CRCs fine) with its vectors zeroed: the checksum
    written with the vectors no longer matches; without a checksum (a shard from before
    them) the all-zero rows give it away. Either way: the path and the fix, not zeros."""
    store, texts, reopen = shard_store
    shard = store.shard_files()[2]
    with np.load(shard) as data:
        assert "checksum" in data.files
        zeros = np.zeros_like(data["vectors"])
    _rewrite(shard, vectors=zeros)
    with pytest.raises(LingtestError, match=r"unreadable embedding shard \(its vectors do not "
                                            r"match the checksum written with them\); fix: "
                                            r"delete it"):
        reopen().get(texts)
    with np.load(shard) as data:
        members = {"hashes": data["hashes"], "vectors": data["vectors"]}
    with open(shard, "wb") as handle:  # no checksum member, as written before checksums
        np.savez(handle, **members)
    with pytest.raises(LingtestError) as caught:
        reopen().get(texts)
    assert str(caught.value).startswith(f"{shard}: unreadable embedding shard (")
    assert f"{len(zeros)} all-zero vectors and no checksum" in str(caught.value)
    shard.unlink()  # the fix
    assert 0 < len(reopen().missing(texts)) < len(texts)


def test_a_shard_without_a_checksum_is_still_served(shard_store):
    """Shards written before checksums keep serving their (non-zero) vectors."""
    store, texts, reopen = shard_store
    expected = reopen().get(texts)
    for shard in store.shard_files():
        with np.load(shard) as data:
            members = {"hashes": data["hashes"], "vectors": data["vectors"]}
        with open(shard, "wb") as handle:
            np.savez(handle, **members)
    assert np.array_equal(reopen().get(texts), expected)
