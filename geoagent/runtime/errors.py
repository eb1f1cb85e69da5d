"""Exception helpers shared by the HTTP layer and the API clients.

:class:`PicklableError` makes an exception whose constructor takes required arguments survive
:mod:`pickle` (process pools, multiprocessing queues, ``concurrent.futures`` hand exceptions across
processes by pickling them). ``BaseException.__reduce__`` rebuilds an exception as ``cls(*self.args)``;
our errors pass one formatted message to ``super().__init__`` but take several required arguments
(``PermanentHTTPError(status, url, body_excerpt)``), so unpickling called ``__init__`` with the message
alone and raised ``TypeError`` (or, for a ``float`` argument, a format error).
"""

from __future__ import annotations

import copyreg
from typing import Any


class PicklableError(Exception):
    """Mixin: pickle by state, not by re-running ``__init__``.

    The pickled form is the class, ``self.args`` (the message the constructor formatted) and the instance
    ``__dict__`` (the attributes the constructor set), restored without calling ``__init__``. It therefore
    holds exactly what the live exception holds: the HTTP layer's errors carry only redacted URLs and
    scrubbed body text (:func:`geoagent.runtime.http.redact_url`), never a request header or API key, so
    their pickled form carries none either. Put it first among the bases of a base class (``class
    HttpError(PicklableError, RuntimeError)``); subclasses inherit it.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        """``(copyreg.__newobj__, (cls, *args), __dict__)``: ``BaseException.__new__`` sets ``args``,
        ``BaseException.__setstate__`` restores the attributes; ``__init__`` is not called."""
        return copyreg.__newobj__, (type(self), *self.args), dict(self.__dict__)
