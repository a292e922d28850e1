"""The configuration options judged against the release under audit, before any probe runs.

Why here and not in click types: the names an option accepts are the release's (its attention
registry, its `SpeculativeAlgorithm` enum), known only once `--sglang` is resolved. A name the
release does not know is a usage error that lists the known ones, never a silent `warn`.
"""

from __future__ import annotations

import ast

from diag.errors import EXIT_USAGE, DiagError, echo
from diag.target import Target

SPEC_INFO = "srt/speculative/spec_info.py"
ALIAS_FILES = ("srt/speculative/spec_registry.py", "srt/server_args.py")


def check_config(target: Target, platform: str, attention_backend: str | None,
                 speculative_algorithm: str | None) -> None:
    """DiagError (exit 2) for a name the release does not know; nothing when it cannot tell
    (the probes then report what they could not read)."""
    release = f"sglang {target.version or '(unknown version)'}"
    if attention_backend is not None:
        known = backend_names(target, platform)
        if known and attention_backend not in known:
            raise DiagError(f"--attention-backend {echo(attention_backend)}: {release} has no such "
                            f"attention backend (known: {', '.join(sorted(known))})",
                            exit_code=EXIT_USAGE)
    if speculative_algorithm is not None:
        known = algorithm_names(target)
        if known and speculative_algorithm.upper() not in known:
            raise DiagError(f"--speculative-algorithm {echo(speculative_algorithm)}: not a builtin "
                            f"algorithm of {release} (known: {', '.join(sorted(known))}; for "
                            "one a plugin registers, leave the option out)",
                            exit_code=EXIT_USAGE)


def backend_names(target: Target, platform: str) -> set[str]:
    """Every attention-backend name the release accepts (its registry, its draft factory, the
    aliases its argument handling rewrites)."""
    from diag.probes.backends import backend_map

    try:
        return set(backend_map(target, platform))
    except (OSError, SyntaxError, ValueError):
        return set()


def algorithm_names(target: Target) -> set[str]:
    """The members of the release's `SpeculativeAlgorithm` enum but NONE, plus NEXTN where the
    release spells it (an alias of EAGLE). Empty when the enum is not found."""
    try:
        tree = ast.parse(target.file(SPEC_INFO).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)
                and n.name == "SpeculativeAlgorithm"):
        for st in cls.body:
            if isinstance(st, ast.Assign):
                names |= {t.id for t in st.targets if isinstance(t, ast.Name) and t.id.isupper()}
    names.discard("NONE")
    if names:
        for rel in (SPEC_INFO, *ALIAS_FILES):
            try:
                if '"NEXTN"' in target.file(rel).read_text(encoding="utf-8", errors="replace"):
                    names.add("NEXTN")
                    break
            except OSError:
                continue
    return names
