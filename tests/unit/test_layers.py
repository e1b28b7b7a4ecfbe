"""The layout is the architecture: each package imports only the layers below it
(model at the bottom; the composition layer, meshgate, on top)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# package -> the first-party packages it may import (besides itself)
ALLOWED = {
    "model": set(),
    "gateway": {"model"},
    "mesh": {"model", "gateway"},
    "metrics": {"model"},
    "management": {"model", "gateway", "mesh"},
    "pipeline": {"model"},
    "meshgate": {"model", "gateway", "mesh", "metrics", "management", "pipeline"},
}
# model must stay importable without Twisted (Django and PySpark import it)
FORBIDDEN_THIRD_PARTY = {"model": {"twisted", "zope"}, "metrics": {"twisted.internet.reactor"}}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below_it(package):
    wrong = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in imports_of(path):
            top = name.split(".")[0]
            if top in ALLOWED and top != package and top not in ALLOWED[package]:
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
            if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN_THIRD_PARTY.get(package, ())):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_no_part_of_the_mesh_imports_the_node_that_assembles_it():
    """mesh/node.py puts the parts together; none of them reaches back into it,
    not even for a type (each is handed what it needs when it is made)."""
    wrong = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "mesh").rglob("*.py"))
             if path.name != "node.py" and "mesh.node" in imports_of(path)]
    assert not wrong, f"these import mesh.node: {wrong}"


def test_the_stomp_layer_knows_nothing_of_management():
    for path in (ROOT / "gateway" / "stomp").rglob("*.py"):
        assert not any(name.startswith(("management", "mesh")) for name in imports_of(path)), path


def test_the_amqp_layer_knows_nothing_of_management_nor_of_stomp():
    for path in (ROOT / "gateway" / "amqp").rglob("*.py"):
        assert not any(name.startswith(("management", "mesh", "gateway.stomp")) for name in imports_of(path)), path


def test_the_broker_core_knows_no_protocol():
    for path in (ROOT / "gateway" / "broker").rglob("*.py"):
        assert not any(name.startswith(("gateway.stomp", "gateway.amqp")) for name in imports_of(path)), path
