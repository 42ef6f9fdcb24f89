"""Count the bad-input catalogue (tests/badinput.py) by class.

    python tests/badinput_count.py [paths...]   (default: tests/unit tests/integration)

Collects (does not run) every test marked ``badinput`` and prints, per class,
how many test cases feed a bad input: each parametrized case once. Hypothesis
property tests are counted once each and also listed with how many examples
each tries per run. Exit 1 if a class has no test.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.badinput import CLASSES, item_class  # noqa: E402


class _Collect:
    def __init__(self) -> None:
        self.items: list[pytest.Item] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.items = list(session.items)


def _examples(item: pytest.Item) -> int | None:
    """How many examples a hypothesis test tries per run, or None if it is not one."""
    obj = getattr(item, "obj", None)
    if not getattr(obj, "is_hypothesis_test", False):
        return None
    settings = getattr(obj, "_hypothesis_internal_use_settings", None)
    return int(settings.max_examples) if settings is not None else 100


def main(argv: list[str]) -> int:
    paths = argv or ["tests/unit", "tests/integration"]
    os.chdir(ROOT)
    collector = _Collect()
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = pytest.main(["--collect-only", "-q", "-p", "no:randomly", "-m", "badinput", *paths], plugins=[collector])
    if code not in (0, 5):
        print(out.getvalue(), file=sys.stderr)
        return int(code)
    cases: Counter[str] = Counter()
    props: list[tuple[str, str, int]] = []
    for item in collector.items:
        cls = item_class(item)
        if cls is None:
            continue
        cases[cls] += 1
        n = _examples(item)
        if n is not None:
            props.append((cls, item.nodeid, n))
    width = max(len(t) for t in CLASSES.values())
    print(f"{'class':<{width}}  cases  (of which property tests)")
    for key, title in CLASSES.items():
        p = sum(1 for c, _, _ in props if c == key)
        print(f"{title:<{width}}  {cases[key]:>5}  ({p})")
    print(f"{'total':<{width}}  {sum(cases.values()):>5}  ({len(props)})")
    if props:
        print(f"\nproperty tests ({len(props)}; each counted once above), examples per run:")
        for cls, nodeid, n in sorted(props):
            print(f"  {n:>4}  {cls:<10} {nodeid}")
    missing = [k for k in CLASSES if not cases[k]]
    if missing:
        print(f"\nno test for: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
