"""Where the playbooks and inventories are, installed or run from the repo.

The repository keeps them at its top level (playbooks/, inventories/). The package reaches them through
`cutover/data/`, whose entries are symlinks into the repository; building a wheel copies the files behind those
links, so the same paths resolve inside an installed wheel. The default gate policies are the `checks`
package's own data: `checks.policy.DEFAULT_POLICY_PATH` finds them.
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
