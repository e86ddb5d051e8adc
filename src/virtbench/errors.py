"""Errors a user can act on: each carries what went wrong and what to do."""


class UserError(Exception):
    """A problem with the user's input or machine, shown without a traceback."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class MissingTool(UserError):
    """A program virtbench needs is not installed."""

    def __init__(self, tool: str, package: str, why: str = ""):
        what = f"'{tool}' is not installed" + (f" ({why})" if why else "")
        super().__init__(what, f"install it with: apt-get install {package}")
        self.tool = tool
        self.package = package


class SuiteError(UserError):
    """A suite file is wrong; names the file, line and key."""

    def __init__(self, path: str, line: int | None, key: str, problem: str, choices=None):
        where = f"{path}:{line}" if line else str(path)
        msg = f"{where}: key '{key}': {problem}"
        hint = None
        if choices:
            hint = "valid choices: " + ", ".join(str(c) for c in choices)
        super().__init__(msg, hint)
        self.path, self.line, self.key = path, line, key


class SuiteErrors(SuiteError):
    """Several problems in one suite file, each with its file:line, reported together (the first one's
    path, line and key stay on the exception)."""

    def __init__(self, errors: list[UserError]):
        first = next((e for e in errors if isinstance(e, SuiteError)), None)
        UserError.__init__(self, f"{len(errors)} problems in the suite file:\n  " + "\n  ".join(
            e.message + (f" ({e.hint})" if e.hint else "") for e in errors), "fix each of them; they are in file order")
        self.errors = errors
        self.path, self.line, self.key = (first.path, first.line, first.key) if first else (None, None, None)


class WorkloadFailed(Exception):
    """A workload repetition failed; recorded as data, the run continues."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class ConditionUnavailable(Exception):
    """A condition cannot be made where it was asked for; the cell is skipped with this reason.
    Here, below conditions and drivers, so both raise it without importing each other."""
