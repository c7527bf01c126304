"""The one exception family of cutover.

Library code raises these with a message that says what is wrong and what to do about it; only the CLI
boundary turns them into exit codes. Every subclass carries its own exit code so scripts can tell them apart.
"""


class CutoverError(Exception):
    """Base of every error cutover reports to an operator."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  fix: {self.hint}" if self.hint else self.message


class ConfigError(CutoverError):
    """An inventory, config or policy file is missing, unreadable or has a bad field."""

    exit_code = 2


class BuildError(CutoverError):
    """The kernel release could not be built (no nvcc, compile error, bad sources)."""

    exit_code = 3


class HostError(CutoverError):
    """A host could not be reached, or refused or failed an action."""

    exit_code = 4


class LockHeldError(CutoverError):
    """Another operator holds the host lock."""

    exit_code = 5


class PhaseError(CutoverError):
    """The requested action is not allowed in the host's current phase."""

    exit_code = 6


class GateFailedError(CutoverError):
    """A shadow or promote gate failed; the hosts were returned to Triton."""

    exit_code = 7


class AckTimeoutError(CutoverError):
    """Not every rank acknowledged a control-file generation in time."""

    exit_code = 8
