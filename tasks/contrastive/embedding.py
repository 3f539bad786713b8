"""Embedding store: every distinct text is embedded once per model, cached on disk.

COSTELLO embeds the three sentences of each triple as it meets them, so a sentence shared by
many triples (a seed with several mutants, a dictionary word) is embedded many times. Here
every distinct text goes through the model once per (model, revision, pooling), and the vectors
are kept on disk so a rerun, another relation or another threshold reuses them.

Layout under ``root``::

    <model id with / replaced by __>/<key>/meta.json      model id, revision, pooling, dim
    <model id with / replaced by __>/<key>/shard-<hex>.npz  hashes (S64) + vectors float32
    <model id with / replaced by __>/<key>/journal-<hex>.bin  records not yet compacted

``key`` is a hash of model id, revision, pooling and the store format, so a new revision,
another pooling or another way of batching never reads old vectors. A text's shard is given
by the first hex characters of its sha256 (``shard_of``): 16 shards use one character, 256 use two. A worker that owns a shard is the
only writer of that file, so a cluster can split the work by shard (``embed_shard``); a
writer in the same process or on the same machine takes a per-shard file lock as well. Each
shard file is replaced atomically (``lingtest.tasks.core.io.atomic_path``).

An encoder behind a service (``EndpointEncoder``: each request costs money and time) stores
each request's vectors the moment it returns (``append``): fixed-size records (the text's hash,
its float32 vector, a CRC32 of both) appended to ``journal-<hex>.bin`` beside the shard with one
``O_APPEND`` write, so a run killed with ``kill -9`` keeps every vector whose request had
returned; reads take the shard and its journal (a torn last record or one whose CRC fails is
skipped: that text is embedded again), and ``compact`` folds the journals into the shards at
the end of an embed call. Local encoders never write a journal: their shards are as before.

What is not in the key: the device (CPU and GPU vectors differ by float rounding), the thread
count and ``batch_size``. The encoder runs passes of one exact token count without padding,
at least ``pass_tokens`` tokens each (``lingtest.tasks.models.encoders.exact_length_passes``), so a
text's vector does not depend on the texts embedded with it or before it; measured with MKL on
CPU at the default 256 tokens per pass, the vectors are also the same at 1 and 2 threads.
Another floor changes the last bits, so it is in the pooling key (``Encoder.cache_key``), as is
a ``max_length`` override; lower-casing and the model's own ``max_length`` come from its files,
which the revision pins.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import zipfile
import zlib
from pathlib import Path
from typing import Iterable, Iterator, Protocol, Sequence

import numpy as np

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.io import atomic_path, held_flock, sha256_text, write_json

STORE_FORMAT = 2  # 2: vectors from exact-length passes; 1 (padded batches) is never read
HASH_DTYPE = "S64"  # sha256 hex digests as fixed-width bytes: npz loads without pickle


class SupportsEncode(Protocol):
    """What ``embed_texts`` needs of an encoder (``lingtest.tasks.models.encoders.Encoder`` fits)."""

    def encode(self, sentences: list[str], batch_size: int = 32) -> np.ndarray: ...


def text_hash(text: str) -> str:
    """sha256 hex digest of the UTF-8 text: the cache key of one text."""
    return sha256_text(text)


def _hex_width(n_shards: int) -> int:
    width = 0
    while 16 ** width < n_shards:
        width += 1
    if 16 ** width != n_shards or width == 0:
        raise LingtestError(f"n_shards={n_shards}: expected a power of 16 (16, 256, 4096)")
    return width


def shard_of(text_hash: str, n_shards: int = 16) -> int:
    """Shard number of a text hash: its first hex characters read as an integer."""
    return int(text_hash[:_hex_width(n_shards)], 16)


def split_by_shard(texts: Iterable[str], n_shards: int = 16) -> dict[int, list[str]]:
    """Distinct texts grouped by shard (first-seen order inside each), for per-shard fan-out."""
    groups: dict[int, list[str]] = {}
    for text in dict.fromkeys(texts):
        groups.setdefault(shard_of(text_hash(text), n_shards), []).append(text)
    return dict(sorted(groups.items()))


def _checksum(hashes: np.ndarray, vectors: np.ndarray) -> bytes:
    """sha256 of a shard's hashes and float32 vectors, written beside them: a shard whose
    zip is valid but whose vectors were overwritten (zeroed, say) no longer matches it."""
    digest = hashlib.sha256(np.ascontiguousarray(hashes, dtype=HASH_DTYPE).tobytes())
    digest.update(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
    return digest.hexdigest().encode("ascii")


class EmbeddingStore:
    """On-disk vectors of one model (id + revision + pooling), sharded by text hash."""

    def __init__(self, root: Path, model_id: str, revision: str, pooling: str,
                 n_shards: int = 16):
        if not revision:
            raise LingtestError(f"model `{model_id}`: revision unknown, so its embeddings "
                                f"cannot be cached safely; fix: load a pinned revision")
        self.model_id, self.revision, self.pooling = model_id, str(revision), pooling
        self.n_shards = n_shards
        self._width = _hex_width(n_shards)
        key = hashlib.sha256(f"{model_id}\0{revision}\0{pooling}\0format={STORE_FORMAT}"
                             .encode()).hexdigest()[:16]
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id.replace("/", "__"))
        self.path = Path(root) / slug / key
        self._shards: dict[int, tuple[dict[bytes, int], np.ndarray]] = {}
        self.dim: int | None = None
        meta = self.read_meta()
        if meta is not None:
            self._check_meta(meta)
            self.dim = meta.get("dim")

    @classmethod
    def for_encoder(cls, root: Path, encoder, n_shards: int = 16) -> "EmbeddingStore":
        """The store of a loaded encoder (its model id, revision, pooling and any
        max_length override: ``Encoder.cache_key``)."""
        return cls(root, encoder.model_id, encoder.revision,
                   getattr(encoder, "cache_key", encoder.pooling), n_shards)

    # ----------------------------------------------------------------- files
    @property
    def meta_path(self) -> Path:
        return self.path / "meta.json"

    def shard_path(self, shard: int) -> Path:
        return self.path / f"shard-{shard:0{self._width}x}.npz"

    def shard_files(self) -> list[Path]:
        """Shard files present on disk, in shard order."""
        return sorted(self.path.glob("shard-*.npz"))

    def journal_path(self, shard: int) -> Path:
        return self.path / f"journal-{shard:0{self._width}x}.bin"

    def journal_files(self) -> list[Path]:
        """Journals not yet compacted into their shards, in shard order."""
        return sorted(self.path.glob("journal-*.bin"))

    def read_meta(self) -> dict | None:
        if not self.meta_path.is_file():
            return None
        try:
            return json.loads(self.meta_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise LingtestError(f"{self.meta_path}: not valid JSON ({exc}); fix: delete the "
                                f"folder {self.path} to rebuild the cache")

    def _check_meta(self, meta: dict) -> None:
        wanted = {"model_id": self.model_id, "revision": self.revision,
                  "pooling": self.pooling, "n_shards": self.n_shards}
        wrong = {k: meta.get(k) for k, v in wanted.items() if meta.get(k) != v}
        if wrong:
            raise LingtestError(f"{self.meta_path}: cache made for {wrong}, expected "
                                f"{ {k: wanted[k] for k in wrong} }; fix: use another store "
                                f"root or delete {self.path}")

    def _write_meta(self, dim: int) -> None:
        write_json(self.meta_path, {"format": STORE_FORMAT, "model_id": self.model_id,
                                    "revision": self.revision, "pooling": self.pooling,
                                    "dim": dim, "n_shards": self.n_shards})

    @contextlib.contextmanager
    def _locked(self, shard: int) -> Iterator[None]:
        """Exclusive lock on one shard while it is read, merged and rewritten."""
        self.path.mkdir(parents=True, exist_ok=True)
        with held_flock(self.path / f".shard-{shard:0{self._width}x}.lock"):
            yield

    def _read_shard(self, shard: int) -> tuple[dict[bytes, int], np.ndarray]:
        path = self.shard_path(shard)
        if not path.is_file():
            return {}, np.empty((0, self.dim or 0), dtype=np.float32)
        try:  # a damaged zip member fails its CRC: BadZipFile, or zlib's error mid-stream
            with np.load(path, allow_pickle=False) as data:
                hashes, vectors = data["hashes"], data["vectors"]
                checksum = data["checksum"].item() if "checksum" in data.files else None
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            raise self._unreadable(path, f"{type(exc).__name__}: {exc}") from None
        if vectors.ndim != 2 or len(hashes) != len(vectors) \
                or (self.dim is not None and vectors.shape[1] != self.dim):
            raise self._unreadable(path, f"{len(hashes)} hashes for vectors of shape "
                                         f"{vectors.shape}, dim {self.dim}")
        broken = ~np.isfinite(vectors).all(axis=1)
        if broken.any():  # ``add`` refuses them: the bytes were damaged, not computed
            raise self._unreadable(path, f"{int(broken.sum())} vectors not finite")
        if checksum is not None and checksum != _checksum(hashes, vectors):
            raise self._unreadable(path, "its vectors do not match the checksum written "
                                         "with them")
        zeroed = ~vectors.any(axis=1)
        if checksum is None and zeroed.any():  # a shard from before checksums: an all-zero
            # row is no encoder's output but a file overwritten (valid zip, vectors zeroed)
            raise self._unreadable(path, f"{int(zeroed.sum())} all-zero vectors and no "
                                         "checksum")
        return {h: i for i, h in enumerate(hashes.tolist())}, vectors

    @staticmethod
    def _unreadable(path: Path, problem: str) -> LingtestError:
        return LingtestError(f"{path}: unreadable embedding shard ({problem}); fix: delete it "
                             f"and rerun (its texts are embedded again)")

    def _shard(self, shard: int) -> tuple[dict[bytes, int], np.ndarray]:
        if shard not in self._shards:
            self._shards[shard] = self._with_journal(shard, *self._read_shard(shard))
        return self._shards[shard]

    # ----------------------------------------------------------------- journal
    def _record(self) -> np.dtype:
        """One journal record: the text's hash, its vector and a CRC32 of both."""
        return np.dtype([("hash", HASH_DTYPE), ("vector", "<f4", (self.dim,)), ("crc", "<u4")])

    def _read_journal(self, shard: int) -> np.ndarray:
        """The shard's journal records whose CRC holds and whose vector is finite; a torn
        last record (a write cut short) is left out."""
        path = self.journal_path(shard)
        if self.dim is None and path.is_file():  # another process began the store since
            self.dim = (self.read_meta() or {}).get("dim")
        if self.dim is None or not path.is_file():
            return np.empty(0, dtype="u1")
        record = self._record()
        raw = path.read_bytes()
        rows = np.frombuffer(raw, dtype=record, count=len(raw) // record.itemsize)
        if not len(rows):
            return rows
        good = np.array([zlib.crc32(row.tobytes()[:record.itemsize - 4]) == row["crc"]
                         for row in rows])
        return rows[good & np.isfinite(rows["vector"]).all(axis=1)]

    def _with_journal(self, shard: int, index: dict[bytes, int], vectors: np.ndarray
                      ) -> tuple[dict[bytes, int], np.ndarray]:
        """A shard's index and vectors with its journal's texts the shard lacks added (the
        shard's vector wins; the first record of a text wins)."""
        records = self._read_journal(shard)
        if not len(records):
            return index, vectors
        new: dict[bytes, int] = {}
        for at, digest in enumerate(records["hash"].tolist()):
            if digest not in index and digest not in new:
                new[digest] = at
        if not new:
            return index, vectors
        merged = np.concatenate([vectors.reshape(-1, self.dim),
                                 records["vector"][list(new.values())]])
        return {**index, **{h: len(index) + i for i, h in enumerate(new)}}, merged

    def _checked(self, texts: Sequence[str], vectors: np.ndarray, what: str) -> np.ndarray:
        """``vectors`` if they fit ``texts`` and the store (the first ones set its dim)."""
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise LingtestError(f"{what}(): {len(texts)} texts but vectors of shape "
                                f"{vectors.shape}")
        if not np.isfinite(vectors).all():
            raise LingtestError(f"{what}(): model `{self.model_id}` gave non-finite embeddings")
        if self.dim is None:
            self.dim = int(vectors.shape[1])
            self._write_meta(self.dim)
        elif vectors.shape[1] != self.dim:
            raise LingtestError(f"{what}(): vectors of dim {vectors.shape[1]}, but {self.path} "
                                f"holds dim {self.dim}")
        return vectors

    def append(self, texts: Sequence[str], vectors: np.ndarray) -> int:
        """Store vectors at once and cheaply: one ``O_APPEND`` write of fixed-size records
        per touched shard's journal, under the shard's lock (a torn record a killed writer
        left at the end is cut off first, so records stay aligned). The kernel holds the
        bytes once ``write`` returns, so a ``kill -9`` loses nothing appended; a power cut may
        lose the last requests (their texts are embedded again). How many records were
        written (``compact`` later drops those the shard already holds)."""
        if len(texts) == 0:
            return 0
        vectors = self._checked(texts, vectors, "append").astype(np.float32)
        record = self._record()
        digests = self._hashes(texts)
        by_shard: dict[int, list[int]] = {}
        for row, digest in enumerate(digests):
            by_shard.setdefault(self._shard_no(digest), []).append(row)
        hashes = np.array(digests, dtype=HASH_DTYPE)
        for shard, rows in sorted(by_shard.items()):
            out = np.zeros(len(rows), dtype=record)
            out["hash"], out["vector"] = hashes[rows], vectors[rows]
            out["crc"] = [zlib.crc32(row.tobytes()[:record.itemsize - 4]) for row in out]
            with self._locked(shard):
                fd = os.open(self.journal_path(shard), os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                             0o644)
                try:
                    size = os.fstat(fd).st_size
                    if size % record.itemsize:  # a killed writer's torn record
                        os.ftruncate(fd, size - size % record.itemsize)
                    data = memoryview(out.tobytes())
                    while data:
                        data = data[os.write(fd, data):]
                finally:
                    os.close(fd)
            self._shards.pop(shard, None)  # read again, journal included, when asked
        return len(texts)

    def compact(self) -> int:
        """Fold every journal into its shard (merged and rewritten atomically, as ``add``
        writes it, then the journal removed), each under the shard's lock; how many texts
        moved. A kill between the two steps leaves records the shard already holds: read
        past, removed by the next compaction."""
        moved = 0
        for path in self.journal_files():
            shard = int(path.stem[len("journal-"):], 16)
            with self._locked(shard):
                index, stored = self._read_shard(shard)
                merged_index, merged = self._with_journal(shard, index, stored)
                if len(merged_index) > len(index):
                    self._write_shard(shard, np.array(list(merged_index), dtype=HASH_DTYPE),
                                      merged)
                    moved += len(merged_index) - len(index)
                path.unlink()
                self._shards[shard] = (merged_index, merged)
        return moved

    def _write_shard(self, shard: int, hashes: np.ndarray, vectors: np.ndarray) -> None:
        with atomic_path(self.shard_path(shard)) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, hashes=hashes, vectors=vectors,
                     checksum=np.array(_checksum(hashes, vectors), dtype="S64"))

    # ----------------------------------------------------------------- API
    def _hashes(self, texts: Sequence[str]) -> list[bytes]:
        if isinstance(texts, str):
            raise LingtestError("the embedding store takes a list of texts, not one string")
        return [text_hash(t).encode("ascii") for t in texts]

    def _shard_no(self, digest: bytes) -> int:
        return int(digest[:self._width], 16)

    def missing(self, texts: Sequence[str]) -> list[str]:
        """Distinct texts not in the store, in first-seen order."""
        distinct = list(dict.fromkeys(texts))
        return [t for t, h in zip(distinct, self._hashes(distinct))
                if h not in self._shard(self._shard_no(h))[0]]

    def __contains__(self, text: str) -> bool:
        digest = text_hash(text).encode("ascii")
        return digest in self._shard(self._shard_no(digest))[0]

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> int:
        """Store vectors (one row per text); texts already stored keep their vectors.

        Returns how many texts were new. Each touched shard is re-read under its lock,
        merged and rewritten atomically, so concurrent writers on one machine lose nothing.
        """
        if len(texts) == 0:
            return 0
        vectors = self._checked(texts, vectors, "add")
        by_shard: dict[int, dict[bytes, int]] = {}
        for row, digest in enumerate(self._hashes(texts)):
            by_shard.setdefault(self._shard_no(digest), {}).setdefault(digest, row)
        added = 0
        for shard, rows in sorted(by_shard.items()):
            with self._locked(shard):
                index, stored = self._read_shard(shard)
                new = [(h, r) for h, r in rows.items() if h not in index]
                if new:
                    hashes = np.array(list(index) + [h for h, _ in new], dtype=HASH_DTYPE)
                    merged = np.concatenate(
                        [stored.reshape(-1, self.dim),
                         vectors[[r for _, r in new]].astype(np.float32)])
                    self._write_shard(shard, hashes, merged)
                    index = {h: i for i, h in enumerate(hashes.tolist())}
                    stored = merged
                    added += len(new)
                self._shards[shard] = self._with_journal(shard, index, stored)
        return added

    def get(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` as a (len(texts), dim) float32 matrix, rows in the order asked.

        Raises LingtestError naming the missing texts when any is not stored.
        """
        hashes = self._hashes(texts)
        if self.dim is None:  # another process may have created the store since
            meta = self.read_meta()
            self.dim = None if meta is None else meta.get("dim")
        out = np.empty((len(texts), self.dim or 0), dtype=np.float32)
        absent: list[str] = []
        for attempt in range(2):
            absent = []
            for row, (text, digest) in enumerate(zip(texts, hashes)):
                index, stored = self._shard(self._shard_no(digest))
                at = index.get(digest)
                if at is None:
                    absent.append(text)
                else:
                    out[row] = stored[at]
            if not absent or attempt:
                break
            self.refresh()  # shards written by other workers since they were read here
        if absent:
            shown = ", ".join(repr(t[:60]) for t in absent[:3])
            raise LingtestError(f"{self.path}: {len(absent)} of {len(texts)} texts are not "
                                f"embedded yet ({shown}{', …' if len(absent) > 3 else ''}); "
                                f"fix: run embed_texts on them first")
        return out

    def refresh(self) -> None:
        """Forget the shards read so far, e.g. after other workers filled them."""
        self._shards.clear()

    def __len__(self) -> int:
        """Number of texts stored (all shards on disk)."""
        shards = {int(f.stem.split("-", 1)[1], 16)
                  for f in [*self.shard_files(), *self.journal_files()]}
        return sum(len(self._shard(shard)[0]) for shard in shards)

    def __repr__(self) -> str:
        return (f"EmbeddingStore({self.model_id!r}, revision={self.revision!r}, "
                f"pooling={self.pooling!r}, path={str(self.path)!r})")


# --------------------------------------------------------------------- embedding

def _check_encoder(encoder, store: EmbeddingStore) -> None:
    """Refuse to file one model's vectors under another model's key (the pooling part is the
    encoder's ``cache_key`` when it has one: pooling plus any max_length override)."""
    for attr, mine in (("model_id", "model_id"), ("revision", "revision"),
                       ("pooling", "cache_key" if hasattr(encoder, "cache_key") else "pooling")):
        have = getattr(encoder, mine, None)
        if have is not None and str(have) != str(getattr(store, attr)):
            raise LingtestError(f"encoder {attr} `{have}` does not match the store's "
                                f"`{getattr(store, attr)}` ({store.path})")


def length_order(texts: Sequence[str], lengths: Sequence[int] | None = None) -> np.ndarray:
    """Indices of ``texts`` longest first (stable) by ``lengths`` (token counts) or, without
    them, by characters: a flush chunk then splits at most one token-count group, so the
    encoder's exact-length passes need few fill-up copies."""
    if lengths is None:
        lengths = [len(t) for t in texts]
    if len(lengths) != len(texts):
        raise LingtestError(f"length_order(): {len(lengths)} lengths for {len(texts)} texts")
    return np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")


def _embed_missing(encoder: SupportsEncode, todo: list[str], store: EmbeddingStore,
                   batch_size: int, flush_every: int) -> int:
    """Embed ``todo`` (distinct, all missing) longest first, storing every chunk."""
    if batch_size < 1 or flush_every < 1:
        raise LingtestError(f"batch_size and flush_every must be >= 1 (got {batch_size}, "
                            f"{flush_every})")
    if hasattr(encoder, "encode_each"):  # a service: each request's vectors stored at once
        try:
            if todo:
                encoder.encode_each(todo, batch_size, store.append)
        finally:
            store.compact()  # a killed run's journal too
        return len(todo)
    if not todo:
        return 0
    counts = encoder.token_counts(todo) if hasattr(encoder, "token_counts") else None  # Encoder
    ordered = [todo[i] for i in length_order(todo, counts)]
    for start in range(0, len(ordered), flush_every):
        part = ordered[start:start + flush_every]
        vectors = np.asarray(encoder.encode(part, batch_size=batch_size), dtype=np.float32)
        if vectors.shape[0] != len(part):
            raise LingtestError(f"encoder returned {vectors.shape[0]} rows for {len(part)} texts")
        store.add(part, vectors)
    return len(ordered)


def embed_texts(encoder: SupportsEncode, texts: Sequence[str], store: EmbeddingStore,
                batch_size: int = 32, flush_every: int = 4096) -> np.ndarray:
    """Embeddings of ``texts`` (rows in input order), embedding only what the store lacks.

    Duplicates are embedded once; the missing texts go to the model longest first (lingtest's
    encoder batches them by exact token count, at least ``encoder.pass_tokens`` tokens per pass;
    ``batch_size`` is the texts per call of an encoder that batches by count) and are
    stored every ``flush_every`` texts, so an interrupted run keeps what it finished. A rerun
    on the same texts makes no model call. An encoder with ``encode_each`` (an embedding
    service) instead hands over each request's vectors as it returns: they are appended to
    the store's journals at once and compacted into the shards when the call ends.
    """
    _check_encoder(encoder, store)
    _embed_missing(encoder, store.missing(texts), store, batch_size, flush_every)
    return store.get(list(texts))


def embed_missing(encoder: SupportsEncode, texts: Sequence[str], store: EmbeddingStore,
                  batch_size: int = 32, flush_every: int = 4096) -> int:
    """Embed and store the ``texts`` the store lacks (as ``embed_texts``, without reading the
    vectors back); how many were embedded."""
    _check_encoder(encoder, store)
    return _embed_missing(encoder, store.missing(list(dict.fromkeys(texts))), store,
                          batch_size, flush_every)


def embed_shard(encoder: SupportsEncode, texts: Sequence[str], store: EmbeddingStore,
                shard: int, batch_size: int = 32, flush_every: int = 4096) -> int:
    """Embed the missing texts of one shard (texts of other shards are ignored).

    One Prefect task per shard can run this in parallel: each writes only its shard file.
    Returns how many texts were embedded.
    """
    _check_encoder(encoder, store)
    if not 0 <= shard < store.n_shards:
        raise LingtestError(f"shard {shard} outside 0..{store.n_shards - 1}")
    mine = [t for t in dict.fromkeys(texts) if shard_of(text_hash(t), store.n_shards) == shard]
    return _embed_missing(encoder, store.missing(mine), store, batch_size, flush_every)
