"""Lifecycle hooks around workloads: their config, the crash ledger, running them, `@with_hooks`."""
