"""The one exception family of cutover.

Library code raises these with a message that says what is wrong and what to do about it; only the CLI
boundary turns them into exit codes. Every subclass names its own exit code (`class X(CutoverError, exit_code=N)`)
so scripts can tell them apart.
"""


class CutoverError(Exception):
    """Base of every error cutover reports to an operator."""

    exit_code = 1

    def __init_subclass__(cls, *, exit_code: int | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if exit_code is not None:
            cls.exit_code = exit_code

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  fix: {self.hint}" if self.hint else self.message


class ConfigError(CutoverError, exit_code=2):
    """An inventory, config or policy file is missing, unreadable or has a bad field."""


class BuildError(CutoverError, exit_code=3):
    """The kernel release could not be built (no nvcc, compile error, bad sources)."""


class HostError(CutoverError, exit_code=4):
    """A host could not be reached, or refused or failed an action."""


class LockHeldError(CutoverError, exit_code=5):
    """Another operator holds the host lock."""


class PhaseError(CutoverError, exit_code=6):
    """The requested action is not allowed in the host's current phase."""


class GateFailedError(CutoverError, exit_code=7):
    """A shadow or promote gate failed; the hosts were returned to Triton."""


class AckTimeoutError(CutoverError, exit_code=8):
    """Not every rank acknowledged a control-file generation in time."""
