"""The table of named limits: every bound the API, the master, the library and the CLI apply
to a number or a text, defined once and read by all of them (docs/spec.md quotes this table).

aiperf/api/bounds.py applies them to every field of every request; aiperf/peaks.py bounds a
worker's CPU count with MAX_CPUS; the master pages its listings by MAX_PAGE and the CLI its
exports. The limits are physical (no accelerator computes more than
MAX_OPS_PER_S_PER_ACCELERATOR), or what the database stores (SQL INTEGER ids, BIGINT counts,
PostgreSQL's VARCHAR lengths), or generous sanity (a run lasts at most 30 days).
tests/test_architecture.py checks that no other module assigns one of these names.
"""

from __future__ import annotations

from aiperf.precision import GEMM_DTYPES

# ---------------------------------------------------------------- the limits

MAX_REQUEST_BYTES = 8 << 20     # a serialized request (the largest: a graph); larger is RESOURCE_EXHAUSTED
# ids (run, worker, model) are SQL INTEGER keys (PostgreSQL int4): a larger id names nothing, and
# PostgreSQL refuses to compare one with the column. 0 means "none"/"current" where the API says so.
MAX_ID = 2**31 - 1
# seq and seed are SQL BIGINT
MAX_SEQ = 2**63 - 1
MAX_SEED = 2**63 - 1
# text: PostgreSQL VARCHAR lengths of the columns they are stored in, or less
MAX_NAME_CHARS = 253            # worker name and host: a DNS name / Kubernetes pod name (column: 255)
MAX_MODEL_NAME_CHARS = 256      # accelerator model, e.g. "NVIDIA H100 80GB HBM3"
MAX_ACCELERATOR_UUID_CHARS = 96  # NVML's UUID buffer (NVML_DEVICE_UUID_V2_BUFFER_SIZE), e.g. "GPU-8f1c..."
MAX_PCI_BUS_ID_CHARS = 32       # NVML's PCI bus id buffer, e.g. "00000000:65:00.0"
MAX_SOFTWARE_NAME_CHARS = 64
MAX_SOFTWARE_VERSION_CHARS = 256
MAX_SOFTWARE_ENTRIES = 64
MAX_REASON_CHARS = 500          # a model's failure reason (column: 500); newlines and tabs allowed
MAX_STOP_REASON_CHARS = 200     # a run's stop reason (column: 200)
MAX_GRAPH_HASH_CHARS = 64       # SHA-256 in hex (column: 64)
MAX_CREDENTIAL_CHARS = 128      # a worker credential kept by a restarting worker (issued: 43 characters)
MAX_TOKEN_CHARS = 1024          # a worker or admin token (generated: 43 characters); printable ASCII, no space
MAX_CHECKPOINT_URI_CHARS = 1024  # a checkpoint's URI (column: 1024): a path or an object-store URL
MAX_UNDELETED_PER_FINISH = 1000  # checkpoints a FinishModel reports it could not delete
SHA256_HEX_CHARS = 64           # a checkpoint's SHA-256: 64 lowercase hex digits, or empty (none)
MAX_KEEP_CHECKPOINTS = 10**6    # retention: checkpoints of the top this-many models kept
# hardware of one worker (one node)
MAX_ACCELERATORS_PER_WORKER = 64
MAX_OPS_PER_S_PER_ACCELERATOR = 1e16   # faster than any accelerator's dense fp16/bf16 GEMM
MAX_ACCELERATOR_MEMORY_BYTES = 2**44   # 16 TiB
MAX_CPUS = 8192                        # Linux's largest NR_CPUS (x86-64 and arm64 with MAXSMP)
MAX_HOST_MEMORY_BYTES = 2**48          # 256 TiB
# datasets
MAX_DATASET_KIND_CHARS = 32
MAX_DATASET_IMAGES = 2**40     # images in a split (ImageNet-1k: 1,281,167; ImageNet-21k: 14.2M)
MAX_DATASET_CLASSES = 1 << 20  # classes of a dataset (ImageNet-21k: 21,841)
MAX_IMAGE_SIZE = 1 << 16       # side of the network input in pixels
MAX_DTYPES_PER_ACCELERATOR = len(GEMM_DTYPES)
# models and reports
MAX_GRAPH_JSON_CHARS = 1 << 20  # ResNet-50's graph is 17 kB
MAX_GRAPH_JSON_DEPTH = 16       # a graph nests 4 deep; checked before json.loads sees it
MAX_GRAPH_LAYERS = 10_000       # ResNet-50 has 175
MAX_LINEAGE_OPERATIONS = 256    # morphisms a child records from its parent (the search's deepest: about 90)
MAX_FLOPS_PER_IMAGE = 10**13    # ResNet-50 at 224 px: 2.3e10 per trained image
MAX_ROUND = 10**7
MAX_BATCH_SIZE = 65536          # per accelerator; TPE's largest choice is 14 x GiB (448 on a 32 GiB V100)
MAX_KERNEL_SIZE = 15            # an inserted conv's kernel (TPE's choices: 3, 5 and 7)
MAX_TRIALS_PER_ARCHITECTURE = 10  # a profile's trainings of one architecture after warm-up (the original: 2)
MAX_EPOCH = 10**6
MAX_IMAGES_PER_REPORT = 2**40
MAX_OPS_PER_REPORT = 2**62      # master's and worker's count of one report: sums of a few fit in BIGINT
CLOCK_SLACK_S = 5.0             # images may reach the master this much earlier than physics allows
MAX_SAMPLES_PER_CALL = 1024     # a worker sends 1 + one per accelerator
MAX_SAMPLE_AGE_S = 86400.0
# runs and queries
MAX_RUN_DURATION_S = 30 * 86400.0
MAX_INTERVAL_S = 3600.0         # report and resource intervals
MAX_MODELS = 10**7
MAX_WORKERS = 100_000           # min_workers of a run
# ListModels / GetHistory / ListRuns / ListWorkers limit: the API refuses more and the master returns
# at most this many. 10,000 models are about 5 MB without their graphs and 175 MB with ResNet-50-sized
# ones (17 kB), inside a reply's 256 MiB (aiperf/api/client.py MAX_MESSAGE_BYTES).
MAX_PAGE = 10_000
MAX_OFFSET = 2**31 - 1
MAX_TIMELINE_POINTS = 1_000_000
MAX_TIMELINE_BUCKETS = 100_000
MAX_VERDICT_CHARS = 32          # an audit's verdict (aiperf.audit.VERDICTS; column: 32)
MAX_AUDIT_IMAGES = 10**9        # images one audit evaluated (ImageNet's validation split: 50,000)
MAX_AUDIT_IMAGES_PER_S = 10**7  # an audit's timed training rate on one device (ResNet-50 on an H100: ~3,000)
MAX_HARDWARE_CHARS = 300        # an auditor's hardware: an accelerator model, or a CPU model and count (column: 300)
MAX_NAMED_WITHOUT_DATASHEET = 8  # accelerator models a scoreboard names as having no datasheet entry

