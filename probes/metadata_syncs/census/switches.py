"""What a release's GPU-arch tests and boolean environment switches mean, read from its source,
for the census's `arch:` and `env:` guards (census.guards; decided in
probes.metadata_syncs.census_config).

Why: `is_gfx95_supported()` is true on HIP when the device's gcnArchName holds one of a list of
arch names, and false off HIP (0.5.23 utils/common.py:1238-1248: ["gfx95"]; :1251-1260
is_gfx942_supported: ["gfx942"]; 0.5.9 :3600-3609, the same); `envs.NAME.get()` of an
`EnvBool` is its default unless the environment sets it (0.5.23 environ.py:638
`SGLANG_AITER_PAGED_PREFILL_ASM = EnvBool(True)`, :143-150 what it parses). A function or
switch of another shape is left undecided.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Any

from diag.probes.metadata_syncs.census.flags import ARCH_CALL
from diag.probes.source import unparse
from diag.target import Target

UTILS_FILES = ("srt/utils/common.py", "srt/utils.py")
ENVIRON_FILE = "srt/environ.py"


def arch_tests(target: Target) -> dict[str, tuple[tuple[str, ...], str]]:
    """name -> (the arch names it looks for, `file:line`) of each `is_gfx*_supported` whose
    body is `if torch.version.hip: <gcnArchName read>; return any(gfx in <it> for gfx in
    [...])` else `return False`."""
    for rel in UTILS_FILES:
        path = target.file(rel)
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        where = target.relpath(path)
        out = {}
        # each top-level `def is_gfx*_supported` parsed alone (the module is ~4,000 lines)
        for m in _ARCH_DEF.finditer(text):
            try:
                fn = ast.parse(m.group(0)).body[0]
            except SyntaxError:
                continue
            names = _arch_names(fn) if isinstance(fn, ast.FunctionDef) else None
            if names is not None and ARCH_CALL.match(fn.name):
                out[fn.name] = (names, f"{where}:{text.count(chr(10), 0, m.start()) + 1}")
        return out
    return {}


# a top-level `def is_gfx...():` and its indented body (up to the next unindented line)
_ARCH_DEF = re.compile(r"^def is_gfx\w+_supported\(\):[^\n]*\n(?:(?:[ \t]+[^\n]*)?\n)*",
                       re.M)


def _arch_names(fn: ast.FunctionDef) -> tuple[str, ...] | None:
    body = [st for st in fn.body if not (isinstance(st, ast.Expr) and
                                         isinstance(st.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.If):
        return None
    test, then, orelse = body[0].test, body[0].body, body[0].orelse
    if unparse(test) != "torch.version.hip" or len(orelse) != 1 or \
            unparse(orelse[0]) != "return False" or len(then) != 2:
        return None
    read, ret = then
    if not (isinstance(read, ast.Assign) and len(read.targets) == 1 and
            isinstance(read.targets[0], ast.Name) and
            unparse(read.value).endswith(".gcnArchName")):
        return None
    arch = read.targets[0].id
    call = ret.value if isinstance(ret, ast.Return) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and
            call.func.id == "any" and len(call.args) == 1 and
            isinstance(gen := call.args[0], ast.GeneratorExp) and len(gen.generators) == 1):
        return None
    comp = gen.generators[0]
    el = gen.elt
    if comp.ifs or not isinstance(comp.target, ast.Name) or \
            not isinstance(comp.iter, (ast.List, ast.Tuple)) or \
            not (isinstance(el, ast.Compare) and len(el.ops) == 1 and
                 isinstance(el.ops[0], ast.In) and isinstance(el.left, ast.Name) and
                 el.left.id == comp.target.id and unparse(el.comparators[0]) == arch):
        return None
    names = [e.value for e in comp.iter.elts if isinstance(e, ast.Constant)]
    if len(names) != len(comp.iter.elts) or not all(isinstance(n, str) for n in names):
        return None
    return tuple(names)


def env_defaults(target: Target) -> dict[str, tuple[str, str, str]]:
    """NAME -> (its default as the environment would spell it ("True"/"False" for a bool),
    `file:line`, "bool" | "str") of each `NAME = EnvBool(<True|False>)` or `NAME =
    EnvStr("<text>")` line of the release's environ.py (0.5.23 :1051 `SGLANG_HACK_FLASHMLA_BACKEND
    = EnvStr("auto")`; another shape, an alias class or a computed default, is not read)."""
    path = target.file(ENVIRON_FILE)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    where = target.relpath(path)
    out, line, at = {}, 1, 0
    for m in _ENV_BOOL.finditer(text):  # line numbers counted on from the last match
        line += text.count("\n", at, m.start())
        at = m.start()
        if m.group(2) is not None:
            out[m.group(1)] = (m.group(2), f"{where}:{line}", "bool")
        else:
            out[m.group(1)] = (m.group(3) or m.group(4) or "", f"{where}:{line}", "str")
    return out


_ENV_BOOL = re.compile(r"^[ \t]+([A-Z][A-Z0-9_]*)\s*=\s*(?:EnvBool\((True|False)\)|"
                       r"""EnvStr\((?:"([^"\\]*)"|'([^'\\]*)')\))[ \t]*(?:#.*)?$""", re.M)


def fill(target: Target, out: Any) -> Any:
    """Each `arch:` guard gets its function's arch names and where (`arch_tests`), each `envs`
    `env:` guard its default and where (`env_defaults`); a guard the release does not define so
    keeps None (undecided)."""
    wanted = {f.split(":", 1)[0] for s in out.sites for g in s.guards
              for f in guard_facts(g)}
    if not wanted & {"arch", "env"}:
        return out
    arch = arch_tests(target) if "arch" in wanted else {}
    envs = env_defaults(target) if "env" in wanted else {}

    def one(g: tuple) -> tuple:
        fact = g[0]
        if fact == "any":
            return (g[0], g[1], tuple(one(p) for p in g[2]), *g[3:])
        if fact == "on":
            modes, inner = g[2]
            return (g[0], g[1], (modes, one(inner)), *g[3:])
        if fact.startswith("arch:"):
            return (fact, g[1], arch.get(fact[5:]), *g[3:])
        if fact.startswith("env:") and g[2] and g[2][0] in ("envs", "envs-str"):
            got = envs.get(fact[4:])
            kind = "bool" if g[2][0] == "envs" else "str"
            default, at = got[:2] if got and got[2] == kind else (None, None)
            return (fact, g[1], (g[2][0], default, at, *g[2][3:]), *g[3:])
        return g

    out.sites = [replace(s, guards=tuple(one(g) for g in s.guards))
                 if any(f.startswith(("arch:", "env:")) for g in s.guards for f in guard_facts(g))
                 else s for s in out.sites]
    return out


def guard_facts(g: tuple) -> list[str]:
    """The facts a guard holds (an `any` its parts', an `on` its inner guard's)."""
    if g[0] == "any":
        return [f for p in g[2] for f in guard_facts(p)]
    if g[0] == "on":
        return guard_facts(g[2][1])
    return [g[0]]
