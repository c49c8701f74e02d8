"""Exceptions the worker raises to say how a trial ended (mapped to TrialStatus)."""


class UnsupportedConfig(Exception):
    """The hardware or a library cannot run this configuration (status `unsupported`)."""


class NonFiniteLoss(Exception):
    """The loss became NaN or inf (status `nan`)."""
