"""The one exception type for user mistakes.

Anything a user can cause (a bad file, an unsupported operator, a wrong input shape)
raises :class:`HwgenError` with a one-line message naming what and where. The CLI
prints it as ``hwgen: error: <message>`` and exits with code 2.
"""


class HwgenError(Exception):
    """A user-facing error: one line, names the node / op / file and the reason."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))
