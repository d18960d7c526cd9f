"""What an evaluation returns: settings, per-dataset metrics and records, and their files on disk."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.eval.report import markdown_table, settings_lines

METRICS_JSON = "metrics.json"
METRICS_MD = "metrics.md"


@dataclass
class EvalResults:
    """What ``evaluate`` returns: the settings header, per-dataset metrics, every record."""

    settings: dict[str, Any]
    metrics: dict[str, dict[str, float]]
    records: list[dict[str, Any]]
    out_dir: Path | None = None
    seconds: float = 0.0
    resumed: int = 0  # records found in an existing results file
    extra: dict[str, Any] = field(default_factory=dict)

    def table_rows(self) -> list[dict[str, Any]]:
        """One row per dataset for ``report.markdown_table``."""
        retriever = (self.settings.get("retriever") or {}).get("backend") or "–"
        return [
            {"dataset": name, "mode": self.settings["mode"], "retriever": retriever, **m}
            for name, m in self.metrics.items()
        ]

    def to_markdown(self) -> str:
        table = markdown_table(self.table_rows(), ["dataset", "mode", "retriever"])
        return table + "\n" + "\n".join(settings_lines(self.settings)) + "\n"

    def write(self, out: Path) -> None:
        """``metrics.json`` (settings, metrics, seconds) and ``metrics.md`` (the table) in ``out``."""
        summary = {
            "settings": self.settings,
            "metrics": self.metrics,
            "seconds": round(self.seconds, 1),
            "resumed_records": self.resumed,
        }
        (out / METRICS_JSON).write_text(
            json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        (out / METRICS_MD).write_text(self.to_markdown(), encoding="utf-8")
