"""What a worker or admin token may be: printable ASCII without white space, at most
MAX_TOKEN_CHARS. A token travels in gRPC metadata (`authorization: Bearer <token>`),
which cannot carry anything else: gRPC would fail the call on the client's side with
an error that names neither the token nor where it came from. So every place that
reads a token (an option, a variable, a file) checks it with `token_problem` and names
its source in the one line it prints."""

from __future__ import annotations

from aiperf.limits import MAX_TOKEN_CHARS


def token_problem(token: str) -> str:
    """Why `token` cannot be a token ("" when it can): empty, too long, or a character
    outside printable ASCII (a space, a newline, a control or non-ASCII character)."""
    if not token:
        return "it is empty"
    if len(token) > MAX_TOKEN_CHARS:
        return f"it has {len(token)} characters, more than {MAX_TOKEN_CHARS}"
    for i, c in enumerate(token):
        if not "!" <= c <= "~":
            return (f"character {i + 1} is U+{ord(c):04X}; a token is printable ASCII without white space "
                    "(a copy-paste may have added a newline or a typographic character)")
    return ""


def check_token(token: str, source: str) -> str:
    """`token`, or ValueError naming `source` (an option, a variable or a file) and the problem."""
    problem = token_problem(token)
    if problem:
        raise ValueError(f"the token from {source} cannot be used: {problem}")
    return token


__all__ = ["check_token", "token_problem"]
