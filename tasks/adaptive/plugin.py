"""AdaTest (adaptive testing with an LM) as a lingtest plug-in: the re-scored test trees,
the debugging experiment, and the commands that grow and review a tree."""
from lingtest.tasks.core.plugin_spec import Plugin, StageSpec

PLUGIN = Plugin(
    name="adaptive", title="Adaptive testing with a language model (AdaTest)",
    paper="AdaTest", citation="Ribeiro & Lundberg, ACL 2022", code="microsoft/adaptive-testing",
    section="adaptive", params="lingtest.tasks.adaptive.params:AdaptiveParams",
    stages=(
        StageSpec("adaptive", section="adaptive", method="lingtest.tasks.adaptive.method:AdaptiveMethod",
                  models="lingtest.tasks.adaptive.checks:tested_models",
                  check="lingtest.tasks.adaptive.checks:check_trees"),
        StageSpec("adaptive-debug", section="adaptive.debug",
                  method="lingtest.tasks.adaptive.debug:DebuggingLoop",
                  models="lingtest.tasks.adaptive.checks:debugged_model",
                  check="lingtest.tasks.adaptive.checks:check_debug"),
    ),
    cli="lingtest.tasks.adaptive.cli:app",
)
