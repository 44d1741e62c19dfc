"""``--annotate``: write down the types that typed collective calls fix at function boundaries.

It reads typed calls (``spmd.all_reduce(x, "tp", src=P, dst=I)``, whether just migrated or
written by hand) and, per function (not counting nested functions):

- a parameter passed directly as a call's input, and never rebound in the function, gets the
  call's ``src`` type: ``x: Tensor[P["tp"]]``;
- the return gets the call's ``dst`` type, ``-> Tensor[I["tp"]]``, when every ``return`` returns
  such a call, or a variable assigned once in the function from one and never rebound, all with
  the same type, and the body cannot end without a ``return``.

Existing annotations are kept, except a plain ``Tensor`` or ``torch.Tensor`` (untyped), which is
replaced.  A parameter with a default is left alone (its default, often None, need not be a
tensor), and so is one whose calls disagree on its type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from .bindings import ModuleBindings, dotted_name, target_names
from .rewrite import MarkerStyle
from spmd_mypy.engine.types import Kind, LocalType, shard

from .table import TYPED_COLLECTIVE_SRC_DEFAULTS, marker

_MARKERS = {kind.value: LocalType(kind) for kind in Kind}


@dataclass(frozen=True)
class TypedCall:
    input: cst.BaseExpression
    axis: str
    src: LocalType
    dst: LocalType


@dataclass(frozen=True)
class CallSite:
    call: TypedCall
    on_every_path: bool  # runs whenever the function returns normally


def _int_literal(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _int_literal(node.expression)
        return None if inner is None else -inner
    return None


class TypedCallReader:
    """Reads ``spmd.<collective>(x, "axis", src=..., dst=...)`` calls back into types."""

    def __init__(self, bindings: ModuleBindings) -> None:
        self.bindings = bindings

    def _spmd_name(self, node: cst.BaseExpression) -> str | None:
        """``X`` for ``spmd.X``, or for a bare ``X`` that is spmd's (or free, as migrate writes it)."""
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if rest and "." not in rest:
            if head == "spmd" and not self.bindings.binds_other_than("spmd", "spmd", star_imports_may_bind=False):
                return rest
            if any(imp.qualified == "spmd" for imp in self.bindings.imports.get(head, ())):
                return rest if not self.bindings.is_rebound(node) else None
            return None
        if not rest and not self.bindings.binds_other_than(head, f"spmd.{head}"):
            return head
        return None

    def local_type(self, node: cst.BaseExpression) -> LocalType | None:
        if isinstance(node, cst.Call):
            if self._spmd_name(node.func) != "S" or len(node.args) != 1 or node.args[0].keyword:
                return None
            dim = _int_literal(node.args[0].value)
            return None if dim is None else shard(dim)
        name = self._spmd_name(node)
        return _MARKERS.get(name) if name is not None else None

    def read(self, call: cst.Call) -> TypedCall | None:
        collective = self._spmd_name(call.func)
        if collective not in TYPED_COLLECTIVE_SRC_DEFAULTS:
            return None
        positional = [a for a in call.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        if any(a.star for a in call.args) or len(positional) > 2:
            return None
        values = [a.value for a in positional]
        x = values[0] if values else keywords.get("x")
        axis_node = values[1] if len(values) > 1 else keywords.get("axis")
        if x is None or not isinstance(axis_node, cst.SimpleString):
            return None
        axis = axis_node.evaluated_value
        src_default = TYPED_COLLECTIVE_SRC_DEFAULTS[collective]
        src = self.local_type(keywords["src"]) if "src" in keywords else src_default
        dst = self.local_type(keywords["dst"]) if "dst" in keywords else None
        if not isinstance(axis, str) or src is None or dst is None:
            return None
        return TypedCall(x, axis, src, dst)


# --- per-function facts -----------------------------------------------------------------------


class _FunctionBodyScan(cst.CSTVisitor):
    """Returns, rebinds and typed calls of one function's own body (nested functions excluded)."""

    def __init__(self, reader: TypedCallReader) -> None:
        super().__init__()
        self.reader = reader
        self.calls: list[CallSite] = []
        self.returns: list[cst.Return] = []
        self._conditional = 0  # inside a branch, loop, try, comprehension or short-circuit
        self._returned = False  # a return statement came before
        self.stores: dict[str, int] = {}
        self.assigned_from: dict[str, TypedCall] = {}  # v = <typed call>
        self.yields = False

    def _store(self, names: list[str]) -> None:
        for name in names:
            self.stores[name] = self.stores.get(name, 0) + 1

    # Nested scopes: only their nonlocal declarations reach this function's names.
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self._store([node.name.value])
        node.body.visit(_NonlocalCollector(self))
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self._store([node.name.value])
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        typed = self.reader.read(node)
        if typed is not None:
            self.calls.append(CallSite(typed, on_every_path=not self._conditional and not self._returned))

    def visit_Return(self, node: cst.Return) -> None:
        self.returns.append(node)

    def leave_Return(self, original_node: cst.Return) -> None:
        self._returned = True

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, _CONDITIONAL):
            self._conditional += 1
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        if isinstance(original_node, _CONDITIONAL):
            self._conditional -= 1

    def visit_Yield(self, node: cst.Yield) -> None:
        self.yields = True

    def visit_Assign(self, node: cst.Assign) -> None:
        typed = self.reader.read(node.value) if isinstance(node.value, cst.Call) else None
        for target in node.targets:
            names = target_names(target.target)
            self._store(names)
            if typed is not None and isinstance(target.target, cst.Name):
                self.assigned_from[target.target.value] = typed

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is None:
            return  # a declaration only: binds nothing
        self._store(target_names(node.target))
        if isinstance(node.value, cst.Call) and isinstance(node.target, cst.Name):
            typed = self.reader.read(node.value)
            if typed is not None:
                self.assigned_from[node.target.value] = typed

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._store(target_names(node.target))

    def visit_For(self, node: cst.For) -> None:
        self._store(target_names(node.target))

    def visit_AsName(self, node: cst.AsName) -> None:  # with/except/import ... as x
        self._store(target_names(node.name))

    def visit_Import(self, node: cst.Import) -> None:
        self._store([(dotted_name(a.name) or "").partition(".")[0] for a in node.names if a.asname is None])

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if not isinstance(node.names, cst.ImportStar):
            self._store([dotted_name(a.name) or "" for a in node.names if a.asname is None])

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._store(target_names(node.target))

    def visit_Del(self, node: cst.Del) -> None:
        self._store(target_names(node.target))

    def visit_Global(self, node: cst.Global) -> None:
        self._store([n.name.value for n in node.names])

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self._store([n.name.value for n in node.names])

    def visit_MatchAs(self, node: cst.MatchAs) -> None:
        if node.name is not None:
            self._store([node.name.value])

    def visit_MatchStar(self, node: cst.MatchStar) -> None:
        if node.name is not None:
            self._store([node.name.value])


