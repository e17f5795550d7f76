"""What `kubectl belay drill` prints of a drill's report: its verdict, each deliverable of the copy
beside the session's, and the steps run twice."""

from __future__ import annotations

from typing import Any


def drill_lines(report: dict[str, Any]) -> str:
    verdict = "passed" if report["passed"] else "FAILED"
    lines = [
        f"drill {report['request']} {verdict}: the copy {report['session']} {report['phase']} after "
        f"{report.get('attemptsLost', 0)} lost attempt(s), stopped at {', '.join(report['points'])}"
    ]
    for item in report.get("deliverables") or []:
        same = "same bytes" if item["sha256"] and item["sha256"] == item["sourceSha256"] else "DIFFERENT"
        lines.append(
            f"  {item['name']}: {same} (copy {item['sha256'] or '-'}, session {item['sourceSha256'] or '-'})"
        )
    for twice in report.get("stepsRunTwice") or []:
        lines.append(f"  repeated: {twice}")
    return "\n".join(lines)
