"""The When2Tool oracle (SPEC §8): a mechanical policy, its accuracy report and its SFT export."""
from .base import OracleParseError
from .core import NON_DETERMINISTIC, OracleRun, OracleStep, run_oracle

__all__ = ["NON_DETERMINISTIC", "OracleParseError", "OracleRun", "OracleStep", "run_oracle"]
