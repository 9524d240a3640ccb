"""The shape the project keeps (ARCHITECTURE.md): one entry per capability, capabilities that use
each other only through their public packages, a core that uses none, small functions, thin
CLI modules, and defaults with one source."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "copilot_cli"
CAPABILITIES = {
    "prompts",
    "kv",
    "quant",
    "chunking",
    "context",
    "prune",
    "regress",
    "serving",
    "warm",
}
LIBRARY_FUNCTION_LINES = 60
CLI_FUNCTION_LINES = 70  # a command's signature holds one Typer declaration per flag
CLI_MODULE_LINES = 100


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _imports(path: Path) -> list[str]:
    """The copilot_cli modules a module imports, `lazy.module("...")` (imported on first use)
    included."""
    modules = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.append(node.module)
        elif isinstance(node, ast.Import):
            modules.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "lazy.module":
            modules.append(node.args[0].value)
    return [m for m in modules if m.startswith("copilot_cli.")]


def test_capabilities_use_each_other_only_through_public_packages():
    leaks = []
    for path in _modules():
        rel = path.relative_to(PACKAGE).parts
        own = rel[0] if len(rel) > 1 else None
        for module in _imports(path):
            parts = module.split(".")
            other = parts[1]
            if own == "core" and other in CAPABILITIES | {"pipeline", "cli"}:
                leaks.append(f"{path.relative_to(ROOT)} imports {module} (core uses no capability)")
            internal = len(parts) > 2 and parts[2] != "options"
            if own in CAPABILITIES and other in CAPABILITIES and other != own and internal:
                leaks.append(f"{path.relative_to(ROOT)} imports {module}")
            if own in CAPABILITIES | {"core", "pipeline"} and other == "cli":
                leaks.append(f"{path.relative_to(ROOT)} imports the CLI ({module})")
    assert leaks == []


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.end_lineno - node.lineno + 1


def test_functions_stay_small():
    long = []
    for path in _modules():
        limit = CLI_FUNCTION_LINES if "cli" in path.parts else LIBRARY_FUNCTION_LINES
        long += [
            f"{path.relative_to(ROOT)}:{name} ({n} lines)"
            for name, n in _functions(path)
            if n > limit
        ]
    assert long == []


def test_cli_modules_stay_thin():
    thick = [
        f"{p.relative_to(ROOT)} ({n} lines)"
        for p in sorted((PACKAGE / "cli").glob("*.py"))
        if (n := len(p.read_text().splitlines())) > CLI_MODULE_LINES
    ]
    assert thick == []


COMMANDS = {
    "compile_templates_command": ("copilot_cli.cli.templates", "CompileOptions"),
    "render_command": ("copilot_cli.cli.render", "RenderOptions"),
    "prefill_kv_command": ("copilot_cli.cli.kv", "PrefillOptions"),
    "quantize_command": ("copilot_cli.cli.quant", "QuantizeOptions"),
    "chunk_command": ("copilot_cli.cli.chunk", "ChunkOptions"),
    "prune_command": ("copilot_cli.cli.prune", "PruneOptions"),
    "context_command": ("copilot_cli.cli.context", "ContextOptions"),
    "regress_command": ("copilot_cli.cli.regress", "RegressOptions"),
    "build_command": ("copilot_cli.cli.build", "BuildOptions"),
    "serve_command": ("copilot_cli.cli.serve", "copilot_cli.serving.server.ServeOptions"),
    "warm_plan_command": ("copilot_cli.cli.warm", "copilot_cli.warm.options.WarmPlanOptions"),
}


# shared CLI declarations, each made once in cli/params.py (every command's tokenizer and Ray
# target read the same way), not by one options class
SHARED_FLAGS = {"tokenizer", "ray"}


def _options_class(command):
    import importlib

    import copilot_cli

    module_name, options_name = COMMANDS[command]
    function = getattr(importlib.import_module(module_name), command)
    where, _, options_name = options_name.rpartition(".")
    options = getattr(importlib.import_module(where) if where else copilot_cli, options_name)
    return function, options


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cli_options_are_declared_once_by_the_options(command):
    """An option a command shares with its options class is declared there, once: flag, help
    and default in the field (core.options.setting), taken by the CLI with from_options. No
    flag repeats an option's literal; a CLI default that differs is None (unset: the options'
    own default applies) or required."""
    from copilot_cli.core.options import default_of, flag_of, help_of

    function, options = _options_class(command)
    fields = {f.name for f in dataclasses.fields(options)}
    declared = 0
    for name, param in inspect.signature(function).parameters.items():
        source = getattr(param.default, "declared_by", None)
        if source is None:
            repeated = name in fields and name not in SHARED_FLAGS
            assert not repeated, f"{command} --{name}: declare it in {options.__name__}"
            continue
        info, (cls, field) = param.default, source
        flag = (info.param_decls or [None])[0]  # an argument has none
        assert flag in (flag_of(cls, field), None)
        assert info.help == help_of(cls, field) and info.help
        expected = default_of(cls, field)
        if flag and flag.startswith("--no-"):
            expected = not expected
        assert info.default in (expected, None, ...), f"{command} --{name}: {info.default!r}"
        declared += 1
    assert declared >= 1


def test_a_flag_declared_by_the_options_shows_their_help_and_default(tmp_path):
    """What --help prints is the field's declaration: change the field's help, the command's
    help changes with it (nothing else holds a copy)."""
    from copilot_cli.cli.params import from_options
    from copilot_cli.warm.options import WarmPlanOptions

    info = from_options(WarmPlanOptions, "window")
    field = next(f for f in dataclasses.fields(WarmPlanOptions) if f.name == "window")
    assert (info.default, info.help) == (field.default, field.metadata["help"])
    assert info.param_decls == ("--window",)
    with pytest.raises(TypeError, match="l0_probability declares no help"):
        from_options(WarmPlanOptions, "l0_probability")


def test_every_config_key_is_documented_with_its_default():
    from copilot_cli.core.options import defaults_of
    from copilot_cli.pipeline.config import PIPELINE_DEFAULTS, SCHEMA, SECTIONS, TOP_LEVEL, shown

    doc = (ROOT / "docs" / "build.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z0-9_.]+)` \| ([^|]*) \|", doc, flags=re.M))
    expected = {}
    for key, value in TOP_LEVEL.items():  # a mapping (executor) documents each of its keys
        items = value.items() if isinstance(value, dict) else [(None, value)]
        expected.update({f"{key}.{sub}" if sub else key: v for sub, v in items})
    for section, cls in SECTIONS.items():
        schema = SCHEMA["properties"][section]["properties"]
        defaults = {**defaults_of(cls), **PIPELINE_DEFAULTS.get(section, {})}
        for key in schema:
            if key in ("thresholds", "limits"):
                for sub in schema[key]["properties"]:
                    expected[f"{section}.{key}.{sub}"] = defaults[key][sub]
            else:
                expected[f"{section}.{key}"] = defaults.get(key, True)  # enabled: true
    keys = set(expected)
    for key, value in expected.items():
        if key in rows:
            assert rows[key].strip().strip("`") == shown(value), (
                f"{key}: docs/build.md says {rows[key].strip()!r}, the code {shown(value)!r}"
            )
    assert sorted(keys - set(rows)) == [], "keys missing from docs/build.md"
    assert sorted(set(rows) - keys) == [], "docs/build.md lists keys the config does not take"


MAX_IMPORTS_INSIDE_FUNCTIONS = 1  # goes down, never up (ARCHITECTURE.md says when one is due)


def test_imports_inside_functions_do_not_grow():
    """Distinct import statements inside functions (per module): only what must stay out of
    a module's own import (a heavy or optional package, or the capability of a CLI command)."""
    found = set()
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found |= {
                    (path, ast.unparse(inner))
                    for inner in ast.walk(node)
                    if isinstance(inner, (ast.Import, ast.ImportFrom))
                }
    assert len(found) <= MAX_IMPORTS_INSIDE_FUNCTIONS, len(found)


