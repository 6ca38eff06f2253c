"""The CUDA lowering passes, one per module (the order is ``transform.cuda_passes``), with the helpers only CUDA
passes share: ``common`` (the ``PrimFunc`` attributes the passes hand each other, substitution, access
collection) and ``layouts`` (fragment and shared-memory layouts, swizzles). Re-exports nothing, so
``transform.cuda.<module>`` is always the module (tests monkeypatch module attributes)."""
