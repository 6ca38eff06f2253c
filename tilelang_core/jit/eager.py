"""``@jit`` on TileLang's *eager* spelling: the decorated function's body is the kernel (no inner ``@T.prim_func``).

```python
@tilelang.jit
def matmul(A, B, block_M, block_N, block_K, dtype=T.float16):
    M, N, K = T.const("M, N, K")            # sizes read off the tensors a call passes
    A: T.Tensor((M, K), dtype)               # A and B are the kernel's tensor parameters
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)               # an output the call allocates and returns
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        ...
    return C

c = matmul(a, b, 128, 128, 32)               # compiles (once per distinct sizes and arguments), runs, returns C
kernel = matmul.compile(M=1024, N=1024, K=1024, block_M=128, block_N=128, block_K=32)  # a JITKernel
```

What TileLang does (``tilelang/jit/__init__.py``, ``tilelang/language/eager/``), and so what this module does:

* A parameter is a *runtime* parameter when it is annotated, in the signature or by a bare ``A: <annotation>``
  statement at the top of the body; every other parameter (and any extra keyword, such as ``M=1024``) is a
  compile-time value, as the arguments of a classic factory are.
* ``T.const`` names are compile-time sizes. Each must be, directly, a dimension of some tensor parameter's
  annotation; a call takes its value from that tensor's shape, or from a keyword of that name. The kernel is
  specialised on the values (one compile per distinct shape), not made shape-generic.
* ``T.empty`` outputs become parameters after the runtime ones, in declaration order; they are the kernel's
  ``out_idx`` (so ``out_idx=`` on the decorator is refused, as in TileLang). Calling the decorated function runs
  the kernel on the arguments and returns what ``return`` names; ``.compile(...)`` returns the kernel instead.

* ``T.annotate_pass_configs`` / ``T.annotate_compile_flags`` in the body add compiler options (the decorator's
  ``pass_configs`` win).

How: the body is split, once, into its *declarations* (the leading statements up to the last tensor annotation,
``T.empty``, ``T.const`` or ``T.annotate_*``, then the plain-Python statements right after them: values, imports,
``@T.macro`` helpers; run as a function compiled from the user's own AST, so tracebacks and diagnostics point at
the user's lines) and the *kernel body* (everything after, without the final ``return``). The kernel body is handed
to TVMScript's parser as the body of a ``@T.prim_func`` whose parameters are the annotated parameters and the
outputs (the very buffer objects the declarations made, so helpers closing over them see the parameters), with the
declarations' names in scope, through a parser ``Source`` that keeps the user's file and line numbers. The rest
(lowering, caches, the kernel object) is the classic path's. Misplaced declarations are located errors when the
function is decorated.

Finding each ``T.const``'s tensor dimension runs the declarations once with symbolic sizes (per distinct set of
compile-time arguments); building the program runs them again with the values. A call form seen before (the same
compile-time values, tensors of the same shapes and dtypes) goes straight to its kernel.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import SourceLocation, TileLangCompileError, TileLangError
from . import cache

_DECL_CALLS = ("const", "empty", "dynamic", "symbolic")
_OPTION_CALLS = ("annotate_pass_configs", "annotate_compile_flags")  # statements of the declarations too
_ANN = "__tl_eager_annotation__"
_OUT = "__tl_eager_output__"
_PRIM_FUNC = "__tl_eager_prim_func__"
_PARAM = "__tl_eager_param_"


# -- recognising the spelling -------------------------------------------------------------------------------------
def _call_name(node: ast.AST) -> str | None:
    """``T.const(...)`` / ``const(...)`` -> ``"const"``."""
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute):
            return f.attr
        if isinstance(f, ast.Name):
            return f.id
    return None


def _function_ast(func: Callable[..., Any]) -> tuple[Any, ast.FunctionDef] | None:
    """TVMScript's ``Source`` of ``func`` (file, first line, indentation, text) and its parsed ``def``; None
    when the source is not available."""
    try:
        from tvm.script.parser.core.diagnostics import Source

        src = Source(func)
        tree = ast.parse(src.source)
    except Exception:  # noqa: BLE001 - no readable source (exec'd code, a notebook cell TVMScript cannot find ...)
        return None
    fdefs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(fdefs) != 1 or fdefs[0].name != func.__name__:
        return None
    return src, fdefs[0]


def _has_inner_prim_func(fdef: ast.FunctionDef) -> bool:
    for node in ast.walk(fdef):
        if isinstance(node, ast.FunctionDef) and node is not fdef:
            for d in node.decorator_list:
                d = d.func if isinstance(d, ast.Call) else d
                if (isinstance(d, ast.Attribute) and d.attr == "prim_func") or (
                        isinstance(d, ast.Name) and d.id == "prim_func"):
                    return True
    return False


def _param_names(fdef: ast.FunctionDef) -> list[str]:
    a = fdef.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return names


def is_eager(func: Callable[..., Any]) -> bool:
    """True when ``func`` is written in the eager spelling: no inner ``@T.prim_func``, and the body declares its
    kernel (a tensor annotation of a parameter, in the signature or the body, ``T.const``/``T.empty``, or a
    top-level ``with T.Kernel(...)``). A classic factory that returns a program built elsewhere has none of
    these, so it stays classic; a function whose source cannot be read is classic too."""
    found = _function_ast(func)
    if found is None:
        return False
    _, fdef = found
    if _has_inner_prim_func(fdef):
        return False
    params = set(_param_names(fdef))
    a = fdef.args
    if any(x.annotation is not None and _looks_like_tensor_annotation(x.annotation)
           for x in a.posonlyargs + a.args + a.kwonlyargs):
        return True
    for stmt in fdef.body:
        if _is_parameter_annotation(stmt, params):
            return True
        if isinstance(stmt, ast.With) and any(_call_name(it.context_expr) == "Kernel" for it in stmt.items):
            return True
        for node in ast.walk(stmt):
            if _call_name(node) in ("const", "empty"):
                return True
    return False


def _unstring(node: ast.AST) -> ast.AST:
    """A postponed annotation (``from __future__ import annotations``) as the expression it spells."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return node
    return node


