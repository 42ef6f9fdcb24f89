"""Code lines under a folder: not blank, not a comment, not a docstring.

`python tests/codesize.py ray_accel` prints the total and the largest modules.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path


def docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    lines.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return lines


def code_lines(source: str) -> int:
    skip = docstring_lines(ast.parse(source))
    code: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            continue
        if tok.type == tokenize.ENDMARKER:
            continue
        for line in range(tok.start[0], tok.end[0] + 1):
            if line not in skip:
                code.add(line)
    return len(code)


def count(root: Path) -> dict[Path, int]:
    return {p: code_lines(p.read_text()) for p in sorted(root.rglob("*.py"))}


def main(argv: list[str]) -> int:
    for folder in argv or ["ray_accel"]:
        sizes = count(Path(folder))
        for path, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:15]:
            print(f"{n:6d}  {path}")
        print(f"{sum(sizes.values()):6d}  code lines under {folder}/ ({len(sizes)} modules)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
