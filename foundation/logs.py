"""Structured JSON log lines on stderr: one object per line with `msg` and extra fields."""

from __future__ import annotations

import json
import logging
import time

__all__ = ["JsonFormatter", "logger"]

_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}

logger = logging.getLogger("brain")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created)),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)
