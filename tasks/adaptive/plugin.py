"""AdaTest (adaptive testing with an LM) as a lingtest plug-in: the re-scored test trees,
the debugging experiment, and the commands that grow and review a tree."""
from tasks.core.plugin_spec import Plugin, StageSpec

PLUGIN = Plugin(
    name="adaptive", title="Adaptive testing with a language model (AdaTest)",
    paper="AdaTest", citation="Ribeiro & Lundberg, ACL 2022", code="microsoft/adaptive-testing",
    section="adaptive", params="tasks.adaptive.params:AdaptiveParams",
    stages=(
        StageSpec("adaptive", section="adaptive", method="tasks.adaptive.method:AdaptiveMethod",
                  models="tasks.adaptive.checks:tested_models",
                  check="tasks.adaptive.checks:check_trees"),
        StageSpec("adaptive-debug", section="adaptive.debug",
                  method="tasks.adaptive.debug:DebuggingLoop",
                  models="tasks.adaptive.checks:debugged_model",
                  check="tasks.adaptive.checks:check_debug"),
    ),
    cli="tasks.adaptive.cli:app",
)
