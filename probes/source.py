"""Reading SGLang's source as code, once: the shared core of the gate, the sync census, the
profiler locators and the fixes.

Why one module: each reader used to parse the same release files itself (`ast.parse` in eight
places) and carry its own helpers for the same questions. Here: a parse cached by file state or
by text (`parse_file`, `parse_text`; `parse_fresh` for callers that rewrite the tree;
`parse_pruned` for a reader of the few functions that name some words), fast
walks, a cached `unparse`, a module index (`ModuleIndex`: functions, classes, `from X import Y`
names), names bound across modules (`Modules.resolve`), the callers of a function in a module
(`callers_of`), and finding code by shape (`find`, `find_def`, `methods`).

Cached trees are shared: a reader may hang private `_diag_*` attributes on nodes but must not
change the tree (take `parse_fresh` for that).
"""

from __future__ import annotations

import ast
import bisect
import contextlib
import gc
import hashlib
import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diag.target import Target

_BY_FILE: dict[tuple[str, int, int], ast.Module] = {}
_BY_TEXT: dict[str, ast.Module] = {}
_UNPARSED: dict[str, tuple[str, int, int]] = {}  # real path: its state when it failed to parse
_PRUNED: dict[tuple, ast.Module] = {}  # `parse_pruned`: by (file state, words)
_INDEX: dict[int, tuple[ast.Module, ModuleIndex]] = {}


_READS: list[set[tuple[str, int, int]]] = []  # open `reads()` records


@contextlib.contextmanager
def reads() -> Iterator[set[tuple[str, int, int]]]:
    """The files `parse_file` is asked for inside the block, as (path, mtime, size); a path
    that cannot be read is recorded as (path, 0, -1). Why: a result computed from several files
    can be kept while `unchanged` says every one of them is as it was."""
    seen: set[tuple[str, int, int]] = set()
    _READS.append(seen)
    try:
        yield seen
    finally:
        _READS.remove(seen)


def unchanged(files: Iterable[tuple[str, int, int]]) -> bool:
    """Every file of a `reads()` record is as it was read."""
    for path, mtime, size in files:
        try:
            st = Path(path).stat()
        except OSError:
            if size != -1:
                return False
            continue
        if (st.st_mtime_ns, st.st_size) != (mtime, size):
            return False
    return True


def file_state(path: Path) -> tuple[str, int, int] | None:
    """(path, mtime, size): the key of a result read from one file version; None when the file
    cannot be read."""
    try:
        st = path.stat()
    except OSError:
        return None
    return str(path), st.st_mtime_ns, st.st_size


def kept(cache: dict, key: object, compute: Callable[[], Any]) -> Any:
    """`compute()` once per `key` while every file it parsed is unchanged (`reads`,
    `unchanged`): a result read from several files of a release, asked for every verdict."""
    hit = cache.get(key)
    if hit is not None and unchanged(hit[1]):
        return hit[0]
    with reads() as files:
        value = compute()
    cache[key] = (value, frozenset(files))
    return value


def _read_state(path: Path) -> tuple[str, int, int] | None:
    """(real path, mtime, size) of `path`, noted in every open `reads()` record; None when it
    cannot be read (noted as such)."""
    try:
        st = path.stat()
        real = path.resolve()  # a linked copy of a tree shares the parse
    except OSError:
        for seen in _READS:
            seen.add((str(path), 0, -1))
        return None
    for seen in _READS:
        seen.add((str(path), st.st_mtime_ns, st.st_size))
    return str(real), st.st_mtime_ns, st.st_size


def parse_file(path: Path) -> ast.Module | None:
    """Parsed module, cached by (real path, mtime, size); None when it cannot be read or parsed
    (`parse_problem` says why)."""
    key = _read_state(path)
    if key is None:
        return None
    tree = _BY_FILE.get(key)
    if tree is None:
        try:  # through the text cache: a reader that has the text shares this parse
            tree = parse_text(path.read_bytes().decode("utf-8"), str(path))
        except (SyntaxError, ValueError, OSError):
            _UNPARSED[key[0]] = key
            return None
        _BY_FILE[key] = tree
    return tree


def unparsed(under: Path) -> list[Path]:
    """Files below `under` that a reader asked for and that did not parse, as they are now
    (`parse_problem` says why). Why: a reader given None reads the file as holding nothing, so a
    verdict read from a damaged file would look like one read from a release without the rule;
    the caller says so instead."""
    root = str(under.resolve())
    out = []
    for real, key in list(_UNPARSED.items()):
        if real.startswith(root + "/") and _read_state(Path(real)) == key:
            out.append(Path(real))
    return sorted(out)


