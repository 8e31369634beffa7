"""The floors of hf_atr, checked on the import graph read from the source (docs/architecture.md).

Every ``import`` statement counts, wherever it stands (module level, inside a function, under
``TYPE_CHECKING``), and so does the package ``__init__`` that Python runs before a submodule. A floor is a
folder: every module sits on the floor of its package (``hf_atr/metrics/`` is the ground floor, all of it), and
a top-level module is a folder of its own. A module may import from its own floor or a lower one, never from
a higher one, and the graph has no cycle. Names that
resolve by table at first use (``hf_atr.__init__``, the objective registry, the auto-class registration)
are not imports; ``test_every_public_name_resolves`` checks that those tables point at real objects.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "hf_atr"

FLOORS = {
    # 0 ground: solvers, data loaders, metric arithmetic and the results table, figures, tokenizer training,
    # import deferral, file permissions, deprecations, the collectives, the files written beside a model's weights
    "hf_atr.ot": 0,
    "hf_atr.data": 0,
    "hf_atr.metrics": 0,
    "hf_atr.plots": 0,
    "hf_atr.lazy": 0,
    "hf_atr.auto_registration": 0,
    "hf_atr.tokenization": 0,
    "hf_atr.file_permissions": 0,
    "hf_atr.deprecation": 0,
    "hf_atr.distributed": 0,
    "hf_atr.model_files": 0,
    "hf_atr.moments": 0,
    # 0 ground, backbones and features: transformers-family code of their own that knows no hf-atr model
    # (PANNs, CLAP's checkpoint conversion, sentence-transformers layouts, the tower mapping, the batched
    # torch twins of transformers' feature extractors)
    "hf_atr.models": 0,
    "hf_atr.towers": 0,
    "hf_atr.features": 0,
    # 1 objectives: the registry (names, base class, hyperparameter checks) and one family per module, on
    # embeddings and the solvers alone
    "hf_atr.objectives": 1,
    # 2 configuration
    "hf_atr.configuration_atr": 2,
    # 3 the upload of a model (reads a model, never imports one)
    "hf_atr.hub": 3,
    # 4 model and processor
    "hf_atr.modeling_atr": 4,
    "hf_atr.model_layers": 4,
    "hf_atr.model_starting_points": 4,
    "hf_atr.scoring_head": 4,
    "hf_atr.processing_atr": 4,
    "hf_atr.dataset_features": 4,
    "hf_atr.audio_batches": 4,
    "hf_atr.windowing": 4,
    "hf_atr.long_clips": 4,
    # 5 what encodes or reads a model: encoding (audio_encoding: its audio), evaluation, the model card
    "hf_atr.encoding": 5,
    "hf_atr.audio_encoding": 5,
    "hf_atr.frame_encoding": 5,
    "hf_atr.evaluation": 5,
    "hf_atr.model_card": 5,
    # 6 knowledge, 7 training
    "hf_atr.knowledge": 6,
    "hf_atr.training": 7,
    # 8 pipelines (the pipeline, its index, indexing, persistence, sharing), 9 the demo, the command line and the
    # search page it serves
    "hf_atr.pipelines": 8,
    # 8 export: the model as a sentence-transformers folder and as ONNX graphs (with the index fingerprint), and what
    # runs those graphs behind the model's methods (which the pipeline runs with backend="onnx")
    "hf_atr.export": 8,
    "hf_atr.demo": 9,
    "hf_atr.cli": 9,
    "hf_atr.commands": 9,
    "hf_atr.app": 9,
}
"""A floor is a folder: each key is a package of ``hf_atr`` or one of its top-level modules, never a module
inside a package."""

FLOOR_EXCEPTIONS: dict[str, tuple[int, str]] = {}
"""Modules on another floor than their folder's: ``{module: (floor, why it cannot move)}``. Empty: every
folder is one floor."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def imported_modules(name: str) -> set[str]:
    """hf_atr modules that ``name`` imports, with the packages whose ``__init__`` those imports run."""
    base = name if name in PACKAGES else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text(), filename=str(MODULES[name]))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                anchor = base.split(".")[: len(base.split(".")) - node.level + 1]
                source = ".".join([*anchor, *([source] if source else [])])
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in MODULES else source)
    edges = set()
    for target in targets:
        parts = target.split(".")
        # The module itself and every package __init__ above it, except the root (see below).
        edges.update(".".join(parts[:end]) for end in range(2, len(parts) + 1))
    # The importer's own packages ran before it did: they are no dependency of it.
    own_packages = {".".join(name.split(".")[:end]) for end in range(1, len(name.split(".")) + 1)}
    return {edge for edge in edges if edge in MODULES and edge not in own_packages}


