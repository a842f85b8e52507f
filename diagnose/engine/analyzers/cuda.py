"""GPU faults: the NVIDIA Xid table, and CUDA errors that surface at a later API call.

CUDA kernels run asynchronously: a kernel that fails (a device-side assertion, an illegal
address) is reported at the next synchronising call, which can be far from the faulty line;
every later CUDA call on that context fails the same way ("CUDA kernel errors might be
asynchronously reported at some other API call"). The first real device error in the timeline
is the kernel's own assertion lines (printed by the GPU before the host sees the error) or the
driver's Xid line in the kernel log; everything after it is a consequence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from diagnose.engine.analyzers.base import AnalyzerInput, AnalyzerOutput, register
from diagnose.engine.analyzers.runlog import LogLine, run_log
from diagnose.engine.findings import reread_gap
from diagnose.evidence import logview
from diagnose.evidence.lines import XID_LINE as XID_LINE  # re-exported: callers of this module match it
from diagnose.evidence.lines import kernel_time, xid_line
from diagnose.evidence.model import Evidence, EvidenceItem, Gap, TextKind

# Xid -> (driver mnemonic, NVIDIA's description, who causes it, what to do). From NVIDIA's Xid catalog
# (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, as mirrored by leptonai/gpud
# catalog_generated.go, 2025-10-29) and the driver's nverror.h; "application" = the catalog's action is
# RESTART_APP / CHECK_APP and the usual cause is the program (bad address, assertion, killed channel).
APPLICATION = "application"
HARDWARE = "hardware"
INFORMATIONAL = "informational"
CONSEQUENCE = "consequence"

XID_TABLE: dict[int, tuple[str, str, str, str]] = {
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", APPLICATION, "restart the application"),
    11: ("ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "invalid or corrupted push buffer stream", APPLICATION, "restart the application; check the CUDA code"),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "graphics engine exception (illegal instruction or memory access in a kernel)", APPLICATION,
         "fix the kernel (out-of-bounds index, bad pointer); restart the application"),
    25: ("ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "invalid or illegal push buffer stream", APPLICATION, "restart the application; check the CUDA code"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault (a kernel touched an address it does not own)", APPLICATION,
         "fix the kernel's addressing; restart the application (repeated faults at random places: inspect the GPU)"),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "invalid or corrupted push buffer stream", APPLICATION, "restart the application; check the CUDA code"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing the channel (software-induced fault, e.g. a device-side assert)",
         APPLICATION, "nothing for the GPU: fix the program's fault"),
    44: ("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "graphics engine fault during context switch", HARDWARE, "contact support if it repeats"),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "preemptive cleanup after earlier errors (the process was killed or hit another fault)",
         CONSEQUENCE, "follow the earlier Xid or the application's error"),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", HARDWARE, "reset the GPU"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "double-bit (uncorrectable) ECC error", HARDWARE, "drain the GPU, reset it, and check retired pages / remapped rows"),
    61: ("PMU_BREAKPOINT", "internal micro-controller breakpoint/warning", HARDWARE, "reset the GPU; contact support if it repeats"),
    62: ("PMU_HALT_ERROR", "internal micro-controller halt", HARDWARE, "reset the GPU; contact support"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory page retirement / row remapping event recorded", INFORMATIONAL,
         "reset the GPU when convenient to activate the remapping"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory page retirement / row remapping failure", HARDWARE, "reset the GPU; contact support (RMA candidate)"),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", "video decoder exception", APPLICATION, "restart the application"),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "graphics engine class error", APPLICATION, "restart the application; check the CUDA code"),
    74: ("NVLINK_ERROR", "NVLink error", HARDWARE, "check the NVLink links (nvidia-smi nvlink -e); reset; contact support"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", HARDWARE,
         "the GPU is gone until the node is rebooted: drain the node, check power/PCIe/thermals"),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "high single-bit ECC error rate", INFORMATIONAL, "watch the GPU; contact support if it grows"),
    93: ("INFOROM_ERASE_LIMIT_EXCEEDED", "InfoROM wear limit exceeded (non-fatal)", INFORMATIONAL, "contact support"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "contained uncorrectable memory (ECC) error: only the application using that memory was hit",
         HARDWARE, "restart the application; reset the GPU to retire the memory"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "uncontained uncorrectable memory (ECC) error: every application on the GPU is affected",
         HARDWARE, "reset the GPU before reuse"),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "context switch timeout", HARDWARE, "reset the GPU"),
    119: ("GSP_RPC_TIMEOUT", "GSP (GPU system processor) RPC timeout", HARDWARE, "reset the GPU; update the driver/firmware"),
    120: ("GSP_ERROR", "GSP (GPU system processor) error", HARDWARE, "reset the GPU; update the driver/firmware"),
    121: ("C2C_ERROR", "chip-to-chip link error", HARDWARE, "contact support"),
    136: ("ALI_TRAINING_FAIL", "NVLink link training failed", HARDWARE, "reset the GPU; inspect the link"),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "unrecovered ECC error", HARDWARE, "reset the GPU; contact support"),
    143: ("GPU_INIT_ERROR", "GPU initialisation error", HARDWARE, "reset the GPU; contact support"),
    144: ("NVLINK_SAW_ERROR", "NVLink SAW error", HARDWARE, "follow NVIDIA's NVLink5 workflow; reset the GPU"),
    145: ("NVLINK_RLW_ERROR", "NVLink RLW error", HARDWARE, "follow NVIDIA's NVLink5 workflow"),
    146: ("NVLINK_TLW_ERROR", "NVLink TLW error", HARDWARE, "follow NVIDIA's NVLink5 workflow"),
    147: ("NVLINK_TREX_ERROR", "NVLink TREX error", HARDWARE, "follow NVIDIA's NVLink5 workflow"),
    148: ("NVLINK_NVLPW_CTRL_ERROR", "NVLink NVLPW_CTRL error", HARDWARE, "follow NVIDIA's NVLink5 workflow"),
    149: ("NVLINK_NETIR_ERROR", "NVLink NETIR (fabric) error", HARDWARE, "follow NVIDIA's NVLink5 workflow"),
    150: ("NVLINK_MSE_ERROR", "NVLink MSE error", HARDWARE, "follow NVIDIA's NVLink5 workflow"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "the recovery action for an earlier Xid changed (e.g. GPU reset required)", INFORMATIONAL,
         "follow the action it names"),
    155: ("NVLINK_SW_DEFINED_ERROR", "NVLink software-defined error", HARDWARE, "reset the GPU"),
    158: ("GPU_FATAL_TIMEOUT", "GPU fatal timeout", HARDWARE, "reset the GPU; contact support"),
    167: ("PCIE_FATAL_TIMEOUT", "PCIe fatal timeout", HARDWARE, "check the PCIe slot/riser; reboot"),
    171: ("UNCORRECTABLE_DRAM_ERROR", "uncorrectable DRAM error (detail of an Xid 48)", HARDWARE, "as Xid 48"),
    172: ("UNCORRECTABLE_SRAM_ERROR", "uncorrectable SRAM error (detail of an Xid 48)", HARDWARE, "as Xid 48"),
}

# The site starts where a run of path characters starts: tried from inside the run too, a long
# run (`____…`) was scanned to its end from each of its characters, quadratic. A match from
# inside a run is also one from its start, so nothing is lost.
_ASSERT = re.compile(
    r"(?P<site>(?<![\w./\\:-])[\w./\\:-]*\.cuh?:\d+): (?:(?P<func>[^\[\]]{1,200}?): )?block: \[[\d,]+\], thread: \[[\d,]+\] Assertion `(?P<cond>.+)` failed\."
)
_CUDA_ERROR = re.compile(r"CUDA error: (?P<err>[A-Za-z][^.\n]*?)(?:\s*$| \(|\. | CUDA kernel| Search for|\\n)")
_ROOT_XID_SUFFIX = re.compile(r"caused by previous Xid (?P<prev>\d+)")

# What the common ATen kernel assertions mean, by a piece of their condition text.
ASSERT_HINTS: tuple[tuple[str, str], ...] = (
    ("srcIndex < srcSelectDimSize", "an index into an embedding / index_select is >= the table size (a token id >= vocab size?)"),
    ("index out of bounds", "an indexing op got an index outside the tensor's size"),
    ("t >= 0 && t < n_classes", "a class label is negative or >= the number of classes (cross_entropy / nll_loss)"),
    ("target_val >= zero && target_val <= one", "a binary-cross-entropy target is outside [0, 1]"),
    ("input_val >= zero && input_val <= one", "a binary-cross-entropy input is outside [0, 1] (apply sigmoid, or use BCEWithLogitsLoss)"),
)


def assert_hint(condition: str) -> str:
    for needle, hint in ASSERT_HINTS:
        if needle in condition:
            return hint
    return "a kernel's check on its inputs failed; the condition says which"


@dataclass(frozen=True)
class XidEvent:
    xid: int
    pci: str
    pid: str | None
    name: str | None
    message: str
    source: str
    line_no: int
    text: str
    time: float | None

    def describe(self) -> str:
        who = f", pid {self.pid.strip(chr(39))}" if self.pid and "unknown" not in self.pid else ""
        if self.name and "unknown" not in self.name:
            who += f" ({self.name.strip()})"
        return f"Xid {self.xid} on PCI {self.pci}{who}"

    @property
    def kind(self) -> str:
        entry = XID_TABLE.get(self.xid)
        return entry[2] if entry else "unknown"


def xid_events(evidence: Evidence, tail_bytes: int = 4 * 1024 * 1024, gaps: list[Gap] | None = None) -> list[XidEvent]:
    """The Xid lines of the kernel logs; one that cannot be read again is a gap (into `gaps`)."""
    events: list[XidEvent] = []
    for source in evidence.texts_of(TextKind.DMESG):
        try:
            data, first = logview.tail(source, tail_bytes)
        except Exception as exc:  # an unreadable kernel log adds nothing here
            if gaps is not None:
                gaps.append(reread_gap(source.display, exc, "its Xid lines were not read for the CUDA analysis"))
            continue
        for offset, line in enumerate(data.decode("utf-8", errors="replace").split("\n")):
            xid = xid_line(line)
            if xid is not None:
                events.append(XidEvent(
                    xid.xid, xid.pci, xid.pid, xid.name, xid.message, source.display, first + offset, line,
                    source.on_clock(kernel_time(line, source.boot_time, source.year, source.mtime)),
                ))
    return events


def describe_xid(xid: int) -> tuple[str, str, str, str]:
    return XID_TABLE.get(xid, ("UNKNOWN", "not in the Xid table this tool knows", "unknown", "look it up in NVIDIA's Xid catalog"))


def _pid_ranks(evidence: Evidence) -> dict[str, int]:
    """pid -> rank, from torchrun's summary (it prints each failed worker's pid)."""
    found = run_log(evidence).summary
    if found is None:
        return {}
    return {str(f.pid): f.rank for f in found[1].failures if f.pid is not None and f.rank is not None}


@register("xid")
def xid(inp: AnalyzerInput) -> AnalyzerOutput:
    """The Xid table for the rule's Xid lines: what each number means and who causes it."""
    out = AnalyzerOutput()
    events: list[XidEvent] = []
    for scan, hit in inp.hits:
        xid = xid_line(hit.text)
        if xid is not None:
            events.append(XidEvent(xid.xid, xid.pci, xid.pid, xid.name, xid.message, scan.source.display, hit.line_no,
                                   hit.text, hit.time))
    if not events:
        return out
    # A kernel log holds the node's whole history; the latest event is the one a post-mortem is about.
    first = max(events, key=lambda e: (e.time is not None, e.time or 0.0, e.line_no))
    mnemonic, meaning, kind, action = describe_xid(first.xid)
    pid = (first.pid or "").strip("'")
    out.captures.update({
        "xid": str(first.xid), "pci": first.pci, "xid_name": mnemonic, "xid_meaning": meaning, "xid_class": kind,
        "xid_action": action, "xid_pid": pid or "?", "xid_process": (first.name or "?").strip(),
    })
    seen: dict[tuple[int, str], XidEvent] = {}
    for event in events:
        seen.setdefault((event.xid, event.pci), event)
    ranks = _pid_ranks(inp.evidence)
    listed = []
    for event in seen.values():
        text = f"{event.describe()}: {describe_xid(event.xid)[1]}"
        rank = ranks.get((event.pid or "").strip("'"))
        if rank is not None:
            text += f" - pid {(event.pid or '').strip(chr(39))} is rank {rank} in torchrun's summary"
        prev = _ROOT_XID_SUFFIX.search(event.message)
        if prev:
            text += f" (the driver says it was caused by an earlier Xid {prev.group('prev')}: "
            text += describe_xid(int(prev.group("prev")))[1] + ")"
        listed.append(text)
    out.captures["xid_list"] = "; ".join(listed[:6]) + (f"; and {len(listed) - 6} more" if len(listed) > 6 else "")
    return out


