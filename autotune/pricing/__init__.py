"""Prices and targets: catalog (load/validate), cost (the bill), target (time-to-target)."""
