"""TVM glue of the CUDA backend: our passes, then a trimmed TVM TIR pipeline and TVM's CUDA code generator.

TVM's default pipeline for CUDA would insert its own barriers (``ThreadSync``) and merge shared allocations by
liveness; neither can see through the pointers our templates take, and our passes already placed barriers and
shared memory. So the pipeline here keeps only the generic lowering passes (flattening, vectorisation, unrolling,
simplification, host/device split). Only the device half is code-generated: the launch (grid, block, dynamic
shared memory, argument order) is ours, recorded in the artifact, so no host code is needed. TVM writes CUDA C
without calling a compiler, on a machine without a GPU.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from ...errors import TileLangCompileError
from . import streaming_loads
from .source_only import source_only

HEADER = '#include "tl/tl.cuh"\n'


@dataclass
class CudaSource:
    """The generated device code and what a launcher needs to know about it."""

    source: str
    kernel: str
    arg_names: list[str]  # buffer, scalar-parameter or symbolic-size names, in kernel parameter order
    grid: list[int | str]  # a symbolic extent as TVM prints it ("(m + 127) // 128"), evaluated per launch
    block: list[int]
    dyn_smem: int
    timings: dict[str, float] = field(default_factory=dict)
    arg_dtypes: list[str] = field(default_factory=list)  # "handle" for a tensor's pointer, else the scalar's dtype
    tma: list[dict[str, Any]] = field(default_factory=list)  # tensor maps the launcher encodes (sm90/tma.py)
    notes: list[str] = field(default_factory=list)  # what a code-generation option did not change, and why


def _int_or_str(g: Any) -> int | str:
    try:
        return int(g)
    except TypeError:
        return str(g)


def lower(func: Any, record: Any = None, arch: str = "sm_90", options: Any = None) -> Any:
    """Run our CUDA passes with ``options`` (a :class:`~tilelang_core.pass_config.PassConfig` or a
    ``pass_configs`` dict); returns an IRModule of plain TIR (thread bindings, register arrays, extern calls)."""
    import tvm

    from ...transform import cuda_passes

    for name, fn in cuda_passes(arch, options):
        t0 = time.perf_counter()
        func = fn(func)
        if record is not None:
            record(name, func, time.perf_counter() - t0)
    return tvm.IRModule({"main": func})


def _wgmma_source(source: str) -> str:
    """A kernel calling ``tl::wgmma_gemm_ss`` or loading by TMA starts with ``tl/tl_sm90.cuh`` (tl.cuh and
    ``tl/wgmma.cuh``, whose per-shape PTX wrappers are large: other kernels do not parse them; one first include, so
    NVRTC's precompiled header holds them) and declares its dynamic shared memory 1024-byte aligned (the wgmma
    and TMA swizzle atoms repeat every 1024 bytes of the shared address space; tl.LowerSharedMemoryCUDA places the
    tiles so)."""
    if "tl::wgmma_gemm_ss" not in source and "tl::tma_load_" not in source:  # TMA loads feeding mma.sync too
        return source
    source = source.replace(HEADER, '#include "tl/tl_sm90.cuh"\n', 1)
    return re.sub(r"extern\s+__shared__\s+(__align__\(\d+\)\s+)?", "extern __shared__ __align__(1024) ", source)


def _split_args(text: str, start: int) -> tuple[list[str], int]:
    """The top-level comma-separated arguments of the call whose ``(`` is at ``text[start]``, and the index just
    past its ``)``."""
    depth, args, cur = 0, [], start + 1
    for i in range(start, len(text)):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append(text[cur:i])
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append(text[cur:i])
            cur = i + 1
    raise ValueError("unbalanced parentheses")


def _packed_broadcasts(source: str) -> str:
    """TVM stores a vector wider than CUDA's built-in ones in a wider word vector (float32x8 in ``ulonglong4``,
    int8x16 in ``int4``) but prints its broadcast as ``make_<that type>`` with one argument per lane, which no CUDA
    header declares (a ReLU ``T.max(x, 0)`` on 8-lane half vectors widened to float32, ``A + T.cast(3, "int8")`` on
    16-lane int8 vectors): a ``make_<type><n>`` call with more than ``n`` arguments becomes
    ``tl::pack_lanes<<type><n>>``, which copies the lanes' bytes in order."""
    out, pos = [], 0
    for m in re.finditer(r"\bmake_((?:u?(?:char|short|int|long|longlong)|float|double)([1-4]))\(", source):
        if m.start() < pos:
            continue
        args, end = _split_args(source, m.end() - 1)
        if len(args) > int(m.group(2)):
            out.append(source[pos:m.start()])
            out.append(f"tl::pack_lanes<{m.group(1)}>({','.join(args)})")
            pos = end
    out.append(source[pos:])
    return "".join(out)


