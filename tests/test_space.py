"""Search spaces: loading, hardware restriction, define-by-run suggestions."""

from __future__ import annotations

import dataclasses

import optuna
import pytest

from autotune.contract import DeviceKind, FSDPMode, HardwareFingerprint, Offload, Precision, TrialConfig
from autotune.errors import UserError
from autotune.search.space import capabilities_for, restrict, suggest
from autotune.search.space_file import SearchSpace, load_space

CPU2 = HardwareFingerprint(device_kind=DeviceKind.cpu, device_count=2, cpu_count=2)
H100x8 = HardwareFingerprint(device_kind=DeviceKind.cuda, device_name="NVIDIA H100 80GB HBM3",
                             device_count=8, cpu_count=64)


def test_default_space_loads():
    space = load_space("default")
    assert 1 in space.num_gpus and Precision.bf16 in space.precision


def test_two_core_cpu_offers_at_most_two_ranks_and_no_fp16_fp8():
    rs = restrict(load_space("default"), capabilities_for(CPU2))
    assert rs.num_gpus == [1, 2]
    assert Precision.fp8 not in rs.precision and Precision.fp16 not in rs.precision
    assert rs.dropped["num_gpus"] == [4, 8]


def test_gpu_machine_offers_its_gpu_count_and_fp8_only_on_hopper_with_library():
    space = load_space("default")
    ampere = restrict(space, capabilities_for(H100x8, compute_capability=(8, 0), fp8_library=True))
    hopper = restrict(space, capabilities_for(H100x8, compute_capability=(9, 0), fp8_library=True))
    no_lib = restrict(space, capabilities_for(H100x8, compute_capability=(9, 0), fp8_library=False))
    assert hopper.num_gpus == [1, 2, 4, 8]
    # fp8 only together with compile: the default space (eager only) drops it, and says why.
    assert Precision.fp8 not in hopper.precision and hopper.dropped["precision"] == [Precision.fp8]
    both = restrict(space.model_copy(update={"compile": [False, True]}),
                    capabilities_for(H100x8, compute_capability=(9, 0), fp8_library=True))
    assert Precision.fp8 in both.precision and Precision.fp8 not in both.precision_choices(False)
    assert Precision.fp8 not in ampere.precision and Precision.fp8 not in no_lib.precision


def test_threads_per_rank_limits_cpu_ranks():
    assert capabilities_for(CPU2, threads_per_rank=2).max_ranks == 1


def test_tp_degrees_must_divide_heads():
    caps = dataclasses.replace(capabilities_for(H100x8), tensor_parallel=True)
    rs = restrict(load_space("default"), caps, n_heads=4)
    assert 8 not in rs.tp_degree  # 4 heads cannot split 8 ways


def _suggestions(rs, n, global_batch=None):
    study = optuna.create_study(directions=["minimize", "minimize"],
                                sampler=optuna.samplers.RandomSampler(seed=0))
    out = []
    for _ in range(n):
        t = study.ask()
        out.append(suggest(t, rs, global_batch))
        study.tell(t, [1.0, 1.0])
    return out


def test_every_suggestion_is_a_valid_trial_config():
    rs = restrict(load_space("default"), capabilities_for(H100x8, compute_capability=(9, 0)))
    for values in _suggestions(rs, 60):
        TrialConfig(**values)  # raises if TP does not divide GPUs or offload lacks ZeRO / FSDP2
        assert values["num_gpus"] % values["tp_degree"] == 0
        if values["zero_stage"] == 0 and values["fsdp"] is FSDPMode.none:
            assert values["offload"] is Offload.none
        if values["fsdp"] is not FSDPMode.none:  # FSDP2 replaces ZeRO, and has no fp16 here
            assert values["zero_stage"] == 0 and values["precision"] is not Precision.fp16
            assert values["offload"] in (Offload.none, Offload.optimizer_params)


def test_fixed_global_batch_derives_accumulation_exactly():
    rs = restrict(load_space("default"), capabilities_for(H100x8))
    for values in _suggestions(rs, 40, global_batch=64):
        dp = values["num_gpus"] // values["tp_degree"]
        assert values["micro_batch_size"] * values["grad_accum_steps"] * dp == 64


def test_impossible_global_batch_is_a_user_error():
    rs = restrict(SearchSpace(num_gpus=[2], micro_batch_size=[1, 2, 4]), capabilities_for(CPU2))
    with pytest.raises(UserError, match="global batch"):
        _suggestions(rs, 1, global_batch=51)  # odd: no micro x 2 ranks divides it


def test_unknown_space_name_lists_known(tmp_path):
    with pytest.raises(UserError, match="default"):
        load_space("nope")


