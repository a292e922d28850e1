"""Run-time fallbacks of a captured phase: the conditions under which its graph runner's replay
test (`can_run_graph`, `can_run` up to 0.5.13.post1) says no, so the pass runs eager although a
graph was captured. Read from the runner's source, each with its file:line, and kept only where
the configuration lets it happen.

Why: a phase reported `graph` still runs eager on some batches, and the live counters name why
(`batch-above-captured`, `runner-declined`); users want each such condition named before they see
it. The replay tests share one shape in every release: `if <cond>: return False`, a branch that
returns a helper's answer, and a final `return a and b and ...` whose names are assigned as
`<check> if <switch> else True`. Each part is read the same way; a part whose switch the
configuration decides is dropped (read from the release, never assumed):
- the ragged-verify graphs: `self.ragged_verify_mode` needs an algorithm whose
  `supports_ragged_verify()` is true (0.5.23 speculative/spec_info.py:160-164: DSPARK only);
- the NGRAM width check: `spec_algorithm.is_ngram()` (not an EAGLE-family worker's);
- the encoder-lengths check: `self.is_encoder_decoder`, the model's architecture in
  `is_encoder_decoder_model` (0.5.23 configs/model_config.py:2540-2546);
- the data-parallel vote: `self.require_mlp_sync` (the caller drops it without DP attention).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from diag.probes.gate import ragged_algorithms
from diag.probes.source import parse_file, parse_pruned, walk_all
from diag.probes.startup.resolve import architectures_listed
from diag.target import Target

CAN_RUN = ("can_run_graph", "can_run")
DP_VOTE = "data-parallel vote"
BATCH_ABOVE = "batch-above-captured"
DECLINED = "runner-declined"
EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "FROZEN_KV_MTP"})


@dataclass
class Fallback:
    """A run-time condition under which a captured phase still runs a pass eager."""

    condition: str
    reason: str  # as the live counters name it: batch-above-captured | runner-declined | ...
    file: str
    line: int

    def to_dict(self) -> dict:
        return {"condition": self.condition, "reason": self.reason, "file": self.file,
                "line": self.line}


@dataclass(frozen=True)
class Facts:
    """What the configuration says about the switches a replay test reads: the speculative
    algorithm (None: an EAGLE-family worker, whichever) and the model's architecture (None: not
    known)."""

    algorithm: str | None = None
    arch: str | None = None


def runner_fallbacks(target: Target, rel: str, facts: Facts = Facts()) -> list[Fallback]:
    """The fallbacks of the runner in `rel` (its first replay test), in line order, one per
    condition."""
    path = target.file(rel)
    tree = parse_file(path)
    if tree is None:
        return []
    fn, methods = _replay_test(tree)
    if fn is None:
        return []
    reader = _Reader(target, target.relpath(path), facts, methods)
    reader.function(fn, ())
    seen: set[str] = set()
    return [f for f in sorted(reader.out, key=lambda f: f.line)
            if not (f.condition in seen or seen.add(f.condition))]


def _replay_test(tree: ast.AST) -> tuple[ast.FunctionDef | None, dict[str, ast.FunctionDef]]:
    """The first `can_run_graph`/`can_run` of the file and the methods of its class (the
    helpers it returns through)."""
    for cls in walk_all(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
        for name in CAN_RUN:
            if name in methods:
                return methods[name], methods
    return None, {}


class _Reader:
    def __init__(self, target: Target, file: str, facts: Facts,
                 methods: dict[str, ast.FunctionDef]) -> None:
        self.target, self.file, self.facts, self.methods = target, file, facts, methods
        self.out: list[Fallback] = []
        self._seen_fns: set[str] = set()
        self._facts: dict[str, frozenset[str] | None] = {}  # read once per runner
        # name -> its assignments in the function being read (`_assignments`)
        self.assigns: dict[str, list[tuple[ast.Assign, tuple[str, ...]]]] = {}

    def _read(self, what: str, fn: Callable[[Target], frozenset[str] | None]
              ) -> frozenset[str] | None:
        if what not in self._facts:
            self._facts[what] = fn(self.target)
        return self._facts[what]

    # -------------------------------------------------------------------------- statements

    def function(self, fn: ast.FunctionDef, guards: tuple[str, ...]) -> None:
        if fn.name in self._seen_fns:
            return
        self._seen_fns.add(fn.name)
        self.assigns = _assignments(fn)
        self.block(fn.body, guards)

    def block(self, body: list[ast.stmt], guards: tuple[str, ...]) -> None:
        for st in body:
            if isinstance(st, ast.If):
                test = self.expand(st.test)
                ret = next((s for s in st.body if isinstance(s, ast.Return)), None)
                if ret is not None and _is_false(ret.value):
                    self.add(test, DECLINED, st.lineno, guards)
                elif ret is not None and (helper := self._helper(ret.value)) is not None:
                    if self.allowed(test):
                        saved = self.assigns
                        self.function(helper, guards + (test,))
                        self.assigns = saved
                else:
                    self.block(st.body, guards + (test,))
            elif isinstance(st, ast.Return) and st.value is not None:
                self.conjuncts(st.value, guards)

    def _helper(self, value: ast.expr | None) -> ast.FunctionDef | None:
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and \
                isinstance(value.func.value, ast.Name) and value.func.value.id == "self":
            return self.methods.get(value.func.attr)
        return None

    def conjuncts(self, value: ast.expr, guards: tuple[str, ...]) -> None:
        for part in and_parts(value):
            if isinstance(part, ast.Name) and part.id in self.assigns:
                for assign, under in self.assigns[part.id]:
                    self.part(assign.value, part.id, guards + under)
            else:
                self.part(part, None, guards)

    def part(self, v: ast.expr, name: str | None, guards: tuple[str, ...]) -> None:
        """One value a conjunct takes: what makes it false, as a fallback."""
        if isinstance(v, ast.Constant):
            return
        if isinstance(v, ast.IfExp):
            test = ast.unparse(v.test)
            if "disable_padding" in test:
                self.add("--disable-cuda-graph-padding: only a batch of a captured size "
                         "replays", DECLINED, v.lineno, guards, decided=True)
                self.part(v.orelse, name, guards + (f"not ({test})",))
            elif _is_true(v.orelse):
                self.part(v.body, name, guards + (test,))
            elif _is_true(v.body):
                self.part(v.orelse, name, guards + (f"not ({test})",))
            else:
                self.add(f"{ast.unparse(v)} does not hold", DECLINED, v.lineno, guards)
            return
        if isinstance(v, ast.BoolOp) and isinstance(v.op, ast.And):
            for sub in v.values:
                if not (isinstance(sub, ast.Name) and sub.id == name):
                    self.part(sub, name, guards)
            return
        if isinstance(v, ast.Compare) and any(
                isinstance(c, ast.Attribute) and c.attr == "max_bs" for c in v.comparators):
            self.add(f"batch above the largest captured size ({ast.unparse(v)})", BATCH_ABOVE,
                     v.lineno, guards, decided=True)
            return
        if isinstance(v, ast.Attribute) and v.attr.startswith("can_run_"):
            if "tbo" in v.attr:
                self.add(f"two-batch overlap ({v.attr})", DECLINED, v.lineno, guards,
                         decided=True)
            else:
                self.add(f"{DP_VOTE}: every DP rank must be able to replay ({v.attr})",
                         DECLINED, v.lineno, guards, decided=True)
            return
        self.add((f"{name}: " if name else "") + f"{ast.unparse(v)} does not hold", DECLINED,
                 v.lineno, guards)

    # -------------------------------------------------------------------------- conditions

    def expand(self, test: ast.expr) -> str:
        """A test's words, with the switch of each name in it that is set only under one
        (`ragged_layout = ... if self.ragged_verify_mode else None`: `ragged_layout is not
        None` holds only where the switch is on)."""
        words = ast.unparse(test)
        for n in (n for n in walk_all(test) if isinstance(n, ast.Name)):
            for assign, _ in self.assigns.get(n.id, []):
                v = assign.value
                if isinstance(v, ast.IfExp) and isinstance(v.orelse, ast.Constant) and \
                        v.orelse.value is None:
                    words += f" [{n.id} set only if {ast.unparse(v.test)}]"
        return words

    def add(self, condition: str, reason: str, line: int, guards: tuple[str, ...],
            decided: bool = False) -> None:
        """A fallback, unless the configuration rules its condition or a guard out. `decided`:
        the words already say what the guard says (the caller's own rules keep or drop it)."""
        if not self.allowed(condition) or not all(self.allowed(g) for g in guards):
            return
        notes = [n for g in guards if (n := self.note(g))]
        if not decided:
            notes += [g for g in guards if not self.note(g) and not _plain_switch(g)]
        text = condition + "".join(f" (only {n})" if n.startswith("with") or
                                   n.startswith("for") else f" (when {n})" for n in notes)
        self.out.append(Fallback(text[:240], reason, self.file, line))

    def allowed(self, cond: str) -> bool:
        """Whether the configuration lets `cond` hold (False where a switch in it cannot)."""
        if "ragged_verify_mode" in cond and not cond.startswith("not ("):
            got = self._read("ragged", ragged_algorithms)
            if got is not None and (self.facts.algorithm or "").upper() not in got[0]:
                return False
        if "is_ngram()" in cond and not cond.startswith("not ("):
            return (self.facts.algorithm or "").upper() == "NGRAM"
        m = _FIELD_SET.fullmatch(cond)
        if m and m.group(1) in (self._read("cleared", decode_cleared) or ()):
            return False  # every decode step clears it first (0.5.23 schedule_batch.py:3743)
        if "is_encoder_decoder" in cond and not cond.startswith("not (") and self.facts.arch:
            models = self._read("encoder", encoder_decoder_models)
            if models is not None and self.facts.arch not in models:
                return False
        return True

    def note(self, guard: str) -> str | None:
        if "is_encoder_decoder" in guard:
            return "for an encoder-decoder model"
        if "enable_two_batch_overlap" in guard:
            return "with --enable-two-batch-overlap"
        return None


def _plain_switch(guard: str) -> bool:
    """A guard the words of a decided fallback already carry (the DP switch, the padding
    switch), or one that only picks how the batch size is computed."""
    return any(s in guard for s in ("require_mlp_sync", "disable_padding", "require_mlp_tp"))


def _assignments(fn: ast.FunctionDef) -> dict[str, list[tuple[ast.Assign, tuple[str, ...]]]]:
    """name -> its assignments in `fn`, each with the tests of the `if`s around it."""
    out: dict[str, list[tuple[ast.Assign, tuple[str, ...]]]] = {}

    def visit(body: list[ast.stmt], under: tuple[str, ...]) -> None:
        for st in body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and \
                    isinstance(st.targets[0], ast.Name):
                out.setdefault(st.targets[0].id, []).append((st, under))
            elif isinstance(st, ast.If):
                visit(st.body, under + (ast.unparse(st.test),))
                visit(st.orelse, under + (f"not ({ast.unparse(st.test)})",))

    visit(fn.body, ())
    return out


def and_parts(v: ast.expr) -> Iterator[ast.expr]:
    """The conjuncts of `a and (b and c)`: a, b, c."""
    if isinstance(v, ast.BoolOp) and isinstance(v.op, ast.And):
        for sub in v.values:
            yield from and_parts(sub)
    else:
        yield v


def _is_false(v: ast.expr | None) -> bool:
    return isinstance(v, ast.Constant) and v.value is False


def _is_true(v: ast.expr | None) -> bool:
    return isinstance(v, ast.Constant) and v.value is True


# `forward_batch.<field> is not None`: a field the batch carries
_FIELD_SET = re.compile(r"forward_batch\.(\w+) is not None")
SCHEDULE_BATCH = "srt/managers/schedule_batch.py"


def decode_cleared(target: Target) -> frozenset[str] | None:
    """The batch fields `ScheduleBatch.prepare_for_decode` sets to None in its own body, which
    every decode and verify step runs first (0.5.23 managers/schedule_batch.py:3736-3744: the
    prefill-time `replace_embeds`, before the speculative branch at :3754); None where the
    method is not found."""
    tree = parse_pruned(target.file(SCHEDULE_BATCH), ("prepare_for_decode",))
    fn = next((n for n in walk_all(tree) if isinstance(n, ast.FunctionDef)
               and n.name == "prepare_for_decode"), None) if tree is not None else None
    if fn is None:
        return None
    return frozenset(t.attr for st in fn.body if isinstance(st, ast.Assign)
                     and isinstance(st.value, ast.Constant) and st.value.value is None
                     for t in st.targets if isinstance(t, ast.Attribute)
                     and isinstance(t.value, ast.Name) and t.value.id == "self")


def encoder_decoder_models(target: Target) -> frozenset[str] | None:
    """The architectures `is_encoder_decoder_model` lists (configs/model_config.py)."""
    got = architectures_listed(target, "is_encoder_decoder_model")
    return got[0] if got is not None else None
