"""The repository stands alone: nothing in it points at what a reader does not
have. Every text file (what `git ls-files` lists, untracked files that git
does not ignore included; a tree without git is walked, skipping `.git`,
`.venv*` and the caches) is searched line by line for three kinds of
reference; the rules are `RULES` below and docs/design.md ("A repository that
stands alone") says them in words. This text describes them without
spelling out a match, since the search reads this file too:

- an absolute path into a private folder of the machine the code was written
  on: `/work`, `/root`, `/home/<name>` or `/Users/<name>`, where a `<name>`
  that is a placeholder (`<user>`, `$USER`) makes it an example. System paths
  (`/etc/ray`, `/opt/aws/neuron/bin`, `/sys`, `/dev`, `/proc`, `/tmp`) and
  `~/.ray` name the same thing on every machine and stay allowed;
- a relative path that climbs out of the repository (one or more `../`) into
  a neighbour's `shared`, `notes`, `tools` or `briefs` folder;
- a number of a tracker that is not in the repository: the word issue or
  acceptance followed by a number (`issue N`, `issues N-M`, `acceptance N.M`),
  a bare parenthesised point number `(N.M)` with a one-digit M (a call such
  as `sleep(0.5)` is not one, nor a version such as `(2.60)`), a comment
  heading numbered `# --- N.M:`, and test names that start with
  `test_acceptance` or `test_issue`. An upstream citation names its
  repository, `ray#46163` or `ray-project/ray#65070`, and stays allowed.

The same search runs on a tree with one planted violation of each kind, so a
rule that stops matching fails here rather than letting the repository drift.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Folders a walk never enters: git's own, virtual environments, and what
# .gitignore names (caches, builds, Ray's session files), which record this
# machine's absolute paths by design.
SKIP_DIRS = re.compile(
    r"^(\.git|\.venv.*|__pycache__|\.mypy_cache|\.ruff_cache|\.pytest_cache|\.hypothesis|.*\.egg-info"
    r"|build|dist|tmp|ray_results|\.ray-accel|\.whl)$"
)

PLACEHOLDER = r"(<[^>/\s]+>|\$\{?USER\}?)"
RULES: dict[str, re.Pattern[str]] = {
    "machine path": re.compile(
        r"(?<![\w.~-])/(work|root)/"
        rf"|(?<![\w.~-])/(home|Users)/(?!{PLACEHOLDER}/)[^/\s\"'`]+/"
    ),
    "path out of the repository": re.compile(r"(\.\./)+(shared|notes|tools|briefs)\b"),
    "tracker issue": re.compile(r"(?<![\w/#-])issues?\s*#?\d+", re.IGNORECASE),
    "tracker acceptance": re.compile(r"\bacceptance\s*#?\d+", re.IGNORECASE),
    "tracker point": re.compile(r"(?<![\w.])\(\d{1,2}\.\d\)"),
    "numbered heading": re.compile(r"#\s*-{3,}\s*\d{1,2}\.\d{1,2}:\s"),
    "tracker test name": re.compile(r"\btest_(acceptance|issues?)_", re.IGNORECASE),
}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.text.strip()}"


def find_in_text(path: str, text: str) -> list[Finding]:
    """Every match of every rule in one file's text."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        found += [Finding(path, number, rule, line) for rule, pat in RULES.items() if pat.search(line)]
    return found


def listed_files(root: Path) -> list[Path]:
    """The repository's files: git's list in a checkout, else (no checkout,
    or no git to ask) a walk."""
    if (root / ".git").exists():
        try:
            out = subprocess.run(
                ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                capture_output=True,
                check=True,
            ).stdout
        except (OSError, subprocess.CalledProcessError):
            pass
        else:
            return [root / name for name in out.decode().split("\0") if name]
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not SKIP_DIRS.match(d)]
        files += [Path(folder) / n for n in names]
    return files


def search(root: Path) -> list[Finding]:
    """Every finding in the text files under root; binary files are skipped."""
    found = []
    for path in sorted(listed_files(root)):
        if not path.is_file():
            continue  # listed by git but deleted in the work tree
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += find_in_text(str(path.relative_to(root)), text)
    return found


def test_the_repository_cites_nothing_outside_itself() -> None:
    found = search(ROOT)
    assert not found, "references a reader of the repository does not have:\n" + "\n".join(map(str, found))


# One planted violation of each kind, and allowed text beside it. The
# strings are assembled so that this file itself holds none of them.
WORK, SHARED, ISSUE, ACC = "/wo" + "rk", "../sha" + "red", "iss" + "ue", "accept" + "ance"
PLANTED: dict[str, tuple[str, str]] = {
    "docs/notes.md": ("machine path", f"see {WORK}/notes/ray-internals.md for why\n"),
    "ray_accel/home.py": ("machine path", "# from /ho" + "me/alice/src/x.py\n"),
    "pkg/root.txt": ("machine path", "token in /ro" + "ot/.ray/auth_token\n"),
    "tests/shared.py": ("path out of the repository", f'FACTS = "{SHARED}/research/ray.md"\n'),
    "README.md": ("tracker issue", f"Fixed in {ISSUE} 17.\n"),
    "Makefile": ("tracker issue", f"# {ISSUE}s 11-17 need this\n"),
    "tests/test_a.py": ("tracker acceptance", f'"""Ranges in a mask ({ACC} 3)."""\n'),
    "tests/test_b.py": ("tracker point", "# names that could be paths (17" + ".4)\n"),
    "tests/test_c.py": ("numbered heading", "# ---------------- 17" + ".1: never signal\n"),
    "tests/test_d.py": ("tracker test name", f"def test_{ACC}_13_5_sigint() -> None: ...\n"),
}
ALLOWED = (
    "Fixed upstream (ray#46163, ray-project/ray#65070, kubernetes/enhancements#5055).\n"
    "The token is in ~/.ray/auth_token or /etc/ray/auth_token; neuron-ls in /opt/aws/neuron/bin.\n"
    "Under /sys/devices/virtual/neuron_device, /dev/neuron0, /proc/1/stat and /tmp/x.\n"
    "A home such as /home/<user>/.ray or /home/$USER/.ray is an example.\n"
    "time.sleep(0.5); f(2.0); Ray 2.60: ray._private; torch-xla 2.9; installed Ray (2.60).\n"
    "# 2.60: a comment line that starts with a version.\n"
    "The acceptance test of a request; an issue of the design.\n"
)


def _plant(root: Path) -> None:
    for rel, (_, text) in PLANTED.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "docs" / "allowed.md").write_text(ALLOWED)
    # A cache beside them records machine paths by design and is never read.
    (root / ".mypy_cache").mkdir()
    (root / ".mypy_cache" / "x.json").write_text(f'{{"path": "{WORK}/x.py"}}')
    (root / "blob.bin").write_bytes(b"\xff\xfe" + f"{ISSUE} 17".encode("utf-16-le"))


def test_the_search_finds_one_planted_violation_of_each_kind(tmp_path: Path) -> None:
    _plant(tmp_path)
    found = {(f.path, f.rule) for f in search(tmp_path)}
    assert found == {(rel, rule) for rel, (rule, _) in PLANTED.items()}
    assert {rule for _, (rule, _) in PLANTED.items()} == set(RULES), "every rule has a planted case"


@pytest.mark.parametrize("line", ALLOWED.splitlines())
def test_allowed_text_is_not_a_finding(line: str) -> None:
    assert find_in_text("allowed.md", line) == []
