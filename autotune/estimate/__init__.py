"""Analytic models used before launching anything: memory (`memory`), compute (`compute`),
communication and projection (`scaling`).

    from autotune.estimate.compute import model_from_preset, flops_per_token
    from autotune.estimate.memory import MemoryConfig, estimate_memory
"""
