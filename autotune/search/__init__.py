"""The search: what to measure next and how each measurement scores.

    study = open_study("sqlite:///autotune.db", "default")          # autotune.search.sweep
    summary = run_sweep(spec, study, n_trials=8, runs_dir=Path("autotune_runs/default"))

space (the choices), calibration (the memory prescreen), score (hours and dollars of a
trial), sweep (objective, reuse, baselines, local moves, the loop), plan (the same search
on the analytic models alone).
"""
