"""Device or host: `_Kinds` guesses whether an expression is a device tensor, a host value, a
Python scalar or unknown (from names, annotations, assignments in the same function, `device=`,
the class's buffers and server-argument attributes, helpers' returns); `_FnInfo` is what a
builder's body says by itself (its assignments, its forward-mode locals), read once per builder.
"""

from __future__ import annotations

import ast
from typing import Any

from diag.probes.metadata_syncs.census.paths import (
    _mode_expr,
    batch_field,
    getattr_read,
    is_prefix_any,
)
from diag.probes.metadata_syncs.census.sites import (
    _DEVICE_FIELDS,
    _FACTORIES,
    _SAME_KIND,
    _SCALAR_CALLS,
)
from diag.probes.source import inner as _inner
from diag.probes.source import mentions, walk_all
from diag.probes.source import unparse as _unparse


class _Kinds:
    """Guesses whether an expression is a device tensor, a host value, a scalar, or unknown."""

    def __init__(self, fn: ast.FunctionDef, facts: dict[str, str] | None = None,
                 info: _FnInfo | None = None) -> None:
        self.params: dict[str, str] = {}
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        for a in args:
            ann = _unparse(a.annotation) if a.annotation is not None else ""
            fact = (facts or {}).get(a.arg)
            if fact in ("host", "host-set"):  # every caller in the file passes a host value
                self.params[a.arg] = "host"
            elif fact == "tensor":  # every caller in the file passes a device tensor
                self.params[a.arg] = "tensor"
            elif a.arg.endswith("_cpu") or "List" in ann or "list" in ann:
                self.params[a.arg] = "host"
            elif "Tensor" in ann:
                self.params[a.arg] = "tensor"
            elif ann in ("int", "bool", "float"):
                self.params[a.arg] = "scalar"
        self.config: set[str] = set()
        self.device: set[str] = set()
        # (backend, call) -> the helper's def, when the call is to a same-class method or a
        # same-module function (set by _Scan): its return value is read through
        self.helper: Any = None
        info = info if info is not None else _FnInfo(fn, {})
        self.assigned = info.assigned
        self.carried = info.carried
        self._carrying: set[str] = set()  # names whose loop-carried values are being read
        self.reaches = info.reaches
        self.reaching = info.reaching
        self.stmt_end = info.stmt_end

    def prior(self, name: str, line: int) -> list[tuple[int, ast.AST]]:
        """The assignments of `name` above `line` that can reach it (not in the other arm of
        an `if` whose one arm holds the use: 0.5.23 wave_backend.py:229 in the decode arm does
        not reach the target-verify arm's :272; not the statement the use is in: 0.5.19
        hybrid_linear_attn_backend.py:357 `mamba_cache_indices = mamba_cache_indices.cpu()`
        copies the device tensor its caller passes)."""
        ends = self.stmt_end
        return [(ln, v) for ln, v in self.assigned.get(name, [])
                if ln <= line and self.reaches(ln, line)
                and not ln <= line <= ends.get((name, ln), -1)]

    def _metadata(self, e: ast.AST, line: int) -> bool:
        """`self.forward_metadata`, or a local bound to it (`fm = self.forward_metadata`)."""
        if isinstance(e, ast.Name):
            prior = self.prior(e.id, line)
            return len(prior) == 1 and self._metadata(prior[0][1], prior[0][0])
        return isinstance(e, ast.Attribute) and e.attr == "forward_metadata" and \
            isinstance(e.value, ast.Name) and e.value.id == "self"

    def of(self, e: ast.AST, line: int, depth: int = 0) -> str:
        if depth > 16:  # a chain of assignments and ops, read back to where it starts
            return "unknown"
        if isinstance(e, ast.Constant):
            return "scalar"
        if isinstance(e, ast.Name):
            if e.id.endswith(("_cpu", "_np")):  # a host mirror, a numpy array
                return "host"
            prior = self.prior(e.id, line)
            if prior:  # what the assignments that reach the use agree on, where known (a
                # None aside): 0.5.23 flashinfer_backend.py:1816 after :1791 and :1810
                kinds = {self._entry(e.id) if v is None else self.of(v, ln, depth + 1)
                         for ln, v in self.reaching(prior, line)
                         if not (isinstance(v, ast.Constant) and v.value is None)}
                known = kinds - {"unknown"}
                got = known.pop() if len(known) == 1 else "unknown" if kinds else "scalar"
            else:
                got = self._entry(e.id)
            if got == "scalar" and e.id not in self._carrying:
                # a Python number on the first iteration, a device scalar from the second
                # where the loop carries one in: the use reads a device value then
                self._carrying.add(e.id)
                try:
                    if any(self.of(v, ln, depth + 1) == "tensor"
                           for ln, v in self.carried(e.id, line)):
                        got = "tensor"
                finally:
                    self._carrying.discard(e.id)
            return got
        if isinstance(e, ast.Attribute):
            if e.attr.endswith(("_cpu", "_np")):
                return "host"
            if isinstance(e.value, ast.Name) and e.value.id != "self":
                prior = self.prior(_unparse(e), line)
                if prior:  # a local object's field assigned earlier in the function
                    return self.of(prior[-1][1], prior[-1][0], depth + 1)
            if isinstance(e.value, ast.Name) and e.value.id == "self" and e.attr in self.config:
                return "scalar"  # set from the server arguments (a Python number)
            if isinstance(e.value, ast.Name) and e.value.id == "self" and e.attr in self.device:
                return "tensor"  # made on the device in the class (a buffer)
            if e.attr in _DEVICE_FIELDS:
                return "tensor"
            if e.attr in self.device and self._metadata(e.value, line):
                # `self.forward_metadata.qo_indptr`: the metadata's field named for one of the
                # class's device buffers holds a view of it (0.5.23 aiter_backend.py:4092 reads
                # the `self.qo_indptr[: bs + 1]` that `_set_uniform_qo_indptr` stores, :2214)
                return "tensor"
            return "unknown"
        if isinstance(e, ast.Subscript):
            if isinstance(e.value, ast.Attribute) and e.value.attr == "shape":
                return "scalar"  # `t.shape[0]`: a Python int, read from the host metadata
            if isinstance(e.slice, ast.Constant) and isinstance(e.slice.value, str) and \
                    e.slice.value.endswith(("_cpu", "_np")):
                # a mapping's entry named as a host mirror, as a name or a field is
                # (0.5.23 dcp/planner.py:166 `fast_decode_kwargs["kv_len_arr_cpu"]`, which
                # every caller fills with a host tensor: aiter_backend.py:2627-2646)
                return "host"
            if isinstance(e.value, ast.Call) and isinstance(e.value.func, ast.Name) and \
                    e.value.func.id == "range":
                return "scalar"  # `for i in range(n)`: i is a Python int (`range(n)[_]`)
            call = e.value
            if isinstance(call, ast.Name):  # `ref = helper(...)`; `ref[0]` (0.5.23
                # aiter_backend.py:1350-1358): a local bound once, to a call
                prior = self.prior(call.id, line)
                call = prior[0][1] if len(prior) == 1 else None
            if isinstance(call, ast.Call) and isinstance(e.slice, ast.Constant) and \
                    isinstance(e.slice.value, int) and self.helper is not None:
                k = self._helper_item(call, e.slice.value, depth)
                if k is not None:
                    return k
            return self.of(e.value, line, depth + 1)
        if isinstance(e, ast.IfExp):  # `a if c else b`: what both sides agree on (a None
            # side aside: where the value is used as a tensor, it is the other one)
            sides = {self.of(x, line, depth + 1) for x in (e.body, e.orelse)
                     if not (isinstance(x, ast.Constant) and x.value is None)}
            return sides.pop() if len(sides) == 1 else "unknown"
        if isinstance(e, ast.UnaryOp):  # `~mask_cpu`, `-t`
            return self.of(e.operand, line, depth + 1)
        if isinstance(e, ast.Compare) and any(
                isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in e.ops):
            return "scalar"  # `t is not None`, `x in xs`: a Python bool
        if isinstance(e, ast.Compare) and len(e.comparators) == 1:
            e = ast.BinOp(e.left, ast.Add(), e.comparators[0])  # `a == b`: the kinds of a, b
        if isinstance(e, ast.BinOp):
            kinds = {self.of(e.left, line, depth + 1), self.of(e.right, line, depth + 1)}
            for k in ("tensor", "host", "unknown"):
                if k in kinds:
                    return k
            return "scalar"
        read = getattr_read(e)  # getattr(forward_batch, "name", None)
        if read is not None:
            return self.of(read, line, depth + 1)
        if isinstance(e, ast.Call):
            f = e.func
            fname = _unparse(f)
            if fname in _SCALAR_CALLS:
                return "scalar"
            if fname.startswith(("np.", "numpy.")):
                return "host"  # numpy works on host arrays
            if self.helper is not None:
                k = self._helper_kind(e, line, depth)
                if k is not None:
                    return k
            dev = [k.value for k in e.keywords if k.arg == "device"]
            if dev and not (isinstance(dev[0], ast.Constant) and dev[0].value == "cpu"):
                return "tensor"  # made on (or copied to) the device
            if isinstance(f, ast.Attribute):
                if f.attr == "to" and any(isinstance(a, ast.Constant) and a.value == "cpu"
                                          for a in [*e.args, *(k.value for k in e.keywords)]):
                    return "host"
                if f.attr in ("tolist", "item"):
                    return "host"
                if f.attr == "cpu":
                    return "host"
                if _unparse(f.value) in ("F", "torch.nn.functional") and e.args:
                    return self.of(e.args[0], line, depth + 1)  # torch.nn.functional op
                if isinstance(f.value, ast.Name) and f.value.id == "torch":
                    dev = [k for k in e.keywords if k.arg == "device"]
                    if dev and isinstance(dev[0].value, ast.Constant) and dev[0].value.value == "cpu":
                        return "host"
                    if dev:
                        return "tensor"
                    if f.attr.endswith("_like") and e.args:
                        return self.of(e.args[0], line, depth + 1)
                    splat = [_unparse(k.value) for k in e.keywords if k.arg is None]
                    if splat:  # `**self.cuda_int32_kwargs` (0.5.19 deepseek_v4_backend_hip_radix
                        # .py:442 `{"device": self.device, ...}`): its name says, else unknown
                        return "tensor" if any("cuda" in x or "device" in x for x in splat) \
                            else "unknown"
                    # a factory without device= makes a host tensor; an op follows its
                    # inputs (`torch.count_nonzero(seq_lens_cpu == v)` is a host tensor)
                    if f.attr in _FACTORIES:
                        return "host"
                    args = [x for a in e.args for x in (
                        a.elts if isinstance(a, (ast.List, ast.Tuple)) else [a])]  # torch.cat
                    kinds = {self.of(a, line, depth + 1) for a in args
                             if not isinstance(a, ast.Constant)}
                    # a torch op runs where its tensors live: host only when a host input
                    # is seen and no device one (else the device, as before)
                    return "host" if "host" in kinds and "tensor" not in kinds else "tensor"
                if f.attr in _SAME_KIND:
                    return self.of(f.value, line, depth + 1)
            return "unknown"
        return "unknown"

    def _entry(self, name: str) -> str:
        """A name's kind before any assignment in the function: its parameter's, else what a
        well-known name is."""
        if name in self.params:
            return self.params[name]
        return "tensor" if name in _DEVICE_FIELDS else "unknown"

    def _helper_item(self, call: ast.Call, i: int, depth: int) -> str | None:
        """Item `i` of what a same-class/same-module helper returns, where every return is a
        tuple: what those items agree on in the helper's own body (0.5.23 aiter_backend.py:3518
        unpacks `make_mla_prefill_ps_meta_data_buffer`'s device buffers, :958-975)."""
        found = self.helper(call)
        if found is None:
            return None
        fn = found[1]
        rets = [n.value for n in _inner(fn) if isinstance(n, ast.Return)
                and not (n.value is None or isinstance(n.value, ast.Constant)
                         and n.value.value is None)]  # a None return aside: not indexed
        if not rets or not all(isinstance(r, ast.Tuple) and len(r.elts) > i for r in rets):
            return None
        own = getattr(fn, "_diag_kinds", None)
        if own is None:
            own = fn._diag_kinds = _Kinds(fn)  # type: ignore[attr-defined]
        kinds = {own.of(r.elts[i], r.lineno, depth + 1) for r in rets}  # type: ignore[union-attr]
        kinds.discard("unknown")
        return kinds.pop() if len(kinds) == 1 else None

    def _helper_kind(self, call: ast.Call, line: int, depth: int) -> str | None:
        """A same-class/same-module helper's result: `Tensor` annotated, or what it returns
        when every return is a call fed one of this call's device tensors (`get_dcp_lens(lens,
        ...)`); None when the helper says nothing."""
        found = self.helper(call)
        if found is None:
            return None
        fn = found[1]
        ann = _unparse(fn.returns) if fn.returns is not None else ""
        if ann.startswith(("int", "bool", "float", "List", "list", "Optional[int")):
            return "scalar" if not ann.startswith(("List", "list")) else "host"
        if ann in ("torch.Tensor", "Tensor"):
            return "tensor"
        rets = [n.value for n in _inner(fn) if isinstance(n, ast.Return) and n.value is not None]
        if rets and all(isinstance(r, ast.Call) and _unparse(r.func) not in _SCALAR_CALLS
                        for r in rets) and any(
                self.of(a, line, depth + 1) == "tensor" for a in call.args):
            return "tensor"
        return None


