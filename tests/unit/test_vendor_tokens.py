"""Vendor knowledge lives in `backends/`, never in `ray_accel/`.

Every `.py` under `ray_accel/` is read with `ast`: its string literals (the
parts of f-strings too) and its names (identifiers, attribute names,
definitions, arguments, imports, keywords) must not carry a vendor prefix.
Docstrings and comments may mention vendor variables (they explain why),
so they are not read. Ray's own words (`GPU`, `num_gpus`, `use_gpu`) and
ray-accel's own `RAYACCEL_*` variables are allowed. The scanner itself is
checked on every run against a tree it plants tokens in.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PREFIXES = ("CUDA_", "NEURON_RT_", "NEURON_PJRT_", "PJRT_", "XLA_", "NCCL_", "HIP_", "ROCR_", "FI_EFA", "TORCHELASTIC_")
OWN = "RAYACCEL_"
# A prefix at the start of a word, or after an underscore inside one
# (`RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES` names a vendor variable too).
_VENDOR = re.compile(r"(?:^|_)(?:" + "|".join(re.escape(p) for p in PREFIXES) + ")")
_WORD = re.compile(r"[A-Za-z0-9_]+")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes that are docstrings (module, class, function)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                out.add(id(first.value))
    return out


def _names(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name
    elif isinstance(node, ast.arg):
        yield node.arg
    elif isinstance(node, ast.alias):
        yield node.name
        if node.asname:
            yield node.asname
    elif isinstance(node, ast.keyword) and node.arg:
        yield node.arg
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        yield from node.names


def vendor_words(text: str) -> list[str]:
    """The words of `text` that carry a vendor prefix (ray-accel's own excepted)."""
    return [w for w in _WORD.findall(text) if not w.startswith(OWN) and _VENDOR.search(w)]


def scan(root: Path) -> list[str]:
    """`file:line:token` for every vendor token in the code under `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        docs = _docstrings(tree)
        rel = path.relative_to(root.parent)
        for node in ast.walk(tree):
            texts: list[str] = []
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                texts.append(node.value)
            texts += list(_names(node))
            line = getattr(node, "lineno", 0)
            found += [f"{rel}:{line}:{word}" for text in texts for word in vendor_words(text)]
    return sorted(set(found))


def test_the_product_carries_no_vendor_token() -> None:
    found = scan(ROOT / "ray_accel")
    assert found == [], "vendor knowledge belongs in backends/:\n" + "\n".join(found)


PLANTED = '''"""Module docstring: CUDA_VISIBLE_DEVICES is mentioned, not used."""
import os

# A comment naming NEURON_RT_VISIBLE_CORES is fine.
MASK = "CUDA_VISIBLE_DEVICES"
NCCL_DEBUG_LEVEL = 1


class Runtime:
    """A class docstring naming PJRT_DEVICE."""

    def env(self, rank: int) -> str:
        """A function docstring naming TORCHELASTIC_RUN_ID."""
        os.environ.setdefault("RAYACCEL_MOCK", "x")  # our own prefix
        return f"{rank}:NEURON_PJRT_PROCESS_INDEX" + os.environ.get("RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES", "")


def use(gpu: int) -> dict[str, int]:
    return {"num_gpus": gpu, "use_gpu": 1, "GPU": 2, "share_cuda_visible_devices": 0}
'''


def test_the_scanner_finds_planted_tokens_and_leaves_docstrings_and_comments(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "planted.py").write_text(PLANTED)
    assert scan(pkg) == [
        "pkg/sub/planted.py:15:NEURON_PJRT_PROCESS_INDEX",
        "pkg/sub/planted.py:15:RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES",
        "pkg/sub/planted.py:5:CUDA_VISIBLE_DEVICES",
        "pkg/sub/planted.py:6:NCCL_DEBUG_LEVEL",
    ]


def test_words_are_matched_by_prefix_only() -> None:
    assert vendor_words("set CUDA_VISIBLE_DEVICES=0 and FI_EFA_FORK_SAFE") == [
        "CUDA_VISIBLE_DEVICES",
        "FI_EFA_FORK_SAFE",
    ]
    assert vendor_words("RAYACCEL_NEURON_RT_ROOT ray::XLA GPU num_gpus MYCUDA_X cuda_visible") == []
