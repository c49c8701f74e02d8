"""`autotune cost --precision tf32`: the help offers it and the catalog has tf32 peaks, but with
--params it stopped on an uncaught ValueError (the memory check built a training precision
from it), and its checkpoints were priced as mixed precision (14 B/param). tf32 is fp32
training with TF32 matmuls: fp32 weights, gradients and optimizer states, at the GPU's tf32
peak. The commands run as the real CLI."""

from __future__ import annotations

import json

import pytest

from autotune.pricing.load import load_catalog

# 1.3B parameters on one H100: no collectives, so tokens/s is exactly MFU x peak / FLOPs.
ONE_GPU = ("cost", "--gpu", "h100-sxm", "--mfu", "0.4", "--params", "1.3e9", "--target-tokens", "1e10",
           "--offer", "runpod-h100-sxm")


def test_tf32_is_priced_at_the_tf32_peak_with_fp32_checkpoints(cli):
    code, out, err = cli(*ONE_GPU, "--precision", "tf32", "--json")
    assert code == 0, err
    [tf32] = json.loads(out)
    code, out, err = cli(*ONE_GPU, "--precision", "fp32", "--json")
    assert code == 0, err
    [fp32] = json.loads(out)
    peaks = load_catalog().gpus["h100-sxm"].peak_tflops
    assert "h100-sxm tf32 peak" in tf32["throughput_basis"]
    assert tf32["tokens_per_s"] / fp32["tokens_per_s"] == pytest.approx(peaks["tf32"] / peaks["fp32"], rel=1e-9)
    # fp32 states: the checkpoint is fp32 training's 12 B/param, not mixed precision's 14.
    code, out, err = cli(*ONE_GPU, "--precision", "tf32")
    assert code == 0, err
    text = " ".join(out.split())
    assert "checkpoint 12 B/param (adamw, fp32), final model 4 B/param" in text
    assert "mixed precision" not in text


def test_the_size_defaults_the_help_states_are_the_ones_priced(cli):
    """--final-model-gb's help said "default: 2 B/param" while fp32 and tf32 runs priced the
    final model's download at 4 B/param (the bill's own "assumed:" line said so)."""
    import inspect

    from autotune.cli.cost import cost

    helps = {name: p.default.help for name, p in inspect.signature(cost).parameters.items()}
    assert "default: 14 B/param; 12 at fp32 and tf32" in helps["checkpoint_gb"]
    assert "default: 2 B/param; 4 at fp32 and tf32" in helps["final_model_gb"]
    for precision, ckpt, final in (("bf16", 14, 2), ("fp32", 12, 4), ("tf32", 12, 4)):
        code, out, err = cli(*ONE_GPU, "--precision", precision)
        assert code == 0, err
        assert f"checkpoint {ckpt} B/param" in " ".join(out.split())
        assert f"final model {final} B/param" in " ".join(out.split())


def test_tf32_holds_fp32_states_in_the_memory_check(cli):
    """10B parameters at ZeRO-1 over 8 H100s: fp32 states (4 + 4 + 8/8 B/param, 88.5 GiB) do
    not fit a GPU, bf16's (2 + 2 + 12/8) do; tf32 keeps fp32's."""
    args = ("cost", "--gpu", "h100-sxm", "--gpus", "8", "--mfu", "0.4", "--params", "1e10",
            "--target-tokens", "1e11", "--global-batch-tokens", "1e6", "--zero-stage", "1",
            "--offer", "lambda-h100-sxm")
    code, out, err = cli(*args, "--precision", "tf32")
    assert code == 0, err
    text = " ".join(out.split())
    assert "skipped lambda-h100-sxm: does not fit: the model's states alone need 88.5 GiB per GPU" in text
    code, out, err = cli(*args, "--precision", "bf16", "--json")
    assert code == 0 and len(json.loads(out)) == 1, err


def test_tf32_with_a_measured_throughput_through_a_real_subprocess(run_cli):
    r = run_cli("cost", "--gpu", "h100-sxm", "--gpus", "8", "--tokens-per-s", "30000", "--params", "7e9",
                "--global-batch-tokens", "1e6", "--target-tokens", "1e11", "--zero-stage", "2",
                "--precision", "tf32", "--offer", "lambda-h100-sxm", "--json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    [bill] = json.loads(r.stdout)
    assert bill["gpus_used"] == 8


def test_an_unknown_precision_is_one_line_exit_2(run_cli):
    r = run_cli("cost", "--gpu", "h100-sxm", "--mfu", "0.4", "--params", "7e9", "--target-tokens", "1e10",
                "--precision", "tf16")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--precision 'tf16' is not one of fp32, tf32, bf16, fp16, fp8" in " ".join(r.stderr.split())


def test_a_step_count_that_is_not_whole_is_refused(run_cli):
    """--target-steps 1.5 was rounded to 2 steps without a word."""
    r = run_cli("cost", "--gpu", "h100-sxm", "--gpus", "8", "--tokens-per-s", "30000",
                "--global-batch-tokens", "1e6", "--target-steps", "1.5")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--target-steps 1.5 must be a whole number" in " ".join(r.stderr.split()), r.stderr
    r = run_cli("cost", "--gpu", "h100-sxm", "--gpus", "8", "--tokens-per-s", "30000",
                "--global-batch-tokens", "1e6", "--target-steps", "2e3", "--json")
    assert r.returncode == 0, r.stderr


def test_the_cost_examples_of_its_docstring_answer(cli):
    # `autotune cost --gpu h100-sxm --mfu 0.4 --params 7e9 --target-tokens 1e11 --json` printed
    # [] (the 7B's states fit no single H100 at ZeRO 0): an example that answers nothing.
    import shlex

    import autotune.cli.cost as mod

    lines = (mod.__doc__ or "").replace("\\\n", " ").splitlines()
    examples = [shlex.split(ln.strip())[1:] for ln in lines if ln.strip().startswith("autotune cost ")]
    assert len(examples) == 3
    for args in examples:
        code, out, err = cli(*args)
        assert code == 0, (args, err)
        if "--json" in args:
            assert json.loads(out), args  # at least one bill
        else:
            assert "cheapest" in out, (args, out[-500:])