def _looks_like_tensor_annotation(node: ast.AST) -> bool:
    """``T.Tensor(...)``, ``T.Tensor[...]``, ``T.Buffer(...)``, ``T.StridedTensor(...)`` (or a string of one)."""
    node = _unstring(node)
    if isinstance(node, (ast.Call, ast.Subscript)):
        f = node.func if isinstance(node, ast.Call) else node.value
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        return name in ("Tensor", "Buffer", "StridedTensor")
    return False


def _is_dtype_attribute(node: ast.AST) -> bool:
    """``T.float32``, ``T.int32``, ``T.bool`` ...: a scalar parameter's annotation in the body (TileLang's rule)."""
    from ..language.dtypes import SUPPORTED_DTYPES

    node = _unstring(node)
    return isinstance(node, ast.Attribute) and node.attr in (*SUPPORTED_DTYPES, "float", "int", "half", "double")


def _is_parameter_annotation(stmt: ast.stmt, params: set[str]) -> bool:
    """A bare ``A: T.Tensor(...)`` / ``n: T.int32`` statement naming a parameter: it declares a runtime parameter.
    Any other annotation (``x: int``) is plain Python, as in TileLang."""
    return (isinstance(stmt, ast.AnnAssign) and stmt.value is None and isinstance(stmt.target, ast.Name)
            and stmt.target.id in params
            and (_looks_like_tensor_annotation(stmt.annotation) or _is_dtype_attribute(stmt.annotation)))


def _runtime_in_signature(func: Callable[..., Any], name: str, node: ast.expr) -> bool:
    """Whether the signature annotation of ``name`` makes it a runtime parameter: a tensor or a scalar dtype
    (``T.Tensor(...)``, ``T.float32``); a Python type (``int``, ``T.dtype``) or anything else marks a compile-time
    argument, as in TileLang, which keeps only annotations that are buffers or variables."""
    if _looks_like_tensor_annotation(node) or _is_dtype_attribute(node):
        return True
    obj = getattr(func, "__annotations__", {}).get(name)
    if isinstance(obj, str):
        from tvm.script.parser.core.utils import get_func_nonlocals

        try:
            obj = eval(obj, {**func.__globals__, **get_func_nonlocals(func)})  # noqa: S307 (the user's annotation)
        except Exception:  # noqa: BLE001 - not evaluable where the function was defined: not a dtype or tensor
            return False
    if obj is None or isinstance(obj, type) or type(obj).__module__ in ("typing", "types"):
        return False
    from tvm import tirx

    if tirx.is_buffer_var(obj):
        return True
    from ..language.dtypes import SUPPORTED_DTYPES

    if callable(obj) and getattr(obj, "__name__", None) in SUPPORTED_DTYPES:  # TVMScript's T.float32 ...
        return True
    return type(obj) is not str and str(obj) in SUPPORTED_DTYPES  # a dtype object


# -- the split, once per decorated function -----------------------------------------------------------------------
@dataclass
class _Split:
    source: Any                      # TVMScript's Source of the function (file, start line, indentation)
    fdef: ast.FunctionDef
    params: list[str]                # every parameter, in signature order
    sig_annotations: dict[str, ast.expr]  # parameter -> its annotation in the signature
    body_annotations: dict[str, ast.AnnAssign]  # parameter -> its bare annotation statement in the body
    declarations: list[ast.stmt]
    host_tail: list[ast.stmt]        # plain-Python statements between the declarations and the kernel proper
    kernel_body: list[ast.stmt]
    outputs: list[tuple[str, ast.stmt]]   # T.empty outputs, in order
    returns: list[str] | None        # names of the final ``return``; None when there is none
    return_tuple: bool
    const_sites: dict[str, ast.stmt]  # T.const name -> the statement declaring it

    def location(self, node: ast.AST) -> SourceLocation:
        line, col, _, _ = self.source.location(node)
        return SourceLocation(self.source.source_name, line, col)

    def error(self, node: ast.AST, msg: str) -> TileLangCompileError:
        return TileLangCompileError(msg, self.location(node), stage="parse")

    @property
    def runtime_params(self) -> list[str]:
        """The annotated parameters (tensors, scalars), in signature order."""
        return [p for p in self.params if p in self.sig_annotations or p in self.body_annotations]


