"""Where the playbooks, inventories and default gate policies are, installed or run from the repo.

The repository keeps them at its top level (playbooks/, inventories/, checks/policies/). The package reaches
them through `cutover/data/`, whose entries are symlinks into the repository; building a wheel copies the
files behind those links, so the same paths resolve inside an installed wheel.
"""

from __future__ import annotations

from pathlib import Path

_DATA = Path(__file__).resolve().parent / "data"


def playbooks_dir() -> Path:
    return _DATA / "playbooks"


def inventories_dir() -> Path:
    return _DATA / "inventories"


def playbook(name: str) -> Path:
    """Absolute path of a packaged playbook, e.g. playbook("stage.yml")."""
    return playbooks_dir() / name


def policies_dir() -> Path:
    """The default gate policies of the `checks` package (shipped as its package data)."""
    import importlib.util

    spec = importlib.util.find_spec("checks")
    return Path(list(spec.submodule_search_locations)[0]).resolve() / "policies"
