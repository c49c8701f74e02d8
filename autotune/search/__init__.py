"""The search: what to measure next and how each measurement scores.

    study = open_study("sqlite:///autotune.db", "default")          # autotune.search.study
    summary = run_sweep(spec, study, n_trials=8, runs_dir=Path("autotune_runs/default"))

study (the Optuna study, its sampler), machine (what this machine offers of the space),
space (the choices), sweep (the loop), strategy (baselines, local moves), objective (one
proposal: prescreen, reuse or run, score), calibration (the memory prescreen), reuse (config
keys, claims), score (hours and dollars of a trial), budget (when to stop), pareto (the front),
plan (the same search on the analytic models alone).
"""
