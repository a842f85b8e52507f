"""Where an exception was raised: inside an installed package's own code, or the user's.

A NameError (or UnboundLocalError) says the code that raised it uses a name it never defined.
When the innermost frame of its traceback is in site-packages, that code is the installed
package's own: a bug of that release, not of the training code that called it. The rule's line
names the error; the traceback around it (tracebacks.py) names the frame. A traceback whose
innermost frame is the user's code (a callback a trainer calls, say) is the user's bug, and the
rule is discarded.
"""

from __future__ import annotations

import re

from diagnose.engine.analyzers.base import AnalyzerInput, AnalyzerOutput, register
from diagnose.engine.tracebacks import read_crashes

# The package a file belongs to: the path's first part under site-packages (a module file's stem).
_PACKAGE = re.compile(r"[/\\](?:site|dist)-packages[/\\](?P<package>[A-Za-z0-9_.-]+?)(?:[/\\]|\.py$)")


@register("crash_site")
def crash_site(inp: AnalyzerInput) -> AnalyzerOutput:
    for scan, hit in inp.hits:
        try:
            crash = read_crashes(scan.source, scan.source.rank).crash_at(hit.line_no, hit.rank)
        except Exception:  # unreadable now: this line proves nothing
            continue
        if crash is None or not crash.frames:
            continue
        frame = crash.frames[-1]
        found = _PACKAGE.search(frame.path)
        if found is None:
            continue
        out = AnalyzerOutput()
        out.captures["package"] = found.group("package")
        out.captures["package_frame"] = frame.describe()
        caller = crash.user_frame
        out.captures["caller_frame"] = caller.describe() if caller is not None else "(no frame of the user's code shown)"
        return out
    return AnalyzerOutput(discard=True)