# Code under these may not run (or may run for some elements only).
_CONDITIONAL: tuple[type[cst.CSTNode], ...] = (
    cst.If, cst.For, cst.While, cst.Try, cst.Match, cst.IfExp, cst.BooleanOperation,
    cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp,
)
if hasattr(cst, "TryStar"):
    _CONDITIONAL += (cst.TryStar,)


class _NonlocalCollector(cst.CSTVisitor):
    def __init__(self, scan: _FunctionBodyScan) -> None:
        super().__init__()
        self.scan = scan

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.scan._store([n.name.value for n in node.names])


def _always_returns(body: cst.BaseSuite) -> bool:
    """Can control reach the end of this block? (conservative: True only when it surely cannot)"""
    if not isinstance(body, cst.IndentedBlock):
        statements = body.body if isinstance(body, cst.SimpleStatementSuite) else []
        return any(isinstance(s, (cst.Return, cst.Raise)) for s in statements)
    if not body.body:
        return False
    last = body.body[-1]
    if isinstance(last, cst.SimpleStatementLine):
        return any(isinstance(s, (cst.Return, cst.Raise)) for s in last.body)
    if isinstance(last, cst.If):
        return _if_always_returns(last)
    if isinstance(last, cst.With):
        return _always_returns(last.body)
    return False


