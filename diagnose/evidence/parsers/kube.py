"""Kubernetes pod status (`kubectl get pod NAME -o json`, or `kubectl get pods -o json`, a List):
how each container ended, as exit records.

Field names are those of the core/v1 API (k8s.io/api/core/v1/types.go: PodStatus.containerStatuses,
initContainerStatuses; ContainerStatus.state / lastState; ContainerStateTerminated.exitCode,
signal, reason, message, finishedAt). A container OOM-killed for its memory limit ends with
reason OOMKilled and exit code 137 (128 + SIGKILL); an evicted pod has status.reason Evicted.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from diagnose.errors import ParseError
from diagnose.evidence.model import ExitRecord

MAX_PODS = 1000


def _time(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _terminated(pod: str, container: dict[str, Any], source: str) -> list[ExitRecord]:
    records = []
    name = container.get("name") if isinstance(container.get("name"), str) else "?"
    for which in ("state", "lastState"):
        state = container.get(which)
        ended = state.get("terminated") if isinstance(state, dict) else None
        if not isinstance(ended, dict):
            continue
        code = ended.get("exitCode") if isinstance(ended.get("exitCode"), int) else None
        signal = ended.get("signal") if isinstance(ended.get("signal"), int) and ended.get("signal") else None
        if signal is None and code is not None and 128 < code < 160:
            signal = code - 128  # the runtime reports a signal death as 128 + the signal
        reason = ended.get("reason") if isinstance(ended.get("reason"), str) else ""
        if code == 0 and reason in ("Completed", ""):
            continue  # a container that finished is no failure
        message = f"pod {pod} container {name} ({'now' if which == 'state' else 'last run'}): {reason or 'terminated'}"
        if isinstance(ended.get("message"), str) and ended["message"].strip():
            message += f": {ended['message'].strip()[:300]}"
        restarts = container.get("restartCount")
        if isinstance(restarts, int) and restarts:
            message += f" (restarted {restarts} time(s))"
        records.append(ExitRecord(source, code=code, signal=signal, message=message, time=_time(ended.get("finishedAt"))))
    return records


def parse_pod_json(text: str, source: str) -> list[ExitRecord]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"pod JSON: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ParseError("pod JSON: not a JSON object")
    pods = data.get("items") if data.get("kind") in ("List", "PodList") else [data]
    if not isinstance(pods, list):
        raise ParseError("pod JSON: a List without items")
    records: list[ExitRecord] = []
    for pod in pods[:MAX_PODS]:
        if not isinstance(pod, dict) or not isinstance(pod.get("status"), dict):
            continue
        meta: dict[str, Any] = pod["metadata"] if isinstance(pod.get("metadata"), dict) else {}
        name = str(meta["name"]) if isinstance(meta.get("name"), str) else "?"
        status = pod["status"]
        for key in ("initContainerStatuses", "containerStatuses"):
            for container in status.get(key) or ():
                if isinstance(container, dict):
                    records.extend(_terminated(name, container, source))
        if status.get("reason") == "Evicted":
            message = status.get("message") if isinstance(status.get("message"), str) else ""
            records.append(ExitRecord(source, message=f"pod {name}: Evicted: {message[:300]}".rstrip(": ")))
    return records
