"""Loading and calling compiled kernels. Imports no part of the TVM compiler: exported kernels and GPU hosts
run with ``apache-tvm-ffi`` (CPU) alone."""

from .artifact import Artifact, ParamSpec, load_artifact
from .call import KernelCallable

__all__ = ["Artifact", "ParamSpec", "load_artifact", "KernelCallable"]
