"""Trials larger than one machine: argv templates and a real two-"node" torchrun trial."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.contract import GPTWorkload, TrialConfig, TrialStatus
from autotune.errors import UserError
from autotune.run.launch import run_trial
from autotune.run.templates import fill_template, template_argv_builder
from autotune.spec import SweepSpec, load_spec


def _cfg(**kw) -> TrialConfig:
    return TrialConfig(workload=GPTWorkload(preset="tiny"), seq_len=32, micro_batch_size=2,
                       warmup_steps=1, measure_steps=2, max_measure_steps=2, timeout_s=300,
                       measure_noise_scale=False, **kw)


def test_template_is_filled_field_by_field_never_through_a_shell():
    out = fill_template(["srun", "--nodes={num_nodes}", "--job-name={job_name}", "{launcher_argv}"],
                        {"num_nodes": 2, "job_name": "a b; rm -rf /"}, ["torchrun", "x"])
    assert out == ["srun", "--nodes=2", "--job-name=a b; rm -rf /", "torchrun", "x"]
    with pytest.raises(ValueError, match="whole element"):
        fill_template(["--x={launcher_argv}"], {}, ["a"])


def test_slurm_template_builds_one_c10d_agent_per_node(tmp_path):
    build = template_argv_builder(["srun", "--nodes={num_nodes}", "--ntasks-per-node=1",
                                   "--gpus-per-node={gpus_per_node}", "{launcher_argv}"],
                                  rdzv_host="node001", job_name="autotune-x")
    argv = build(_cfg(num_gpus=4, num_nodes=2), tmp_path / "config.json", tmp_path / "result.json", 29411)
    assert argv[:4] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=4"]
    rest = argv[4:]
    assert rest[rest.index("--nnodes") + 1] == "2" and rest[rest.index("--nproc-per-node") + 1] == "4"
    assert rest[rest.index("--rdzv-backend") + 1] == "c10d"
    assert rest[rest.index("--rdzv-endpoint") + 1] == "node001:29411"


def test_spec_launcher_section_is_validated(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("launcher: {num_nodes: [2]}\n")
    with pytest.raises(UserError, match="argv"):
        load_spec(p)
    p.write_text("launcher: {argv: [srun, '--x={nodez}', '{launcher_argv}']}\n")
    with pytest.raises(UserError, match="nodez"):
        load_spec(p)
    assert SweepSpec.model_validate({"launcher": {"num_nodes": [1, 2], "argv": ["{launcher_argv}"]}})


@pytest.mark.e2e
def test_two_torchrun_agents_as_two_nodes_make_one_trial(tmp_path):
    """Two torchrun agents on this machine stand in for two nodes: --nnodes 2, one rank each,
    a c10d rendezvous on 127.0.0.1 and a free port, started per node by autotune.run.nodes."""
    cfg = _cfg(num_gpus=1, num_nodes=2)
    build = template_argv_builder(["{launcher_argv}"], per_node=True, rdzv_host="127.0.0.1")
    result = run_trial(cfg, tmp_path / "trial", argv_builder=build)
    assert result.status is TrialStatus.ok, (result.error, result.log_tail)
    assert result.world_size == 2 and len(result.step_times_s) == 2
    assert result.tokens_per_s > 0
    # Data parallel over both "nodes": the samples the trial counted per step are every rank's
    # (micro-batch 2 on each of the 2 ranks), not one node's.
    assert result.samples_per_s == pytest.approx(2 * 2 / result.step_time_median_s, rel=1e-9)
    assert result.tokens_per_s == pytest.approx(2 * 2 * 32 / result.step_time_median_s, rel=1e-9)
    assert len(result.observations["step_time_median_s_by_rank"]) == 2  # both ranks measured
    import json

    nodes = json.loads(Path(tmp_path / "trial" / "nodes.json").read_text())["argvs"]
    assert len(nodes) == 2 and all("--nnodes" in a and "c10d" in a for a in nodes)


def test_ssh_templates_must_quote_the_launcher_argv(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("launcher: {num_nodes: [2], per_node: true, argv: [ssh, '{host}', '{launcher_argv}']}\n")
    with pytest.raises(UserError, match="launcher_argv_shell"):
        load_spec(p)
    p.write_text("launcher: {num_nodes: [2], per_node: true, argv: [ssh, '{host}', '{launcher_argv_shell}']}\n")
    assert load_spec(p).launcher.argv[-1] == "{launcher_argv_shell}"


def test_the_specs_hosts_and_per_node_reach_each_nodes_command(tmp_path, monkeypatch):
    """The sweep's runner (`default_runner`) builds each node's command from the spec's
    `launcher`: one command per node with `per_node`, `{host}` that node's entry of `hosts`,
    the rendezvous on hosts[0]. Nothing is launched: run_trial is replaced by a function that
    keeps the argv builder it is handed, which then runs for real."""
    import json

    from autotune.run import launch
    from autotune.search.objective import default_runner

    spec = SweepSpec.model_validate({"study": "s", "launcher": {
        "num_nodes": [2], "per_node": True, "hosts": ["node-a", "node-b"],
        "argv": ["ssh", "{host}", "{launcher_argv_shell}"]}})
    builders = []
    monkeypatch.setattr(launch, "run_trial", lambda cfg, d, argv_builder=None, **kw: builders.append(argv_builder))
    default_runner(spec)(_cfg(num_gpus=1, num_nodes=2), tmp_path)
    (build,) = builders
    argv = build(_cfg(num_gpus=1, num_nodes=2), tmp_path / "config.json", tmp_path / "result.json", 29500)
    assert argv[1:3] == ["-m", "autotune.run.nodes"]
    nodes = json.loads(Path(argv[3]).read_text())["argvs"]
    assert [a[:2] for a in nodes] == [["ssh", "node-a"], ["ssh", "node-b"]]
    assert all("node-a:29500" in a[2] for a in nodes)


@pytest.mark.e2e
def test_a_remote_shell_gets_trial_paths_with_spaces_and_semicolons_intact(tmp_path):
    """`sh -c STRING` parses its one argument as a shell command line, exactly what ssh's remote
    shell does with the string ssh joins from its arguments: a stand-in for ssh that needs no
    server. The trial folder's name has a space, a ';' and a '$'; each node agent must get it
    as one argument, and nothing after the ';' may run as a command."""
    cfg = _cfg(num_gpus=1, num_nodes=2)
    canary = tmp_path / "INJECTED"
    trial_dir = tmp_path / f"runs with space; touch {canary}; $HOME"
    build = template_argv_builder(["sh", "-c", "{launcher_argv_shell}"], per_node=True,
                                  rdzv_host="127.0.0.1")
    result = run_trial(cfg, trial_dir, argv_builder=build)
    assert result.status is TrialStatus.ok, (result.error, result.log_tail)
    assert result.world_size == 2 and (trial_dir / "result.json").is_file()
    assert not canary.exists()