def parse_pruned(path: Path, words: tuple[str, ...]) -> ast.Module | None:
    """`parse_file(path)` for a reader that looks only at functions whose text holds one of
    `words`: the top-level functions and the methods of top-level classes that hold none are
    left out, each as a `pass` on its first line with the rest of its lines blank (every line
    number holds). A large module's parse is most of such a reader's cost (0.5.23
    `schedule_batch.py`, 179 kB, for one method). The whole tree where it is parsed already;
    the whole module where the text does not split that way (the pruned text does not parse).
    Never cached as the module's tree: other readers get the whole one. A syntax error inside
    a left-out function goes unseen: not for a reader that reports a module that does not
    parse (`parse_problem`; the gate's worker file, the backends)."""
    full = _read_state(path)
    if full is None or full in _BY_FILE:
        return parse_file(path)
    tree = _PRUNED.get((full, words))
    if tree is None:
        try:
            text = path.read_bytes().decode("utf-8")
            tree = ast.parse(_pruned_text(text, words), str(path))
        except (SyntaxError, ValueError, OSError):
            return parse_file(path)
        tree._diag_source = text  # type: ignore[attr-defined]
        _PRUNED[(full, words)] = tree
    return tree


def classes_defined(paths: Iterable[Path], names: Iterable[str]) -> dict[Path, set[str]]:
    """The modules among `paths` (in their order) that define one of `names` at top level
    (`class Name` at a line's start), each with those it defines: read as text, no parse (a
    substring test, then one regex pass for the names the module may define)."""
    wanted = sorted(set(names))
    out: dict[Path, set[str]] = {}
    for path in paths if wanted else ():
        text = path.read_text(encoding="utf-8", errors="replace")
        here = [n for n in wanted if f"class {n}" in text]
        if here:
            got = {m.group(1) for m in re.finditer(
                rf"^class ({'|'.join(map(re.escape, here))})\b", text, re.M)}
            if got:
                out[path] = got
    return out


def _pruned_text(text: str, words: tuple[str, ...]) -> str:
    """`text` with each top-level function and top-level class's method (decorators included)
    whose lines hold none of `words` replaced by `pass` and blank lines. A block ends at the
    next code line indented no deeper than its `def` (a closing bracket of a multi-line
    signature excepted); a string whose lines start at that depth ends it early, and the
    pruned text then does not parse (the caller parses the whole module)."""
    lines = text.split("\n")
    n = len(lines)
    in_class, body = False, -1  # inside a top-level class; its body's indentation once seen
    keep_next = False  # a decorator over several lines: the def under it is kept whole
    i = 0
    while i < n:
        line = lines[i]
        code = line.lstrip()
        if not code or code[0] == "#":
            i += 1
            continue
        ind = len(line) - len(code)
        if ind == 0 and code[0] not in "@)]}":  # (a bracket closes a multi-line header)
            in_class, body = code.startswith("class "), -1
        elif in_class and body < 0 and ind > 0:
            body = ind
        at_def = ind == 0 or (in_class and ind == body)
        if not (at_def and (code.startswith(("def ", "async def ", "@")))):
            i += 1
            continue
        j = i
        while j < n and lines[j].lstrip().startswith("@") and \
                len(lines[j]) - len(lines[j].lstrip()) == ind:
            j += 1
        head = lines[j].lstrip() if j < n else ""
        if not head.startswith(("def ", "async def ")) or len(lines[j]) - len(head) != ind:
            if ind == 0 and head.startswith("class "):  # a decorated top-level class
                in_class, body = True, -1
            else:
                keep_next = j > i
            i = j + 1 if j > i else i + 1
            continue
        k = j + 1
        while k < n:
            rest = lines[k].lstrip()
            if rest and rest[0] != "#" and len(lines[k]) - len(rest) <= ind and \
                    rest[0] not in ")]}":
                break
            k += 1
        if keep_next:
            keep_next = False
        elif not any(w in lines[t] for t in range(i, k) for w in words):
            lines[i] = " " * ind + "pass"
            for t in range(i + 1, k):
                lines[t] = ""
        i = k
    return "\n".join(lines)