def _is_declaration(stmt: ast.stmt, params: set[str]) -> bool:
    if _is_parameter_annotation(stmt, params):
        return True
    if isinstance(stmt, ast.Assign):
        return _call_name(stmt.value) in _DECL_CALLS
    return _is_option_call(stmt)


def _is_option_call(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and _call_name(stmt.value) in _OPTION_CALLS


def _split(func: Callable[..., Any]) -> _Split:
    found = _function_ast(func)
    assert found is not None  # is_eager checked it
    src, fdef = found
    a = fdef.args
    if a.vararg is not None or a.kwarg is not None:
        node = a.vararg or a.kwarg
        raise TileLangCompileError(f"{fdef.name}: an eager @jit function cannot take *args or **kwargs (each "
                                   "argument is a tensor or a compile-time value, named in the signature)",
                                   SourceLocation(src.source_name, *src.location(node)[:2]), stage="parse")
    params = _param_names(fdef)
    pset = set(params)
    sig = {x.arg: x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs
           if x.annotation is not None and _runtime_in_signature(func, x.arg, x.annotation)}
    body = list(fdef.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # docstring
    split = _Split(src, fdef, params, sig, {}, [], [], [], [], None, False, {})
    if body and isinstance(body[-1], ast.Return):
        ret = body.pop()
        split.returns, split.return_tuple = _return_names(split, ret)
    for stmt in body:
        for node in _walk_outside_functions(stmt):
            if isinstance(node, ast.Return):
                raise split.error(node, f"{fdef.name}: an eager @jit function returns its T.empty outputs with "
                                        "one `return` at the end of its body")
    last = max((i for i, s in enumerate(body) if _is_declaration(s, pset)), default=-1)
    split.declarations, rest = body[:last + 1], body[last + 1:]
    n_host = next((i for i, s in enumerate(rest) if not (isinstance(s, _HOST_STMTS) or _is_option_call(s))),
                  len(rest))
    split.host_tail, split.kernel_body = rest[:n_host], rest[n_host:]
    for stmt in split.declarations:
        if isinstance(stmt, (ast.With, ast.AsyncWith)) or _is_kernel_stmt(stmt):
            raise split.error(stmt, f"{fdef.name}: the kernel body starts here, but tensor annotations, T.const "
                                    "and T.empty follow it; declare every parameter, size and output first")
        if _is_parameter_annotation(stmt, pset):
            name = stmt.target.id
            if name in sig or name in split.body_annotations:
                raise split.error(stmt, f"{fdef.name}: parameter {name!r} is annotated twice")
            split.body_annotations[name] = stmt
        elif isinstance(stmt, ast.Assign) and _call_name(stmt.value) == "empty":
            if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
                raise split.error(stmt, f"{fdef.name}: assign each T.empty output to one name (C = T.empty(...))")
            split.outputs.append((stmt.targets[0].id, stmt))
        elif isinstance(stmt, ast.Assign) and _call_name(stmt.value) == "const":
            args = stmt.value.args
            if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
                import re

                for n in re.split(r"[\s,]+", args[0].value.strip()):
                    if n:
                        split.const_sites.setdefault(n, stmt)
    top_outputs = {id(stmt.value) for _, stmt in split.outputs}
    for stmt in body:
        for node in ast.walk(stmt):
            if node is not stmt and _is_parameter_annotation(node, pset):
                raise split.error(node, f"{fdef.name}: annotate parameter {node.target.id!r} with a statement of "
                                        "its own at the top of the body (not inside if / for / with), so that "
                                        "every call has the same kernel parameters")
            if _call_name(node) == "empty" and id(node) not in top_outputs:
                raise split.error(node, f"{fdef.name}: T.empty declares an output of the kernel: assign it to a "
                                        "name with a statement of its own among the declarations, before the "
                                        "kernel body (not inside a kernel, a branch or a macro)")
    out_names = [n for n, _ in split.outputs]
    if len(set(out_names)) != len(out_names):
        raise split.error(split.outputs[-1][1], f"{fdef.name}: two T.empty outputs share a name")
    for name, stmt in split.outputs:
        if name in pset:
            raise split.error(stmt, f"{fdef.name}: T.empty output {name!r} has the name of a parameter")
    for n in split.returns or []:
        if n not in out_names:
            raise split.error(split.fdef, f"{fdef.name}: `return {n}` names no T.empty output; an eager "
                                          f"kernel returns the outputs it declares (here: {out_names or 'none'})")
    return split


def _walk_outside_functions(node: ast.AST) -> Any:
    """``ast.walk`` that does not enter nested ``def`` / ``lambda`` bodies (a macro's ``return`` is its own)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(n))


def _return_names(split: _Split, ret: ast.Return) -> tuple[list[str] | None, bool]:
    v = ret.value
    if v is None or (isinstance(v, ast.Constant) and v.value is None):
        return None, False
    elts, is_tuple = (v.elts, True) if isinstance(v, (ast.Tuple, ast.List)) else ([v], False)
    if not all(isinstance(e, ast.Name) for e in elts):
        raise split.error(ret, f"{split.fdef.name}: an eager @jit function returns T.empty outputs by name "
                               f"(return C, or return C, D), got `{ast.unparse(v)}`")
    return [e.id for e in elts], is_tuple


# Statements after the declarations that run as Python before the kernel is parsed (values such as a softmax
# scale, helper ``@T.macro`` definitions, which TVMScript cannot parse as kernel statements); the first other
# statement starts the kernel body.
_HOST_STMTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom,
               ast.Pass)


def _is_kernel_stmt(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.For, ast.While)) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                                                       and _call_name(stmt.value) not in _DECL_CALLS + _OPTION_CALLS)


def _absolute(node: ast.AST, src: Any) -> ast.AST:
    """A copy of ``node`` with the user's file positions (the split's ASTs count lines from the function)."""
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        if "lineno" in n._attributes:
            n.lineno = getattr(n, "lineno", 1) + src.start_line - 1
            n.end_lineno = (getattr(n, "end_lineno", None) or n.lineno - src.start_line + 1) + src.start_line - 1
            n.col_offset = getattr(n, "col_offset", 0) + src.start_column
            n.end_col_offset = (getattr(n, "end_col_offset", None) or 0) + src.start_column
    return node


# -- running the declarations --------------------------------------------------------------------------------------
@dataclass
class _Declared:
    """One run of the declarations: the annotated parameters' annotations, the outputs, every local name."""

    annotations: dict[str, Any]
    outputs: list[tuple[str, Any]]
    namespace: dict[str, Any]
    consts: dict[str, Any]
    pass_configs: dict[str, Any] | None = None
    compile_flags: list[str] | None = None


class _Declarations:
    """The declarations as a Python function compiled from the user's AST (lines and file kept)."""

    def __init__(self, split: _Split, func: Callable[..., Any]):
        self.split = split
        self.func = func
        # finding the sizes runs the declarations only (a host value such as ``dim ** 0.5`` need not work on a
        # symbolic size); building the program runs the host statements after them too
        self.code_sizes = self._compile(split.declarations)
        self.code = self._compile(split.declarations + split.host_tail)

    def _compile(self, statements: list[ast.stmt]) -> Any:
        split = self.split
        fdef = split.fdef
        body: list[ast.stmt] = []
        for name in split.params:  # signature annotations first, evaluated where the declarations can see them
            if name in split.sig_annotations:
                body.append(self._record(name, split.sig_annotations[name], split.sig_annotations[name]))
        for stmt in statements:
            if isinstance(stmt, ast.AnnAssign) and stmt.value is None and isinstance(stmt.target, ast.Name) \
                    and stmt.target.id in split.body_annotations:
                body.append(self._record(stmt.target.id, stmt.annotation, stmt))
            elif any(stmt is out for _, out in split.outputs):
                name = stmt.targets[0].id
                call = ast.Call(ast.Name(_OUT, ast.Load()), [ast.Constant(name), stmt.value], [])
                body.append(ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], call), stmt))
            else:
                body.append(stmt)
        body.append(ast.Return(ast.Call(ast.Name("locals", ast.Load()), [], []), lineno=fdef.lineno, col_offset=0))
        args = copy.deepcopy(fdef.args)
        for x in args.posonlyargs + args.args + args.kwonlyargs:
            x.annotation = None
        args.defaults, args.kw_defaults = [], [None] * len(args.kwonlyargs)
        fn = ast.FunctionDef(name=fdef.name, args=args, body=body, decorator_list=[], returns=None,
                             type_params=[], lineno=fdef.lineno, col_offset=fdef.col_offset)
        mod = ast.Module(body=[_absolute(fn, split.source)], type_ignores=[])
        ast.fix_missing_locations(mod)
        return compile(mod, split.source.source_name, "exec")

    @staticmethod
    def _record(name: str, annotation: ast.expr, at: ast.AST) -> ast.stmt:
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a postponed annotation
            annotation = ast.parse(annotation.value, mode="eval").body
            ast.copy_location(annotation, at)
            for n in ast.walk(annotation):
                ast.copy_location(n, at)
        call = ast.Call(ast.Name(_ANN, ast.Load()), [ast.Constant(name), annotation], [])
        stmt = ast.Assign([ast.Name(name, ast.Store())], call)
        return ast.copy_location(stmt, at)

    def run(self, arguments: dict[str, Any], values: dict[str, int] | None) -> _Declared:
        """Run the declarations with these arguments; ``T.const`` gives symbolic sizes when ``values`` is None."""
        from ..language.eager import EAGER_BUILD, EagerContext, EmptyTensor

        annotations: dict[str, Any] = {}
        outputs: dict[str, Any] = {}

        def record(name: str, value: Any) -> Any:
            annotations[name] = value
            return value

        def output(name: str, value: Any) -> Any:
            """``C = T.empty(...)``: C becomes the kernel parameter itself (so a helper closing over C sees it)."""
            if not isinstance(value, EmptyTensor):
                stmt = dict(self.split.outputs)[name]
                raise self.split.error(stmt, f"{name}: expected T.empty(...) here, got {type(value).__name__}")
            outputs[name] = value.annotation()
            return outputs[name]

        from tvm.script.parser.core.utils import get_func_nonlocals

        g = dict(self.func.__globals__)
        g.update(get_func_nonlocals(self.func))
        g[_ANN] = record
        g[_OUT] = output
        ns: dict[str, Any] = {}
        exec(self.code if values is not None else self.code_sizes, g, ns)  # noqa: S102 (the user's own declarations, compiled from their source)
        fn = ns[self.split.fdef.name]
        ctx = EagerContext(values=values)
        prev = getattr(EAGER_BUILD, "current", None)
        EAGER_BUILD.current = ctx
        try:
            local = fn(**arguments)
        finally:
            EAGER_BUILD.current = prev
        return _Declared(annotations, [(n, outputs[n]) for n, _ in self.split.outputs], {**g, **local},
                         dict(ctx.declared), ctx.pass_configs, ctx.compile_flags)


