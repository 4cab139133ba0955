"""A Go ``text/template`` engine: the lexer, parser, executor, builtins and Go's ``fmt`` printing.

Only what Tinkerbell's templates can use is exposed: JSON-like data, Go's builtin functions and
Tinkerbell's four (``contains``, ``hasPrefix``, ``hasSuffix``, ``formatPartition``), and
``missingkey=error``.
"""

from capa_py.tinkerbell.gotemplate.errors import TemplateError
from capa_py.tinkerbell.gotemplate.exec import FUNCS, execute
from capa_py.tinkerbell.gotemplate.parse import parse

__all__ = ["FUNCS", "TemplateError", "execute", "parse"]
