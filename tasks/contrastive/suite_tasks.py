"""The ``contrastive`` stage's suite task: which tables and settings a suite is built from, and
the cached ``build-suite`` task (COSTELLO's generation, or an imported COSTELLO JSON suite)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from prefect.logging import get_run_logger

from lingtest.tasks.contrastive import costello_json, suite
from lingtest.tasks.core.caching import model_id, task
from lingtest.tasks.contrastive.params import ContrastiveParams
from lingtest.tasks.core.config import Params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.models.registry import resolve


SpacyModel = model_id("spacy", resolve=resolve)  # keyed on its resolved revision


SUITE_TABLES = ("sst", "word_polarity", "names", "gender_pairs", "contrast_pairs", "mrpc")


SUITE_SETTINGS = ("suite", "relations", "sst_split", "mrpc_split", "contrast_split", "max_seeds",
                  "cr1_triples", "synonym_scope", "synonym_probability")


def suite_inputs(params: ContrastiveParams, workspace: Workspace) -> list[str]:
    """The files a suite is made from: the processed tables, or the imported suite file."""
    if params.suite:
        path = Path(params.suite)
        path = path if path.is_absolute() else workspace.root / path
        if not path.is_file():
            raise LingtestError(f"contrastive.suite: {path} does not exist; give the path of "
                                "a COSTELLO JSON suite, or null to generate one")
        return [str(path)]
    files = [workspace.processed / f"{name}.parquet" for name in SUITE_TABLES]
    absent = [str(f) for f in files if not f.is_file()]
    if absent:
        raise LingtestError(f"missing processed tables {', '.join(absent)}: run "
                            "`lingtest run data` (or `dvc repro data`) first")
    return [str(f) for f in files]


@task(name="build-suite")
def build_suite(inputs: list[Path], settings: dict, seed: int, nltk_data: Path,
                spacy_model: SpacyModel, offline: bool) -> pd.DataFrame:
    """Generate the triples (or import a COSTELLO JSON suite)."""
    params = ContrastiveParams(**settings)
    if params.suite:
        imported = costello_json.select_imported(
            costello_json.read_costello_suite(inputs[0]), params.relations, params.max_seeds,
            seed, inputs[0])
        get_run_logger().info("suite %s: %s", Path(inputs[0]).name,
                              imported.groupby("relation", sort=False).size().to_dict())
        return imported
    from lingtest.tasks.models.nlp import load_spacy
    from lingtest.tasks.text.wordnet import wordnet

    tables = {Path(f).stem: pd.read_parquet(f) for f in inputs}
    generated = suite.generate_suite(tables, load_spacy(spacy_model, offline=offline),
                                     wordnet(nltk_data), params, seed)
    get_run_logger().info("suite: %s", generated.groupby("relation").size().to_dict())
    return generated


def settings_of(params: Params) -> dict:
    return params.contrastive.model_dump(mode="json", include=set(SUITE_SETTINGS))
