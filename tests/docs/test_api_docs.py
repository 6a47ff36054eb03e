"""docs/api.rst lists every public name of sklearn_fed exactly once, each in an autosummary."""

import importlib
import pkgutil
import re
from pathlib import Path

import sklearn_fed

API = Path(__file__).resolve().parents[2] / "docs" / "api.rst"


def _public_modules():
    yield sklearn_fed
    for info in pkgutil.walk_packages(sklearn_fed.__path__, "sklearn_fed."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            yield importlib.import_module(info.name)


def _public_objects():
    """id -> a qualified name, for every name in a public module's ``__all__``."""
    objects = {}
    for module in _public_modules():
        for name in getattr(module, "__all__", ()):
            if not name.startswith("__"):
                objects.setdefault(id(getattr(module, name)), f"{module.__name__}.{name}")
    return objects


def _documented():
    """(qualified name, line) of every autosummary entry; fails on names outside one."""
    entries, module, in_autosummary = [], None, False
    for number, line in enumerate(API.read_text().splitlines(), 1):
        if match := re.match(r"\.\. currentmodule:: (\S+)", line):
            module = match[1]
        elif line.startswith(".. autosummary::"):
            in_autosummary = True
        elif line.startswith("   ") and in_autosummary:
            if not line.strip().startswith(":"):
                entries.append((f"{module}.{line.strip()}", number))
        elif line.strip():
            assert not line.startswith(" "), (
                f"api.rst:{number}: {line.strip()!r} is outside an autosummary (plain text)"
            )
            in_autosummary = False
    return entries


def _resolve(qualified):
    module, _, name = qualified.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError:  # e.g. sklearn_fed.linear_model.fesc_weights
        return getattr(_resolve(module), name)


def test_every_public_name_is_documented_once():
    public = _public_objects()
    seen = {}
    for qualified, number in _documented():
        obj = _resolve(qualified)
        assert id(obj) not in seen, (
            f"api.rst:{number}: {qualified} is already listed as {seen[id(obj)]}"
        )
        seen[id(obj)] = qualified
    missing = sorted(name for key, name in public.items() if key not in seen)
    assert not missing, f"public names missing from docs/api.rst: {missing}"


def test_headings_are_not_repeated():
    headings = re.findall(r"^(.+)\n-{3,}$", API.read_text(), flags=re.M)
    normalized = [h.lower().replace(" ", "") for h in headings]
    assert len(set(normalized)) == len(normalized), headings