@pytest.mark.parametrize("text, field", [
    ("num_gpus: [0, 1]\n", "num_gpus"),
    ("zero_stage: [5]\n", "zero_stage"),
    ("precision: [fp64]\n", "precision"),
    ("colour: [red]\n", "colour"),
    ("num_gpus: [1\n", "not valid YAML"),
])
def test_bad_space_file_names_file_and_field(tmp_path, text, field):
    p = tmp_path / "space.yaml"
    p.write_text(text)
    with pytest.raises(UserError) as exc:
        load_space(str(p))
    assert str(p) in str(exc.value) and field in str(exc.value)


def test_space_nothing_runnable_is_a_user_error(tmp_path):
    p = tmp_path / "space.yaml"
    p.write_text("num_gpus: [64]\n")
    with pytest.raises(UserError, match="num_gpus"):
        restrict(load_space(str(p)), capabilities_for(CPU2))


@pytest.mark.parametrize("text, field, shown, runs", [
    ("precision: [fp16]\n", "precision", "(fp16)", "it runs fp32, bf16"),
    ("precision: [fp8, fp16]\n", "precision", "(fp8, fp16)", "on GPUs only"),
    ("num_gpus: [8]\n", "num_gpus", "(8)", "at most 2 rank(s)"),
])
def test_space_nothing_runnable_names_the_choices_and_what_runs_here(tmp_path, text, field, shown, runs):
    # A GPU feature asked of a CPU: the message named the choices as Python's enum repr
    # ("[<Precision.fp16: 'fp16'>]") and not what the machine does run.
    p = tmp_path / "space.yaml"
    p.write_text(text)
    with pytest.raises(UserError) as exc:
        restrict(load_space(str(p)), capabilities_for(CPU2))
    text = str(exc.value)
    assert f"`{field}` {shown}" in text and runs in text, text
    assert "<" not in text and "To fix: list a choice this machine runs" in text


def test_fp8_on_a_gpu_with_no_compile_says_it_runs_only_compiled():
    caps = capabilities_for(H100x8, compute_capability=(9, 0), fp8_library=True)
    with pytest.raises(UserError, match="fp8 runs only compiled"):
        restrict(SearchSpace(precision=[Precision.fp8], compile=[False]), caps)


def test_misspelt_space_name_suggests_the_shipped_one():
    with pytest.raises(UserError, match="did you mean 'default'"):
        load_space("defualt")


def _key(v):
    return tuple(str(getattr(x, "value", x)) for x in (
        v["num_gpus"], v["tp_degree"], v["micro_batch_size"], v["grad_accum_steps"], v["precision"],
        v["checkpointing"], v["zero_stage"], v["offload"], v.get("fsdp", FSDPMode.none)))


def test_enumeration_lists_exactly_what_random_suggestions_reach():
    from autotune.search.space_walk import enumerate_configs

    rs = restrict(load_space("default"), capabilities_for(CPU2))
    listed = enumerate_configs(rs, 8)
    keys = [_key(v) for _, v in listed]
    assert len(keys) == len(set(keys))
    for v in _suggestions(rs, 200, 8):  # every random suggestion is in the listing
        assert _key(v) in set(keys)
    for _, v in listed:
        TrialConfig(**v)  # and every listed config is valid
        assert v["micro_batch_size"] * v["grad_accum_steps"] * v["num_gpus"] // v["tp_degree"] == 8
    # A space too large to list is answered None, not a truncated list.
    big = restrict(load_space("default"), capabilities_for(H100x8, compute_capability=(9, 0)))
    assert enumerate_configs(big, None, limit=100) is None


def test_neighbours_move_one_dimension_one_choice():
    from autotune.search.space_walk import neighbours

    rs = restrict(SearchSpace(num_gpus=[1, 2], micro_batch_size=[1, 2, 4, 8],
                              precision=[Precision.fp32, Precision.bf16], zero_stage=[0, 1, 2],
                              offload=[Offload.none, Offload.optimizer]), capabilities_for(CPU2))
    here = dict(num_gpus=2, tp_degree=1, micro_batch_size=2, grad_accum_steps=2,
                precision=Precision.fp32, checkpointing="none", zero_stage=1, offload=Offload.none)
    got = {_key(v) for _, v in neighbours(here, rs, 8)}
    base = _key(here)

    def moved(**kw):
        return _key({**here, **kw})

    assert got == {
        moved(num_gpus=1, grad_accum_steps=4),  # one rank: accumulation re-derived for global 8
        moved(micro_batch_size=1, grad_accum_steps=4), moved(micro_batch_size=4, grad_accum_steps=1),
        moved(precision=Precision.bf16),
        moved(zero_stage=0), moved(zero_stage=2),
        moved(offload=Offload.optimizer),
    }
    assert base not in got
    # Zero stage 0 offers no offload: its neighbours never carry one.
    at0 = neighbours({**here, "zero_stage": 0}, rs, 8)
    assert all(v["offload"] is Offload.none or v["zero_stage"] > 0 for _, v in at0)


