"""Every conda environment under envs/ lists exactly pyproject.toml's dependencies."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
ENV_FILES = sorted((ROOT / "envs").glob("*.yaml"))

#: conda-forge names of packages whose PyPI name differs
CONDA_TO_PYPI = {"pytorch": "torch", "pytorch-cpu": "torch", "pytorch-gpu": "torch"}
#: environment-only packages with no place in [project].dependencies
IGNORED = {"python", "pip"}


def normalize(name: str) -> str:
    """PEP 503 normalised name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> str:
    """Package name of a pip requirement or conda match spec (``torch>=2.3``, ``python=3.11``,
    ``conda-forge::numpy``, ``pandas[performance]``)."""
    spec = spec.split("::")[-1].strip()
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", spec)
    if not match:
        raise ValueError(f"cannot read a package name from {spec!r}")
    return normalize(match[0])


def pyproject_names(text: str) -> set[str]:
    return {requirement_name(dep) for dep in tomllib.loads(text)["project"]["dependencies"]}


def env_names(text: str) -> set[str]:
    names = set()
    for dep in yaml.safe_load(text).get("dependencies", []):
        if isinstance(dep, dict):
            for spec in dep.get("pip", []):
                names.add(requirement_name(spec))
        else:
            name = requirement_name(dep)
            names.add(normalize(CONDA_TO_PYPI.get(name, name)))
    return names - IGNORED


def mismatch(pyproject_text: str, env_text: str) -> dict[str, set[str]]:
    project, env = pyproject_names(pyproject_text), env_names(env_text)
    return {"only in pyproject.toml": project - env, "only in the env file": env - project}


def test_there_is_an_env_file():
    assert ROOT.joinpath("envs", "repens.yaml") in ENV_FILES


@pytest.mark.parametrize("env_file", ENV_FILES, ids=lambda p: p.name)
def test_env_lists_pyproject_dependencies(env_file):
    found = mismatch((ROOT / "pyproject.toml").read_text(), env_file.read_text())
    assert found == {"only in pyproject.toml": set(), "only in the env file": set()}, found


PYPROJECT = """
[project]
name = "x"
dependencies = ["torch>=2.3", "numpy", "PyYAML>=6.0"]
"""


def test_mismatch_catches_a_package_added_to_one_side_only():
    env = (
        "dependencies:\n  - python=3.11\n  - pip\n  - conda-forge::pytorch>=2.3\n  - pip:\n    - numpy\n    - pyyaml\n"
    )
    assert mismatch(PYPROJECT, env) == {"only in pyproject.toml": set(), "only in the env file": set()}
    added_to_env = env + "    - scipy\n"
    assert mismatch(PYPROJECT, added_to_env)["only in the env file"] == {"scipy"}
    added_to_pyproject = PYPROJECT.replace('"numpy"', '"numpy", "pandas>=2"')
    assert mismatch(added_to_pyproject, env)["only in pyproject.toml"] == {"pandas"}