def parse_text(source: str, filename: str = "<unknown>") -> ast.Module:
    """Parsed text, cached by its digest (raises SyntaxError/ValueError as `ast.parse`); the
    tree's filename is the first reader's (cached trees are read, never compiled)."""
    key = hashlib.blake2b(source.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    tree = _BY_TEXT.get(key)
    if tree is None:
        tree = _BY_TEXT[key] = ast.parse(source, filename)
        tree._diag_source = source  # type: ignore[attr-defined]  # for text prefilters
    return tree


def text_lines(tree: ast.Module, pattern: str) -> list[int] | None:
    """The sorted lines of the module's text (`parse_text` keeps it) where the regex `pattern`
    matches, kept on the tree per pattern; None without the text. A prefilter: a node none of
    whose lines matches holds no such text (`spans_line`)."""
    text = getattr(tree, "_diag_source", None)
    if text is None:
        return None
    memo = getattr(tree, "_diag_text_lines", None)
    if memo is None:
        memo = tree._diag_text_lines = {}  # type: ignore[attr-defined]
    got = memo.get(pattern)
    if got is None:
        starts = getattr(tree, "_diag_line_starts", None)
        if starts is None:
            starts = tree._diag_line_starts = [0] + [  # type: ignore[attr-defined]
                m.end() for m in re.finditer("\n", text)]
        got = memo[pattern] = sorted({bisect.bisect_right(starts, m.start())
                                      for m in re.finditer(pattern, text)})
    return got


def spans_line(node: ast.AST, lines: list[int]) -> bool:
    """Whether one of `lines` (sorted) lies within `node`'s lines (a def's decorators too)."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    i = bisect.bisect_left(lines, first)
    return i < len(lines) and lines[i] <= (node.end_lineno or node.lineno)


def parse_fresh(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """An uncached tree the caller owns (a fix rewrites it, or builds code from a snippet)."""
    return ast.parse(source, filename, mode=mode)


def parse_problem(path: Path) -> tuple[str, int | None] | None:
    """Why a source file cannot be read as a module: ("missing" | "empty" | "does not parse
    (...)", line), or None when it parses to something."""
    if not path.is_file():
        return "missing", None
    tree = parse_file(path)  # cached: the common case costs nothing more
    if tree is not None:
        return ("empty", None) if not tree.body else None
    try:
        data = path.read_bytes()
    except OSError as e:
        return f"unreadable ({e.strerror})", None
    try:
        tree = ast.parse(data, filename=str(path))
    except SyntaxError as e:
        at = f" at line {e.lineno}" if e.lineno else ""
        return f"does not parse (SyntaxError{at}: {e.msg})", e.lineno
    except ValueError as e:
        return f"does not parse ({e})", None
    return ("empty", None) if not tree.body else None


def broken_source(target: Target, e: BaseException) -> tuple[str, str, int | None] | None:
    """(file as users see it, why, line) where `e` is the parse of a file of `target` failing (a
    partial write, an edit: the tree is broken, not diag); None for anything else, and for a file
    that parses as it is now."""
    file = getattr(e, "filename", None) if isinstance(e, SyntaxError) else None
    if not file:
        return None
    path = Path(file)
    try:
        path.resolve().relative_to(target.root.resolve())
    except (ValueError, OSError):
        return None
    why = parse_problem(path)
    return None if why is None else (target.relpath(path), why[0], why[1])


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic cyclic GC while a whole tree is read. Why: parsing and indexing a release
    allocates millions of AST nodes and lists that stay alive in the caches above; each full
    collection walks all of them again, a third of the census's time on 0.5.23 (2.5 s -> 1.7 s
    without). Nothing read here is cyclic garbage; the previous state is restored."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# --------------------------------------------------------------------------- walking

def unparse(node: ast.AST) -> str:
    """`ast.unparse`, kept on the node: fixpoints read the same conditions again."""
    text = getattr(node, "_diag_src", None)
    if text is None:
        text = ast.unparse(node)
        try:
            node._diag_src = text  # type: ignore[attr-defined]
        except AttributeError:
            pass
    return text


def mentions(node: ast.AST, *words: str) -> bool:
    """Whether `unparse(node)` can contain one of `words` (identifiers: they cannot span two
    tokens): some name, attribute, keyword, parameter or string constant under `node` contains
    it. A prefilter for a text test on an unparsed expression: the walk costs a fraction of
    the unparse, which most expressions then skip (~40 ms of a cold census on 0.5.23)."""
    field = _TEXT_FIELD.get
    for n in walk(node):
        cls = n.__class__
        name = field(cls)
        if name is not None:
            text = getattr(n, name) or ""
        elif cls is ast.Constant and n.value.__class__ is str:
            text = n.value
        else:
            continue
        for w in words:
            if w in text:
                return True
    return False


# the identifier a node of each class carries (the parser makes these classes exactly)
_TEXT_FIELD = {ast.Name: "id", ast.Attribute: "attr", ast.keyword: "arg", ast.arg: "arg"}


def _node_fields() -> dict[type, tuple[str, ...]]:
    """Per node class, the fields that can hold a node: `_fields` less those whose ASDL type
    (from the class's docstring, e.g. `Name(identifier id, expr_context ctx)`) is a name, a
    string, a constant or an int. A class whose docstring does not list exactly its `_fields`
    keeps them all."""
    import re

    scalar = {"identifier", "string", "constant", "int"}
    out: dict[type, tuple[str, ...]] = {}
    for name in dir(ast):
        cls = getattr(ast, name)
        if not (isinstance(cls, type) and issubclass(cls, ast.AST) and cls._fields):
            continue
        m = re.fullmatch(r"\w+\((.*)\)", (cls.__doc__ or "").strip())
        if m is None:
            continue
        kinds = {}
        for part in m.group(1).split(","):
            typ, _, field_name = part.strip().rpartition(" ")
            kinds[field_name] = typ.rstrip("?*")
        if set(kinds) == set(cls._fields):
            out[cls] = tuple(f for f in cls._fields if kinds[f] not in scalar)
    return out


_NODE_FIELDS = _node_fields()


def children(node: ast.AST, node_t: type = ast.AST) -> list[ast.AST]:
    """`ast.iter_child_nodes(node)` as a list (the same order)."""
    out: list[ast.AST] = []
    fields = _NODE_FIELDS.get(node.__class__)
    for name in node._fields if fields is None else fields:
        v = getattr(node, name, None)
        if isinstance(v, list):
            out.extend([x for x in v if isinstance(x, node_t)])
        elif isinstance(v, node_t):
            out.append(v)
    return out


def walk(node: ast.AST) -> list[ast.AST]:
    """The nodes of `ast.walk(node)`, in its (breadth-first) order, as a list: 1.5-2x as fast
    (`children` inlined, fields that hold no node skipped)."""
    out = [node]
    extend, append, node_t, fields_of = out.extend, out.append, ast.AST, _NODE_FIELDS.get
    for n in out:  # grows as it goes: breadth-first
        fields = fields_of(n.__class__)
        for name in n._fields if fields is None else fields:
            v = getattr(n, name, None)
            if isinstance(v, list):
                extend([x for x in v if isinstance(x, node_t)])
            elif isinstance(v, node_t):
                append(v)
    return out


def inner(fn: ast.AST) -> list[ast.AST]:
    """The nodes under `fn` in walk order, kept on it (without `fn` itself: no cycle)."""
    out = getattr(fn, "_diag_inner", None)
    if out is None:
        out = fn._diag_inner = walk(fn)[1:]  # type: ignore[attr-defined]
    return out


_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")
# the nodes that hold blocks of statements (every other statement is a leaf)
_COMPOUND = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For,
             ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar, ast.Match,
             ast.ExceptHandler, ast.match_case)