# ---------------------------------------------------------------- asynchronous CUDA errors


def _device_errors(evidence: Evidence) -> tuple[list[LogLine], list[LogLine], list[XidEvent]]:
    log = run_log(evidence)
    asserts = [line for line in log.device_lines if _ASSERT.search(line.text)]
    errors = [line for line in log.device_lines if _CUDA_ERROR.search(line.text)]
    return asserts, errors, xid_events(evidence, gaps=log.gaps)


# The Xid each host-side CUDA error leaves in the kernel log (seen on H200, driver 580: assert -> 43,
# illegal address -> 31; NVIDIA's catalog: 13 for graphics-engine exceptions).
XIDS_FOR_ERROR: dict[str, set[int]] = {
    "device-side assert triggered": {43},
    "an illegal memory access was encountered": {31, 13},
    "misaligned address": {13, 31},
    "unspecified launch failure": {13, 31, 43},
}


def _first_device_error(asserts: list[LogLine], xids: list[XidEvent], reported: str = "") -> tuple[str, EvidenceItem | None]:
    """The earliest real device fault: a hardware Xid outranks everything, then the kernel's own
    assertion, then an application Xid (which follows the fault it reports)."""
    hardware = [x for x in xids if x.kind == HARDWARE]
    if hardware:
        event = min(hardware, key=lambda x: (x.time is None, x.time or 0.0, x.line_no))
        meaning = describe_xid(event.xid)[1]
        return (f"{event.describe()} in the kernel log ({meaning})",
                EvidenceItem(event.source, event.text, event.line_no, event.time))
    if asserts:
        line = asserts[0]
        match = _ASSERT.search(line.text)
        assert match is not None
        return (f"the kernel assertion `{match.group('cond')}` failed at {match.group('site')}"
                + (f" ({match.group('func').strip()})" if match.group("func") else ""), line.item())
    app = [x for x in xids if x.kind in (APPLICATION, CONSEQUENCE, "unknown")]
    expected = XIDS_FOR_ERROR.get(reported, set())
    app = [x for x in app if x.xid in expected] or app
    if app:
        # The history may hold older faults: the latest one of the kind this error leaves is the one.
        event = max(app, key=lambda x: (x.time is not None, x.time or 0.0, x.line_no))
        return (f"{event.describe()} in the kernel log ({describe_xid(event.xid)[1]}"
                + (f": {event.message[:160]}" if event.message else "") + ")",
                EvidenceItem(event.source, event.text, event.line_no, event.time))
    return "", None


