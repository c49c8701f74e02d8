"""A fixed global batch over trials that span nodes: micro-batch x accumulation x every node's
data-parallel ranks is the spec's `batch.global_batch_samples`, whichever node count a trial
draws, for the sampler's trials, the baselines, the local moves and the listed space.

Before the fix the accumulation was derived for one node and the node count drawn afterwards, so
a 2-node trial of a 64-sample batch trained on 128 samples per step. The real two-"node" trial
(two torchrun agents on this machine) is in tests/test_multinode.py; these tests check the
configs the search hands it.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.errors import UserError
from autotune.search.context import SweepContext
from autotune.search.objective import Objective, trial_config_for
from autotune.search.strategy import LocalMoves, baseline_params
from autotune.search.study import DIRECTIONS, make_sampler
from autotune.spec import SweepSpec, load_spec

BATCH = 16


@pytest.fixture()
def spec(tmp_path) -> SweepSpec:
    space = tmp_path / "space.yaml"
    space.write_text("num_gpus: [1, 2]\nmicro_batch_size: [1, 2, 4, 8]\nprecision: [fp32]\n"
                     "checkpointing: [none]\n")
    return SweepSpec.model_validate({
        "workload": {"kind": "gpt", "preset": "tiny"}, "seq_len": 32, "space": str(space),
        "batch": {"global_batch_samples": BATCH},
        "launcher": {"num_nodes": [1, 2], "argv": ["{launcher_argv}"]}})


def _ctx(spec: SweepSpec) -> SweepContext:
    study = optuna.create_study(directions=DIRECTIONS, sampler=make_sampler(0, worker=0))
    return SweepContext.build(spec, study, Path("unused"))


def test_every_trial_the_sampler_draws_meets_the_global_batch_over_all_its_nodes(spec):
    ctx = _ctx(spec)
    objective = Objective(ctx)
    seen = set()
    for _ in range(40):
        trial = ctx.study.ask()
        try:
            cfg = objective.suggest(trial)
        except optuna.TrialPruned:
            ctx.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        assert cfg.global_batch_samples == BATCH, cfg
        assert cfg.micro_batch_size * cfg.grad_accum_steps * cfg.num_gpus * cfg.num_nodes == BATCH
        seen.add((cfg.num_gpus, cfg.num_nodes))
        ctx.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    assert (2, 2) in seen and (1, 1) in seen  # both node counts drawn, so the check covered them


def test_a_queued_two_node_config_gets_the_accumulation_of_two_nodes(spec):
    ctx = _ctx(spec)
    ctx.study.enqueue_trial({"num_nodes": 2, "num_gpus": 2, "micro_batch_size": 2})
    cfg = Objective(ctx).suggest(ctx.study.ask())
    assert (cfg.num_nodes, cfg.num_gpus, cfg.micro_batch_size, cfg.grad_accum_steps) == (2, 2, 2, 2)
    # Values derived for one node cannot launch on two: the config would not be the spec's batch.
    one_node = {**cfg.model_dump(include={"num_gpus", "tp_degree", "micro_batch_size", "precision",
                                          "checkpointing", "zero_stage", "offload", "fsdp", "compile"}),
                "grad_accum_steps": 4}
    with pytest.raises(ValueError, match="global batch 16"):
        trial_config_for(one_node, spec, ctx.machine, 2, seed=0)


def test_baselines_moves_and_the_listed_space_keep_the_batch_on_every_node_count(spec):
    ctx = _ctx(spec)
    gb = spec.batch.global_batch_samples
    for params in baseline_params(ctx.machine, gb, num_nodes=2):
        assert params.get("num_nodes", 2) == 2
    moves = LocalMoves(ctx, seed=0)
    for n in (1, 2):
        listed = moves.listed(n)
        assert listed
        for _, values in listed:  # trial_config_for raises where the batch is not met
            assert trial_config_for(values, spec, ctx.machine, n, seed=0).global_batch_samples == gb
    # 1 GPU x 1 node: micro 1-8; 2 GPUs x 1 node or 1 GPU x 2 nodes: 1-8; 2 x 2: 1-4.
    assert len(moves.listed(1)) == 4 + 4 and len(moves.listed(2)) == 4 + 3


def test_a_global_batch_no_node_count_divides_is_refused_at_load(tmp_path):
    p = tmp_path / "spec.yaml"
    p.write_text("batch: {global_batch_samples: 9}\n"
                 "launcher: {num_nodes: [1, 2], argv: ['{launcher_argv}']}\n")
    with pytest.raises(UserError, match=r"cannot be split evenly over launcher.num_nodes \[2\]"):
        load_spec(p)
