"""Assertions shared by the loader tests."""

from jaxsched.errors import DataError


def assert_names(err: DataError, path, line, field):
    """The message names the file, the 1-based line and the field, and so do the attributes."""
    assert err.path == str(path)
    assert err.row == line
    assert err.field == field
    where = f"{path}"
    if line is not None:
        where += f", line {line}"
    if field is not None:
        where += f", field '{field}'"
    assert str(err).startswith(where + ": "), str(err)
