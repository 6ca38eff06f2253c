"""The CPU lowering passes, one per module (the order is ``transform.cpu_passes``). Re-exports nothing, so
``transform.cpu.<module>`` is always the module."""