def statements(node: ast.AST) -> list[ast.AST]:
    """Every statement in `node`'s blocks, nested ones (defs, classes) too, in no particular
    order: stores and `global`s are statements, so no walk of the expressions is needed."""
    out: list[ast.AST] = []
    todo = [node]
    while todo:
        n = todo.pop()
        out.append(n)
        if isinstance(n, _COMPOUND):
            for f in _BLOCKS:
                block = getattr(n, f, None)
                if block:
                    todo.extend(block)
    return out


def walk_all(node: ast.AST) -> Iterable[ast.AST]:
    """`ast.walk(node)`: the same nodes in the same (breadth-first) order, `node` first, from
    the walk `inner` keeps on it. For readers of cached trees that walk the same module or
    function again and again (the gate resolves each name by walking its function anew)."""
    return itertools.chain((node,), inner(node))


def find(node: ast.AST, shape: Callable[[ast.AST], bool]) -> Iterator[ast.AST]:
    """Code by shape: every node under `node` (walk order) for which `shape(node)` holds."""
    return (n for n in walk(node) if shape(n))


def methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {m.name: m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}


def find_def(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.ClassDef | None:
    """`Class.method` / `function` / `Class` at the top of a module (None when absent)."""
    scope: list[ast.stmt] = tree.body
    node = None
    for part in qualname.split("."):
        node = next((n for n in scope if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            return None
        scope = node.body
    return node  # type: ignore[return-value]


# --------------------------------------------------------------------------- modules

class ModuleIndex:
    """One parsed module: its top-level functions, classes and `from X import Y` names."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.imports: dict[str, str] = {}  # local name -> dotted module
        self.import_names: dict[str, str] = {}  # local name -> the name in that module
        # Statements only (imports are statements, also lazy ones inside functions and ifs):
        # much cheaper than walking every expression node of a 3000-line backend module.
        stack: list[ast.AST] = list(tree.body)
        while stack:
            n = stack.pop()
            if isinstance(n, ast.ImportFrom):
                if n.module and n.level == 0:
                    for a in n.names:
                        self.imports.setdefault(a.asname or a.name, n.module)
                        self.import_names.setdefault(a.asname or a.name, a.name)
                continue
            for name in ("body", "orelse", "finalbody", "handlers"):
                sub = getattr(n, name, None)
                if isinstance(sub, list):
                    stack.extend(sub)


def index(tree: ast.Module) -> ModuleIndex:
    """The `ModuleIndex` of a (cached) tree, built once per tree."""
    hit = _INDEX.get(id(tree))
    if hit is None or hit[0] is not tree:
        hit = _INDEX[id(tree)] = (tree, ModuleIndex(tree))
    return hit[1]


@dataclass(frozen=True)
class Bound:
    """Where a name used in one module is defined: the module's path and the def."""

    path: Path
    dotted: str
    node: ast.FunctionDef | ast.ClassDef


class Modules:
    """The `sglang.*` modules of one target, by dotted name, parsed on first use."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._mods: dict[str, ModuleIndex | None] = {}

    def relpath(self, path: Path) -> str:
        """`path` relative to the target root (`sglang/srt/...`); paths made by `path()` are
        under the root already, so no filesystem call is needed."""
        try:
            return str(path.relative_to(self.target.root))
        except ValueError:
            return str(path)

    def path(self, dotted: str) -> Path:
        parts = dotted.split(".")
        return self.target.root.joinpath(*parts[:-1], parts[-1] + ".py")

    def module(self, dotted: str) -> ModuleIndex | None:
        if dotted not in self._mods:
            tree = parse_file(self.path(dotted)) if dotted.split(".")[0] == "sglang" else None
            self._mods[dotted] = index(tree) if tree else None
        return self._mods[dotted]

    def resolve(self, mod: ModuleIndex, name: str, depth: int = 0) -> Bound | None:
        """The def a name imported into `mod` (`from sglang.x import f`) binds to, followed
        through re-exports; None for a name defined elsewhere (torch, a kernel package)."""
        dotted = mod.imports.get(name)
        if dotted is None or depth > 4:
            return None
        other = self.module(dotted)
        if other is None:
            return None
        real = mod.import_names.get(name, name)
        node = other.funcs.get(real) or other.classes.get(real)
        if node is not None:
            return Bound(self.path(dotted), dotted, node)
        return self.resolve(other, real, depth + 1)


def callers_of(tree: ast.Module, name: str) -> list[tuple[str, ast.Call]]:
    """Calls of `name` in a module (`name(...)`, `self.name(...)`), with the qualname of the
    function holding each: who passes what to a helper."""
    out: list[tuple[str, ast.Call]] = []

    def visit(scope: str, body: list[ast.stmt]) -> None:
        for st in body:
            if isinstance(st, ast.ClassDef):
                visit(f"{scope}{st.name}.", st.body)
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for n in inner(st):
                    if isinstance(n, ast.Call) and (
                            (isinstance(n.func, ast.Name) and n.func.id == name) or
                            (isinstance(n.func, ast.Attribute) and n.func.attr == name)):
                        out.append((f"{scope}{st.name}", n))
    visit("", tree.body)
    return out


def last_name(e: ast.AST) -> str:
    """The last name of a callee, attribute or name (`self.x.is_hip()` -> `is_hip`): how the
    static audits recognise a flag or a helper whatever object it hangs on."""
    if isinstance(e, ast.Call):
        e = e.func
    if isinstance(e, ast.Attribute):
        return e.attr
    return e.id if isinstance(e, ast.Name) else ""

