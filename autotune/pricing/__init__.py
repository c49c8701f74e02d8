"""Prices and targets: catalog (load/validate), cost (the bill of one config on one offer),
target (tokens to the training target), quote (a throughput priced on every offer, count and type)."""
