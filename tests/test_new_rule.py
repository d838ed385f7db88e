"""A new update rule is one file of ``repens/methods/rules/`` and a method entry in
config.yaml: in a copy of the package with only those two added, the config's checks
accept the method and the pipeline trains it (the job runner the workflow calls; and, in the
slow stage, Snakemake itself)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

#: the whole of the new rule: a deep ensemble whose prior is tempered (a made-up rule)
RULE = textwrap.dedent('''
    """A tempered deep ensemble: phi_i = grad log p(D | w_i) + temperature * grad log p(w_i)."""

    from dataclasses import dataclass

    from repens.methods.rule import Rule
    from repens.methods.updates import Update, add_grad_log_prior, grad_log_likelihood

    REGISTRY_ENTRY = {"name": "tempered", "options": ["temperature"]}


    @dataclass(frozen=True, kw_only=True)
    class Tempered(Rule):
        temperature: float = 1.0

        def ascent(self, params, ctx, state):
            return Update(add_grad_log_prior(grad_log_likelihood(params, ctx), params, ctx, self.temperature))


    build = Tempered
''')

METHOD = {"rule": "tempered", "temperature": 0.5, "label": "Tempered DE"}


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A copy of the checkout's package and workflow with the new rule's file and a method
    entry (``tempered``, on the toy regression, 40 steps at quick scale) added."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for part in ("src", "workflow", "envs"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=ignore)
    shutil.copy(ROOT / "Snakefile", tmp_path / "Snakefile")
    (tmp_path / "src" / "repens" / "methods" / "rules" / "tempered.py").write_text(RULE)
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["methods"]["tempered"] = METHOD
    config["experiments"]["toy"]["methods"].append("tempered")
    config["experiments"]["toy"]["quick"]["datasets"]["regression"]["steps"] = 40
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return tmp_path


def _python(checkout: Path, code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=checkout)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_new_rule_is_checked_and_trained_by_the_job_runner(checkout):
    code = textwrap.dedent("""
        import json, yaml
        from repens.pipeline.config import check_config, check_schema, load_schema, resolve_job
        config = yaml.safe_load(open("config.yaml"))
        config["scale"] = "quick"
        check_schema(config, load_schema())
        check_config(config)
        print(json.dumps(resolve_job(config, "toy", "regression", "tempered", 42)))
    """)
    spec = json.loads(_python(checkout, code))
    assert spec["rule"] == "tempered" and spec["temperature"] == 0.5 and spec["steps"] == 40
    tempered = _train(checkout, spec, "tempered")
    assert json.loads(str(tempered["job"]))["rule"] == "tempered" and np.isfinite(tempered["f_test"]).all()
    # the rule's own step ran: the deep ensemble of the same job (the prior at full weight) differs
    plain = {k: v for k, v in spec.items() if k != "temperature"}
    ensemble = _train(checkout, {**plain, "rule": "ensemble", "method": "de"}, "de")
    assert not np.array_equal(tempered["f_test"], ensemble["f_test"])


def _train(checkout: Path, spec: dict, name: str):
    """The job ``spec`` trained by the workflow's job runner (``python -m repens train``)."""
    out = checkout / "results" / name / "predictions.npz"
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    run = subprocess.run(
        [sys.executable, "-m", "repens", "train", "--spec", json.dumps(spec), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=checkout,
    )
    assert run.returncode == 0, run.stderr
    return np.load(out)


@pytest.mark.slow
def test_snakemake_trains_the_new_rule(checkout):
    target = "results/toy/regression/tempered/seed42/predictions.npz"
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "-c1", target, "--config", "scale=quick"],
        capture_output=True,
        text=True,
        env=env,
        cwd=checkout,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(str(np.load(checkout / target)["job"]))["rule"] == "tempered"
