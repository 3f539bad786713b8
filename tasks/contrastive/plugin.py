"""COSTELLO (contrastive testing of sentence embeddings) as a lingtest plug-in."""
from tasks.core.plugin_spec import Plugin, StageSpec

PLUGIN = Plugin(
    name="contrastive", title="Contrastive testing of sentence embeddings (COSTELLO)",
    paper="COSTELLO",
    citation="Jiang et al., FSE 2024", code="lenijwp/COSTELLO",
    section="contrastive", params="tasks.contrastive.params:ContrastiveParams",
    stages=(StageSpec("contrastive", section="contrastive",
                      method="tasks.contrastive.method:ContrastiveMethod",
                      models="tasks.contrastive.checks:configured_models",
                      check="tasks.contrastive.checks:check_inputs", processes=True),),
    model_checks={"encoder": "tasks.contrastive.checks:check_encoder"},
)
