from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApiVersion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    API_VERSION_UNSPECIFIED: _ClassVar[ApiVersion]
    API_VERSION_1: _ClassVar[ApiVersion]

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    RUN_PENDING: _ClassVar[RunState]
    RUN_RUNNING: _ClassVar[RunState]
    RUN_STOPPING: _ClassVar[RunState]
    RUN_FINISHED: _ClassVar[RunState]
    RUN_ABORTED: _ClassVar[RunState]

class ModelState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_STATE_UNSPECIFIED: _ClassVar[ModelState]
    MODEL_QUEUED: _ClassVar[ModelState]
    MODEL_TRAINING: _ClassVar[ModelState]
    MODEL_DONE: _ClassVar[ModelState]
    MODEL_FAILED: _ClassVar[ModelState]
    MODEL_ABANDONED: _ClassVar[ModelState]
    MODEL_CUT: _ClassVar[ModelState]

class WorkerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKER_STATE_UNSPECIFIED: _ClassVar[WorkerState]
    WORKER_ALIVE: _ClassVar[WorkerState]
    WORKER_LOST: _ClassVar[WorkerState]

class Profile(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROFILE_UNSPECIFIED: _ClassVar[Profile]
    PROFILE_OFFICIAL: _ClassVar[Profile]
    PROFILE_SMOKE: _ClassVar[Profile]

class Precision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRECISION_UNSPECIFIED: _ClassVar[Precision]
    PRECISION_FP32: _ClassVar[Precision]
    PRECISION_MIXED_FP16: _ClassVar[Precision]
    PRECISION_MIXED_BF16: _ClassVar[Precision]
    PRECISION_FP16: _ClassVar[Precision]
    PRECISION_BF16: _ClassVar[Precision]
    PRECISION_FP8: _ClassVar[Precision]
    PRECISION_INT8: _ClassVar[Precision]

class Backend(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKEND_UNSPECIFIED: _ClassVar[Backend]
    BACKEND_TENSORFLOW: _ClassVar[Backend]
    BACKEND_JAX: _ClassVar[Backend]

class Toggle(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOGGLE_UNSPECIFIED: _ClassVar[Toggle]
    TOGGLE_ON: _ClassVar[Toggle]
    TOGGLE_OFF: _ClassVar[Toggle]
API_VERSION_UNSPECIFIED: ApiVersion
API_VERSION_1: ApiVersion
RUN_STATE_UNSPECIFIED: RunState
RUN_PENDING: RunState
RUN_RUNNING: RunState
RUN_STOPPING: RunState
RUN_FINISHED: RunState
RUN_ABORTED: RunState
MODEL_STATE_UNSPECIFIED: ModelState
MODEL_QUEUED: ModelState
MODEL_TRAINING: ModelState
MODEL_DONE: ModelState
MODEL_FAILED: ModelState
MODEL_ABANDONED: ModelState
MODEL_CUT: ModelState
WORKER_STATE_UNSPECIFIED: WorkerState
WORKER_ALIVE: WorkerState
WORKER_LOST: WorkerState
PROFILE_UNSPECIFIED: Profile
PROFILE_OFFICIAL: Profile
PROFILE_SMOKE: Profile
PRECISION_UNSPECIFIED: Precision
PRECISION_FP32: Precision
PRECISION_MIXED_FP16: Precision
PRECISION_MIXED_BF16: Precision
PRECISION_FP16: Precision
PRECISION_BF16: Precision
PRECISION_FP8: Precision
PRECISION_INT8: Precision
BACKEND_UNSPECIFIED: Backend
BACKEND_TENSORFLOW: Backend
BACKEND_JAX: Backend
TOGGLE_UNSPECIFIED: Toggle
TOGGLE_ON: Toggle
TOGGLE_OFF: Toggle

class Limits(_message.Message):
    __slots__ = ("max_models", "max_rounds_per_worker", "max_epochs_per_round")
    MAX_MODELS_FIELD_NUMBER: _ClassVar[int]
    MAX_ROUNDS_PER_WORKER_FIELD_NUMBER: _ClassVar[int]
    MAX_EPOCHS_PER_ROUND_FIELD_NUMBER: _ClassVar[int]
    max_models: int
    max_rounds_per_worker: int
    max_epochs_per_round: int
    def __init__(self, max_models: _Optional[int] = ..., max_rounds_per_worker: _Optional[int] = ..., max_epochs_per_round: _Optional[int] = ...) -> None: ...

class RunConfig(_message.Message):
    __slots__ = ("run_id", "profile", "seed", "duration_s", "precision", "limits", "warmup_rounds", "min_running_time_s", "report_interval_s", "resource_interval_s", "min_workers", "deterministic", "xla", "inherit", "keep_checkpoints")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    WARMUP_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    MIN_RUNNING_TIME_S_FIELD_NUMBER: _ClassVar[int]
    REPORT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    MIN_WORKERS_FIELD_NUMBER: _ClassVar[int]
    DETERMINISTIC_FIELD_NUMBER: _ClassVar[int]
    XLA_FIELD_NUMBER: _ClassVar[int]
    INHERIT_FIELD_NUMBER: _ClassVar[int]
    KEEP_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    profile: Profile
    seed: int
    duration_s: float
    precision: Precision
    limits: Limits
    warmup_rounds: int
    min_running_time_s: float
    report_interval_s: float
    resource_interval_s: float
    min_workers: int
    deterministic: bool
    xla: bool
    inherit: bool
    keep_checkpoints: int
    def __init__(self, run_id: _Optional[int] = ..., profile: _Optional[_Union[Profile, str]] = ..., seed: _Optional[int] = ..., duration_s: _Optional[float] = ..., precision: _Optional[_Union[Precision, str]] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., warmup_rounds: _Optional[int] = ..., min_running_time_s: _Optional[float] = ..., report_interval_s: _Optional[float] = ..., resource_interval_s: _Optional[float] = ..., min_workers: _Optional[int] = ..., deterministic: _Optional[bool] = ..., xla: _Optional[bool] = ..., inherit: _Optional[bool] = ..., keep_checkpoints: _Optional[int] = ...) -> None: ...

class Outage(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: float
    end: float
    def __init__(self, start: _Optional[float] = ..., end: _Optional[float] = ...) -> None: ...

class RunInfo(_message.Message):
    __slots__ = ("config", "state", "created_at", "started_at", "deadline", "stopped_at", "finished_at", "stop_reason", "outages", "rules_version")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    STOPPED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    OUTAGES_FIELD_NUMBER: _ClassVar[int]
    RULES_VERSION_FIELD_NUMBER: _ClassVar[int]
    config: RunConfig
    state: RunState
    created_at: float
    started_at: float
    deadline: float
    stopped_at: float
    finished_at: float
    stop_reason: str
    outages: _containers.RepeatedCompositeFieldContainer[Outage]
    rules_version: str
    def __init__(self, config: _Optional[_Union[RunConfig, _Mapping]] = ..., state: _Optional[_Union[RunState, str]] = ..., created_at: _Optional[float] = ..., started_at: _Optional[float] = ..., deadline: _Optional[float] = ..., stopped_at: _Optional[float] = ..., finished_at: _Optional[float] = ..., stop_reason: _Optional[str] = ..., outages: _Optional[_Iterable[_Union[Outage, _Mapping]]] = ..., rules_version: _Optional[str] = ...) -> None: ...

class Hyperparameters(_message.Message):
    __slots__ = ("batch_size", "kernel_size")
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    KERNEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    kernel_size: int
    def __init__(self, batch_size: _Optional[int] = ..., kernel_size: _Optional[int] = ...) -> None: ...

class Accelerator(_message.Message):
    __slots__ = ("model", "memory_bytes", "peak_flops", "peak_flops_by_dtype", "uuid", "pci_bus_id")
    class PeakFlopsByDtypeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PEAK_FLOPS_FIELD_NUMBER: _ClassVar[int]
    PEAK_FLOPS_BY_DTYPE_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    PCI_BUS_ID_FIELD_NUMBER: _ClassVar[int]
    model: str
    memory_bytes: int
    peak_flops: float
    peak_flops_by_dtype: _containers.ScalarMap[str, float]
    uuid: str
    pci_bus_id: str
    def __init__(self, model: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., peak_flops: _Optional[float] = ..., peak_flops_by_dtype: _Optional[_Mapping[str, float]] = ..., uuid: _Optional[str] = ..., pci_bus_id: _Optional[str] = ...) -> None: ...

class DatasetInfo(_message.Message):
    __slots__ = ("kind", "train_images", "validation_images", "num_classes", "image_size", "fingerprint")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TRAIN_IMAGES_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_IMAGES_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    IMAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    train_images: int
    validation_images: int
    num_classes: int
    image_size: int
    fingerprint: str
    def __init__(self, kind: _Optional[str] = ..., train_images: _Optional[int] = ..., validation_images: _Optional[int] = ..., num_classes: _Optional[int] = ..., image_size: _Optional[int] = ..., fingerprint: _Optional[str] = ...) -> None: ...

class SoftwareVersion(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ("worker_id", "name", "host", "accelerators", "cpus", "memory_bytes", "software", "state", "registered_at", "last_heartbeat", "current_model_id", "current_run_id", "cpu_peak_flops_by_dtype", "dataset", "has_dataset", "implausible_reports", "cpu_model", "backend")
    class CpuPeakFlopsByDtypeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ACCELERATORS_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    SOFTWARE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    CURRENT_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CPU_PEAK_FLOPS_BY_DTYPE_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    HAS_DATASET_FIELD_NUMBER: _ClassVar[int]
    IMPLAUSIBLE_REPORTS_FIELD_NUMBER: _ClassVar[int]
    CPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    name: str
    host: str
    accelerators: _containers.RepeatedCompositeFieldContainer[Accelerator]
    cpus: int
    memory_bytes: int
    software: _containers.RepeatedCompositeFieldContainer[SoftwareVersion]
    state: WorkerState
    registered_at: float
    last_heartbeat: float
    current_model_id: int
    current_run_id: int
    cpu_peak_flops_by_dtype: _containers.ScalarMap[str, float]
    dataset: DatasetInfo
    has_dataset: bool
    implausible_reports: int
    cpu_model: str
    backend: Backend
    def __init__(self, worker_id: _Optional[int] = ..., name: _Optional[str] = ..., host: _Optional[str] = ..., accelerators: _Optional[_Iterable[_Union[Accelerator, _Mapping]]] = ..., cpus: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., software: _Optional[_Iterable[_Union[SoftwareVersion, _Mapping]]] = ..., state: _Optional[_Union[WorkerState, str]] = ..., registered_at: _Optional[float] = ..., last_heartbeat: _Optional[float] = ..., current_model_id: _Optional[int] = ..., current_run_id: _Optional[int] = ..., cpu_peak_flops_by_dtype: _Optional[_Mapping[str, float]] = ..., dataset: _Optional[_Union[DatasetInfo, _Mapping]] = ..., has_dataset: _Optional[bool] = ..., implausible_reports: _Optional[int] = ..., cpu_model: _Optional[str] = ..., backend: _Optional[_Union[Backend, str]] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("model_id", "run_id", "parent_id", "worker_id", "round", "graph_json", "graph_hash", "hyperparameters", "state", "best_accuracy", "predicted_accuracy", "has_accuracy", "created_at", "finished_at", "reason", "flops_per_train_image", "flops_per_eval_image", "images_trained", "images_validated", "epochs", "checkpoint_uri", "checkpoint_sha256", "inherited_from", "checkpoint_deleted", "checkpoint_delete_error", "init_seed")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    GRAPH_JSON_FIELD_NUMBER: _ClassVar[int]
    GRAPH_HASH_FIELD_NUMBER: _ClassVar[int]
    HYPERPARAMETERS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    BEST_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    HAS_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FLOPS_PER_TRAIN_IMAGE_FIELD_NUMBER: _ClassVar[int]
    FLOPS_PER_EVAL_IMAGE_FIELD_NUMBER: _ClassVar[int]
    IMAGES_TRAINED_FIELD_NUMBER: _ClassVar[int]
    IMAGES_VALIDATED_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_URI_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_SHA256_FIELD_NUMBER: _ClassVar[int]
    INHERITED_FROM_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DELETED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DELETE_ERROR_FIELD_NUMBER: _ClassVar[int]
    INIT_SEED_FIELD_NUMBER: _ClassVar[int]
    model_id: int
    run_id: int
    parent_id: int
    worker_id: int
    round: int
    graph_json: str
    graph_hash: str
    hyperparameters: Hyperparameters
    state: ModelState
    best_accuracy: float
    predicted_accuracy: float
    has_accuracy: bool
    created_at: float
    finished_at: float
    reason: str
    flops_per_train_image: int
    flops_per_eval_image: int
    images_trained: int
    images_validated: int
    epochs: int
    checkpoint_uri: str
    checkpoint_sha256: str
    inherited_from: int
    checkpoint_deleted: bool
    checkpoint_delete_error: str
    init_seed: int
    def __init__(self, model_id: _Optional[int] = ..., run_id: _Optional[int] = ..., parent_id: _Optional[int] = ..., worker_id: _Optional[int] = ..., round: _Optional[int] = ..., graph_json: _Optional[str] = ..., graph_hash: _Optional[str] = ..., hyperparameters: _Optional[_Union[Hyperparameters, _Mapping]] = ..., state: _Optional[_Union[ModelState, str]] = ..., best_accuracy: _Optional[float] = ..., predicted_accuracy: _Optional[float] = ..., has_accuracy: _Optional[bool] = ..., created_at: _Optional[float] = ..., finished_at: _Optional[float] = ..., reason: _Optional[str] = ..., flops_per_train_image: _Optional[int] = ..., flops_per_eval_image: _Optional[int] = ..., images_trained: _Optional[int] = ..., images_validated: _Optional[int] = ..., epochs: _Optional[int] = ..., checkpoint_uri: _Optional[str] = ..., checkpoint_sha256: _Optional[str] = ..., inherited_from: _Optional[int] = ..., checkpoint_deleted: _Optional[bool] = ..., checkpoint_delete_error: _Optional[str] = ..., init_seed: _Optional[int] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("api_version", "name", "host", "accelerators", "cpus", "memory_bytes", "software", "credential", "cpu_peak_flops_by_dtype", "cpu_model", "backend")
    class CpuPeakFlopsByDtypeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ACCELERATORS_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    SOFTWARE_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    CPU_PEAK_FLOPS_BY_DTYPE_FIELD_NUMBER: _ClassVar[int]
    CPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    api_version: ApiVersion
    name: str
    host: str
    accelerators: _containers.RepeatedCompositeFieldContainer[Accelerator]
    cpus: int
    memory_bytes: int
    software: _containers.RepeatedCompositeFieldContainer[SoftwareVersion]
    credential: str
    cpu_peak_flops_by_dtype: _containers.ScalarMap[str, float]
    cpu_model: str
    backend: Backend
    def __init__(self, api_version: _Optional[_Union[ApiVersion, str]] = ..., name: _Optional[str] = ..., host: _Optional[str] = ..., accelerators: _Optional[_Iterable[_Union[Accelerator, _Mapping]]] = ..., cpus: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., software: _Optional[_Iterable[_Union[SoftwareVersion, _Mapping]]] = ..., credential: _Optional[str] = ..., cpu_peak_flops_by_dtype: _Optional[_Mapping[str, float]] = ..., cpu_model: _Optional[str] = ..., backend: _Optional[_Union[Backend, str]] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("worker_id", "heartbeat_interval_s", "has_run", "run", "master_time", "api_version", "abandoned_model_ids", "credential")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    HAS_RUN_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    MASTER_TIME_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    ABANDONED_MODEL_IDS_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    heartbeat_interval_s: float
    has_run: bool
    run: RunInfo
    master_time: float
    api_version: ApiVersion
    abandoned_model_ids: _containers.RepeatedScalarFieldContainer[int]
    credential: str
    def __init__(self, worker_id: _Optional[int] = ..., heartbeat_interval_s: _Optional[float] = ..., has_run: _Optional[bool] = ..., run: _Optional[_Union[RunInfo, _Mapping]] = ..., master_time: _Optional[float] = ..., api_version: _Optional[_Union[ApiVersion, str]] = ..., abandoned_model_ids: _Optional[_Iterable[int]] = ..., credential: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "model_id", "leaving")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    model_id: int
    leaving: bool
    def __init__(self, worker_id: _Optional[int] = ..., model_id: _Optional[int] = ..., leaving: _Optional[bool] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("has_run", "run", "master_time", "heartbeat_interval_s", "worker_state")
    HAS_RUN_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    MASTER_TIME_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    WORKER_STATE_FIELD_NUMBER: _ClassVar[int]
    has_run: bool
    run: RunInfo
    master_time: float
    heartbeat_interval_s: float
    worker_state: WorkerState
    def __init__(self, has_run: _Optional[bool] = ..., run: _Optional[_Union[RunInfo, _Mapping]] = ..., master_time: _Optional[float] = ..., heartbeat_interval_s: _Optional[float] = ..., worker_state: _Optional[_Union[WorkerState, str]] = ...) -> None: ...

class GetHistoryRequest(_message.Message):
    __slots__ = ("worker_id", "run_id", "since_model_id", "limit", "without_ranking")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    WITHOUT_RANKING_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    run_id: int
    since_model_id: int
    limit: int
    without_ranking: bool
    def __init__(self, worker_id: _Optional[int] = ..., run_id: _Optional[int] = ..., since_model_id: _Optional[int] = ..., limit: _Optional[int] = ..., without_ranking: _Optional[bool] = ...) -> None: ...

class GetHistoryResponse(_message.Message):
    __slots__ = ("run_id", "models", "ranked_model_ids")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    RANKED_MODEL_IDS_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    models: _containers.RepeatedCompositeFieldContainer[Model]
    ranked_model_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, run_id: _Optional[int] = ..., models: _Optional[_Iterable[_Union[Model, _Mapping]]] = ..., ranked_model_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class SubmitModelRequest(_message.Message):
    __slots__ = ("worker_id", "run_id", "graph_json", "graph_hash", "parent_id", "round", "hyperparameters", "queue", "dataset", "has_dataset", "inherited_from")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_JSON_FIELD_NUMBER: _ClassVar[int]
    GRAPH_HASH_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    HYPERPARAMETERS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    HAS_DATASET_FIELD_NUMBER: _ClassVar[int]
    INHERITED_FROM_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    run_id: int
    graph_json: str
    graph_hash: str
    parent_id: int
    round: int
    hyperparameters: Hyperparameters
    queue: bool
    dataset: DatasetInfo
    has_dataset: bool
    inherited_from: int
    def __init__(self, worker_id: _Optional[int] = ..., run_id: _Optional[int] = ..., graph_json: _Optional[str] = ..., graph_hash: _Optional[str] = ..., parent_id: _Optional[int] = ..., round: _Optional[int] = ..., hyperparameters: _Optional[_Union[Hyperparameters, _Mapping]] = ..., queue: _Optional[bool] = ..., dataset: _Optional[_Union[DatasetInfo, _Mapping]] = ..., has_dataset: _Optional[bool] = ..., inherited_from: _Optional[int] = ...) -> None: ...

class SubmitModelResponse(_message.Message):
    __slots__ = ("model_id", "state", "flops_per_train_image", "flops_per_eval_image", "init_seed")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FLOPS_PER_TRAIN_IMAGE_FIELD_NUMBER: _ClassVar[int]
    FLOPS_PER_EVAL_IMAGE_FIELD_NUMBER: _ClassVar[int]
    INIT_SEED_FIELD_NUMBER: _ClassVar[int]
    model_id: int
    state: ModelState
    flops_per_train_image: int
    flops_per_eval_image: int
    init_seed: int
    def __init__(self, model_id: _Optional[int] = ..., state: _Optional[_Union[ModelState, str]] = ..., flops_per_train_image: _Optional[int] = ..., flops_per_eval_image: _Optional[int] = ..., init_seed: _Optional[int] = ...) -> None: ...

class GetHyperparameterHistoryRequest(_message.Message):
    __slots__ = ("worker_id", "run_id")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    run_id: int
    def __init__(self, worker_id: _Optional[int] = ..., run_id: _Optional[int] = ...) -> None: ...

class HyperparameterObservation(_message.Message):
    __slots__ = ("model_id", "round", "worker_id", "hyperparameters", "accuracy")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HYPERPARAMETERS_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    model_id: int
    round: int
    worker_id: int
    hyperparameters: Hyperparameters
    accuracy: float
    def __init__(self, model_id: _Optional[int] = ..., round: _Optional[int] = ..., worker_id: _Optional[int] = ..., hyperparameters: _Optional[_Union[Hyperparameters, _Mapping]] = ..., accuracy: _Optional[float] = ...) -> None: ...

class GetHyperparameterHistoryResponse(_message.Message):
    __slots__ = ("run_id", "observations")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    observations: _containers.RepeatedCompositeFieldContainer[HyperparameterObservation]
    def __init__(self, run_id: _Optional[int] = ..., observations: _Optional[_Iterable[_Union[HyperparameterObservation, _Mapping]]] = ...) -> None: ...

class ProgressReport(_message.Message):
    __slots__ = ("worker_id", "model_id", "seq", "images_trained", "images_validated", "has_accuracy", "val_accuracy", "epoch", "worker_flops", "weights_sha256")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    IMAGES_TRAINED_FIELD_NUMBER: _ClassVar[int]
    IMAGES_VALIDATED_FIELD_NUMBER: _ClassVar[int]
    HAS_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    VAL_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    WORKER_FLOPS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    model_id: int
    seq: int
    images_trained: int
    images_validated: int
    has_accuracy: bool
    val_accuracy: float
    epoch: int
    worker_flops: int
    weights_sha256: str
    def __init__(self, worker_id: _Optional[int] = ..., model_id: _Optional[int] = ..., seq: _Optional[int] = ..., images_trained: _Optional[int] = ..., images_validated: _Optional[int] = ..., has_accuracy: _Optional[bool] = ..., val_accuracy: _Optional[float] = ..., epoch: _Optional[int] = ..., worker_flops: _Optional[int] = ..., weights_sha256: _Optional[str] = ...) -> None: ...

class ProgressAck(_message.Message):
    __slots__ = ("model_id", "seq", "duplicate", "master_flops", "flops_mismatch", "run_state", "model_state")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    MASTER_FLOPS_FIELD_NUMBER: _ClassVar[int]
    FLOPS_MISMATCH_FIELD_NUMBER: _ClassVar[int]
    RUN_STATE_FIELD_NUMBER: _ClassVar[int]
    MODEL_STATE_FIELD_NUMBER: _ClassVar[int]
    model_id: int
    seq: int
    duplicate: bool
    master_flops: int
    flops_mismatch: bool
    run_state: RunState
    model_state: ModelState
    def __init__(self, model_id: _Optional[int] = ..., seq: _Optional[int] = ..., duplicate: _Optional[bool] = ..., master_flops: _Optional[int] = ..., flops_mismatch: _Optional[bool] = ..., run_state: _Optional[_Union[RunState, str]] = ..., model_state: _Optional[_Union[ModelState, str]] = ...) -> None: ...

class FinishModelRequest(_message.Message):
    __slots__ = ("worker_id", "model_id", "state", "reason", "best_accuracy", "predicted_accuracy", "has_accuracy", "checkpoint_uri", "checkpoint_sha256", "undeleted_checkpoints", "checkpoint_weights_sha256")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    BEST_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    HAS_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_URI_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_SHA256_FIELD_NUMBER: _ClassVar[int]
    UNDELETED_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_WEIGHTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    model_id: int
    state: ModelState
    reason: str
    best_accuracy: float
    predicted_accuracy: float
    has_accuracy: bool
    checkpoint_uri: str
    checkpoint_sha256: str
    undeleted_checkpoints: _containers.RepeatedCompositeFieldContainer[CheckpointNotDeleted]
    checkpoint_weights_sha256: str
    def __init__(self, worker_id: _Optional[int] = ..., model_id: _Optional[int] = ..., state: _Optional[_Union[ModelState, str]] = ..., reason: _Optional[str] = ..., best_accuracy: _Optional[float] = ..., predicted_accuracy: _Optional[float] = ..., has_accuracy: _Optional[bool] = ..., checkpoint_uri: _Optional[str] = ..., checkpoint_sha256: _Optional[str] = ..., undeleted_checkpoints: _Optional[_Iterable[_Union[CheckpointNotDeleted, _Mapping]]] = ..., checkpoint_weights_sha256: _Optional[str] = ...) -> None: ...

class CheckpointToDelete(_message.Message):
    __slots__ = ("model_id", "uri")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    model_id: int
    uri: str
    def __init__(self, model_id: _Optional[int] = ..., uri: _Optional[str] = ...) -> None: ...

class CheckpointNotDeleted(_message.Message):
    __slots__ = ("model_id", "error")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    model_id: int
    error: str
    def __init__(self, model_id: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class FinishModelResponse(_message.Message):
    __slots__ = ("model", "run_state", "delete_checkpoints")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RUN_STATE_FIELD_NUMBER: _ClassVar[int]
    DELETE_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    model: Model
    run_state: RunState
    delete_checkpoints: _containers.RepeatedCompositeFieldContainer[CheckpointToDelete]
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ..., run_state: _Optional[_Union[RunState, str]] = ..., delete_checkpoints: _Optional[_Iterable[_Union[CheckpointToDelete, _Mapping]]] = ...) -> None: ...

class ResourceSample(_message.Message):
    __slots__ = ("age_s", "accelerator_index", "accelerator_util", "accelerator_memory_used", "cpu_util", "memory_used")
    AGE_S_FIELD_NUMBER: _ClassVar[int]
    ACCELERATOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    ACCELERATOR_UTIL_FIELD_NUMBER: _ClassVar[int]
    ACCELERATOR_MEMORY_USED_FIELD_NUMBER: _ClassVar[int]
    CPU_UTIL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_FIELD_NUMBER: _ClassVar[int]
    age_s: float
    accelerator_index: int
    accelerator_util: float
    accelerator_memory_used: int
    cpu_util: float
    memory_used: int
    def __init__(self, age_s: _Optional[float] = ..., accelerator_index: _Optional[int] = ..., accelerator_util: _Optional[float] = ..., accelerator_memory_used: _Optional[int] = ..., cpu_util: _Optional[float] = ..., memory_used: _Optional[int] = ...) -> None: ...

class SendResourceSamplesRequest(_message.Message):
    __slots__ = ("worker_id", "samples")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    samples: _containers.RepeatedCompositeFieldContainer[ResourceSample]
    def __init__(self, worker_id: _Optional[int] = ..., samples: _Optional[_Iterable[_Union[ResourceSample, _Mapping]]] = ...) -> None: ...

class SendResourceSamplesResponse(_message.Message):
    __slots__ = ("stored",)
    STORED_FIELD_NUMBER: _ClassVar[int]
    stored: int
    def __init__(self, stored: _Optional[int] = ...) -> None: ...

class WorkerMessage(_message.Message):
    __slots__ = ("heartbeat", "progress")
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    heartbeat: HeartbeatRequest
    progress: ProgressReport
    def __init__(self, heartbeat: _Optional[_Union[HeartbeatRequest, _Mapping]] = ..., progress: _Optional[_Union[ProgressReport, _Mapping]] = ...) -> None: ...

class MessageError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class MasterMessage(_message.Message):
    __slots__ = ("heartbeat", "progress", "error")
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    heartbeat: HeartbeatResponse
    progress: ProgressAck
    error: MessageError
    def __init__(self, heartbeat: _Optional[_Union[HeartbeatResponse, _Mapping]] = ..., progress: _Optional[_Union[ProgressAck, _Mapping]] = ..., error: _Optional[_Union[MessageError, _Mapping]] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ("duration_s", "profile", "seed", "limits", "precision", "warmup_rounds", "min_workers", "allow_concurrent", "report_interval_s", "resource_interval_s", "deterministic", "xla", "no_inherit", "keep_checkpoints")
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    WARMUP_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    MIN_WORKERS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    REPORT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    DETERMINISTIC_FIELD_NUMBER: _ClassVar[int]
    XLA_FIELD_NUMBER: _ClassVar[int]
    NO_INHERIT_FIELD_NUMBER: _ClassVar[int]
    KEEP_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    duration_s: float
    profile: Profile
    seed: int
    limits: Limits
    precision: Precision
    warmup_rounds: int
    min_workers: int
    allow_concurrent: bool
    report_interval_s: float
    resource_interval_s: float
    deterministic: bool
    xla: Toggle
    no_inherit: bool
    keep_checkpoints: int
    def __init__(self, duration_s: _Optional[float] = ..., profile: _Optional[_Union[Profile, str]] = ..., seed: _Optional[int] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., precision: _Optional[_Union[Precision, str]] = ..., warmup_rounds: _Optional[int] = ..., min_workers: _Optional[int] = ..., allow_concurrent: _Optional[bool] = ..., report_interval_s: _Optional[float] = ..., resource_interval_s: _Optional[float] = ..., deterministic: _Optional[bool] = ..., xla: _Optional[_Union[Toggle, str]] = ..., no_inherit: _Optional[bool] = ..., keep_checkpoints: _Optional[int] = ...) -> None: ...

class StartRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: RunInfo
    def __init__(self, run: _Optional[_Union[RunInfo, _Mapping]] = ...) -> None: ...

class StopRunRequest(_message.Message):
    __slots__ = ("run_id", "abort", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    abort: bool
    reason: str
    def __init__(self, run_id: _Optional[int] = ..., abort: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class StopRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: RunInfo
    def __init__(self, run: _Optional[_Union[RunInfo, _Mapping]] = ...) -> None: ...

class GetRunStatusRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    def __init__(self, run_id: _Optional[int] = ...) -> None: ...

class ModelCount(_message.Message):
    __slots__ = ("state", "count")
    STATE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    state: ModelState
    count: int
    def __init__(self, state: _Optional[_Union[ModelState, str]] = ..., count: _Optional[int] = ...) -> None: ...

class RunStatus(_message.Message):
    __slots__ = ("run", "master_time", "elapsed_s", "workers_alive", "workers_joined", "models", "api_version", "official", "unofficial_reasons")
    RUN_FIELD_NUMBER: _ClassVar[int]
    MASTER_TIME_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_S_FIELD_NUMBER: _ClassVar[int]
    WORKERS_ALIVE_FIELD_NUMBER: _ClassVar[int]
    WORKERS_JOINED_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    OFFICIAL_FIELD_NUMBER: _ClassVar[int]
    UNOFFICIAL_REASONS_FIELD_NUMBER: _ClassVar[int]
    run: RunInfo
    master_time: float
    elapsed_s: float
    workers_alive: int
    workers_joined: int
    models: _containers.RepeatedCompositeFieldContainer[ModelCount]
    api_version: ApiVersion
    official: bool
    unofficial_reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run: _Optional[_Union[RunInfo, _Mapping]] = ..., master_time: _Optional[float] = ..., elapsed_s: _Optional[float] = ..., workers_alive: _Optional[int] = ..., workers_joined: _Optional[int] = ..., models: _Optional[_Iterable[_Union[ModelCount, _Mapping]]] = ..., api_version: _Optional[_Union[ApiVersion, str]] = ..., official: _Optional[bool] = ..., unofficial_reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class GetScoreboardRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    def __init__(self, run_id: _Optional[int] = ...) -> None: ...

class Scoreboard(_message.Message):
    __slots__ = ("run", "elapsed_s", "flops", "score", "provisional", "regulated_score", "valid_flops", "error", "best_accuracy", "target_accuracy", "valid", "invalid_reason", "official", "efficiency", "peak_flops", "total_ops", "worker_ops", "flops_mismatch_reports", "reports", "workers", "workers_alive", "accelerators", "models", "models_done", "best_model_id", "inventory", "master_software", "min_running_time_s", "score_time_s", "images_trained", "images_validated", "peak_verdict", "implausible_reports", "unofficial_reasons", "regulated_score_time_s", "valid_flops_time_s", "audit_status", "audit_model_id", "audit", "efficiency_vs_measured", "datasheet_peak_flops", "efficiency_unknown_reason", "scoring_rules_version", "checks")
    RUN_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_S_FIELD_NUMBER: _ClassVar[int]
    FLOPS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    PROVISIONAL_FIELD_NUMBER: _ClassVar[int]
    REGULATED_SCORE_FIELD_NUMBER: _ClassVar[int]
    VALID_FLOPS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    BEST_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    TARGET_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    VALID_FIELD_NUMBER: _ClassVar[int]
    INVALID_REASON_FIELD_NUMBER: _ClassVar[int]
    OFFICIAL_FIELD_NUMBER: _ClassVar[int]
    EFFICIENCY_FIELD_NUMBER: _ClassVar[int]
    PEAK_FLOPS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_OPS_FIELD_NUMBER: _ClassVar[int]
    WORKER_OPS_FIELD_NUMBER: _ClassVar[int]
    FLOPS_MISMATCH_REPORTS_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_ALIVE_FIELD_NUMBER: _ClassVar[int]
    ACCELERATORS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    MODELS_DONE_FIELD_NUMBER: _ClassVar[int]
    BEST_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    MASTER_SOFTWARE_FIELD_NUMBER: _ClassVar[int]
    MIN_RUNNING_TIME_S_FIELD_NUMBER: _ClassVar[int]
    SCORE_TIME_S_FIELD_NUMBER: _ClassVar[int]
    IMAGES_TRAINED_FIELD_NUMBER: _ClassVar[int]
    IMAGES_VALIDATED_FIELD_NUMBER: _ClassVar[int]
    PEAK_VERDICT_FIELD_NUMBER: _ClassVar[int]
    IMPLAUSIBLE_REPORTS_FIELD_NUMBER: _ClassVar[int]
    UNOFFICIAL_REASONS_FIELD_NUMBER: _ClassVar[int]
    REGULATED_SCORE_TIME_S_FIELD_NUMBER: _ClassVar[int]
    VALID_FLOPS_TIME_S_FIELD_NUMBER: _ClassVar[int]
    AUDIT_STATUS_FIELD_NUMBER: _ClassVar[int]
    AUDIT_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    EFFICIENCY_VS_MEASURED_FIELD_NUMBER: _ClassVar[int]
    DATASHEET_PEAK_FLOPS_FIELD_NUMBER: _ClassVar[int]
    EFFICIENCY_UNKNOWN_REASON_FIELD_NUMBER: _ClassVar[int]
    SCORING_RULES_VERSION_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    run: RunInfo
    elapsed_s: float
    flops: float
    score: float
    provisional: bool
    regulated_score: float
    valid_flops: float
    error: float
    best_accuracy: float
    target_accuracy: float
    valid: bool
    invalid_reason: str
    official: bool
    efficiency: float
    peak_flops: float
    total_ops: float
    worker_ops: float
    flops_mismatch_reports: int
    reports: int
    workers: int
    workers_alive: int
    accelerators: int
    models: _containers.RepeatedCompositeFieldContainer[ModelCount]
    models_done: int
    best_model_id: int
    inventory: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    master_software: _containers.RepeatedCompositeFieldContainer[SoftwareVersion]
    min_running_time_s: float
    score_time_s: float
    images_trained: int
    images_validated: int
    peak_verdict: str
    implausible_reports: int
    unofficial_reasons: _containers.RepeatedScalarFieldContainer[str]
    regulated_score_time_s: float
    valid_flops_time_s: float
    audit_status: str
    audit_model_id: int
    audit: Audit
    efficiency_vs_measured: float
    datasheet_peak_flops: float
    efficiency_unknown_reason: str
    scoring_rules_version: str
    checks: _containers.RepeatedCompositeFieldContainer[ValidityCheck]
    def __init__(self, run: _Optional[_Union[RunInfo, _Mapping]] = ..., elapsed_s: _Optional[float] = ..., flops: _Optional[float] = ..., score: _Optional[float] = ..., provisional: _Optional[bool] = ..., regulated_score: _Optional[float] = ..., valid_flops: _Optional[float] = ..., error: _Optional[float] = ..., best_accuracy: _Optional[float] = ..., target_accuracy: _Optional[float] = ..., valid: _Optional[bool] = ..., invalid_reason: _Optional[str] = ..., official: _Optional[bool] = ..., efficiency: _Optional[float] = ..., peak_flops: _Optional[float] = ..., total_ops: _Optional[float] = ..., worker_ops: _Optional[float] = ..., flops_mismatch_reports: _Optional[int] = ..., reports: _Optional[int] = ..., workers: _Optional[int] = ..., workers_alive: _Optional[int] = ..., accelerators: _Optional[int] = ..., models: _Optional[_Iterable[_Union[ModelCount, _Mapping]]] = ..., models_done: _Optional[int] = ..., best_model_id: _Optional[int] = ..., inventory: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ..., master_software: _Optional[_Iterable[_Union[SoftwareVersion, _Mapping]]] = ..., min_running_time_s: _Optional[float] = ..., score_time_s: _Optional[float] = ..., images_trained: _Optional[int] = ..., images_validated: _Optional[int] = ..., peak_verdict: _Optional[str] = ..., implausible_reports: _Optional[int] = ..., unofficial_reasons: _Optional[_Iterable[str]] = ..., regulated_score_time_s: _Optional[float] = ..., valid_flops_time_s: _Optional[float] = ..., audit_status: _Optional[str] = ..., audit_model_id: _Optional[int] = ..., audit: _Optional[_Union[Audit, _Mapping]] = ..., efficiency_vs_measured: _Optional[float] = ..., datasheet_peak_flops: _Optional[float] = ..., efficiency_unknown_reason: _Optional[str] = ..., scoring_rules_version: _Optional[str] = ..., checks: _Optional[_Iterable[_Union[ValidityCheck, _Mapping]]] = ...) -> None: ...

class ValidityCheck(_message.Message):
    __slots__ = ("rule", "state", "figure", "limit", "detail")
    RULE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FIGURE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    rule: str
    state: str
    figure: str
    limit: str
    detail: str
    def __init__(self, rule: _Optional[str] = ..., state: _Optional[str] = ..., figure: _Optional[str] = ..., limit: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class Audit(_message.Message):
    __slots__ = ("model_id", "run_id", "claimed_accuracy", "has_audited_accuracy", "audited_accuracy", "architecture_ok", "verdict", "auditor_host", "validation_images", "audited_at", "detail", "tolerance", "throughput", "worker_hardware", "auditor_hardware", "claimed_images_per_second", "audited_images_per_second", "worker_flops", "audited_flops", "throughput_tolerance", "node_audit", "inventory")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    HAS_AUDITED_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    AUDITED_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_OK_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    AUDITOR_HOST_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_IMAGES_FIELD_NUMBER: _ClassVar[int]
    AUDITED_AT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    WORKER_HARDWARE_FIELD_NUMBER: _ClassVar[int]
    AUDITOR_HARDWARE_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_IMAGES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    AUDITED_IMAGES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    WORKER_FLOPS_FIELD_NUMBER: _ClassVar[int]
    AUDITED_FLOPS_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    NODE_AUDIT_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    model_id: int
    run_id: int
    claimed_accuracy: float
    has_audited_accuracy: bool
    audited_accuracy: float
    architecture_ok: bool
    verdict: str
    auditor_host: str
    validation_images: int
    audited_at: float
    detail: str
    tolerance: float
    throughput: str
    worker_hardware: str
    auditor_hardware: str
    claimed_images_per_second: float
    audited_images_per_second: float
    worker_flops: float
    audited_flops: float
    throughput_tolerance: float
    node_audit: bool
    inventory: str
    def __init__(self, model_id: _Optional[int] = ..., run_id: _Optional[int] = ..., claimed_accuracy: _Optional[float] = ..., has_audited_accuracy: _Optional[bool] = ..., audited_accuracy: _Optional[float] = ..., architecture_ok: _Optional[bool] = ..., verdict: _Optional[str] = ..., auditor_host: _Optional[str] = ..., validation_images: _Optional[int] = ..., audited_at: _Optional[float] = ..., detail: _Optional[str] = ..., tolerance: _Optional[float] = ..., throughput: _Optional[str] = ..., worker_hardware: _Optional[str] = ..., auditor_hardware: _Optional[str] = ..., claimed_images_per_second: _Optional[float] = ..., audited_images_per_second: _Optional[float] = ..., worker_flops: _Optional[float] = ..., audited_flops: _Optional[float] = ..., throughput_tolerance: _Optional[float] = ..., node_audit: _Optional[bool] = ..., inventory: _Optional[str] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ("run_id", "state", "limit", "offset", "include_graph")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_GRAPH_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    state: ModelState
    limit: int
    offset: int
    include_graph: bool
    def __init__(self, run_id: _Optional[int] = ..., state: _Optional[_Union[ModelState, str]] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., include_graph: _Optional[bool] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("run_id", "models", "total")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    models: _containers.RepeatedCompositeFieldContainer[Model]
    total: int
    def __init__(self, run_id: _Optional[int] = ..., models: _Optional[_Iterable[_Union[Model, _Mapping]]] = ..., total: _Optional[int] = ...) -> None: ...

class GetTimelineRequest(_message.Message):
    __slots__ = ("run_id", "max_points", "buckets")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_POINTS_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    max_points: int
    buckets: int
    def __init__(self, run_id: _Optional[int] = ..., max_points: _Optional[int] = ..., buckets: _Optional[int] = ...) -> None: ...

class CurvePoint(_message.Message):
    __slots__ = ("elapsed_s", "ops", "flops", "has_accuracy", "best_accuracy")
    ELAPSED_S_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    FLOPS_FIELD_NUMBER: _ClassVar[int]
    HAS_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    BEST_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    elapsed_s: float
    ops: float
    flops: float
    has_accuracy: bool
    best_accuracy: float
    def __init__(self, elapsed_s: _Optional[float] = ..., ops: _Optional[float] = ..., flops: _Optional[float] = ..., has_accuracy: _Optional[bool] = ..., best_accuracy: _Optional[float] = ...) -> None: ...

class ResourcePoint(_message.Message):
    __slots__ = ("elapsed_s", "has_accelerator", "accelerator_util", "accelerator_memory_used", "has_host", "cpu_util", "memory_used")
    ELAPSED_S_FIELD_NUMBER: _ClassVar[int]
    HAS_ACCELERATOR_FIELD_NUMBER: _ClassVar[int]
    ACCELERATOR_UTIL_FIELD_NUMBER: _ClassVar[int]
    ACCELERATOR_MEMORY_USED_FIELD_NUMBER: _ClassVar[int]
    HAS_HOST_FIELD_NUMBER: _ClassVar[int]
    CPU_UTIL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_FIELD_NUMBER: _ClassVar[int]
    elapsed_s: float
    has_accelerator: bool
    accelerator_util: float
    accelerator_memory_used: float
    has_host: bool
    cpu_util: float
    memory_used: float
    def __init__(self, elapsed_s: _Optional[float] = ..., has_accelerator: _Optional[bool] = ..., accelerator_util: _Optional[float] = ..., accelerator_memory_used: _Optional[float] = ..., has_host: _Optional[bool] = ..., cpu_util: _Optional[float] = ..., memory_used: _Optional[float] = ...) -> None: ...

class Timeline(_message.Message):
    __slots__ = ("run", "points", "resources")
    RUN_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    run: RunInfo
    points: _containers.RepeatedCompositeFieldContainer[CurvePoint]
    resources: _containers.RepeatedCompositeFieldContainer[ResourcePoint]
    def __init__(self, run: _Optional[_Union[RunInfo, _Mapping]] = ..., points: _Optional[_Iterable[_Union[CurvePoint, _Mapping]]] = ..., resources: _Optional[_Iterable[_Union[ResourcePoint, _Mapping]]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("limit", "offset")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    limit: int
    offset: int
    def __init__(self, limit: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "total", "master_time")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MASTER_TIME_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[RunInfo]
    total: int
    master_time: float
    def __init__(self, runs: _Optional[_Iterable[_Union[RunInfo, _Mapping]]] = ..., total: _Optional[int] = ..., master_time: _Optional[float] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ("state", "run_id", "limit", "offset")
    STATE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    state: WorkerState
    run_id: int
    limit: int
    offset: int
    def __init__(self, state: _Optional[_Union[WorkerState, str]] = ..., run_id: _Optional[int] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers", "total", "master_time")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MASTER_TIME_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    total: int
    master_time: float
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ..., total: _Optional[int] = ..., master_time: _Optional[float] = ...) -> None: ...

class RecordAuditRequest(_message.Message):
    __slots__ = ("model_id", "has_audited_accuracy", "audited_accuracy", "architecture_ok", "verdict", "auditor_host", "validation_images", "detail", "audited_images_per_second", "auditor_hardware", "has_retrained_accuracy", "retrained_accuracy", "node_audit", "node_accelerators", "node_cpu_model", "node_cpus")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    HAS_AUDITED_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    AUDITED_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_OK_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    AUDITOR_HOST_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_IMAGES_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    AUDITED_IMAGES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    AUDITOR_HARDWARE_FIELD_NUMBER: _ClassVar[int]
    HAS_RETRAINED_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    RETRAINED_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    NODE_AUDIT_FIELD_NUMBER: _ClassVar[int]
    NODE_ACCELERATORS_FIELD_NUMBER: _ClassVar[int]
    NODE_CPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    NODE_CPUS_FIELD_NUMBER: _ClassVar[int]
    model_id: int
    has_audited_accuracy: bool
    audited_accuracy: float
    architecture_ok: bool
    verdict: str
    auditor_host: str
    validation_images: int
    detail: str
    audited_images_per_second: float
    auditor_hardware: str
    has_retrained_accuracy: bool
    retrained_accuracy: float
    node_audit: bool
    node_accelerators: _containers.RepeatedCompositeFieldContainer[Accelerator]
    node_cpu_model: str
    node_cpus: int
    def __init__(self, model_id: _Optional[int] = ..., has_audited_accuracy: _Optional[bool] = ..., audited_accuracy: _Optional[float] = ..., architecture_ok: _Optional[bool] = ..., verdict: _Optional[str] = ..., auditor_host: _Optional[str] = ..., validation_images: _Optional[int] = ..., detail: _Optional[str] = ..., audited_images_per_second: _Optional[float] = ..., auditor_hardware: _Optional[str] = ..., has_retrained_accuracy: _Optional[bool] = ..., retrained_accuracy: _Optional[float] = ..., node_audit: _Optional[bool] = ..., node_accelerators: _Optional[_Iterable[_Union[Accelerator, _Mapping]]] = ..., node_cpu_model: _Optional[str] = ..., node_cpus: _Optional[int] = ...) -> None: ...

class RecordAuditResponse(_message.Message):
    __slots__ = ("audit",)
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    audit: Audit
    def __init__(self, audit: _Optional[_Union[Audit, _Mapping]] = ...) -> None: ...

class ListAuditsRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    def __init__(self, run_id: _Optional[int] = ...) -> None: ...

class ListAuditsResponse(_message.Message):
    __slots__ = ("run_id", "audits", "node_audit_model_ids")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AUDITS_FIELD_NUMBER: _ClassVar[int]
    NODE_AUDIT_MODEL_IDS_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    audits: _containers.RepeatedCompositeFieldContainer[Audit]
    node_audit_model_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, run_id: _Optional[int] = ..., audits: _Optional[_Iterable[_Union[Audit, _Mapping]]] = ..., node_audit_model_ids: _Optional[_Iterable[int]] = ...) -> None: ...
