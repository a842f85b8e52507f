"""Training metrics from the files ML frameworks write, as MetricSeries (step, value, line):

- HF Trainer `trainer_state.json` (transformers trainer_callback.py TrainerState.save_to_json:
  json.dumps(asdict(state), indent=2, sort_keys=True); log_history holds one dict per logging step,
  NaN/Infinity written as JSON's non-standard NaN/Infinity);
- Lightning CSVLogger `metrics.csv` (one row per logged step, a column per metric, "nan"/"inf");
- wandb `wandb-summary.json` (the last value of each metric; "_step" the last step);
- Lightning `hparams.yaml`: hyperparameters, read for a note (the learning rate), never run.

Metric names kept: the ones that hold "loss". A file that is not what its kind says raises
ParseError, which the caller turns into a gap.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable
from typing import Any

from diagnose.errors import ParseError
from diagnose.evidence.model import MetricSeries

MAX_POINTS = 200_000  # a metrics file of a long run; past this the rest is not read
_LOSS = re.compile(r"loss", re.IGNORECASE)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("nan", "inf", "+inf", "-inf", "infinity", "-infinity"):
            return float(text.replace("infinity", "inf"))
        try:
            return float(text)
        except ValueError:
            return None
    return None


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)  # Python's json reads NaN / Infinity as HF and wandb write them
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"{what}: not valid JSON ({exc})") from None


def _step_lines(text: str) -> list[tuple[int, int]]:
    """(line number, step) of each `"step": N` line of an indented trainer_state.json."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        match = re.match(r'\s*"step"\s*:\s*(\d{1,12})', line)
        if match:
            found.append((number, int(match.group(1))))
    return found


def _metric_lines(text: str, name: str) -> list[int]:
    pattern = re.compile(r'\s*"' + re.escape(name) + r'"\s*:')
    return [number for number, line in enumerate(text.splitlines(), 1) if pattern.match(line)]


def parse_trainer_state(text: str, source: str) -> list[MetricSeries]:
    data = _loads(text, "trainer_state.json")
    if not isinstance(data, dict) or not isinstance(data.get("log_history"), list):
        raise ParseError("trainer_state.json: no log_history list in it")
    history = [entry for entry in data["log_history"][:MAX_POINTS] if isinstance(entry, dict)]
    last_step = data.get("global_step") if isinstance(data.get("global_step"), int) else None
    max_steps = data.get("max_steps") if isinstance(data.get("max_steps"), int) else None
    names = sorted({key for entry in history for key in entry if _LOSS.search(key)})
    series = []
    for name in names:
        lines = iter(_metric_lines(text, name))
        points = []
        for entry in history:
            if name not in entry:
                continue
            value = _number(entry[name])
            line = next(lines, None)
            if value is None:
                continue
            step = entry.get("step") if isinstance(entry.get("step"), int) else None
            points.append((step, value, line))
        if points:
            series.append(MetricSeries(source, name, tuple(points), last_step, max_steps))
    return series


def parse_lightning_metrics(text: str, source: str) -> list[MetricSeries]:
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except (StopIteration, csv.Error) as exc:
        raise ParseError(f"metrics.csv: no header ({exc})") from None
    if "step" not in header:
        raise ParseError("metrics.csv: no step column (not a Lightning CSVLogger file)")
    step_at = header.index("step")
    columns = [(i, name) for i, name in enumerate(header) if _LOSS.search(name)]
    points: dict[str, list[tuple[int | None, float, int | None]]] = {name: [] for _, name in columns}
    last_step: int | None = None
    try:
        for number, row in enumerate(reader, 2):
            if number > MAX_POINTS:
                break
            step = _int(row[step_at]) if step_at < len(row) else None
            if step is not None:
                last_step = step if last_step is None else max(last_step, step)
            for index, name in columns:
                value = _number(row[index]) if index < len(row) and row[index] != "" else None
                if value is not None:
                    points[name].append((step, value, number))
    except csv.Error as exc:
        raise ParseError(f"metrics.csv: {exc}") from None
    return [MetricSeries(source, name, tuple(values), last_step) for name, values in points.items() if values]


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def parse_wandb_summary(text: str, source: str) -> list[MetricSeries]:
    data = _loads(text, "wandb-summary.json")
    if not isinstance(data, dict):
        raise ParseError("wandb-summary.json: not a JSON object")
    step = data.get("_step") if isinstance(data.get("_step"), int) else None
    series = []
    for name, raw in data.items():
        if not _LOSS.search(name):
            continue
        value = _number(raw)
        if value is not None:
            line = next(iter(_metric_lines(text, name)), None) or _line_of_key(text, name)
            series.append(MetricSeries(source, name, ((step, value, line),), step))
    return series


def _line_of_key(text: str, name: str) -> int | None:
    needle = json.dumps(name) + ":"
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line.replace('": ', '":'):
            return number
    return 1 if needle in text.replace('": ', '":') else None


def parse_hparams(text: str, source: str) -> str:
    """A note naming the learning rate and batch size Lightning saved (safe_load: data only)."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ParseError(f"hparams.yaml: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        return f"{source}: no hyperparameters in it"
    wanted = [(k, v) for k, v in data.items() if isinstance(k, str) and re.search(r"(?i)lr|learning_rate|batch", k)
              and isinstance(v, (int, float, str)) and not isinstance(v, bool)]
    said = ", ".join(f"{k}={v}" for k, v in wanted[:6]) or f"{len(data)} value(s)"
    return f"{source}: hyperparameters {said}"


def _fmt(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:.4g}"


def describe(series: Iterable[MetricSeries]) -> list[str]:
    """Notes for the report: where each loss ended, where it stopped being finite, whether it ran away."""
    notes = []
    for one in series:
        last = one.points[-1]
        steps = f" of {one.max_steps}" if one.max_steps else ""
        where = f"step {last[0]}{steps}" if last[0] is not None else "the last entry"
        text = f"{one.source}: {one.name} {_fmt(last[1])} at {where}"
        bad = one.first_nonfinite()
        if bad is not None:
            text += f"; first {_fmt(bad[1])} at step {bad[0]}" + (f" (line {bad[2]})" if bad[2] else "")
        grown = one.divergence()
        if grown is not None:
            (low_step, low, _), (high_step, high, _) = grown
            text += f"; it grew {high / low:.1e}-fold from {_fmt(low)} (step {low_step}) to {_fmt(high)} (step {high_step})"
        notes.append(text)
    return notes
