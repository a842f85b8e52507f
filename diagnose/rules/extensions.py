"""The analyzers a rule may name with `analyze:`, and the captures each one adds.

The rule language validates `analyze:` against this table (not against the engine, which sits
a layer above), and `rules lint` checks an analyzer rule's placeholders against it. The engine's
registry must implement exactly these names; a test holds the two together.
"""

from __future__ import annotations

ANALYZER_CAPTURES: dict[str, frozenset[str]] = {
    "collective_timeout": frozenset({
        "op", "seq", "timeout_ms", "ran_ms", "timed_out_ranks", "timed_out_word", "lagging_rank", "lag_detail",
    }),
    "hung_rank": frozenset({
        "hung_rank", "hung_ranks_word", "collective", "timed_out_ranks", "hung_last_line", "hung_end", "hang_detail",
    }),
    "xid": frozenset({
        "xid", "pci", "xid_name", "xid_meaning", "xid_class", "xid_action", "xid_pid", "xid_process", "xid_list",
    }),
    "cuda_async": frozenset({
        "cuda_error", "assertion", "assert_site", "assert_kernel", "assert_count", "assert_hint", "first_device_error",
        "xid_note",
    }),
    "nccl_error": frozenset({"last_error", "nccl_warn", "nccl_detail"}),
    "crash_site": frozenset({"package", "package_frame", "caller_frame"}),
    "sigkill": frozenset({"sigkill_verdict", "sigkill_detail"}),
    "torchelastic": frozenset({
        "elastic_summary", "root_rank", "root_local_rank", "root_host", "root_exitcode", "root_signal", "root_error",
        "root_time", "hung_rank",
    }),
}
