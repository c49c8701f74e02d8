"""The worker side of autotune: code that runs inside launched trial processes.

Imports torch (and DeepSpeed / accelerate where a trial needs them); talks to the
controller only through `autotune.contract` JSON files.
"""
