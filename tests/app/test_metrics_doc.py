"""docs/metrics.md lists every metric name the code logs: the literal names in the source, and the names built from
the pieces the algorithms return (loss metrics, importance-weight metrics, dynamic-sampling counts, timing phases)."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from algos.kl import apply_kl_penalty_to_rewards
from algos.policy_loss import _metrics as policy_loss_metrics
from algos.rollout_correction import rollout_is_weights
from algos.value_loss import compute_value_loss
from app.trainer.dynamic_sampling import FILTER_COUNTS

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "metrics.md").read_text()
PREFIXES = (
    "actor",
    "critic",
    "reward",
    "val-core",
    "val-aux",
    "timing_s",
    "perf",
    "response_length",
    "prompt_length",
    "filter_groups",
    "train",
    "async",
    "rollout_corr",
    "training",
)
NAME = re.compile(r"""["'](?:%s)/[A-Za-z0-9_/.{}-]*["']""" % "|".join(map(re.escape, PREFIXES)))
SOURCE = {p: p.read_text() for d in ("app", "algos") for p in (ROOT / d).rglob("*.py")}


def documented(name: str) -> bool:
    return f"`{name}`" in DOC


def test_every_literal_metric_name_in_the_code_is_on_the_page():
    names = {m.group(0)[1:-1] for text in SOURCE.values() for m in NAME.finditer(text)}
    literal = {n for n in names if "{" not in n and not n.endswith("/")}
    assert len(literal) > 30  # the scan found the logging code
    assert sorted(n for n in literal if not documented(n)) == []


def test_every_name_template_has_its_prefix_on_the_page():
    templates = {m.group(0)[1:-1] for text in SOURCE.values() for m in NAME.finditer(text) if "{" in m.group(0)}
    for template in templates:
        assert template.split("{", 1)[0] in DOC, template


def test_names_built_from_the_algorithms_pieces_are_on_the_page():
    zero = torch.zeros(())
    built = [f"actor/{k}" for k in policy_loss_metrics(zero, zero, zero)]
    x, mask = torch.zeros(1, 2), torch.ones(1, 2)
    _, is_metrics = rollout_is_weights(x, x, mask, level="token", threshold=2.0)
    built += [f"rollout_corr/{k}" for k in is_metrics] + ["rollout_corr/rollout_is_std"]
    _, vf_metrics = compute_value_loss(x, x, x, mask, cliprange_value=0.5, loss_agg_mode="token-mean")
    built += [f"critic/{k}" for k in vf_metrics]
    _, kl_metrics = apply_kl_penalty_to_rewards(x, x, x, mask, 0.1, "kl")
    built += [f"actor/{k}" for k in kl_metrics]
    built += [f"filter_groups/{k}_groups" for k in FILTER_COUNTS]
    phases = {m for text in SOURCE.values() for m in re.findall(r'phase\("([a-z_]+)"\)', text)}
    assert {"gen", "update_actor", "sync", "step"} <= phases
    built += [f"timing_s/{p}" for p in phases] + ["timing_s/gen_overlap", "timing_s/gen_wait"]
    assert sorted(n for n in built if not documented(n)) == []
