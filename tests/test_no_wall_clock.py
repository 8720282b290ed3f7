"""No test may depend on how fast the machine is: every bound a test puts on a wait (an AppTest run, an answer being
written, a browser wait, a polling loop) is a bound on a hang, at least HANG_S, never a claim about speed. Read from
the source, so a short bound is found before a loaded machine finds it."""

import re
from pathlib import Path

from tests.pages import HANG_S

TESTS = Path(__file__).resolve().parent

# What bounds a wait, and the number's unit: an AppTest run, the registry of answers, a browser wait (ms), the
# polling helper's default, and a hand-written deadline loop.
BOUNDS = [
    (re.compile(r"default_timeout=([\d_.]+)"), 1),
    (re.compile(r"\.run\(timeout=([\d_.]+)"), 1),
    (re.compile(r"wait_all_idle\(([\d_.]+)"), 1),
    (re.compile(r"\.(?:wait_for|wait_for_function|expect_download|wait_for_selector)\([^\n]*timeout=([\d_.]+)"), 1000),
    (re.compile(r"def wait_for\([^)]*timeout=([\d_.]+)"), 1),
    (re.compile(r"deadline = time\.monotonic\(\) \+ ([\d_.]+)"), 1),
]


def short_bounds() -> list[str]:
    found = []
    for path in sorted(TESTS.glob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for pattern, per_second in BOUNDS:
                for match in pattern.finditer(line):
                    seconds = float(match.group(1).replace("_", "")) / per_second
                    if seconds < HANG_S:
                        found.append(f"{path.name}:{number}: {seconds:g} s: {line.strip()}")
    return found


def test_every_wait_in_the_tests_is_bounded_only_against_a_hang():
    assert short_bounds() == []