def _classify(kind: str, what: str) -> tuple[str, str]:
    if kind == "host":
        return "host-mirror", f"{what} is a host value (a *_cpu mirror or a host copy)"
    if kind == "tensor":
        return "syncs", f"{what} is a device tensor"
    if kind == "scalar":
        return "", ""
    return "cannot-tell", f"cannot tell whether {what} lives on the device"


_LEAVES = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_ENTRY: tuple[int, None] = (0, None)  # `reaching`: the name's value on entry


# the node classes `_FnInfo` reads (the parser makes these classes exactly, never subclasses)
_FN_NODES = frozenset({ast.For, ast.While, ast.Call, ast.If, ast.Assign, ast.AnnAssign,
                       ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp})


class _FnInfo:
    """What a builder's body says by itself (its assignments), whatever its callers pass: read
    once per builder, not on every pass of the fixpoint in `_analyse`."""

    def __init__(self, fn: ast.FunctionDef, helpers: dict[str, ast.AST]) -> None:
        mode_vars: list[str] = []
        counts: dict[str, int] = {}
        single: list[ast.Assign] = []  # `name = value`, in walk order
        # name -> [(line, value)] of `name = value` / `name: T = value` (for _Kinds)
        self.assigned: dict[str, list[tuple[int, ast.AST]]] = {}
        # every `if` as line spans: (its line, body first/last, else first/last (0 when none),
        # whether the body / the else ends in return, raise, continue or break)
        self._ifs: list[tuple[int, int, int, int, int, bool, bool]] = []
        self._reach: dict[tuple[int, int], bool] = {}
        # every `for`/`while` body as a line span: an assignment below a use in the same loop
        # reaches it on the next iteration (`_Kinds.of`)
        self._loops: list[tuple[int, int]] = []
        # (name, line) of an assignment statement -> its last line: a use inside the statement
        # (its own value, `x = x.cpu()`) reads the value from before it (`_Kinds.prior`)
        self.stmt_end: dict[tuple[str, int], int] = {}
        calls_any = False  # an `any(...)`: the prefix test below needs one
        for n in _inner(fn):
            if n.__class__ not in _FN_NODES:  # most nodes: one set lookup, not seven tests
                continue
            if isinstance(n, (ast.For, ast.While)):
                self._loops.append((n.body[0].lineno, n.end_lineno or n.lineno))
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "any":
                calls_any = True
            if isinstance(n, ast.If):
                self._ifs.append((
                    n.lineno, n.body[0].lineno, n.body[-1].end_lineno or n.lineno,
                    n.orelse[0].lineno if n.orelse else 0,
                    (n.orelse[-1].end_lineno or n.lineno) if n.orelse else 0,
                    isinstance(n.body[-1], _LEAVES),
                    bool(n.orelse) and isinstance(n.orelse[-1], _LEAVES)))
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        counts[t.id] = counts.get(t.id, 0) + 1
                if len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                    single.append(n)
                    self.assigned.setdefault(n.targets[0].id, []).append((n.lineno, n.value))
                    if mentions(n.value, "forward_mode"):
                        text = _unparse(n.value)
                        if "forward_mode" in text and not text.endswith("forward_mode"):
                            mode_vars.append(n.targets[0].id)
                elif len(n.targets) == 1 and isinstance(n.targets[0], ast.Tuple) and \
                        isinstance(n.value, ast.Call) and \
                        all(isinstance(t, ast.Name) for t in n.targets[0].elts):
                    # `a, b = f(...)`: each name is item i of what f returns (`_Kinds.of` reads
                    # a helper's tuple, else the call's own kind)
                    for i, t in enumerate(n.targets[0].elts):
                        counts[t.id] = counts.get(t.id, 0) + 1
                        item = ast.copy_location(ast.Subscript(
                            value=n.value, slice=ast.Constant(i), ctx=ast.Load()), n)
                        self.assigned.setdefault(t.id, []).append((n.lineno, item))
                elif len(n.targets) == 1 and isinstance(n.targets[0], ast.Tuple) and \
                        isinstance(n.value, ast.Tuple) and \
                        len(n.targets[0].elts) == len(n.value.elts):
                    # `num_token, num_seq = a.shape[0], b.shape[0]`: each name its own value
                    for t, v in zip(n.targets[0].elts, n.value.elts):
                        if isinstance(t, ast.Name):
                            counts[t.id] = counts.get(t.id, 0) + 1
                            self.assigned.setdefault(t.id, []).append((n.lineno, v))
                elif len(n.targets) == 1 and isinstance(n.targets[0], ast.Attribute) and \
                        isinstance(n.targets[0].value, ast.Name) and \
                        n.targets[0].value.id != "self":
                    # `metadata.encoder_lens_int32 = forward_batch.encoder_lens.to(...)`: a
                    # local object's field, read back by its dotted name
                    self.assigned.setdefault(_unparse(n.targets[0]), []).append(
                        (n.lineno, n.value))
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value:
                self.assigned.setdefault(n.target.id, []).append((n.lineno, n.value))
            elif isinstance(n, (ast.For, ast.ListComp, ast.SetComp, ast.GeneratorExp,
                                ast.DictComp)):
                # `for x in xs` / `[f(x) for x in xs]`: x is an element of xs, where xs lives
                # (0.5.23 flashinfer_backend.py:956-957: the items of a host list or `.tolist()`),
                # bound from the loop's (the comprehension's) first line
                for g in ([n] if isinstance(n, ast.For) else n.generators):
                    if isinstance(g.target, ast.Name):
                        item = ast.copy_location(ast.Subscript(
                            value=g.iter, slice=ast.Name("_"), ctx=ast.Load()), g.iter)
                        self.assigned.setdefault(g.target.id, []).append((n.lineno, item))
            if isinstance(n, (ast.Assign, ast.AnnAssign)):
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    for x in (t.elts if isinstance(t, ast.Tuple) else [t]):
                        key = x.id if isinstance(x, ast.Name) else \
                            _unparse(x) if isinstance(x, ast.Attribute) else None
                        if key is not None:
                            self.stmt_end[(key, n.lineno)] = n.end_lineno or n.lineno
        # by line: the walk is breadth-first, so a nested assignment came after a later
        # top-level one; `_Kinds.of` starts from the last assignment above a use (0.5.23
        # qwen_sparse_attn_backend.py:416 `extend_lengths.clone()` follows :404's `torch.cat`)
        for values in self.assigned.values():
            values.sort(key=lambda lv: lv[0])
        self.mode_vars = ",".join(mode_vars)
        self.names = set(counts)  # every name assigned in the body
        # names bound once to a batch field (`x = getattr(forward_batch, "f", None)`: `cond`)
        self.fields = {n.targets[0].id: f for n in single
                       if counts.get(n.targets[0].id) == 1
                       and (f := batch_field(n.value, {})) is not None}
        # names assigned once from a forward-mode test, or from a test of the prefix lengths
        # a draft-extend step decides (`paths.is_prefix_any`), or from such a name (0.5.23
        # flashinfer_mla_backend.py:449-453: `extend_no_prefix` into `use_ragged`): read
        # through by `cond`
        once = [n for n in single if counts.get(n.targets[0].id) == 1]
        self.locals = {n.targets[0].id: n.value for n in once if _mode_expr(n.value, helpers)}
        grew = calls_any
        while grew:
            grew = False
            for n in once:
                if n.targets[0].id not in self.locals and any(
                        is_prefix_any(x, self.fields) or (
                            isinstance(x, ast.Name) and x.id in self.locals)
                        for x in walk_all(n.value)):
                    self.locals[n.targets[0].id] = n.value
                    grew = True

    def carried(self, name: str, use: int) -> list[tuple[int, ast.AST]]:
        """The assignments of `name` below a use inside a loop body that holds both: the value
        the next iteration reads (0.5.23 torch_native_backend.py:173 `start_q, start_kv =
        end_q, end_kv` reaches :127's `query[:, start_q:end_q, :]`)."""
        return [(ln, v) for ln, v in self.assigned.get(name, []) if ln > use and any(
            b0 <= use and ln <= b1 for b0, b1 in self._loops)]

    def reaches(self, at: int, use: int) -> bool:
        """Whether an assignment on line `at` can reach a use on line `use`: not when they sit
        in the two arms of one `if`."""
        key = (at, use)
        got = self._reach.get(key)
        if got is None:
            got = self._reach[key] = not any(
                e1 and ((b0 <= at <= b1 and e0 <= use <= e1) or (e0 <= at <= e1 and b0 <= use
                                                                  <= b1))
                for _, b0, b1, e0, e1, _, _ in self._ifs)
        return got

    def reaching(self, prior: list[tuple[int, ast.AST]], use: int
                 ) -> list[tuple[int, ast.AST | None]]:
        """The assignments among `prior` (those above a use, none in an arm apart from it) that
        reach the use: the last, and where it sits in an arm of an `if` the use is after, the
        last one of the other way through that `if` (its other arm's, else the one before it),
        unless that arm returns or raises."""
        out: list[tuple[int, ast.AST | None]] = []
        todo: list[tuple[int, ast.AST | None]] = [prior[-1]]
        while todo:
            d = todo.pop()
            if any(d is o for o in out):
                continue
            out.append(d)
            ln = d[0]
            if d[1] is None:
                continue
            for top, b0, b1, e0, e1, b_ends, e_ends in self._ifs:
                in_body, in_else = b0 <= ln <= b1, bool(e1) and e0 <= ln <= e1
                if not (in_body or in_else) or top <= use <= max(b1, e1):
                    continue  # not in this `if`, or the use is inside it too
                if (e_ends if in_body else b_ends):
                    continue  # the other way leaves the function (or the loop)
                lo, hi = (e0, e1) if in_body else (b0, b1)
                other = [p for p in prior if hi and lo <= p[0] <= hi]
                before = [p for p in prior if p[0] < top]
                if other:
                    todo.append(other[-1])
                elif before:
                    todo.append(before[-1])
                else:
                    todo.append(_ENTRY)  # the value the name had on entry (a parameter)
        return out
