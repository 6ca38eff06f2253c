"""Target-independent passes (validation, index-extent checks and int64 promotion, NaN-skipping min/max) and the
helpers every pass shares: ``rewriter`` (the recursive ``Rewriter``, IR builders, source locations), ``regions``
(tile-region arithmetic), ``notes`` (notes a pass leaves on the kernel). Modules are imported by path; this package
re-exports nothing, so ``transform.common.<module>`` is always the module."""
