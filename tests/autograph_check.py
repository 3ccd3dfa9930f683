"""
Catch AutoGraph's silent fallback. When AutoGraph cannot convert a function called under
``tf.function`` (source code it cannot find or parse, e.g. two lambdas on one line, or a language
feature it does not support), it logs "AutoGraph could not transform <function> and will run it
as-is" as a warning on the ``tensorflow`` Python logger (``tf.get_logger()``; ``tf_logging`` via
``autograph/utils/ag_logging.py``, echoed to stdout only in interactive sessions) and traces the
function as plain Python: its ``if``/``for`` on tensors then run once at trace time, or fail.
``tests/conftest.py`` turns that warning into a test failure.
"""

import contextlib
import logging
from collections.abc import Iterator

AUTOGRAPH_FALLBACK = "AutoGraph could not transform"
# TensorFlow's Python logger (tf.get_logger()); absl's too, in case a version routes through it
LOGGER_NAMES = ("tensorflow", "absl")


class AutoGraphFallbackHandler(logging.Handler):
    """Collects the messages of AutoGraph's "could not transform" warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if AUTOGRAPH_FALLBACK in message:
            self.messages.append(message)


@contextlib.contextmanager
def catch_autograph_fallbacks() -> Iterator[list[str]]:
    """
    Within the block, collect every AutoGraph fallback warning into the yielded list. The
    handler sits on the loggers themselves (not the root logger), so it sees the records even if
    propagation is switched off, and a logger set above WARNING is lowered to WARNING meanwhile.
    """
    handler = AutoGraphFallbackHandler()
    loggers = [logging.getLogger(name) for name in LOGGER_NAMES]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        if logger.getEffectiveLevel() > logging.WARNING:
            logger.setLevel(logging.WARNING)
    try:
        yield handler.messages
    finally:
        for logger, level in zip(loggers, levels):
            logger.removeHandler(handler)
            logger.setLevel(level)


def failure_message(messages: list[str]) -> str:
    return (
        "AutoGraph could not convert a function and ran it as plain Python (tensor-dependent "
        "control flow in it is not staged). Make it convertible, or decorate it with "
        "@tf.autograph.experimental.do_not_convert if it has no such control flow. TensorFlow "
        "said:\n\n" + "\n\n".join(messages)
    )
