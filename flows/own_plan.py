"""What ``lingtest test`` will run, decided before Prefect or any model loads: the models'
kinds (with the evidence each was told from), the methods that fit them and the run folder.
Imports neither Prefect nor pandas, so a spec whose kind cannot be told costs the CLI's
start-up and no more."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lingtest.tasks.core.errors import LingtestError

# The methods that test each kind of model, and the parameter that names their models.
KIND_METHODS = {"classifier": ("capabilities", "adaptive"), "encoder": ("contrastive",),
                "llm": ("consistency",)}
# Methods that also take an LLM in another role, when --methods names them: asked to classify
# each text through a prompt (lingtest.tasks.models.llm_classifier), or embedding through its server's
# embeddings API (served LLMs only).
LLM_ROLES = {"capabilities": "a sentiment classifier (prompted)",
             "adaptive": "a sentiment classifier (prompted)",
             "contrastive": "an encoder (its server's embeddings API)"}
SERVED_FORMS = ("openai", "openai-chat", "ollama")
METHOD_MODELS = {"capabilities": "capabilities.models", "adaptive": "adaptive.models",
                 "contrastive": "contrastive.encoders", "consistency": "consistency.llms"}
RUNS = "runs"  # under the project root, git-ignored


@dataclass
class Plan:
    """What ``lingtest test`` will run: the parsed models, the methods and the output."""

    specs: list[str]
    names: list[str]
    methods: list[str]
    name: str
    out: Path
    kinds: dict[str, tuple[str, str]] = field(default_factory=dict)
    roles: dict[str, list[str]] = field(default_factory=dict)  # an LLM's other roles


def plan(specs: list[str], methods: list[str] | None, name: str | None, params,
         root: Path) -> Plan:
    """Parse and check the models, and pick the methods (every method that fits their kind
    unless ``methods`` narrows them). Loads no weights."""
    from lingtest.tasks.models.checks import infer_kind
    from lingtest.tasks.models.model_spec import parse_models

    if name is not None and not name.strip():
        raise LingtestError("lingtest test --name '': give the run folder a name (runs/<name>/), "
                            "or leave it out for the first model's name")
    if not specs:
        raise LingtestError("lingtest test: name at least one model (a spec: hub id, folder, "
                            "python:MODULE:ATTR, predictions:PATH, openai:MODEL@URL)")
    refs = parse_models(specs, "lingtest test", params.models.names, root)
    unknown = [m for m in methods or [] if m not in METHOD_MODELS]
    if unknown:
        raise LingtestError(f"lingtest test --methods: unknown method `{unknown[0]}`; "
                            f"methods: {', '.join(METHOD_MODELS)}")
    implied = {k for k, fits in KIND_METHODS.items() for m in methods or [] if m in fits}
    kinds: dict[str, tuple[str, str]] = {}  # name → (kind, the evidence it was told from)
    for ref in refs:
        try:
            kinds[ref.name] = infer_kind(ref, root)
        except LingtestError:
            if len(implied) != 1:  # --methods tells the kind when its methods share one
                raise
            kinds[ref.name] = next(iter(implied)), f"--methods {','.join(methods or [])}"
    fitting = list(dict.fromkeys(m for kind, _ in kinds.values() for m in KIND_METHODS[kind]))
    chosen = methods or fitting
    forms = {ref.name: ref.form for ref in refs}
    roles: dict[str, list[str]] = {}
    for method in chosen:
        wrong = [n for n, (kind, _) in kinds.items() if method not in KIND_METHODS[kind]
                 and not _llm_role(kind, forms[n], method)]
        for n, (kind, _) in kinds.items():
            if method not in KIND_METHODS[kind] and n not in wrong:
                roles.setdefault(n, []).append(f"{method}: {LLM_ROLES[method]}")
        if wrong:
            kind, evidence = kinds[wrong[0]]
            raise LingtestError(f"lingtest test: {method} does not test {', '.join(wrong)} "
                                f"({kind}, from {evidence}); {kind}s go through "
                                f"{', '.join(KIND_METHODS[kind])}")
    run_name = name or refs[0].name.replace("/", "-")
    if not run_name or "/" in run_name or run_name.startswith("."):
        raise LingtestError(f"lingtest test --name {run_name!r}: one folder name, e.g. my-model")
    return Plan(specs, [r.name for r in refs], chosen, run_name, root / RUNS / run_name,
                kinds, roles)


def _llm_role(kind: str, form: str, method: str) -> bool:
    """An LLM named for a method that tests it in another role (``LLM_ROLES``)."""
    return kind == "llm" and method in LLM_ROLES and (
        method != "contrastive" or form in SERVED_FORMS)


def describe_kinds(the_plan: Plan) -> list[str]:
    """One line per model: the kind lingtest took it for, and why."""
    shown = {"llm": "an LLM", "encoder": "an encoder", "classifier": "a classifier"}
    return [f"lingtest test: {name} is {shown.get(kind, kind)} "
            f"(from {evidence})" + "".join(f"; tested under {role}"
                                           for role in the_plan.roles.get(name, []))
            for name, (kind, evidence) in the_plan.kinds.items()]


