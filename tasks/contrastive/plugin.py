"""COSTELLO (contrastive testing of sentence embeddings) as a lingtest plug-in."""
from lingtest.tasks.core.plugin_spec import Plugin, StageSpec

PLUGIN = Plugin(
    name="contrastive", title="Contrastive testing of sentence embeddings (COSTELLO)",
    paper="COSTELLO",
    citation="Jiang et al., FSE 2024", code="lenijwp/COSTELLO",
    section="contrastive", params="lingtest.tasks.contrastive.params:ContrastiveParams",
    stages=(StageSpec("contrastive", section="contrastive",
                      method="lingtest.tasks.contrastive.method:ContrastiveMethod",
                      models="lingtest.tasks.contrastive.checks:configured_models",
                      check="lingtest.tasks.contrastive.checks:check_inputs", processes=True),),
    model_checks={"encoder": "lingtest.tasks.contrastive.checks:check_encoder"},
)
