"""The data room as a plug-in: the ``data`` stage imports the raw assets and writes the
processed tables every method reads (it has no section of its own: ``data`` is shared)."""
from lingtest.tasks.core.plugin_spec import Plugin, StageSpec

PLUGIN = Plugin(
    name="data", title="Raw assets and processed tables",
    stages=(StageSpec("data", section="data", flow="lingtest.flows.data:data_flow",
                      check="lingtest.tasks.data.checks:check_inputs"),),
)