from tests.test_record import old_study  # noqa: E402,F401 - the fixture: a study written by main


def test_a_study_written_by_main_resumes_with_plain_names(old_study):  # noqa: F811 - the fixture above
    """Main named restricted or dependent parameters after their list (`micro_batch_size|dp=2`);
    resumed, the study takes new trials under plain names beside its old ones."""
    from autotune.contract import Checkpointing
    from autotune.search.space import unrestricted

    study, _ = old_study
    space = SearchSpace(num_gpus=[1, 2], micro_batch_size=[1, 2], precision=[Precision.fp32],
                        checkpointing=[Checkpointing.none, Checkpointing.full])
    rs, full = restrict(space, capabilities_for(CPU2), 4), unrestricted(space, 4)
    for _ in range(6):
        t = study.ask()
        values = suggest(t, rs, 4, full)
        assert values["micro_batch_size"] * values["grad_accum_steps"] * values["num_gpus"] == 4
        study.tell(t, [1.0, 1.0])
    old, new = study.trials[:6], study.trials[6:]
    assert any("|" in n for t in old for n in t.params)  # main's names stay as they were
    assert {n for t in new for n in t.params} <= {"num_gpus", "micro_batch_size", "checkpointing", "precision"}


def test_a_small_machine_never_gets_a_choice_it_cannot_run_under_the_full_list():
    """The plain name carries the study's full list ([1, 2, 4, 8]); a 2-rank machine's TPE
    proposals stay within [1, 2] (MachineSampler), and a value another machine queued for 8
    GPUs is refused here, not launched."""
    from autotune.search.space import unrestricted
    from autotune.search.study import make_sampler

    space = load_space("default")
    rs, full = restrict(space, capabilities_for(CPU2), 4), unrestricted(space, 4)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=make_sampler(0, worker=0))
    for i in range(30):
        t = study.ask()
        values = suggest(t, rs, None, full)
        assert values["num_gpus"] in (1, 2) and values["precision"] in rs.precision
        assert t.distributions["num_gpus"].choices == (1, 2, 4, 8)
        study.tell(t, [1.0 + i % 5, 2.0 - i % 3])
    study.enqueue_trial({"num_gpus": 8})
    with pytest.raises(optuna.TrialPruned, match="queued by a machine offering more"):
        suggest(study.ask(), rs, None, full)


def test_fsdp2_is_offered_beside_zero_not_with_it():
    """FSDP2 runs at ZeRO stage 0 (they both shard the model), never with fp16 (not
    implemented: trials/engines/fsdp.py), and its offload is CPUOffloadPolicy's all-or-nothing."""
    rs = restrict(SearchSpace(num_gpus=[2], precision=[Precision.fp32, Precision.fp16], zero_stage=[0, 3],
                              offload=[Offload.none, Offload.optimizer, Offload.optimizer_params],
                              fsdp=[FSDPMode.none, FSDPMode.full_shard, FSDPMode.shard_grad_op]),
                  capabilities_for(H100x8, compute_capability=(7, 0)))
    seen = set()
    for values in _suggestions(rs, 120):
        TrialConfig(**values)
        seen.add((values["zero_stage"], values["fsdp"], values["offload"], values["precision"]))
    assert {(0, FSDPMode.full_shard, Offload.optimizer_params, Precision.fp32),
            (0, FSDPMode.shard_grad_op, Offload.none, Precision.fp32)} <= seen
    assert not any(f is not FSDPMode.none and (z or p is Precision.fp16 or o is Offload.optimizer)
                   for z, f, o, p in seen)
    assert rs.offload_choices(0, FSDPMode.full_shard) == [Offload.none, Offload.optimizer_params]
    assert rs.offload_choices(0) == [Offload.none]


@pytest.mark.parametrize("kv_heads, tp_degrees", [(1, [1]), (2, [1, 2])])
def test_a_hugging_face_models_key_value_heads_bound_its_tp_degrees(tmp_path, kv_heads, tp_degrees):
    """Each TP rank holds whole attention and key/value heads, so a model with one key/value
    head runs no TP. The space took no heads from a Hugging Face config: every TP-2 trial of
    such a model ended `unsupported` (config-dependent, never 'the same error'), and a space of
    TP 2 spent the whole budget on them."""
    import json

    from autotune.search.machine import restricted_space
    from autotune.spec import load_spec

    (tmp_path / "llama.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": kv_heads, "vocab_size": 512}))
    (tmp_path / "space.yaml").write_text("num_gpus: [2]\ntp_degree: [1, 2]\nzero_stage: [0]\n")
    (tmp_path / "spec.yaml").write_text("workload: {kind: hf, config_path: llama.json}\nspace: space.yaml\n")
    rs = restricted_space(load_spec(tmp_path / "spec.yaml"), CPU2)
    assert rs.tp_degree == tp_degrees
    assert rs.dropped.get("tp_degree", []) == ([2] if kv_heads == 1 else [])