def _if_always_returns(node: cst.If) -> bool:
    if not _always_returns(node.body):
        return False
    orelse = node.orelse
    if orelse is None:
        return False
    if isinstance(orelse, cst.If):
        return _if_always_returns(orelse)
    return _always_returns(orelse.body)


def _is_plain_tensor(annotation: cst.Annotation | None) -> bool:
    if annotation is None:
        return True
    return dotted_name(annotation.annotation) in ("Tensor", "torch.Tensor")


def _annotation(code: str) -> cst.Annotation:
    return cst.Annotation(cst.parse_expression(code))


@dataclass
class AnnotateStats:
    annotated: int = 0
    markers: set[str] = field(default_factory=set)


class Annotator(cst.CSTTransformer):
    def __init__(self, bindings: ModuleBindings, style: MarkerStyle) -> None:
        super().__init__()
        self.reader = TypedCallReader(bindings)
        self.style = style
        self.stats = AnnotateStats()
        self._has_typed_call: list[bool] = []  # per enclosing function: skip those without

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._has_typed_call.append(False)

    def visit_Call(self, node: cst.Call) -> None:
        if self._has_typed_call and not self._has_typed_call[-1] and self.reader.read(node) is not None:
            self._has_typed_call[:] = [True] * len(self._has_typed_call)

    def _type_code(self, local_type: LocalType, axis: str) -> str:
        self.stats.markers.update({"Tensor", marker(local_type)})
        self.stats.annotated += 1
        return self.style.tensor(local_type, axis)

    def _return_type(self, scan: _FunctionBodyScan, params: set[str]) -> tuple[LocalType, str] | None:
        if scan.yields or not scan.returns:
            return None
        found: set[tuple[LocalType, str]] = set()
        for ret in scan.returns:
            value = ret.value
            if value is None:
                return None
            typed = self.reader.read(value) if isinstance(value, cst.Call) else None
            if typed is None and isinstance(value, cst.Name):
                name = value.value
                if name not in params and scan.stores.get(name) == 1:
                    typed = scan.assigned_from.get(name)
            if typed is None:
                return None
            found.add((typed.dst, typed.axis))
        return found.pop() if len(found) == 1 else None

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        if not self._has_typed_call.pop():
            return updated_node
        scan = _FunctionBodyScan(self.reader)
        updated_node.body.visit(scan)
        all_params = [*updated_node.params.posonly_params, *updated_node.params.params, *updated_node.params.kwonly_params]
        star = updated_node.params.star_arg
        star_names = {p.name.value for p in (star, updated_node.params.star_kwarg) if isinstance(p, cst.Param)}
        param_names = {p.name.value for p in all_params} | star_names

        param_types: dict[str, set[tuple[LocalType, str]]] = {}
        fixed_on_every_path: set[str] = set()
        for site in scan.calls:
            call = site.call
            if isinstance(call.input, cst.Name) and call.input.value in param_names:
                param_types.setdefault(call.input.value, set()).add((call.src, call.axis))
                if site.on_every_path:
                    fixed_on_every_path.add(call.input.value)

        def annotate_param(param: cst.Param) -> cst.Param:
            types = param_types.get(param.name.value)
            if (
                not types
                or len(types) != 1
                or param.name.value not in fixed_on_every_path
                or param.default is not None
                or scan.stores.get(param.name.value)
                or not _is_plain_tensor(param.annotation)
            ):
                return param
            local_type, axis = next(iter(types))
            return param.with_changes(annotation=_annotation(self._type_code(local_type, axis)))

        params = updated_node.params.with_changes(
            posonly_params=[annotate_param(p) for p in updated_node.params.posonly_params],
            params=[annotate_param(p) for p in updated_node.params.params],
            kwonly_params=[annotate_param(p) for p in updated_node.params.kwonly_params],
        )
        updated_node = updated_node.with_changes(params=params)

        returns = self._return_type(scan, param_names)
        if returns is not None and _is_plain_tensor(updated_node.returns) and _always_returns(updated_node.body):
            updated_node = updated_node.with_changes(returns=_annotation(self._type_code(*returns)))
        return updated_node
