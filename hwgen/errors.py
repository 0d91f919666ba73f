"""The one exception type for user mistakes.

Anything a user can cause (a bad file, an unsupported operator, a wrong input shape)
raises :class:`HwgenError` with a one-line message naming what and where. The CLI
prints it as ``hwgen: error: <message>`` and exits with code 2.
"""
import warnings


class HwgenError(Exception):
    """A user-facing error: one line, names the node / op / file and the reason."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class HwgenWarning(UserWarning):
    """Something the user asked for that hwgen did differently and went on (e.g. more
    samples than the input holds): one line, issued with :func:`warnings.warn`. The CLI
    prints it as ``hwgen: warning: <message>``; in Python it is an ordinary warning."""


def warn(message: str):
    """Issue ``message`` (made one line) as a :class:`HwgenWarning`."""
    warnings.warn(" ".join(str(message).split()), HwgenWarning, stacklevel=3)
