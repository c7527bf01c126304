"""Every name the project's Python uses is defined: pyflakes' undefined-name check over cutover/, checks/,
kernel_ext/ and playbooks/library/. A name left behind by a rename fails only when its line runs, and some lines
run only on hardware CI does not have (a second GPU, say), so it is caught here instead."""

from pathlib import Path

from pyflakes import api, messages, reporter

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cutover", "checks", "kernel_ext", "playbooks/library")
UNDEFINED = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)


class Collect(reporter.Reporter):
    """Keeps pyflakes' findings instead of printing them."""

    def __init__(self):
        self.found = []

    def unexpectedError(self, filename, message):
        self.found.append(f"{filename}: {message}")

    def syntaxError(self, filename, message, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: {message}")

    def flake(self, message):
        if isinstance(message, UNDEFINED):
            self.found.append(str(message))


def test_no_undefined_names():
    collect = Collect()
    files = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    assert len(files) > 50
    for path in files:
        api.checkPath(str(path), collect)
    assert collect.found == []
