"""The README's GPU quick start is a real spec: examples/llama7b-8gpu loads and validates as
autotune reads it, builds the 7B Llama's exact parameter count from its config, and `autotune
plan` (the analytic search, no trial) bills it on 8-GPU offers. A sweep needs the 8 GPUs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "llama7b-8gpu"


def test_the_7b_spec_and_its_space_validate():
    from autotune.contract import HFWorkload
    from autotune.search.space_file import load_space
    from autotune.spec import load_spec

    spec = load_spec(EXAMPLE / "spec.yaml")
    assert isinstance(spec.workload, HFWorkload) and Path(spec.workload.config_path).is_file()
    assert spec.seq_len == 4096 and spec.batch.global_batch_samples == 256
    space = load_space(spec.space)
    assert space.num_gpus == [8] and [p.value for p in space.precision] == ["bf16"]


def test_the_7b_config_is_llama_2_7b_and_plan_bills_it_on_8_gpus(cli):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig.from_json_file(str(EXAMPLE / "llama-7b.json"))
    with torch.device("meta"):
        params = sum(p.numel() for p in LlamaForCausalLM(config).parameters())
    assert params == 6_738_415_616  # Llama-2-7B's published count (6.74B)
    code, out, err = cli("plan", str(EXAMPLE / "spec.yaml"), "--mfu", "0.4", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["bills"] and all(b["gpus"] == 8 and b["nodes"] == 1 for b in doc["bills"]), doc["bills"][:1]
    assert any("6,738,415,616 parameters" in a for a in doc["assumptions"])


def test_the_readmes_quick_start_spec_is_the_example_file():
    import yaml

    readme = (REPO / "README.md").read_text()
    block = readme.split("# examples/llama7b-8gpu/spec.yaml\n", 1)[1].split("```", 1)[0]
    shown = yaml.safe_load(block)
    assert shown == yaml.safe_load((EXAMPLE / "spec.yaml").read_text())


def test_the_readmes_cpu_demo_is_a_real_sweeps_output():
    """The README quotes the default sweep's output as docs/default_sweep.txt recorded it
    (scripts/readme_demo.py runs the sweep and writes both), trial lines and short answer
    alike; the record says when, at which commit and on which machine."""
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    from readme_demo import LOG, logged_output, quoted_output

    log = LOG.read_text()
    assert "- Run: " in log and "commit `" in log and "- Machine: " in log
    quoted = quoted_output((REPO / "README.md").read_text())
    assert quoted is not None and quoted == logged_output(log)
    trial_lines = [ln for ln in quoted.splitlines() if ln.startswith("  trial ")]
    assert len(trial_lines) == 8 and "\nPick: trial " in quoted and "Next: autotune export" in quoted


def test_the_readmes_default_sweep_model_is_the_one_the_default_spec_counts():
    """The README's first command names the model the default sweep trains, by its count."""
    from autotune.estimate.workload import model_from_workload
    from autotune.spec import default_spec

    shape = model_from_workload(default_spec().workload)
    assert shape is not None
    first_command = (REPO / "README.md").read_text().split("## Two commands", 1)[1].split("```", 1)[0]
    assert f"GPT, {shape.params:,} parameters" in first_command


def _commands(text: str, start: str) -> list[str]:
    """The shell commands of a document's code blocks that start with `start`, continuation
    lines joined and comments dropped."""
    blocks = [b.split("\n", 1)[1] for b in text.split("```")[1::2] if b.startswith("bash")]
    joined = "\n".join(blocks).replace("\\\n", " ")
    return [ln.split(" #")[0] for ln in joined.splitlines() if ln.strip().startswith(start)]


def test_the_docs_skypilot_commands_run_as_written(tmp_path, run_cli):
    """The README's SkyPilot command gave --storage-file with --skypilot-task, which the sweep
    refuses (a task never holds the URL): run as written, it ended exit 2. Each command, from a
    folder with a spec.yaml and a ~/.autotune-db-url, writes its tasks (no `sky` needed)."""
    import shlex

    home = tmp_path / "home"
    home.mkdir()
    (home / ".autotune-db-url").write_text("postgresql://tuner:PW@db.example.com/autotune\n")
    commands = [c for doc in ("README.md", "docs/cluster.md")
                for c in _commands((REPO / doc).read_text(), "autotune sweep") if "--skypilot-task" in c]
    assert len(commands) == 2, commands
    for i, command in enumerate(commands):
        folder = tmp_path / f"run{i}"
        folder.mkdir()
        (folder / "spec.yaml").write_text("study: llama-8b\n")
        argv = [a.replace("~", str(home)) for a in shlex.split(command)][1:]
        p = run_cli(*argv, cwd=folder, env={"HOME": str(home)})
        assert p.returncode == 0, (command, p.stderr)
        assert (folder / "skypilot" / "autotune-h100-sxmx8.yaml").is_file(), p.stdout


def _quoted_outputs(readme: str) -> list[tuple[str, list[str]]]:
    """The README's commands shown with what they print: an `autotune` line followed by
    comment lines quoting its output (`# cheapest: ...`, `#  1. ...`), each quote's `...`
    standing for text left out."""
    shown = []
    lines = readme.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("autotune ") or line.rstrip().endswith("\\"):
            continue
        quotes = []
        for follow in lines[i + 1:]:
            if not follow.startswith("#"):
                break
            text = follow[1:].strip()
            if text.startswith("cheapest:") or re.match(r"\d+\. ", text):
                quotes.append(text)
        if quotes:
            shown.append((line.split(" #")[0].strip(), quotes))
    return shown


