"""The one error type for bad input: it names the file, the row and the field."""

from __future__ import annotations


class DataError(ValueError):
    """Malformed input data (trace, node list or config value).

    ``row`` is the 1-based line number in the file as a person sees it in an editor
    (the header, if any, is line 1); ``None`` when the problem is the whole file.
    """

    def __init__(self, path, row: int | None, field: str | None, problem: str):
        self.path, self.row, self.field, self.problem = str(path), row, field, problem
        where = str(path)
        if row is not None:
            where += f", line {row}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {problem}")