def _tma_source(source: str, kname: str, nmaps: int) -> str:
    """A kernel with TMA loads takes its tensor maps as one ``__grid_constant__`` parameter after the others
    (``tl::TmaDescs<n> tl_tmaps``, in the declaration and the definition), and each ``tl::tma_load_2d<i>`` reads
    map ``i`` of it (the TIR cannot name a parameter TVM does not know)."""
    source = re.sub(r"tl::tma_load_([1-5])d<(\d+)>\(", r"tl::tma_load_\1d(&tl_tmaps.m[\2], ", source)
    # the multicast loads of a thread-block cluster (sm90/cluster.py)
    source = re.sub(r"tl::tma_load_2d_multicast<(\d+)>\(", r"tl::tma_load_2d_multicast(&tl_tmaps.m[\1], ", source)
    # TMA stores of the epilogue (sm90/tma_store.py); a kernel whose tensors all go through maps has no other
    # parameter left
    source = re.sub(r"tl::tma_store_2d<(\d+)>\(", r"tl::tma_store_2d(&tl_tmaps.m[\1], ", source)
    sig = re.compile(rf"(__global__\s+void\s+(?:__launch_bounds__\(\d+\)\s+)?{re.escape(kname)}\s*\()([^)]*)\)")
    return sig.sub(lambda m: f"{m.group(1)}{m.group(2)}{', ' if m.group(2).strip() else ''}const __grid_constant__ "
                             f"tl::TmaDescs<{nmaps}> tl_tmaps)", source)


def _tir_pipeline() -> Any:
    import tvm
    from tvm import s_tir, tirx

    return tvm.ir.transform.Sequential([
        s_tir.transform.LowerOpaqueBlock(),
        tirx.transform.FlattenBuffer(),
        tirx.transform.BF16ComputeLegalize(),
        tirx.transform.NarrowDataType(32),
        tirx.transform.VectorizeLoop(True),
        tirx.transform.UnrollLoop(),
        tirx.transform.StmtSimplify(),
        tirx.transform.RemoveNoOp(),
        tirx.transform.CommonSubexprElim(),
        tirx.transform.FP8ComputeLegalize(),
        tirx.transform.VerifyMemory(),
        tirx.transform.AnnotateEntryFunc(),
        tirx.transform.SplitHostDevice(),
        tirx.transform.MakePackedAPI(),
        tirx.transform.FP8StorageLegalize(),
        tirx.transform.BF16StorageLegalize(),
    ])


