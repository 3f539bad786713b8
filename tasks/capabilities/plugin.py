"""S²LCT (specification- and syntax-based capability testing of sentiment classifiers) as a
lingtest plug-in, with the stage that fine-tunes the classifier it tests by default."""
from lingtest.tasks.core.plugin_spec import Plugin, StageSpec

# the data stage's tables the suite is built from
TABLES = ("sst", "word_polarity", "ptb_trees", "checklist_suite")

PLUGIN = Plugin(
    name="capabilities", title="Capability testing of sentiment classifiers (S²LCT)",
    paper="S²LCT", citation="public code: ALiCT", code="jasonlee27/alict",
    section="capabilities", params="lingtest.tasks.capabilities.params:CapabilitiesParams",
    stages=(
        StageSpec("train-sentiment", section="capabilities.train_sentiment",
                  flow="lingtest.flows.train_sentiment:train_sentiment_flow"),
        StageSpec("capabilities", section="capabilities",
                  method="lingtest.tasks.capabilities.method:CapabilitiesMethod",
                  models="lingtest.tasks.capabilities.checks:configured_models",
                  check="lingtest.tasks.capabilities.checks:check_inputs", tables=TABLES,
                  processes=True),
    ),
    model_checks={"fill": "lingtest.tasks.capabilities.checks:check_fill_model"},
)