# -- the factory ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Template:
    """Per set of compile-time arguments: where each ``T.const`` size is read from."""

    matcher: tuple[tuple[str, str, int], ...]   # (size name, parameter, dimension)
    ranks: tuple[tuple[str, int], ...]           # (tensor parameter, its number of dimensions)


class EagerJITFactory:
    """What ``@jit`` returns for an eager-spelled function. Calling it runs the kernel on the given arguments and
    returns its outputs; ``.compile(...)`` returns the :class:`~tilelang_core.jit.kernel.JITKernel`;
    ``.get_program(...)`` the un-lowered program."""

    eager = True

    def __init__(self, factory: Callable[..., Any], target: Any, options: Any,
                 decorator_pass_configs: dict[str, Any] | None = None):
        self.factory = factory
        self._decorator_pass_configs = dict(decorator_pass_configs or {})  # as given: these win over the body's
        self.out_idx = None
        self.target = target
        self.options = options
        self._split = _split(factory)
        self._declarations = _Declarations(self._split, factory)
        self._signature = inspect.signature(factory)
        self._templates: dict[Any, _Template] = {}
        self._memory: dict[Any, Any] = {}
        self._calls: dict[Any, Any] = {}  # call form -> (kernel, where each runtime argument is in the call)
        self._runtime_set = frozenset(self._split.runtime_params)
        functools.update_wrapper(self, factory)

    # binding ------------------------------------------------------------------------------------------------
    def _bind(self, args: tuple, kwargs: dict) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """(runtime arguments given, compile-time arguments with defaults, extra keywords such as ``M=1024``)."""
        known = {k: v for k, v in kwargs.items() if k in self._signature.parameters}
        extra = {k: v for k, v in kwargs.items() if k not in self._signature.parameters}
        runtime = set(self._split.runtime_params)
        try:
            ba = self._signature.bind_partial(*args, **known)
        except TypeError as e:
            raise TypeError(f"{self.factory.__name__}: {e}") from None
        ba.apply_defaults()
        given = dict(ba.arguments)
        missing = [p for p in self._split.params if p not in given and p not in runtime]
        if missing:
            raise TypeError(f"{self.factory.__name__}: missing compile-time argument(s) "
                            f"{', '.join(repr(m) for m in missing)}")
        rt = {k: v for k, v in given.items() if k in runtime}
        ct = {k: v for k, v in given.items() if k not in runtime}
        for k in extra:
            if k not in self._split.const_sites:
                raise TypeError(f"{self.factory.__name__}: unexpected keyword argument {k!r} (neither a parameter "
                                f"nor a T.const size; the sizes are {sorted(self._split.const_sites) or 'none'})")
        return rt, ct, extra

    def _key(self, ct: dict[str, Any]) -> Any:
        try:
            return tuple((k, repr(v)) for k, v in ct.items())
        except Exception:  # noqa: BLE001
            return None

    def _template(self, ct: dict[str, Any]) -> _Template:
        key = self._key(ct)
        tpl = self._templates.get(key) if key is not None else None
        if tpl is None:
            tpl = self._match(ct)
            if key is not None:
                self._templates[key] = tpl
        return tpl

    def _match(self, ct: dict[str, Any]) -> _Template:
        """Run the declarations with symbolic sizes; find, for each ``T.const``, the first tensor dimension that
        is exactly it (TileLang's rule: a size used only inside an expression such as ``M * 2`` cannot be read)."""
        decl = self._run(dict(ct, **{p: None for p in self._split.runtime_params}), None, ct)
        matcher = []
        for name, var in decl.consts.items():
            site = next(((p, i) for p in self._split.runtime_params
                         for i, s in enumerate(_shape_of(decl.annotations.get(p))) if _same(s, var)), None)
            if site is None:
                matcher.append((name, "", -1))
            else:
                matcher.append((name, site[0], site[1]))
        ranks = tuple((p, len(_shape_of(decl.annotations.get(p)))) for p in self._split.runtime_params)
        return _Template(tuple(matcher), ranks)

    def _values(self, tpl: _Template, rt: dict[str, Any], extra: dict[str, Any]) -> dict[str, int]:
        values: dict[str, int] = {}
        for name, param, dim in tpl.matcher:
            if name in extra:
                v = extra[name]
                if isinstance(v, bool) or not isinstance(v, int):
                    raise TypeError(f"{self.factory.__name__}: size {name}={v!r}: expected an int")
                values[name] = v
            elif param and param in rt:
                t = rt[param]
                shape = getattr(t, "shape", None)
                if shape is None:
                    raise TypeError(f"{self.factory.__name__}: argument {param!r}: expected a tensor, got "
                                    f"{type(t).__name__}")
                want = dict(tpl.ranks)[param]
                if len(shape) != want:
                    raise ValueError(f"{self.factory.__name__}: argument {param!r}: expected a {want}-D tensor, "
                                     f"got shape {tuple(shape)}")
                values[name] = int(shape[dim])
            elif param:
                raise TypeError(f"{self.factory.__name__}: no value for size {name!r}: it is dimension {dim} of "
                                f"{param!r}, which was not passed; pass the tensor or the size as a keyword "
                                f"({name}=...)")
            else:
                site = self._split.const_sites.get(name, self._split.fdef)
                err = self._split.error(site, f"T.const {name!r} is not, by itself, a dimension of any annotated "
                                              f"tensor parameter, so a call cannot read its value from a tensor "
                                              f"(a size used only inside an expression such as {name} * 2 "
                                              f"cannot be read back); use it as a dimension, or pass {name}=...")
                self._describe(err, {})
                raise err
        return values

    def _run(self, arguments: dict[str, Any], values: dict[str, int] | None, config: dict[str, Any]) -> _Declared:
        from . import _from_language_error

        try:
            decl = self._declarations.run(arguments, values)
        except TileLangCompileError as e:
            self._describe(e, config)
            raise
        except TileLangError:
            raise
        except Exception as e:
            located = _from_language_error(e)
            if located is not None:
                self._describe(located, config)
                raise located from e
            raise
        return decl

    # programs and kernels -----------------------------------------------------------------------------------
    def _program(self, ct: dict[str, Any], values: dict[str, int]) -> Any:
        return self._build(ct, values)[0]

    def _build(self, ct: dict[str, Any], values: dict[str, int]) -> tuple[Any, _Declared]:
        config = dict(ct, **values)
        decl = self._run(dict(ct, **{p: None for p in self._split.runtime_params}), values, config)
        return _parse_kernel(self, decl, config), decl

    def _resolve(self, args: tuple, kwargs: dict) -> tuple[dict, dict, dict[str, int]]:
        rt, ct, extra = self._bind(args, kwargs)
        tpl = self._template(ct)
        values = self._values(tpl, rt, extra)
        return rt, ct, values

    def get_program(self, *args: Any, **kwargs: Any) -> Any:
        """The program (TIR with tile ops, not compiled) for these arguments: tensors or ``T.const`` keywords,
        and the compile-time arguments."""
        _, ct, values = self._resolve(args, kwargs)
        return self._program(ct, values)

    get_tir = get_program

    def compile(self, *args: Any, **kwargs: Any) -> Any:  # noqa: A003 (TileLang's name)
        """The compiled kernel for these arguments (tensors may be left out when their sizes are keywords)."""
        _, ct, values = self._resolve(args, kwargs)
        return self._kernel(ct, values)

    def par_compile(self, configs: Any, num_workers: int | None = None, ignore_error: bool = False) -> list[Any]:
        """TileLang's ``f.par_compile([...])``: ``[f.compile(**c) for c in configs]`` on ``num_workers`` threads (a
        config is a dict of keywords or a tuple of positional arguments); with ``ignore_error`` a failed compile
        gives None in its place."""
        import os
        from concurrent.futures import ThreadPoolExecutor

        configs = list(configs)
        for c in configs:
            if not isinstance(c, (dict, tuple)):
                raise TypeError(f"{self.factory.__name__}.par_compile: each config is a dict of keywords or a tuple "
                                f"of arguments, got {c!r}")
        if num_workers is not None and (not isinstance(num_workers, int) or num_workers < 1):
            raise ValueError(f"par_compile num_workers: expected an int >= 1, got {num_workers!r}")

        def one(c: Any) -> Any:
            try:
                return self.compile(**c) if isinstance(c, dict) else self.compile(*c)
            except Exception:
                if ignore_error:
                    return None
                raise

        workers = min(len(configs), num_workers or os.cpu_count() or 1) or 1
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, configs))

    def _kernel(self, ct: dict[str, Any], values: dict[str, int]) -> Any:
        key = self._key(ct)
        mkey = None if key is None else (key, tuple(sorted(values.items())), repr(self.target), self.options.key())
        if mkey is None:
            return self._specialise(ct, values)
        hit = self._memory.get(mkey)
        if hit is None:
            # the classic factory's path (JITFactory.__call__): threads asking for one key wait while one builds it
            with cache.key_lock(("jit eager", id(self), mkey)):
                hit = self._memory.get(mkey)
                if hit is None:
                    kernel = self._specialise(ct, values)
                    self._memory[mkey] = kernel
                    return kernel
        cache.count("memory_hits")
        return hit

    def _specialise(self, ct: dict[str, Any], values: dict[str, int]) -> Any:
        """Build and compile the kernel of one set of compile-time arguments and sizes (no memory cache)."""
        from . import _compile

        func, decl = self._build(ct, values)
        n_in = len(self._split.runtime_params)
        outs = list(range(n_in, n_in + len(self._split.outputs)))
        config = dict(ct, **values)
        opts = self._options(decl, config, outs)
        try:
            kernel = _compile(func, self.target, opts, name=self.factory.__name__, config=config)
        except TileLangCompileError as e:
            self._describe(e, config)
            raise
        kernel.factory = self
        return kernel

    def _options(self, decl: _Declared, config: dict[str, Any], outs: list[int]) -> Any:
        """The decorator's options, with the body's ``T.annotate_pass_configs`` under the decorator's own
        ``pass_configs`` (which win, as in TileLang) and its ``T.annotate_compile_flags`` after the decorator's."""
        from ..pass_config import resolve as resolve_pass_configs

        opts = dataclasses.replace(self.options, out_idx=outs or None)
        if decl.pass_configs is not None:
            try:
                merged = resolve_pass_configs({**decl.pass_configs, **self._decorator_pass_configs})
            except (TypeError, ValueError) as e:
                site = next((s for s in self._split.declarations + self._split.host_tail
                             if isinstance(s, ast.Expr) and _call_name(s.value) == "annotate_pass_configs"),
                            self._split.fdef)
                err = self._split.error(site, f"T.annotate_pass_configs: {e}")
                self._describe(err, config)
                raise err from None
            opts = dataclasses.replace(opts, pass_configs=merged)
        if decl.compile_flags:
            from ..target import resolve_target

            if resolve_target(self.target) != "cuda":
                site = next((s for s in self._split.declarations + self._split.host_tail
                             if isinstance(s, ast.Expr) and _call_name(s.value) == "annotate_compile_flags"),
                            self._split.fdef)
                err = self._split.error(site, f"T.annotate_compile_flags({decl.compile_flags!r}): these are "
                                              "nvcc/NVRTC flags, and this kernel compiles for the CPU (LLVM, "
                                              "in-process), where no compiler flags apply")
                self._describe(err, config)
                raise err
            opts = dataclasses.replace(opts, compile_flags=(*opts.compile_flags, *decl.compile_flags))
        return opts

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fast = self._call_form(args, kwargs)
        hit = self._calls.get(fast) if fast is not None else None
        if hit is not None:  # the same call form as before: no binding, no key building
            kernel, where = hit
            return self._returned(kernel(*(args[w] if isinstance(w, int) else kwargs[w] for w in where)))
        rt, ct, values = self._resolve(args, kwargs)
        missing = [p for p in self._split.runtime_params if p not in rt]
        if missing:
            raise TypeError(f"{self.factory.__name__}: missing tensor argument(s) "
                            f"{', '.join(repr(m) for m in missing)} (calling an eager @jit function runs the "
                            f"kernel; use {self.factory.__name__}.compile(...) to compile without running)")
        kernel = self._kernel(ct, values)
        result = kernel(*(rt[p] for p in self._split.runtime_params))
        if fast is not None:
            if len(self._calls) >= 256:
                self._calls.clear()
            pos = {p: i for i, p in enumerate(self._split.params[:len(args)])}
            self._calls[fast] = (kernel, [pos.get(p, p) for p in self._split.runtime_params])
        return self._returned(result)

    def _call_form(self, args: tuple, kwargs: dict) -> Any:
        """A hashable key of a call: the compile-time values with their types (so ``1``, ``1.0`` and ``True``
        differ) and each runtime argument's type, shape and dtype (they fix the ``T.const`` sizes). None when a
        value is not hashable (the call then takes the full path)."""
        runtime = self._runtime_set
        params = self._split.params
        if len(args) > len(params):
            return None
        parts = []
        for name, v in zip(params, args):
            parts.append(_runtime_key(v) if name in runtime else (type(v), v))
        for k in kwargs:
            v = kwargs[k]
            parts.append((k, _runtime_key(v) if k in runtime else (type(v), v)))
        key = (len(args), tuple(parts))
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def _returned(self, result: Any) -> Any:
        names = [n for n, _ in self._split.outputs]
        if self._split.returns is None or not names:
            return None
        got = list(result) if len(names) > 1 else [result]
        by_name = dict(zip(names, got))
        picked = [by_name[n] for n in self._split.returns]
        return tuple(picked) if self._split.return_tuple else picked[0]

    # reports ------------------------------------------------------------------------------------------------
    def _describe(self, err: TileLangCompileError, config: dict[str, Any]) -> None:
        from ..trace.report import describe_factory

        describe_factory(err, self.factory, config, out_idx=None, target=self.target, jit=True,
                         pass_configs=self.pass_configs)

    @property
    def tensor_params(self) -> tuple[str, ...]:
        """The parameters that are the kernel's tensors (annotated ``X: T.Tensor(...)``): a call passes them, and
        ``compile`` does not need them when their ``T.const`` sizes are given as keywords."""
        return tuple(self._split.runtime_params)

    @property
    def sizes(self) -> tuple[str, ...]:
        """The ``T.const`` size names, the keywords ``compile(...)`` accepts besides the parameters (``N=1024``)."""
        return tuple(sorted(self._split.const_sites))

    @property
    def pass_configs(self) -> Any:
        return self.options.pass_configs

    def __repr__(self) -> str:
        return (f"<tilelang_core.jit eager function {self.factory.__name__}, {len(self._memory)} specialisation(s) "
                "cached>")