HEAVY = ("torch", "transformers", "numpy", "jinja2", "jsonschema", "tree_sitter", "safetensors")


def test_help_starts_without_torch():
    """--help (the root's and every command's) builds the flags from the options classes:
    they, every package `__init__` and every CLI module (a command reaches its capability
    through a lazy package or `lazy.module`) import nothing heavy (no torch, no numpy, no
    template engine, no schema checker)."""
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from copilot_cli.cli import app\n"
        "names = [c.name for c in app.registered_commands]\n"
        "assert len(names) >= 13, names\n"
        "for args in (['--help'], *([name, '--help'] for name in names)):\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0, args\n"
        "import copilot_cli\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_public_api_is_small_and_documented():
    import copilot_cli

    names = [n for n in copilot_cli.__all__ if n != "__version__"]
    assert len(names) <= 25
    for name in names:
        value = getattr(copilot_cli, name)
        assert (inspect.getdoc(value) or "").strip(), f"{name} has no docstring"
        if inspect.isfunction(value):
            hints = typing.get_type_hints(value)
            assert "return" in hints, f"{name} has no return type"


def _module_graph() -> tuple[dict[str, set[str]], list[str]]:
    """Module -> the copilot_cli modules it imports (deferred imports too; a name imported from
    a lazy package counts as an import of the module that defines it), and every
    `from M import _private` of another module's private name."""
    names = {}
    for path in _modules():
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    packages = {m for m, p in names.items() if p.name == "__init__.py"}
    graph, private = {}, []
    for module, path in names.items():
        found, tree = set(), ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("copilot_cli"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    found.add(full if full in names else _holder(node.module, alias.name, packages))
                    private_name = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private_name and full not in names:
                        private.append(f"{module} imports {node.module}.{alias.name}")
        found |= _deferred_uses(tree, packages)
        graph[module] = {m for m in found if m in names and m != module and m not in packages}
    return graph, private


def _holder(module: str, name: str, packages: set[str]) -> str:
    """The module that defines `name` when `module` is a lazy package exporting it."""
    import importlib

    if module not in packages:
        return module
    where = getattr(importlib.import_module(module), "_WHERE", {})
    return where.get(name, module).partition(":")[0]


def _deferred_uses(tree: ast.Module, packages: set[str]) -> set[str]:
    """The modules a module reaches without importing them at its top: `lazy.module("M")`
    names M, and `pkg.name` of a lazy package `pkg` (`from copilot_cli import kv`) is the
    module that the package's table says holds `name`."""
    found, aliases = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "lazy.module":
            found.add(node.args[0].value)
        if isinstance(node, ast.ImportFrom) and node.module == "copilot_cli":
            for alias in node.names:
                if f"copilot_cli.{alias.name}" in packages:
                    aliases[alias.asname or alias.name] = f"copilot_cli.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            package = aliases.get(node.value.id)
            if package is not None:
                found.add(_holder(package, node.attr, packages))
    return found


def test_no_module_imports_another_modules_private_names():
    assert _module_graph()[1] == []


def test_no_import_cycles_between_modules():
    graph, _ = _module_graph()
    cycles, state = [], {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for other in sorted(graph.get(module, ())):
            if state.get(other) == "open":
                cycles.append(" -> ".join([*path[path.index(other) :], other]))
            elif other not in state:
                visit(other, [*path, other])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_work_reaches_other_processes_only_through_the_executor():
    """A capability hands its units to core/executor.py (here, local processes or Ray); only
    the executor and core/cluster.py start workers or touch Ray's task API."""
    allowed = {PACKAGE / "core" / "executor.py", PACKAGE / "core" / "cluster.py"}
    spawning = re.compile(
        r"\b(ProcessPoolExecutor|multiprocessing|start_replicas|ray\.(remote|wait|get|put)|"
        r"ActorPool|import ray|from ray)\b"
    )
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in _modules()
        if path not in allowed
        for match in spawning.finditer(path.read_text())
    ]
    assert found == []


def test_the_capability_table_names_what_each_package_exports():
    """ARCHITECTURE.md's capability table: every entry point and options class it names in a
    row is exported by that row's package (renaming or moving one fails here, not in a reader's
    hands)."""
    import importlib

    text = (ROOT / "ARCHITECTURE.md").read_text()
    rows = re.findall(r"^\| [^|]+ \| `([a-z_]+)/` \| ([^|]+) \| ([^|]+) \|$", text, flags=re.M)
    assert len(rows) >= 10
    missing = []
    for package, entries, options in rows:
        module = importlib.import_module(f"copilot_cli.{package}")
        for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", entries + options):
            if not hasattr(module, name):
                missing.append(f"{package}: {name}")
    assert missing == []
