"""A worker's calls to the master answered with plain records (aiperf.api.records): what the
worker agent talks through, so that no message of aiperf_pb2 crosses into worker/.

`WorkerClient` stays the wire-level client (its replies are the messages; tests and fuzzers
send hostile values through it); `WorkerSession` wraps one, with the Connect stream its
heartbeats and progress reports ride on.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from aiperf.api import wire
from aiperf.api.client import Accelerator, ResourceSample, WorkerClient
from aiperf.api.records import CheckpointToDelete, Heartbeat, ModelRecord, Registration, SubmittedModel
from aiperf.hyperparameters import Hyperparameters
from aiperf.states import ModelState


class WorkerSession:
    """The calls of a worker agent: one WorkerClient and one Connect stream of its own."""

    def __init__(self, client: WorkerClient) -> None:
        self.client = client
        self._stream = client.connect()

    @classmethod
    def open(cls, address: str, token: str, **options: Any) -> "WorkerSession":
        """A session on a new WorkerClient; `options` as the client's (TLS, retries, timeout)."""
        return cls(WorkerClient(address, token, **options))

    def close(self) -> None:
        """Close the stream, then the channel (twice is harmless)."""
        self._stream.close()
        self.client.close()

    def credential(self, worker_id: int) -> str:
        return self.client.credential(worker_id)

    def register(self, name: str, host: str, accelerators: Sequence[Accelerator] = (), cpus: int = 0,
                 memory_bytes: int = 0, software: Mapping[str, str] | None = None, credential: str = "",
                 cpu_peak_flops_by_dtype: Mapping[str, float] | None = None, cpu_model: str = "",
                 backend: str = "") -> Registration:
        """As WorkerClient.register."""
        return wire.registration(self.client.register(
            name, host, accelerators, cpus, memory_bytes, software, credential, cpu_peak_flops_by_dtype,
            cpu_model, backend))

    def heartbeat(self, worker_id: int, model_id: int = 0) -> Heartbeat:
        """As WorkerClient.heartbeat, on this session's stream."""
        return wire.heartbeat(self._stream.heartbeat(worker_id, model_id))

    def goodbye(self, worker_id: int, timeout_s: float) -> bool:
        """As WorkerStream.goodbye."""
        return self._stream.goodbye(worker_id, timeout_s)

    def get_history(self, worker_id: int, since_model_id: int = 0) -> list[ModelRecord]:
        """The run's models with model_id > since_model_id, ascending (no ranking: the search ranks
        what it holds itself); a page of them when the master caps it."""
        reply = self.client.get_history(worker_id, since_model_id=since_model_id, ranking=False)
        return [wire.model_record(m) for m in reply.models]

    def submit_model(self, worker_id: int, graph_json: str, graph_hash: str, parent_id: int, round: int,
                     hyperparameters: Hyperparameters, dataset: Mapping[str, Any] | None = None,
                     inherited_from: int = 0) -> SubmittedModel:
        """As WorkerClient.submit_model; the new model's id and initialisation seed."""
        reply = self.client.submit_model(worker_id, graph_json, graph_hash, parent_id=parent_id, round=round,
                                         hyperparameters=hyperparameters,
                                         dataset=dataset, inherited_from=inherited_from)
        return SubmittedModel(reply.model_id, reply.init_seed)

    def report_progress(self, worker_id: int, model_id: int, seq: int, images_trained: int, images_validated: int,
                        epoch: int, worker_flops: int, val_accuracy: float | None = None,
                        weights_sha256: str = "") -> None:
        """As WorkerClient.report_progress, on this session's stream."""
        self._stream.report_progress(worker_id, model_id, seq, images_trained, images_validated, epoch,
                                     worker_flops, val_accuracy, weights_sha256)

    def finish_model(self, worker_id: int, model_id: int, state: ModelState, best_accuracy: float | None = None,
                     predicted_accuracy: float | None = None, reason: str = "", checkpoint_uri: str = "",
                     checkpoint_sha256: str = "", undeleted: Sequence[tuple[int, str]] = (),
                     checkpoint_weights_sha256: str = "") -> list[CheckpointToDelete]:
        """As WorkerClient.finish_model; the checkpoints retention lets go."""
        reply = self.client.finish_model(worker_id, model_id, state, best_accuracy, predicted_accuracy, reason,
                                         checkpoint_uri, checkpoint_sha256, undeleted,
                                         checkpoint_weights_sha256=checkpoint_weights_sha256)
        return wire.checkpoints_to_delete(reply.delete_checkpoints)

    def send_resource_samples(self, worker_id: int, samples: Sequence[ResourceSample]) -> int:
        """As WorkerClient.send_resource_samples."""
        return self.client.send_resource_samples(worker_id, samples)
