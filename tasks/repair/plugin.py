"""COSTELLO's repair (§5.4: fine-tune an encoder on its violated triples, re-test it) as a
lingtest plug-in; it reads the contrastive stage's results."""
from lingtest.tasks.core.plugin_spec import Plugin, StageSpec

PLUGIN = Plugin(
    name="repair", title="Repairing embedding models (COSTELLO §5.4)",
    paper="COSTELLO", citation="Jiang et al., FSE 2024", code="lenijwp/COSTELLO",
    section="repair", params="lingtest.tasks.repair.params:RepairParams",
    stages=(StageSpec("repair", section="repair", flow="lingtest.flows.repair:repair_flow",
                      models="lingtest.tasks.repair.checks:configured_models"),),
    model_checks={"repair": "lingtest.tasks.repair.checks:check_repair_model"},
)
