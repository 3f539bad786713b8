"""The one exception type users see: a message naming the file/line/key and the fix."""


class LingtestError(Exception):
    """A user-facing error: bad input, missing asset, unknown model, wrong parameter.

    The CLI prints ``str(error)`` alone (no traceback), so the message must say what is
    wrong, where (file and line, or parameter key), and how to fix it.
    """


class InputFormatError(LingtestError):
    """Malformed input file; the message names the file and line."""

    def __init__(self, path, line: int | None, problem: str, fix: str = ""):
        where = f"{path}:{line}" if line is not None else f"{path}"
        message = f"{where}: {problem}"
        if fix:
            message += f" ({fix})"
        super().__init__(message)
        self.path, self.line, self.problem = path, line, problem


class FailedCalls(LingtestError):
    """Some model calls of a stage failed. The stage exits non-zero, so DVC does not record
    it as up to date and the next ``make run`` resends just the failed calls (answered ones
    come from the result database); its reports go to ``partial``, not over the last good
    ones in ``reports/<stage>``."""

    def __init__(self, stage: str, summary: dict, partial: str) -> None:
        self.summary, self.partial = summary, partial
        errors, sent = summary["errors"], summary["sent"]
        how = f"all {sent}" if errors == sent else f"{errors} of {sent}"
        super().__init__(
            f"{stage}: {how} LLM calls failed ({summary['sent_by_model']} sent by model); "
            f"reports/{stage} is left as it was, this run's reports (what was answered) are "
            f"in {partial}. Check the model server, then run `make run` (or `lingtest run "
            f"{stage}`) again: only the failed calls are sent again")


def read_utf8(path, fix: str = "save the file as UTF-8") -> str:
    """A user's text file (``lingtest.tasks.core.io.read_input_text``: a regular file within the
    size limit); non-UTF-8 bytes become an InputFormatError naming the line."""
    from lingtest.tasks.core.io import read_input_text

    return read_input_text(path, fix)


def drop_user_error_tracebacks() -> None:
    """From now on a log record of a LingtestError carries no traceback: its message already
    says what is wrong, where and the fix, and Prefect logs every failed task and flow with
    the full stack, which buried that one line (a record factory, as secrets' masking)."""
    import logging

    previous = logging.getLogRecordFactory()
    if getattr(previous, "_lingtest_user_errors", False):
        return

    def factory(*args, **kwargs) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if record.exc_info and isinstance(record.exc_info[1], LingtestError):
            record.exc_info, record.exc_text = None, None
        return record

    factory._lingtest_user_errors = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


drop_user_error_tracebacks()  # on import: the flow's process and every worker alike
