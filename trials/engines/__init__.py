"""Engines that apply a TrialConfig's parallelism to a model: DDP, DeepSpeed ZeRO, TP."""
