"""KomMKonLLM (combinatorial consistency testing of LLMs) as a lingtest plug-in."""
from lingtest.tasks.core.plugin_spec import Plugin, StageSpec

PLUGIN = Plugin(
    name="consistency", title="Combinatorial consistency testing of LLMs (KomMKonLLM)",
    paper="KomMKonLLM", citation="KomMKonLLM user guide (SBA Research 2025)",
    code="KomMKonLLM/KomMKonLLM",
    section="consistency", params="lingtest.tasks.consistency.params:ConsistencyParams",
    stages=(StageSpec("consistency", section="consistency",
                      method="lingtest.tasks.consistency.method:ConsistencyMethod",
                      models="lingtest.tasks.consistency.checks:configured_models",
                      check="lingtest.tasks.consistency.checks:check_inputs", processes=True),),
    cli="lingtest.tasks.consistency.cli:app",
)
