"""Workloads a trial can train: the built-in GPT, a Hugging Face config, a user entry point."""
