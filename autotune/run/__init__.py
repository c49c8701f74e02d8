"""Running trials on this machine: launch (a trial start to end), with argv (the launcher's
command and environment), process_group (kill whole), results (how a trial ended), templates
(cluster and multi-node argv), deepspeed_ops (the op prebuild); pool (long-lived workers),
storage (Optuna URLs, redaction, claims), nodes (multi-node agents), hardware (this machine's
fingerprint).

    result = run_trial(cfg, Path("autotune_runs/default/trial_0000"))   # autotune.run.launch
"""
