"""Exceptions the worker raises to say how a trial ended (mapped to TrialStatus)."""


class UnsupportedConfig(Exception):
    """The hardware or a library cannot run this configuration (status `unsupported`).

    `workload_allows`: where the cause is the workload itself, whatever else the config says,
    the values of that setting it can run (a model with no TP plan: {"tp_degree": [1]}); the
    sweep then launches no config outside them (autotune.search.objective)."""

    def __init__(self, message: str, workload_allows: dict[str, list] | None = None):
        super().__init__(message)
        self.workload_allows = workload_allows


class NonFiniteLoss(Exception):
    """The loss became NaN or inf (status `nan`)."""


class EntryPointContractError(TypeError):
    """A user's entry point returned what breaks its calling convention (status `crash`). Its
    name is the contract's ENTRY_POINT_CONTRACT_ERROR: the sweep stops at the first, since
    every config would end the same way."""