def test_the_readmes_quoted_plan_and_cost_outputs_are_what_the_commands_print(run_cli):
    """The README quotes `autotune plan`'s pick (430.6 h, 3,445 GPU-hours on 8 H100s) and `autotune
    cost`'s first two bills ($663.08, $5,011.42): estimates from the shipped catalog, which a
    price or model change moves. Run as written from the checkout, each quoted line is one the
    command prints (its `...` left out)."""
    import shlex

    shown = _quoted_outputs((REPO / "README.md").read_text())
    assert [cmd.split()[1] for cmd, _ in shown] == ["plan", "cost"], shown
    for command, quotes in shown:
        p = run_cli(*shlex.split(command)[1:], cwd=REPO)
        assert p.returncode == 0, (command, p.stderr)
        printed = p.stdout.splitlines()
        for quote in quotes:
            pieces = [q.strip() for q in quote.split("...") if q.strip()]
            assert any(_in_order(pieces, ln) for ln in printed), (command, quote, p.stdout[-3000:])


def _in_order(pieces: list[str], line: str) -> bool:
    at = 0
    for piece in pieces:
        at = line.find(piece, at)
        if at < 0:
            return False
        at += len(piece)
    return True


def test_the_readmes_measured_figures_are_their_raw_files():
    """Each figure the README quotes from a measurement, computed again from its raw file in
    benchmarks/results/ (the standard: a sentence that quotes a figure is checked against its
    raw file): the 389.5M GPT's peaks per engine and the sharded build's growth, the 1.27B
    FSDP2 trial and the 872M DDP config not run (scale.json); huge pages' tokens/s ratios
    (noise_levers.json); the run-to-run spread per search space (search_*.json)."""
    results = REPO / "benchmarks" / "results"
    readme = " ".join((REPO / "README.md").read_text().split())
    gib = 2**30

    scale = json.loads((results / "scale.json").read_text())
    rows = {(r["size"], r["engine"]): r for r in scale["rows"]}
    peak = {e: max(rows["390M", e]["peak_bytes_per_rank"]) / gib for e in ("DDP", "ZeRO-3", "FSDP2")}
    assert (f"DDP peaks at {peak['DDP']:.2f} GiB per rank, ZeRO-3 at {peak['ZeRO-3']:.2f} GiB "
            f"({peak['ZeRO-3'] / peak['DDP']:.2f}x) and FSDP2 full_shard at {peak['FSDP2']:.2f} GiB "
            f"({peak['FSDP2'] / peak['DDP']:.2f}x)") in readme
    growth = sorted(f"{max(b - a for a, b in zip(r['baseline_bytes_per_rank'], r['build_peak_bytes_per_rank'])) / (4 * r['params']):.2f}"
                    for r in (rows["390M", "ZeRO-3"], rows["390M", "FSDP2"]))
    said = f"{growth[0]}x" if growth[0] == growth[-1] else f"{growth[0]}x to {growth[-1]}x"
    assert f"a sharded rank's build grows by {said} the model's fp32 bytes" in readme
    big = rows["1.27B", "FSDP2"]
    assert f"FSDP2 trains a 1.27B GPT at {max(big['peak_bytes_per_rank']) / gib:.1f} GiB per rank" in readme
    ddp = rows["872M", "DDP"]
    assert ddp["status"] == "not run" and "24 GiB RAM" in scale["context"]["machine"]
    assert f"DDP at 872M was predicted not to fit ({ddp['error'].split('predicted ')[1].replace(' > ', ', ')})" in readme

    levers = json.loads((results / "noise_levers.json").read_text())["rows"]
    tps = {(r["key"], r["thp"]): r["tokens_per_s_median"] for r in levers}
    ratios = sorted(f"{tps[k, 'on'] / tps[k, 'off']:.2f}x" for k, _ in tps if _ == "on")
    assert f"({' and '.join(ratios)} the tokens/s of two configs" in readme

    spreads = [json.loads((results / f"search_{space}.json").read_text())["truth"]["median_spread"]
               for space in ("big", "ds", "cpu40", "mem", "gpt390")]
    assert f"differ by a median of {min(spreads) * 100:.0f}-{max(spreads):.0%} of their" in readme


def test_the_readmes_llama_activation_figures_are_the_estimates():
    """The README's Llama-2-7B activations (micro-batch 1, seq 2048, bf16) are what the
    estimate computes for a bare `model_type: llama`, under each mixed-precision layout."""
    from autotune.contract import Precision
    from autotune.estimate.compute import model_from_hf_config
    from autotune.estimate.memory import MemoryConfig, activation_parts

    flat = " ".join((REPO / "README.md").read_text().split())
    llama = model_from_hf_config({"model_type": "llama"})
    for engine, layout in (("ddp", "under bf16 autocast (DDP)"), ("deepspeed", "with bf16 weights (DeepSpeed)")):
        parts = activation_parts(llama, MemoryConfig(seq_len=2048, micro_batch_size=1,
                                                     precision=Precision.bf16, engine=engine))
        assert parts is not None
        assert f"{parts['kept'] / 2**20:,.1f} MiB of activations {layout}" in flat or \
            f"{parts['kept'] / 2**20:,.1f} MiB {layout}" in flat, engine
