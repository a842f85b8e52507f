"""Generate N user rules as a team would write them, for the scan benchmark (issue 18).

Each rule names the messages of the team's own code and infrastructure: literal-anchored
patterns (an exception name, a logger prefix, a service name, a fixed phrase) with the regex
features rule authors use around them: named captures, alternations, \\d+ / \\S+ / [\\w.]+
fields, optional parts, a few (?i) and ^-anchored ones. Deterministic for a given count and seed.
The texts are made up (they are rules, not log lines: nothing here is evidence).

    python bench/rulegen.py OUT_DIR 1000
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

COMPONENTS = (
    "ShardReader", "FeatureStore", "TokenizerPool", "Uploader", "CheckpointSync", "MetricsSink", "Sampler",
    "Evaluator", "Prefetcher", "BlobCache", "RewardModel", "Packer", "Dedup", "Augmenter", "Scheduler",
    "ReplayBuffer", "VocabLoader", "EmbeddingTable", "Profiler", "Planner", "KVStore", "LeaseManager",
    "ArtifactStore", "Mixer", "Curriculum", "Filter", "Indexer", "Streamer", "Decoder", "Rollout",
)
SERVICES = ("datahub", "blobd", "featsvc", "evalsvc", "ckptd", "orchestr8", "quotad", "authz", "meshd", "tracer")
OBJECTS = (
    "shard", "manifest", "bucket", "partition", "lease", "token", "segment", "replica", "snapshot", "index",
    "chunk", "batch", "record", "window", "cursor", "table", "blob", "volume", "namespace", "queue",
)
VERBS = ("open", "fetch", "decode", "upload", "commit", "verify", "restore", "mount", "resolve", "allocate",
         "register", "flush", "compact", "merge", "sync", "rotate", "acquire", "release", "parse", "index")
FAILURES = ("failed", "timed out", "was rejected", "is corrupt", "is missing", "was preempted", "is stale",
            "exceeded its quota", "returned an error", "was not found")
TEAMS = ("infra", "data", "eval", "rl", "pretrain", "sft", "mm", "speech", "search", "safety")
LIMITS = ("max_tokens", "max_shards", "queue_depth", "inflight_bytes", "open_files", "retry_budget",
          "grad_accum", "seq_len", "cache_bytes", "batch_rows")


def _pattern(rng: random.Random, n: int) -> str:
    comp, svc, obj, verb = rng.choice(COMPONENTS), rng.choice(SERVICES), rng.choice(OBJECTS), rng.choice(VERBS)
    fail, team, limit = rng.choice(FAILURES), rng.choice(TEAMS), rng.choice(LIMITS)
    other = rng.choice([o for o in OBJECTS if o != obj])
    shape = n % 12
    if shape == 0:
        return f"{comp}Error: {obj} (?P<{obj}_id>\\d+) {fail}"
    if shape == 1:
        return f"\\[{team}\\] {comp} could not {verb} (?:{obj}|{other}) (?P<name>\\S+)"
    if shape == 2:
        return f"{svc}: failed to {verb} {obj} at (?P<path>[\\w./-]+)(?: \\(errno (?P<errno>\\d+)\\))?"
    if shape == 3:
        return f"(?i){comp.lower()} {obj} {fail}"
    if shape == 4:
        return f"{comp}Exception: .*{obj} {fail}"
    if shape == 5:
        return f"{limit}=(?P<value>\\d+) exceeds (?:the )?limit (?P<limit>\\d+) in {svc}"
    if shape == 6:
        return f"ERROR {svc}\\.{comp.lower()}: {verb} of {obj} {fail}"
    if shape == 7:
        return f"timed out after (?P<seconds>[\\d.]+) ?s waiting for {svc} {obj}"
    if shape == 8:
        return f"^\\s*{comp}\\.{verb}\\(\\) {fail}: (?P<reason>.+)$"
    if shape == 9:
        return f"{team}-{svc} (?:lease|token|quota) {fail} for {obj} (?P<key>[0-9a-f]{{8,}})"
    if shape == 10:
        return f"\\b{comp}\\b.*\\b(?P<code>E{rng.randint(100, 999)})\\b"
    return f"{svc} returned (?P<status>5\\d\\d) for (?:GET|PUT|POST) /v\\d+/{obj}s"


def generate(folder: Path, count: int, seed: int = 18) -> list[str]:
    """Write `count` rule files under folder/team/; return their patterns."""
    rng = random.Random(seed)
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "team").mkdir(parents=True)
    patterns = []
    for n in range(count):
        pattern = _pattern(rng, n)
        patterns.append(pattern)
        rule_id = f"team.user-rule-{n:04d}"
        (folder / "team" / f"{rule_id}.yaml").write_text(
            f"id: {rule_id}\ntitle: Team rule {n}\ncategory: team\nrole: root\nseverity: error\n"
            f"confidence: 0.5\nwhen:\n  log: {json.dumps(pattern)}\nexplanation: A rule of the team's own code.\n"
            "fix:\n  - Ask the team that owns it.\n"
        )
    return patterns


if __name__ == "__main__":  # pragma: no cover - manual use
    import sys

    print(len(generate(Path(sys.argv[1]), int(sys.argv[2]))), "rules")
