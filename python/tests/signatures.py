"""The one way the engine-contract tests write a signature, to compare a backend or a stub
with the table recorded from the engine's published source."""

import inspect


def params(f) -> str:
    """A signature without annotations: '(a, b=None, *, c=1)', self and cls omitted."""
    out, star = [], False
    for p in inspect.signature(f).parameters.values():
        if p.name in ("self", "cls"):
            continue
        if p.kind == p.KEYWORD_ONLY and not star:
            out.append("*")
            star = True
        s = ("*" if p.kind == p.VAR_POSITIONAL else "**" if p.kind == p.VAR_KEYWORD else "") + p.name
        if p.default is not p.empty:
            s += "=" + repr(p.default)
        out.append(s)
    return "(" + ", ".join(out) + ")"