GRAPH = {name: imported_modules(name) for name in MODULES}


def floor(name: str) -> int:
    """The floor of a module: its folder's (a top-level module is a folder of its own), or its exception's."""
    if name == "hf_atr":
        return max(FLOORS.values())  # the public facade is the top floor
    if name in FLOOR_EXCEPTIONS:
        return FLOOR_EXCEPTIONS[name][0]
    folder = ".".join(name.split(".")[:2])
    if folder not in FLOORS:
        raise AssertionError(
            f"{name} has no floor: add {folder} to FLOORS in tests/test_layers.py and docs/architecture.md"
        )
    return FLOORS[folder]


def test_every_floor_is_a_folder():
    """Each FLOORS key is a package or top-level module of hf_atr, and each of those has a floor."""
    folders = {".".join(name.split(".")[:2]) for name in MODULES if name != "hf_atr"}
    assert sorted(set(FLOORS) - folders) == [], "FLOORS names a module inside a package, or none at all"
    assert sorted(folders - set(FLOORS)) == []


def test_every_exception_states_why_and_differs_from_its_folder():
    for name, (exception_floor, reason) in FLOOR_EXCEPTIONS.items():
        assert name in MODULES, f"{name} is no module of hf_atr"
        assert exception_floor != FLOORS[".".join(name.split(".")[:2])], f"{name} sits on its folder's floor"
        assert len(reason.split()) >= 5, f"{name}: say why it cannot move to a folder of its floor"


def test_root_package_imports_only_the_ground_floor():
    """Python runs hf_atr/__init__.py before any submodule, so it must import nothing above the ground."""
    assert {target: floor(target) for target in GRAPH["hf_atr"]} == {
        "hf_atr.auto_registration": 0,
        "hf_atr.lazy": 0,
    }


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_from_a_higher_floor(name):
    upward = sorted(target for target in GRAPH[name] if floor(target) > floor(name))
    assert not upward, f"{name} (floor {floor(name)}) imports {[(t, floor(t)) for t in upward]}"


def test_import_graph_has_no_cycle():
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for target in sorted(GRAPH[name]):
            if state.get(target) == "open":
                cycle = path[path.index(target) :] + [target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, [*path, target])
        state[name] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])


def test_ground_floor_solvers_import_nothing_else_of_hf_atr():
    solvers = [name for name in MODULES if name.startswith("hf_atr.ot")]
    assert {target for name in solvers for target in GRAPH[name]} <= set(solvers)


@pytest.mark.parametrize("room", ["hf_atr.features", "hf_atr.models", "hf_atr.towers"])
def test_backbones_and_features_import_nothing_of_hf_atr_outside_their_room(room):
    """The dual encoder and the processor build on these; they must not know either (nor data, nor config)."""
    members = [name for name in MODULES if name == room or name.startswith(f"{room}.")]
    assert {target for name in members for target in GRAPH[name]} <= {*members, "hf_atr.lazy"}


@pytest.mark.parametrize(
    "package",
    [
        "hf_atr",
        "hf_atr.objectives",
        "hf_atr.data",
        "hf_atr.ot",
        "hf_atr.features",
        "hf_atr.models.panns",
        "hf_atr.training",
        "hf_atr.evaluation",
        "hf_atr.metrics",
    ],
)
def test_every_public_name_resolves(package):
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert not missing


def test_the_objective_table_points_at_the_registered_classes():
    from hf_atr.objectives.registry import BUILTIN_OBJECTIVES, get_objective_class

    for name, location in BUILTIN_OBJECTIVES.items():
        objective_class = get_objective_class(name)
        assert f"{objective_class.__module__}:{objective_class.__qualname__}" == location
        assert objective_class.name == name and objective_class.citation and objective_class.description