LIMITS: tuple[tuple[str, str], ...] = (
    ("MAX_REQUEST_BYTES", "a serialized request; gRPC refuses a larger one with RESOURCE_EXHAUSTED"),
    ("MAX_ID", "run, worker, model and parent ids (1.., 0 where it means none or current)"),
    ("MAX_SEQ", "a report's seq (1..)"),
    ("MAX_SEED", "a run's seed"),
    ("MAX_NAME_CHARS", "worker name and host, printable"),
    ("MAX_MODEL_NAME_CHARS", "accelerator model, printable ASCII"),
    ("MAX_ACCELERATOR_UUID_CHARS", "an accelerator's UUID, printable ASCII (empty: unknown)"),
    ("MAX_PCI_BUS_ID_CHARS", "an accelerator's PCI bus id, printable ASCII (empty: unknown)"),
    ("MAX_SOFTWARE_NAME_CHARS", "software name, printable"),
    ("MAX_SOFTWARE_VERSION_CHARS", "software version, printable"),
    ("MAX_SOFTWARE_ENTRIES", "software versions per worker"),
    ("MAX_REASON_CHARS", "a model's failure reason, printable (newlines and tabs allowed)"),
    ("MAX_STOP_REASON_CHARS", "a run's stop reason, printable"),
    ("MAX_GRAPH_HASH_CHARS", "graph hash"),
    ("MAX_CREDENTIAL_CHARS", "the worker credential a restarting worker presents to Register"),
    ("MAX_TOKEN_CHARS", "a worker or admin token, printable ASCII without white space, checked where it is read"),
    ("MAX_CHECKPOINT_URI_CHARS", "a checkpoint's URI, printable (empty: none)"),
    ("MAX_UNDELETED_PER_FINISH", "checkpoints one FinishModel reports it could not delete"),
    ("MAX_KEEP_CHECKPOINTS", "a run's keep_checkpoints (0: the default)"),
    ("MAX_ACCELERATORS_PER_WORKER", "accelerators in one Register"),
    ("MAX_OPS_PER_S_PER_ACCELERATOR", "a peak, and the ceiling rate of a report's operations"),
    ("MAX_ACCELERATOR_MEMORY_BYTES", "memory of one accelerator, and its memory used"),
    ("MAX_CPUS", "CPUs of a worker"),
    ("MAX_HOST_MEMORY_BYTES", "memory of a worker, and its memory used"),
    ("MAX_DTYPES_PER_ACCELERATOR", "entries of peak_flops_by_dtype (and cpu_peak_flops_by_dtype)"),
    ("MAX_DATASET_KIND_CHARS", "a dataset's kind name"),
    ("MAX_DATASET_IMAGES", "images in a dataset's split"),
    ("MAX_DATASET_CLASSES", "classes of a dataset"),
    ("MAX_IMAGE_SIZE", "side of a dataset's network input"),
    ("MAX_GRAPH_JSON_CHARS", "graph JSON size"),
    ("MAX_GRAPH_JSON_DEPTH", "graph JSON nesting, checked before parsing"),
    ("MAX_GRAPH_LAYERS", "layers of a graph"),
    ("MAX_LINEAGE_OPERATIONS", "morphism operations a submitted graph records from its parent"),
    ("MAX_FLOPS_PER_IMAGE", "master-counted operations per trained image of a model"),
    ("MAX_ROUND", "a worker's round"),
    ("MAX_BATCH_SIZE", "batch size per accelerator"),
    ("MAX_KERNEL_SIZE", "kernel size of the convs morphism inserted (odd, from 1)"),
    ("MAX_TRIALS_PER_ARCHITECTURE", "a profile's trainings of one architecture after warm-up"),
    ("MAX_EPOCH", "a report's epoch"),
    ("MAX_IMAGES_PER_REPORT", "images trained, and images validated, in one report"),
    ("MAX_OPS_PER_REPORT", "operations of one report, the master's count and the worker's"),
    ("CLOCK_SLACK_S", "seconds added to a report's interval for clock skew and transport"),
    ("MAX_SAMPLES_PER_CALL", "resource samples in one SendResourceSamples"),
    ("MAX_SAMPLE_AGE_S", "age of a resource sample"),
    ("MAX_RUN_DURATION_S", "a run's duration"),
    ("MAX_INTERVAL_S", "report and resource intervals of a run"),
    ("MAX_MODELS", "a run's max_models"),
    ("MAX_WORKERS", "a run's min_workers"),
    ("MAX_PAGE", "limit of ListModels, GetHistory, ListRuns and ListWorkers"),
    ("MAX_OFFSET", "offset of ListModels, ListRuns and ListWorkers"),
    ("MAX_TIMELINE_POINTS", "max_points of GetTimeline"),
    ("MAX_TIMELINE_BUCKETS", "buckets of GetTimeline"),
    ("MAX_VERDICT_CHARS", "an audit's verdict, printable (the master accepts only the listed verdicts)"),
    ("MAX_AUDIT_IMAGES", "validation images of one audit"),
    ("MAX_AUDIT_IMAGES_PER_S", "an audit's timed training images per second on one device"),
    ("MAX_HARDWARE_CHARS", "an auditor's hardware (accelerator model, or CPU model and count), printable"),
    ("MAX_NAMED_WITHOUT_DATASHEET", "models named in a scoreboard's efficiency_unknown_reason; the rest counted"),
)


def limits_table() -> list[tuple[str, int | float, str]]:
    """(name, value, meaning) of every named limit, for docs and tests."""
    values = globals()
    return [(name, values[name], meaning) for name, meaning in LIMITS]


