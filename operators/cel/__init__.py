"""operators.cel (interface documented below once complete)."""

from .errors import CELCompileError, CELCostError, CELError, CELEvalError
from .program import evaluate

__all__ = ["CELCompileError", "CELCostError", "CELError", "CELEvalError", "evaluate"]
