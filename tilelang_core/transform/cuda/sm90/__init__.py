"""Reserved for Hopper-only (sm_90a) lowering: the wgmma/TMA pieces once they leave the architecture-generic passes.

Today the wgmma fragment and shared layouts live in ``cuda/layouts.py`` and the wgmma async pipeline in
``cuda/pipeline_cuda.py``, next to the mma.sync code they share helpers with; this package holds no modules yet."""
