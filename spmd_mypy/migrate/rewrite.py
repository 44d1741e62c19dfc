"""The libcst transformer: Megatron mapping calls -> typed ``spmd`` calls.

``copy_to_tensor_model_parallel_region(x, group=get_tensor_model_parallel_group())`` becomes
``spmd.reinterpret(x, "tp", src=I, dst=R)``.  A call is rewritten only when every argument it
passes is understood (see :func:`plan_call`); otherwise it is left as it is and reported, once,
with the reason.  The argument list keeps its layout: the commas, line breaks, comments and
trailing comma of the original are reused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping as MappingT, Sequence

import libcst as cst

from .bindings import ModuleBindings, dotted_name, megatron_mapping
from .locate import Locator
from spmd_mypy.engine.types import LocalType

from .table import (
    DEFAULT_GROUP_GETTERS,
    DEFAULT_TP_AXIS,
    DISTINCTIVE_NAMES,
    Mapping,
    Role,
    entry_code,
    marker,
    value_code,
)

NOT_MIGRATED = "not migrated"
NOTE = "note"
ERROR = "error"


@dataclass(frozen=True)
class Options:
    tp_axis: str = DEFAULT_TP_AXIS
    # Extra group getters (function name -> axis); the defaults map to ``tp_axis``.
    group_getters: MappingT[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # Group expressions (source, whitespace-insensitive -> axis), e.g. ``self.tp_group``.
    group_exprs: MappingT[str, str] = field(default_factory=lambda: MappingProxyType({}))
    annotate: bool = False

    def getter_axes(self) -> dict[str, str]:
        return {**{name: self.tp_axis for name in DEFAULT_GROUP_GETTERS}, **self.group_getters}

    def expr_axes(self) -> dict[str, str]:
        return {normalize_source(code): axis for code, axis in self.group_exprs.items()}


@dataclass(frozen=True)
class Finding:
    line: int  # 1-based
    column: int  # 1-based
    kind: str  # NOT_MIGRATED | NOTE | ERROR
    message: str


def source_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def normalize_source(code: str) -> str:
    return "".join(code.split())


@dataclass(frozen=True)
class CallPlan:
    """What a mapping call becomes: ``spmd.<collective>(<input>, "<axis>", src=..., dst=...)``."""

    mapping: Mapping
    input_arg: cst.Arg
    axis: str
    src: LocalType
    dst: LocalType


def _literal(node: cst.BaseExpression) -> str | None:
    """``None``/``True``/``False`` (through parentheses), else None."""
    if isinstance(node, cst.Name) and node.value in ("None", "True", "False"):
        return node.value
    return None


def group_axis(expr: cst.BaseExpression, options: Options) -> str | None:
    """The mesh axis a process-group expression stands for, when the options say so."""
    if _literal(expr) == "None":
        return options.tp_axis
    if isinstance(expr, cst.Call):
        name = dotted_name(expr.func)
        if name is not None:
            axis = options.getter_axes().get(name.rpartition(".")[2])
            if axis is not None:
                return axis
    return options.expr_axes().get(normalize_source(source_of(expr)))


def _group_hint(expr: cst.BaseExpression) -> str:
    if isinstance(expr, cst.Call) and dotted_name(expr.func) is not None:
        getter = (dotted_name(expr.func) or "").rpartition(".")[2]
        return f"; if it is, pass --group-getter {getter}=AXIS"
    if dotted_name(expr) is not None:
        return f"; if it is, pass --group-expr {normalize_source(source_of(expr))}=AXIS"
    return ""


def bind_arguments(mapping: Mapping, args: Sequence[cst.Arg]) -> dict[str, cst.Arg] | str:
    """Match a call's arguments to Megatron's signature, as Python would; a reason on failure."""
    bound: dict[str, cst.Arg] = {}
    names = [p.name for p in mapping.params]
    position = 0
    for arg in args:
        if arg.star:
            code = f"{arg.star}{source_of(arg.value)}"
            return f"{code} cannot be matched to the parameters"
        if arg.keyword is None:
            if position >= len(names):
                return "too many positional arguments"
            bound[names[position]] = arg
            position += 1
            continue
        keyword = arg.keyword.value
        if keyword not in names:
            return f"unknown keyword argument {keyword}="
        if keyword in bound:
            return f"{keyword} is given twice"
        bound[keyword] = arg
    for param in mapping.params:
        if param.default is None and param.name not in bound:
            return f"missing the {param.name} argument"
    return bound


def plan_call(mapping: Mapping, args: Sequence[cst.Arg], options: Options) -> CallPlan | str:
    """How to rewrite a call, or why it cannot be (never a guess)."""
    bound = bind_arguments(mapping, args)
    if isinstance(bound, str):
        return bound
    axis = options.tp_axis
    dst = mapping.dst
    input_arg: cst.Arg | None = None
    sizes: dict[str, str] = {}  # uneven split sizes given: {the typed call's keyword: code}
    given: list[str] = []
    for param in mapping.params:
        arg = bound.get(param.name)
        if param.role is Role.INPUT:
            input_arg = arg
            continue
        if arg is None:
            continue
        code = source_of(arg.value)
        if param.role is Role.GROUP:
            if param.default is None and _literal(arg.value) == "None":
                return "needs a process group, and None is not one"
            found = group_axis(arg.value, options)
            if found is None:
                return f"group {code} is not known to be the process group of a mesh axis" + _group_hint(arg.value)
            axis = found
        elif param.role is Role.DST_FLAG:
            literal = _literal(arg.value)
            variant = next((v for v in param.variants if v.value == literal), None)
            if variant is None:
                allowed = " or ".join(v.value for v in param.variants)
                return f"{param.name}={code} is not a literal {allowed}, so the dst type is unknown"
            dst = variant.dst
        elif param.role is Role.DEFAULT_ONLY:
            if param.default is None or normalize_source(code) != param.default:
                if not param.sizes_keyword:
                    return param.reason
                sizes[param.sizes_keyword] = _one_line(code)
                given.append(f"{param.name}={_one_line(code)}")
    assert input_arg is not None  # required, checked by bind_arguments
    if sizes:
        return _uneven_reason(mapping, input_arg, axis, dst, sizes, given)
    return CallPlan(mapping, input_arg, axis, mapping.src, dst)


def _one_line(code: str) -> str:
    return " ".join(code.split())


def _uneven_reason(mapping: Mapping, input_arg: cst.Arg, axis: str, dst: LocalType,
                   sizes: dict[str, str], given: list[str]) -> str:
    """Uneven split sizes are not migrated (the tool maps only the call shapes it is sure of),
    but the typed call takes them: the call to write by hand."""
    keywords = [k for k in ("sizes", "out_sizes") if k in sizes]
    if mapping.collective == "all_to_all" and "sizes" not in sizes:
        # torch splits the input evenly when only the output sizes are given; the typed call
        # needs both
        keywords.insert(0, "sizes")
        sizes = {"sizes": "<an equal share of dim 0 per rank>", **sizes}
    call = (f"spmd.{mapping.collective}({_one_line(source_of(input_arg.value))}, \"{axis}\", "
            f"src={value_code(mapping.src)}, dst={value_code(dst)}, "
            + ", ".join(f"{k}={sizes[k]}" for k in keywords) + ")")
    return (f"uneven split sizes ({', '.join(given)}) are not migrated; the typed call takes "
            f"them: write {call} by hand")


# --- building the typed call, keeping the layout of the original ---------------------------


def _comment_free(whitespace: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    if isinstance(whitespace, cst.ParenthesizedWhitespace):
        return whitespace.with_changes(
            first_line=cst.TrailingWhitespace(newline=whitespace.first_line.newline),
            empty_lines=[],
        )
    return whitespace


def _comment_free_comma(comma: cst.Comma) -> cst.Comma:
    return comma.with_changes(
        whitespace_before=_comment_free(comma.whitespace_before),
        whitespace_after=_comment_free(comma.whitespace_after),
    )


def _separator_style(call: cst.Call) -> cst.Comma:
    """The comma to put between arguments that the original call has no comma for."""
    args = call.args
    if len(args) >= 2 and isinstance(args[0].comma, cst.Comma):
        return _comment_free_comma(args[0].comma)
    if isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
        # One argument on its own line: put each new one on its own line, indented the same.
        return cst.Comma(whitespace_after=_comment_free(call.whitespace_before_args))
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


class _CommentCounter(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def visit_Comment(self, node: cst.Comment) -> None:
        self.count += 1


def count_comments(node: cst.CSTNode) -> int:
    counter = _CommentCounter()
    node.visit(counter)
    return counter.count


@dataclass(frozen=True)
class MarkerStyle:
    """How to spell spmd names in this file: ``I`` when free, ``spmd.I`` when the name is taken."""

    qualified: frozenset[str]

    def prefix(self, name: str) -> str:
        return "spmd." if name in self.qualified else ""

    def value(self, local_type: LocalType) -> str:
        return value_code(local_type, self.prefix(marker(local_type)))

    def entry(self, local_type: LocalType, axis: str) -> str:
        return entry_code(local_type, axis, self.prefix(marker(local_type)))

    def tensor(self, local_type: LocalType, axis: str) -> str:
        return f"{self.prefix('Tensor')}Tensor[{self.entry(local_type, axis)}]"

    def imports_for(self, names: set[str]) -> set[str]:
        """The ``from spmd import ...`` names the spelled code needs."""
        return {n for n in names if n not in self.qualified}


def build_typed_call(call: cst.Call, plan: CallPlan, style: MarkerStyle) -> cst.Call:
    old_args = list(call.args)
    no_space = cst.SimpleWhitespace("")
    input_arg = plan.input_arg.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)
    if plan.input_arg is old_args[-1]:
        input_arg = input_arg.with_changes(whitespace_after_arg=no_space)
    equal = cst.AssignEqual(whitespace_before=no_space, whitespace_after=no_space)
    new_args = [
        input_arg,
        cst.Arg(cst.SimpleString(f'"{plan.axis}"')),
        cst.Arg(cst.parse_expression(style.value(plan.src)), keyword=cst.Name("src"), equal=equal),
        cst.Arg(cst.parse_expression(style.value(plan.dst)), keyword=cst.Name("dst"), equal=equal),
    ]
    separator = _separator_style(call)
    # The last old argument's line comment (``x @ w  # why`` or ``group=g,  # why``) stays on
    # the line of the new argument in its place when the new arguments go one per line
    # (it went to the dst= line, the last).
    last, last_index = old_args[-1], len(old_args) - 1
    tail_comma = last.comma if isinstance(last.comma, cst.Comma) else None
    tail = tail_comma.whitespace_after if tail_comma is not None else last.whitespace_after_arg
    line_comment: cst.TrailingWhitespace | None = None
    if (last_index < len(new_args) - 1 and isinstance(tail, cst.ParenthesizedWhitespace)
            and tail.first_line.comment is not None
            and isinstance(separator.whitespace_after, cst.ParenthesizedWhitespace)):
        line_comment = tail.first_line
        tail = tail.with_changes(first_line=cst.TrailingWhitespace(newline=tail.first_line.newline))
    laid_out = []
    for i, arg in enumerate(new_args[:-1]):
        original_comma = old_args[i].comma if i < len(old_args) - 1 else None
        comma = original_comma if isinstance(original_comma, cst.Comma) else separator
        if i == last_index and line_comment is not None:
            assert isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace)
            comma = comma.with_changes(whitespace_after=comma.whitespace_after.with_changes(first_line=line_comment))
        if i > 0:
            arg = arg.with_changes(whitespace_after_arg=no_space)
        laid_out.append(arg.with_changes(comma=comma))
    if tail_comma is not None:
        laid_out.append(new_args[-1].with_changes(comma=tail_comma.with_changes(whitespace_after=tail),
                                                  whitespace_after_arg=last.whitespace_after_arg))
    else:
        laid_out.append(new_args[-1].with_changes(comma=last.comma, whitespace_after_arg=tail))
    func = cst.Attribute(value=cst.Name("spmd"), attr=cst.Name(plan.mapping.collective))
    return call.with_changes(func=func, args=laid_out)


class _NameCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def _names_in(nodes: list[cst.BaseExpression]) -> set[str]:
    collector = _NameCollector()
    for node in nodes:
        node.visit(collector)
    return collector.names


# --- the transformer --------------------------------------------------------------------------


@dataclass
class RewriteStats:
    rewritten: int = 0
    markers: set[str] = field(default_factory=set)  # spmd names the new code uses
    used_heads: set[str] = field(default_factory=set)  # names the rewritten calls went through


class MappingCallRewriter(cst.CSTTransformer):
    def __init__(
        self, bindings: ModuleBindings, locator: Locator, options: Options, style: MarkerStyle, blocked: str = ""
    ) -> None:
        super().__init__()
        self.bindings = bindings
        self.locator = locator
        self.options = options
        self.style = style
        self.blocked = blocked  # a reason no call in this file can be rewritten
        self.findings: list[Finding] = []
        self.stats = RewriteStats()

    def _report(self, node: cst.CSTNode, message: str, kind: str = NOT_MIGRATED) -> None:
        line, column = self.locator.position(node)
        self.findings.append(Finding(line, column, kind, message))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        mapping, why_not = megatron_mapping(self.bindings, original_node.func)
        if mapping is None:
            # An untraced ``all_to_all`` is most likely torch.distributed's: not reported.
            name = (dotted_name(original_node.func) or "").rpartition(".")[2]
            if why_not and (name in DISTINCTIVE_NAMES or "bound more than once" in why_not):
                self._report(original_node, why_not)
            return updated_node
        if self.blocked:
            self._report(original_node, self.blocked)
            return updated_node
        plan = plan_call(mapping, updated_node.args, self.options)
        if isinstance(plan, str):
            self._report(original_node, f"{mapping.megatron_name}: {plan}")
            return updated_node
        new_call = build_typed_call(updated_node, plan, self.style)
        if count_comments(new_call) < count_comments(updated_node):
            self._report(
                original_node,
                f"{mapping.megatron_name}: a comment inside an argument that the typed call drops",
            )
            return updated_node
        self.stats.rewritten += 1
        self.stats.markers.update({marker(plan.src), marker(plan.dst)})
        # Names the call no longer goes through (its function, a dropped group=getter(), ...).
        self.stats.used_heads.update(_names_in([original_node.func, *(a.value for a in updated_node.args)]))
        return new_call
