"""Running trials on this machine: launch (argv, process group, timeout), storage (Optuna URLs,
redaction, claims), nodes (multi-node agents), hardware (this machine's fingerprint).

    result = run_trial(cfg, Path("autotune_runs/default/trial_0000"))   # autotune.run.launch
"""