def _runtime_key(v: Any) -> Any:
    """What of a runtime argument decides the kernel: a tensor's shape and dtype (its sizes), else its type."""
    shape = getattr(v, "shape", None)
    if shape is not None:
        return (type(v), tuple(shape), str(getattr(v, "dtype", "")))
    return type(v)


def _shape_of(annotation: Any) -> tuple:
    from tvm import tirx

    if annotation is not None and tirx.is_buffer_var(annotation):
        return tuple(annotation.shape)
    return ()


def _same(dim: Any, var: Any) -> bool:
    return hasattr(dim, "same_as") and dim.same_as(var)


# -- the kernel body through TVMScript's parser --------------------------------------------------------------------
def _parse_kernel(factory: EagerJITFactory, decl: _Declared, config: dict[str, Any]) -> Any:
    """The kernel body as a ``@T.prim_func`` over the annotated parameters and the outputs, parsed by TVMScript
    with the declarations' names in scope (errors keep the user's file and lines)."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.parser.core import doc
    from tvm.script.parser.core.diagnostics import Source
    from tvm.script.parser.core.entry import parse as _  # noqa: F401  (registers the dialects)
    from tvm.script.parser.core.parser import Parser
    from tvm.script.tirx import prim_func

    from . import _from_diagnostic, _is_diagnostic

    split = factory._split
    extra = dict(decl.namespace)
    extra[_PRIM_FUNC] = prim_func
    args = []
    for p in split.runtime_params:
        node = split.sig_annotations.get(p) or split.body_annotations[p]
        extra[_PARAM + p] = decl.annotations[p]
        args.append(ast.copy_location(ast.arg(p, ast.copy_location(ast.Name(_PARAM + p, ast.Load()), node)), node))
    for name, out in decl.outputs:
        stmt = dict(split.outputs)[name]
        extra[_PARAM + name] = out
        args.append(ast.copy_location(ast.arg(name, ast.copy_location(ast.Name(_PARAM + name, ast.Load()), stmt)),
                                      stmt))
    body = [copy.deepcopy(s) for s in split.kernel_body] or [ast.copy_location(ast.Pass(), split.fdef)]
    fdef = ast.FunctionDef(name=split.fdef.name, args=ast.arguments(posonlyargs=[], args=args, vararg=None,
                                                                    kwonlyargs=[], kw_defaults=[], kwarg=None,
                                                                    defaults=[]),
                           body=body, decorator_list=[ast.copy_location(ast.Name(_PRIM_FUNC, ast.Load()), split.fdef)],
                           returns=None, type_params=[])
    ast.copy_location(fdef, split.fdef)
    module = ast.Module(body=[fdef], type_ignores=[])
    ast.fix_missing_locations(module)
    tree = doc.to_doc(module)

    class _KernelSource(Source):
        def __init__(self, base: Source):  # noqa: D107 (the user's file and positions, our tree)
            self.__dict__.update(base.__dict__)

        def as_ast(self) -> Any:
            return tree

    source = _KernelSource(split.source)
    parser = Parser(source, {})
    try:
        with IRBuilder() as builder:
            try:
                parser.parse(extra_vars=extra)
            except Exception as err:  # noqa: BLE001
                from tvm.script.parser.core.error import ParserError

                if isinstance(err, ParserError):
                    parser.report_error(err.node, err.args[0])
                raise
        func = builder.get()
    except TileLangError:
        raise
    except Exception as e:
        if _is_diagnostic(e):
            err = _from_diagnostic(e)
            factory._describe(err, config)
            raise err from None
        raise
    return func
