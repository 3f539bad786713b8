"""KomMKonLLM's checks before a run: the answer store opens, the external covering-array
generator is installed when chosen, and the question or guide files parse."""
from __future__ import annotations

from lingtest.tasks.core.config import Params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.plugin_spec import ModelEntry
from lingtest.tasks.core.validate import keyed, param_path, read_param_file


def configured_models(params: Params) -> list[ModelEntry]:
    """The LLMs under test."""
    return [ModelEntry("consistency.llms", spec, "llm") for spec in params.consistency.llms]


def check_inputs(params: Params, workspace: Workspace) -> None:
    from lingtest.tasks.consistency.run_settings import database_url
    from lingtest.tasks.consistency.store import check_sqlite, open_store, parse_database_url

    c = params.consistency
    url = database_url(c, workspace)
    check_sqlite(url, workspace.root)  # a bad URL, a damaged file, a folder outside
    if parse_database_url(url).get_backend_name() != "sqlite":  # a server: reached now, not
        open_store(url).engine.dispose()                      # after the suite is rewritten
    if c.generator != "builtin" and not c.import_dir:  # the external generator runs
        from lingtest.tasks.consistency.external import PARAM, find_binary
        try:
            find_binary(c.generator, c.generator_binary)
        except LingtestError as error:
            raise keyed(PARAM, error) from None
    if c.questions:
        from lingtest.tasks.data.questions import read_questions_jsonl
        read_param_file("consistency.questions", read_questions_jsonl,
                        param_path(c.questions, workspace.root))
    if c.import_dir:
        from lingtest.tasks.consistency.guide_import import read_guide_folder
        read_param_file("consistency.import_dir", read_guide_folder,
                        param_path(c.import_dir, workspace.root))
