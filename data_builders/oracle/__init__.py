"""The When2Tool oracle (docs/guide.md#when2tool-the-oracle): a mechanical policy, its accuracy report and its SFT
export."""
from .base import OracleParseError
from .core import NON_DETERMINISTIC, OracleRun, OracleStep, run_oracle

__all__ = ["NON_DETERMINISTIC", "OracleParseError", "OracleRun", "OracleStep", "run_oracle"]
