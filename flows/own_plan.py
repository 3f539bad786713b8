"""What ``lingtest test`` will run, decided before Prefect or any model loads: the models'
kinds (with the evidence each was told from), the methods that fit them and the run folder.
Imports neither Prefect nor pandas, so a spec whose kind cannot be told costs the CLI's
start-up and no more."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tasks.core.errors import LingtestError

# The methods that test each kind of model, and the parameter that names their models.
KIND_METHODS = {"classifier": ("capabilities", "adaptive"), "encoder": ("contrastive",),
                "llm": ("consistency",)}
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


def plan(specs: list[str], methods: list[str] | None, name: str | None, params,
         root: Path) -> Plan:
    """Parse and check the models, and pick the methods (every method that fits their kind
    unless ``methods`` narrows them). Loads no weights."""
    from tasks.models.checks import infer_kind
    from tasks.models.model_spec import parse_models

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
    for method in chosen:
        wrong = [n for n, (kind, _) in kinds.items() if method not in KIND_METHODS[kind]]
        if wrong:
            kind, evidence = kinds[wrong[0]]
            raise LingtestError(f"lingtest test: {method} does not test {', '.join(wrong)} "
                                f"({kind}, from {evidence}); {kind}s go through "
                                f"{', '.join(KIND_METHODS[kind])}")
    run_name = name or refs[0].name.replace("/", "-")
    if not run_name or "/" in run_name or run_name.startswith("."):
        raise LingtestError(f"lingtest test --name {run_name!r}: one folder name, e.g. my-model")
    return Plan(specs, [r.name for r in refs], chosen, run_name, root / RUNS / run_name,
                kinds)


def describe_kinds(the_plan: Plan) -> list[str]:
    """One line per model: the kind lingtest took it for, and why."""
    return [f"lingtest test: {name} is {'an' if kind[0] in 'aeiou' else 'a'} {kind} "
            f"(from {evidence})" for name, (kind, evidence) in the_plan.kinds.items()]


