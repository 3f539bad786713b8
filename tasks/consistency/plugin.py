"""KomMKonLLM (combinatorial consistency testing of LLMs) as a lingtest plug-in."""
from tasks.core.plugin_spec import Plugin, StageSpec

PLUGIN = Plugin(
    name="consistency", title="Combinatorial consistency testing of LLMs (KomMKonLLM)",
    paper="KomMKonLLM", citation="KomMKonLLM user guide (SBA Research 2025)",
    code="KomMKonLLM/KomMKonLLM",
    section="consistency", params="tasks.consistency.params:ConsistencyParams",
    stages=(StageSpec("consistency", section="consistency",
                      method="tasks.consistency.method:ConsistencyMethod",
                      models="tasks.consistency.checks:configured_models",
                      check="tasks.consistency.checks:check_inputs", processes=True),),
    cli="tasks.consistency.cli:app",
)