def generate(mod: Any, arch: str = "sm_90", instruments: list[Any] | None = None, options: Any = None) -> CudaSource:
    """CUDA C for the kernel in ``mod`` (the output of :func:`lower`); ``options`` as for :func:`lower`
    (``tl.cuda.streaming_loads`` is applied here)."""
    import tvm
    from tvm.tirx.build import codegen_build, split_host_device_mods

    from ...pass_config import PassConfigKey, resolve
    from ...transform.common.imported_sources import imported_sources
    from ...transform.cuda.common import ATTR_LAUNCH, ATTR_SMEM

    func = mod["main"]
    launch = func.attrs[ATTR_LAUNCH]
    grid = [_int_or_str(g) for g in launch["grid"]]
    threads = int(launch["threads"])
    smem = int(func.attrs[ATTR_SMEM]) if ATTR_SMEM in func.attrs else 0
    names = {buf.name for buf in func.params if tirx_is_buffer(buf)}
    views = _param_views(func)  # T.Tensor(shape, dtype, A.data): the kernel gets A's pointer for the view
    scalars = {p.name for p in func.params if not tirx_is_buffer(p)}
    for p in func.params:  # symbolic sizes of the tensors' shapes reach the kernel as scalars too
        if tirx_is_buffer(p):
            for d in p.shape:
                scalars.update(v.name for v in tvm.tirx.analysis.undefined_vars(d))
    t0 = time.perf_counter()
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    host = tvm.target.Target("llvm") if tvm.runtime.enabled("llvm") else tvm.target.Target("c")
    try:
        with tvm.transform.PassContext(opt_level=3, instruments=instruments or []):
            mod = tvm.tirx.transform.BindTarget(target.with_host(host))(mod)
            mod = _tir_pipeline()(mod)
            _, device_mods = split_host_device_mods(mod)
            if len(device_mods) != 1:
                raise TileLangCompileError("expected exactly one CUDA device module", stage="codegen")
            (dtarget, dmod), = device_mods.items()
            from tvm.tirx.compilation_pipeline import finalize_device_passes

            dmod = finalize_device_passes()(dmod)
            with source_only() as captured:
                rt = codegen_build(dmod, dtarget)
    except TileLangCompileError:
        raise
    except Exception as e:  # noqa: BLE001 - TVM raises many kinds; report as ours
        raise TileLangCompileError(f"CUDA code generation failed: {e}", stage="codegen") from e
    t1 = time.perf_counter()
    kernels = [(gv.name_hint, f) for gv, f in dmod.functions.items()]
    if len(kernels) != 1:
        raise TileLangCompileError(f"expected one CUDA kernel, TVM produced {len(kernels)}", stage="codegen")
    kname, kfunc = kernels[0]
    arg_names, arg_dtypes = [], []
    for p in kfunc.params:
        pname = p.name
        base = pname[:-4] if pname.endswith("_ptr") else pname
        pdt = getattr(getattr(p, "ty", None), "dtype", None)  # a pointer's type has none
        dt = "handle" if pdt is None or str(pdt) == "handle" else str(pdt)
        if base in views and dt == "handle":
            base = views[base]
        if base in names and dt == "handle":
            arg_names.append(base)
            arg_dtypes.append("handle")
        elif pname in scalars:
            arg_names.append(pname)
            arg_dtypes.append(dt)
        else:
            raise TileLangCompileError(f"the CUDA kernel takes a parameter {pname!r} that is neither a tensor, a "
                                       "scalar parameter nor a symbolic size of the program", stage="codegen")
    # TVM hands the source to the (overridden) compile callback where a driver is present, else keeps it as is
    source = HEADER + (captured.sources[-1] if captured.called else rt.inspect_source(""))
    imported = imported_sources(func)
    if imported:  # T.import_source: the user's device code at file scope, after our headers, before the kernel
        source = HEADER + "\n// T.import_source\n" + "\n".join(imported) + "\n\n" + source[len(HEADER):]
    source = _packed_broadcasts(_wgmma_source(source))
    tma_maps: list[dict[str, Any]] = []
    if func.attrs is not None and "tl.tma_maps" in func.attrs:
        import json

        tma_maps = json.loads(str(func.attrs["tl.tma_maps"]))  # read through maps: the kernel may not take them
        source = _tma_source(source, kname, len(tma_maps))
    if not re.search(rf"__global__\s+void\s+(__launch_bounds__\(\d+\)\s+)?{re.escape(kname)}\s*\(", source):
        raise TileLangCompileError(f"kernel {kname} not found in the generated CUDA source", stage="codegen")
    cfg = resolve(options)
    if cfg[PassConfigKey.TL_CUDA_STREAMING_LOADS]:
        # read-once inputs: evict-first loads (a cache hint; see streaming_loads)
        source = streaming_loads.rewrite_source(source, streaming_loads.streaming_buffers(func))
    notes: list[str] = []
    prefetch = cfg[PassConfigKey.TL_CUDA_L2_PREFETCH]
    if prefetch != 128 and "tl::cp_async_16" in source:  # read by include/tl/copy.cuh, before any include
        source = f"#define TL_L2_PREFETCH {prefetch}\n" + source
    elif prefetch != 128:
        notes.append(f"tl.cuda.l2_prefetch={prefetch} changes nothing here: the kernel has no cp.async reads (its "
                     "global loads are TMA boxes or plain loads)")
    cluster = func.attrs["tl.cluster_dims"] if func.attrs is not None and "tl.cluster_dims" in func.attrs else None
    if cluster is not None:  # a compile-time cluster shape (split-K through distributed shared memory)
        dims = ", ".join(str(int(c)) for c in cluster)
        source = re.sub(r"__global__\s+void\s+", f"__global__ void __cluster_dims__({dims}) ", source)
    return CudaSource(source=source, kernel=kname, arg_names=arg_names, grid=grid, block=[threads, 1, 1],
                      dyn_smem=smem, timings={"codegen": t1 - t0}, arg_dtypes=arg_dtypes, tma=tma_maps, notes=notes)


def _param_views(func: Any) -> dict[str, str]:
    """Buffers declared over a tensor parameter's data (views: ``T.Tensor(shape, dtype, A.data)``) -> its name."""
    import tvm
    import tvm_ffi
    from tvm import tirx

    params = [p for p in func.params if tirx_is_buffer(p)]
    out: dict[str, str] = {}

    def visit(s: Any) -> Any:
        data = s.data  # the pointer the view was declared over (A.data: buffer_data(A))
        for p in params:
            if isinstance(data, tvm.ir.Call) and len(data.args) == 1 and data.args[0].same_as(p) and \
                    not s.buffer.same_as(p):
                out[s.buffer.name] = p.name
        return s

    tvm_ffi.structural_map(func.body, [(tirx.DeclBuffer, visit)])
    return out


def tirx_is_buffer(p: Any) -> bool:
    from tvm import tirx

    return bool(tirx.is_buffer_var(p))
