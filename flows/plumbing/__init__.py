"""Prefect plumbing the stages share: run logs and progress, terminal lines, artifacts, the
ledger's no-op rule, slots, task runners, the server and its deployment forms."""
