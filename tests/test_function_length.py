"""No function in ``src/repens/`` is longer than :data:`MAX_LINES` lines.

Counted from ``def`` to the function's last line, docstring included (``ast``'s
``end_lineno - lineno + 1``). The few left over are named in :data:`KNOWN_LONG` with the
reason; the test guards every other function, and fails when a known one gets short (so
the list only shrinks).
"""

import ast
from pathlib import Path

MAX_LINES = 60
SRC = Path(__file__).resolve().parents[1] / "src" / "repens"

# "module.function" (module path relative to src/repens, dotted) -> why it is still long
KNOWN_LONG: dict[str, str] = {}


def _function_lengths() -> dict[str, int]:
    lengths: dict[str, int] = {}
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{module}.{node.name}"
                lengths[name] = max(lengths.get(name, 0), node.end_lineno - node.lineno + 1)
    return lengths


def test_no_function_over_the_limit():
    long = {name: n for name, n in _function_lengths().items() if n > MAX_LINES and name not in KNOWN_LONG}
    assert not long, f"functions over {MAX_LINES} lines (split them into named helpers): {long}"


def test_known_long_are_still_long():
    lengths = _function_lengths()
    short = sorted(name for name in KNOWN_LONG if lengths.get(name, 0) <= MAX_LINES)
    assert not short, f"no longer over {MAX_LINES} lines (or gone): drop them from KNOWN_LONG: {short}"
