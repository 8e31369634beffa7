"""One import path per public name: a module of hf_atr exports only what it defines, and importers use that module.

Read from the source (so a re-exported constant counts as much as a class):

- a module's ``__all__`` lists no name the module imports, and no import is written as a public alias
  (``from .x import y as y``, the explicit re-export of PEP 484): either gives the name a second path. Package
  ``__init__`` files are exempt, since gathering their modules' names is their job.
- every ``from hf_atr.<module> import <name>`` in hf_atr/, tests/, benchmarks/, examples/ and the Python blocks of
  docs/ names the module that defines ``<name>`` (or a package that exports it). A name that moved keeps its old
  path in the old module's (or package's) table of moved names (``MOVED_NAMES``,
  :func:`hf_atr.deprecation.moved_names`), which is no import and warns; no importer uses it, and
  :func:`test_an_old_path_warns_and_gives_the_object_of_the_defining_module` checks every such path.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import pytest

from hf_atr.deprecation import HfAtrDeprecationWarning, moved_names

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "hf_atr"
MODULE_FILES = sorted(path for path in PACKAGE_DIR.rglob("*.py") if path.name != "__init__.py")
IMPORTER_FILES = sorted(
    [
        *(
            path
            for folder in ("hf_atr", "tests", "benchmarks", "examples")
            for path in (ROOT / folder).rglob("*.py")
        ),
        *(ROOT / "docs").rglob("*.md"),
    ]
)
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def module_level_statements(tree: ast.Module) -> list[ast.stmt]:
    """The module's own statements, with those under a module-level ``if`` / ``try`` (not inside functions)."""
    statements, pending = [], list(tree.body)
    while pending:
        statement = pending.pop(0)
        statements.append(statement)
        if isinstance(statement, ast.If):
            pending.extend([*statement.body, *statement.orelse])
        elif isinstance(statement, ast.Try):
            pending.extend([*statement.body, *statement.orelse, *statement.finalbody])
            pending.extend(line for handler in statement.handlers for line in handler.body)
    return statements


def listed_names(tree: ast.Module) -> list[str]:
    """The string constants of the module's ``__all__`` assignments."""
    names = []
    for statement in module_level_statements(tree):
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        if isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
            targets = [statement.target]
        if any(isinstance(target, ast.Name) and target.id == "__all__" for target in targets):
            names += [
                node.value
                for node in ast.walk(statement.value)
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
            ]
    return names


def silent_reexports(source: str) -> list[str]:
    """Names a module's source gives a second import path: imported and listed in ``__all__``, or imported under
    their own name as an explicit alias (``import y as y``, ``from .x import y as y``)."""
    tree = ast.parse(source)
    imported, aliased = set(), []
    for statement in module_level_statements(tree):
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            for alias in statement.names:
                imported.add(alias.asname or alias.name.partition(".")[0])
                if alias.asname is not None and alias.asname == alias.name and not alias.name.startswith("_"):
                    aliased.append(alias.name)
    return sorted({*(name for name in listed_names(tree) if name in imported), *aliased})


def defined_names(source: str) -> set[str]:
    """Names a module's source binds at module level other than by importing them."""
    names = set()
    for statement in module_level_statements(ast.parse(source)):
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(statement.name)
        elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names.update(
                node.id for target in targets for node in ast.walk(target) if isinstance(node, ast.Name)
            )
    return names


def moved_table(source: str) -> dict[str, str]:
    """The module's ``MOVED_NAMES`` table: name whose old path here warns -> the module that defines it now."""
    for statement in module_level_statements(ast.parse(source)):
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        if isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        if any(isinstance(target, ast.Name) and target.id == "MOVED_NAMES" for target in targets):
            return ast.literal_eval(statement.value)
    return {}


@functools.cache
def module_facts(file: Path) -> tuple[set[str], dict[str, str]]:
    """:func:`defined_names` and :func:`moved_table` of ``file``, read and parsed once (thousands of imports name a
    few hundred modules)."""
    source = file.read_text()
    return defined_names(source), moved_table(source)


def module_path(module: str) -> Path | None:
    """The file of an hf_atr module that is not a package, or ``None``."""
    path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
    return path if path.is_file() else None


