"""A rich progress bar for a training run: steps, tokens/s, training and held-out loss, time left."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class RunProgress:
    """``with RunProgress(title, total, done, enabled) as bar: bar.update(...)``; a no-op when not enabled."""

    def __init__(self, title: str, total: int, done: int, enabled: bool = True) -> None:
        self.enabled = enabled
        self._fields: dict[str, Any] = {"tps": "-", "loss": "-", "heldout": "-"}
        if enabled:
            self.console = Console(stderr=True, log_path=False)
            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[tps]} tok/s"), TextColumn("loss {task.fields[loss]}"),
                                 TextColumn("held-out {task.fields[heldout]}"), TimeElapsedColumn(),
                                 TimeRemainingColumn(), console=self.console)
            self._task = self._bar.add_task(title, total=total, completed=done, **self._fields)

    def __enter__(self) -> "RunProgress":
        if self.enabled:
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self._bar.__exit__(*exc)

    def update(self, step: int, tokens_per_s: float | None = None, loss: float | None = None,
               heldout: float | None = None) -> None:
        if not self.enabled:
            return
        if tokens_per_s is not None:
            self._fields["tps"] = f"{tokens_per_s:,.0f}"
        if loss is not None:
            self._fields["loss"] = f"{loss:.4f}"
        if heldout is not None:
            self._fields["heldout"] = f"{heldout:.4f}"
        self._bar.update(self._task, completed=step, **self._fields)

    def log(self, text: str) -> None:
        """One line above the bar (kept in non-interactive logs)."""
        if self.enabled:
            self._bar.console.log(text)