# Errors the CUDA runtime returns from the call that caused them: torch still appends "might be
# asynchronously reported" to every CUDA error, but for these the stack trace is right. Stream
# capture's errors come from the capturing call itself (seen on an H200, torch 2.11:
# tests/data/shapes/cuda-graph-capture.log); the others are refused at the call (CUDA runtime API,
# cudaError_t: "returned by this call", not by a kernel's execution).
SYNCHRONOUS_ERRORS = (
    "when stream is capturing", "depend on a capturing blocking stream", "previous error during capture",
    "during CUDA graph capture", "invalid device ordinal", "no kernel image is available", "invalid device function",
    "CUDA driver version is insufficient", "no CUDA-capable device is detected", "busy or unavailable",
    "too many resources requested for launch",
)


def is_synchronous(error: str) -> bool:
    return any(words in error for words in SYNCHRONOUS_ERRORS)


@register("cuda_async")
def cuda_async(inp: AnalyzerInput) -> AnalyzerOutput:
    """Name the reported CUDA error and the first real device error behind it; a CUDA error the
    failing call itself raised (stream capture, a bad device) was not reported asynchronously."""
    out = AnalyzerOutput()
    asserts, errors, xids = _device_errors(inp.evidence)
    reported = ""
    for _scan, hit in inp.hits:
        match = _CUDA_ERROR.search(hit.text)
        if match:
            reported = match.group("err").strip()
            break
    if not reported and errors:
        match = _CUDA_ERROR.search(errors[0].text)
        reported = match.group("err").strip() if match else ""
    if reported and is_synchronous(reported) and not asserts and not any(x.kind == HARDWARE for x in xids):
        out.discard = True  # torch's boilerplate line, under an error whose stack trace is true
        return out
    out.captures["cuda_error"] = reported or "?"
    if asserts:
        match = _ASSERT.search(asserts[0].text)
        assert match is not None
        out.captures.update({
            "assertion": match.group("cond"), "assert_site": match.group("site"),
            "assert_kernel": (match.group("func") or "?").strip(),
            "assert_count": str(len(asserts)), "assert_hint": assert_hint(match.group("cond")),
        })
    else:
        out.captures.update({
            "assertion": "(the kernel's own \"Assertion ... failed.\" lines are not in the logs given - they go to stderr)",
            "assert_site": "?", "assert_hint": "the assertion text names the failed check",
        })
    first, item = _first_device_error(asserts, xids, reported)
    out.captures["first_device_error"] = first or "none in the evidence given (no kernel assertion lines, no Xid in dmesg)"
    app_xids = [x for x in xids if x.kind in (APPLICATION, CONSEQUENCE)]
    expected = XIDS_FOR_ERROR.get(reported, set())
    app_xids = [x for x in app_xids if x.xid in expected] or ([] if expected else app_xids)
    if app_xids and (asserts or any(x.kind == HARDWARE for x in xids)):
        ranks = _pid_ranks(inp.evidence)
        parts = []
        for event in app_xids[:3]:
            text = event.describe()
            rank = ranks.get((event.pid or "").strip("'"))
            if rank is not None:
                text += f" = rank {rank}"
            parts.append(text)
        out.captures["xid_note"] = "The kernel log agrees: " + "; ".join(parts) + " (the driver's record of the same fault)."
    else:  # no Xid, or the Xid is itself the first device error named above
        out.captures["xid_note"] = "" if any(inp.evidence.texts_of(TextKind.DMESG)) else "No kernel log was given to check for an Xid."
    if item is not None:
        out.evidence.append(item)
    return out