def hf_atr_imports(path: Path) -> list[tuple[str, str]]:
    """``(module, name)`` for each ``from hf_atr.<module> import <name>`` of a Python file or a page's Python
    blocks, relative imports of hf_atr's own modules resolved."""
    if path.suffix == ".md":
        sources = [block for block in PYTHON_BLOCK.findall(path.read_text())]
    else:
        sources = [path.read_text()]
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    imports = []
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:  # a page's block that is an excerpt, not a program
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*anchor, *([module] if module else [])])
            if module == "hf_atr" or module.startswith("hf_atr."):
                imports += [(module, alias.name) for alias in node.names]
    return imports


@pytest.mark.parametrize("path", MODULE_FILES, ids=lambda path: str(path.relative_to(PACKAGE_DIR)))
def test_no_module_re_exports_a_name(path):
    reexported = silent_reexports(path.read_text())
    assert not reexported, (
        f"{path.relative_to(ROOT)} re-exports {reexported}: import them from the module that defines them, and "
        "give a moved public name a warning alias (MOVED_NAMES, hf_atr.deprecation.moved_names)"
    )


@pytest.mark.slow
def test_every_import_names_the_module_that_defines_the_name():
    second_paths = []
    for path in IMPORTER_FILES:
        for module, name in hf_atr_imports(path):
            if module_path(f"{module}.{name}") is not None:
                continue  # a module imported from its package
            file = module_path(module) or ROOT.joinpath(*module.split("."), "__init__.py")
            if not file.is_file():
                continue  # no module of hf_atr: the import itself fails
            defined, moved = module_facts(file)
            defines = file.name == "__init__.py" or name in defined  # a package lists it
            if name in moved or not defines:
                second_paths.append(f"{path.relative_to(ROOT)}: from {module} import {name}")
    assert not second_paths, "import these from the module that defines them:\n" + "\n".join(second_paths)


def test_the_re_export_check_fails_on_a_new_silent_re_export():
    source = (
        "from .audio_encoding import encode_audio, float32_embeddings\n"
        "from .index_storage import FORMAT_VERSION\n"
        "from .model_layers import AtrProjectionMLP as AtrProjectionMLP\n"
        "from .audio_encoding import SkippedAudio as _SkippedAudio\n"
        "def encode_text(): return float32_embeddings\n"
        "__all__ = ['FORMAT_VERSION', 'encode_audio', 'encode_text']\n"
    )
    assert silent_reexports(source) == ["AtrProjectionMLP", "FORMAT_VERSION", "encode_audio"]
    assert silent_reexports("from .a import b\ndef c(): return b\n__all__ = ['c']\n") == []


def test_the_import_check_tells_a_definition_from_an_import():
    source = (
        "from .audio_encoding import encode_audio\n"
        "MOVED_NAMES = {'SkippedAudio': 'hf_atr.audio_encoding'}\n"
        "LIMIT: int = 3\n"
        "def encode_text(): ...\n"
    )
    assert defined_names(source) == {"MOVED_NAMES", "LIMIT", "encode_text"}
    assert moved_table(source) == {"SkippedAudio": "hf_atr.audio_encoding"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


OLD_PATHS = sorted(
    (module_name(path), name, home)
    for path in sorted(PACKAGE_DIR.rglob("*.py"))
    for name, home in moved_table(path.read_text()).items()
)


@pytest.mark.parametrize(("module", "name", "home"), OLD_PATHS, ids=[f"{m}.{n}" for m, n, _ in OLD_PATHS])
def test_an_old_path_warns_and_gives_the_object_of_the_defining_module(module, name, home):
    old_module = importlib.import_module(module)
    with pytest.deprecated_call(match=rf"`{module}.{name}` moved to `{home}.{name}`"):
        moved = getattr(old_module, name)
    new_home = importlib.import_module(home)
    assert moved is getattr(new_home, name) and name not in getattr(new_home, "MOVED_NAMES", {})
    if module_path(home) is not None:
        assert name in defined_names(module_path(home).read_text())
    assert name not in vars(old_module)  # not cached: every use warns


def test_a_moved_name_warns_and_is_the_object_of_its_new_home():
    import hf_atr.audio_encoding

    old_module_getattr = moved_names("hf_atr.encoding", {"SkippedAudio": "hf_atr.audio_encoding"})
    with pytest.warns(
        HfAtrDeprecationWarning, match=r"`hf_atr.encoding.SkippedAudio` moved to `hf_atr.audio_encoding"
    ):
        assert old_module_getattr("SkippedAudio") is hf_atr.audio_encoding.SkippedAudio
    with pytest.raises(AttributeError, match="no attribute 'encode_everything'"):
        old_module_getattr("encode_everything")