def test_choices_left_out_for_one_reason_say_it_once():
    """`autotune plan` of gpt-oss-20b printed the same reason after each TP degree: "tp_degree 2
    (the worker does not run ...), 4 (the worker does not run ...), 8 (...)". Values that share a
    reason now say it once; values without one, or with another, keep their place."""
    from autotune.search.space import unrestricted

    space = SearchSpace.model_validate({"num_gpus": [8], "tp_degree": [1, 2, 4, 8]})
    why = "the worker does not run this model's tensor-parallel plan"
    assert unrestricted(space, 1, why).dropped_text() == f"tp_degree 2, 4, 8 ({why})"  # tp_heads 1: TP 1 only
    rs = unrestricted(space, 6)  # 6 heads: TP 4 and 8 do not divide them
    heads = "each TP rank holds whole attention and key/value heads: TP must divide the model's 6"
    assert rs.dropped_text() == f"tp_degree 4, 8 ({heads})"
    rs.why_dropped["tp_degree 4"] = "another reason"
    assert rs.dropped_text() == f"tp_degree 4 (another reason), 8 ({heads})"


def test_the_sweep_says_what_this_machine_leaves_out_apart_from_what_the_model_or_the_space_does(tmp_path):
    """A TP degree the model's heads cannot split, or one the space's ZeRO stages rule out, was
    listed as "not offered on this machine", with no reason: another machine would leave it
    out too. Now the machine's line keeps what the machine leaves out, and a second line names
    the rest with its reason."""
    import io
    import json
    from types import SimpleNamespace

    from rich.console import Console

    from autotune.cli.sweep import _header
    from autotune.search.machine import restricted_space
    from autotune.spec import load_spec

    space = SearchSpace.model_validate({"num_gpus": [1, 2, 4], "tp_degree": [1, 2, 4], "zero_stage": [0]})
    rs = restrict(space, capabilities_for(CPU2), n_heads=3)  # 3 heads: no TP 2; 4 ranks: not here
    heads = "each TP rank holds whole attention and key/value heads: TP must divide the model's 3"
    assert rs.dropped_text(machine=True) == "num_gpus 4; tp_degree 4"
    assert rs.dropped_text(machine=False) == f"tp_degree 2 ({heads})"
    assert rs.dropped_text() == f"num_gpus 4; tp_degree 2 ({heads}), 4"
    zero3 = restrict(SearchSpace.model_validate({"num_gpus": [2], "tp_degree": [1, 2], "zero_stage": [3]}),
                     capabilities_for(CPU2))
    assert zero3.dropped_text(machine=False) == (
        "tp_degree 2 (TP runs at ZeRO stage 0 only, which the space's zero_stage does not list)")
    assert zero3.dropped_text(machine=True) == ""
    # A model that runs no TP leaves out every degree, on any machine: its reason, once.
    no_tp = restrict(space, capabilities_for(CPU2), n_heads=1, tp_why="the worker does not split it")
    assert no_tp.dropped_text(machine=False) == "tp_degree 2, 4 (the worker does not split it)"
    assert no_tp.dropped_text(machine=True) == "num_gpus 4"

    # The sweep's start, from a real spec: a Llama with 3 heads on this 2-rank CPU machine.
    (tmp_path / "llama.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 3, "vocab_size": 512}))
    (tmp_path / "space.yaml").write_text("num_gpus: [1, 2, 4]\ntp_degree: [1, 2, 4]\nzero_stage: [0]\n")
    (tmp_path / "spec.yaml").write_text("workload: {kind: hf, config_path: llama.json}\nspace: space.yaml\n")
    spec = load_spec(tmp_path / "spec.yaml")
    session = SimpleNamespace(hardware=CPU2, restricted=restricted_space(spec, CPU2), spec=spec, measured_before=0)
    out = io.StringIO()
    _header(Console(file=out, width=200), session, "sqlite:///x.db", 3)
    lines = out.getvalue().splitlines()
    assert "  not offered on this machine: num_gpus 4; tp_degree 4" in lines, lines
    assert f"  left out by the model or the space: tp_degree 2 ({heads})" in lines, lines
