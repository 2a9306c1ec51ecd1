"""A small data-parallel training job in JAX on CPU: real collectives, heartbeats, checkpoints, resume.

Every process of the Trainer (framework: jax) runs this file. JAX's distributed runtime meets on
worker 0 (COORDINATOR_ADDRESS:COORDINATOR_PORT, NUM_PROCESSES, PROCESS_ID — the operator's env
contract), each process holds one CPU device of a global mesh, and each step's gradient is the
mean over the global batch: XLA all-reduces it across the processes with gloo.

The model is a two-layer MLP that learns which of four interleaved spirals a point belongs to;
the dataset is generated here from a fixed seed, so every process agrees on it without a
download. Each process trains on its own slice of every global batch.

With the Trainer Operator's training-side package (trainerop_sdk):
- a heartbeat every HEARTBEAT_STEPS steps and after every epoch (epoch and global step show in
  ``kubectl get trainer``);
- a checkpoint after every epoch: each process saves its replica of the parameters as its shard,
  written CHECKPOINT_REPLICATION_FACTOR times and reported with the pod's own identity; the
  checkpoint controller commits it once every shard has a quorum of verified copies;
- a checkpoint at the step the operator asks for, mid-epoch too (before a spot reclaim or on
  ``kubectl trainer checkpoint``: every process is asked the same step, which a heartbeat's
  answer carries back);
- on start, RESUME_FROM (the latest committed checkpoint) is loaded and training continues from
  its global step, so a replaced pod does not start over;
- on SIGTERM (eviction, spot reclaim) the current state is saved before the pod goes;
- with spec.model, training starts from the weights the operator's initializer fetched and
  checked (MODEL_PATH/params.npz, read-only) instead of random ones.

Settings (environment): MODEL_PATH (from spec.model), EPOCHS (from the Trainer), STEPS_PER_EPOCH
(default 32), HEARTBEAT_STEPS (16), LEARNING_RATE (0.5), MIN_EPOCH_SECONDS (0: an epoch takes
what it takes; more stretches each epoch so the run can be watched, or a worker killed, while it
trains), INIT_TIMEOUT_SECONDS (300, JAX's: how long the processes wait for each other at start;
past it JAX ends the process with a signal, which restartPolicy ExitCode retries).

Run outside a cluster (one process, no checkpoints): ``python train.py``.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

CLASSES = 4
POINTS = 4096
HIDDEN = 64
PEER_LOST = 200  # exit code when a collective fails because another process died (retryable)


def log(message: str) -> None:
    print(f"[process {jax.process_index()}] {message}", flush=True)


def spirals(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """POINTS points on CLASSES interleaved noisy spiral arms, with the arm as the label."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, POINTS)
    radius = rng.uniform(0.05, 1.0, POINTS)
    angle = 2 * np.pi * labels / CLASSES + 3.0 * radius + rng.normal(0, 0.15, POINTS)
    points = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    return points.astype(np.float32), labels.astype(np.int32)


def init_params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + 1)

    def dense(n_in: int, n_out: int) -> np.ndarray:
        return (rng.normal(0, 1, (n_in, n_out)) * np.sqrt(2.0 / n_in)).astype(np.float32)

    return {
        "w1": dense(2, HIDDEN),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": dense(HIDDEN, HIDDEN),
        "b2": np.zeros(HIDDEN, np.float32),
        "w3": dense(HIDDEN, CLASSES),
        "b3": np.zeros(CLASSES, np.float32),
    }


def initial_params() -> dict[str, np.ndarray]:
    """What training starts from: MODEL_PATH's params.npz when the Trainer names a model (fetched
    from the Hub and checked by the operator's initializer before this container started), else
    random weights."""
    model = os.environ.get("MODEL_PATH")
    if not model:
        return init_params()
    path = os.path.join(model, "params.npz")
    with open(path, "rb") as f:
        data = f.read()
    with np.load(io.BytesIO(data)) as saved:
        params = {name: saved[name] for name in saved.files}
    shapes = {name: value.shape for name, value in init_params().items()}
    if {name: value.shape for name, value in params.items()} != shapes:
        raise SystemExit(f"{path} does not hold this model's parameters: expected the shapes {shapes}")
    log(f"initial weights from {path} (sha256 {hashlib.sha256(data).hexdigest()[:16]})")
    return params


def loss_fn(params: dict[str, Any], points: jax.Array, labels: jax.Array) -> jax.Array:
    hidden = jnp.tanh(points @ params["w1"] + params["b1"])
    hidden = jnp.tanh(hidden @ params["w2"] + params["b2"])
    logits = hidden @ params["w3"] + params["b3"]
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=1))


def serialize(params: dict[str, Any], step: int) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, step=np.int64(step), **{name: np.asarray(value) for name, value in params.items()})
    return buffer.getvalue()


def deserialize(data: bytes) -> tuple[dict[str, np.ndarray], int]:
    with np.load(io.BytesIO(data)) as saved:
        return {name: saved[name] for name in saved.files if name != "step"}, int(saved["step"])


def initialize_distributed() -> None:
    processes = int(os.environ.get("NUM_PROCESSES", "1"))
    if processes <= 1:
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    address = f"{os.environ['COORDINATOR_ADDRESS']}:{os.environ.get('COORDINATOR_PORT', '6666')}"
    process_id = int(os.environ["PROCESS_ID"])
    print(f"[process {process_id}] joining {processes} processes at {address}", flush=True)
    jax.distributed.initialize(
        coordinator_address=address,
        num_processes=processes,
        process_id=process_id,
        initialization_timeout=int(os.environ.get("INIT_TIMEOUT_SECONDS", "300")),
    )


def operator_hooks() -> tuple[Any, Any]:
    """The heartbeat and checkpointer when running under the operator, else (None, None)."""
    if not os.environ.get("TRAINER_NAME"):
        return None, None
    from trainerop_sdk.checkpoint import Checkpointer
    from trainerop_sdk.heartbeat import Heartbeat

    checkpointer = Checkpointer.in_cluster() if os.environ.get("CHECKPOINT_DIR") else None
    return Heartbeat.in_cluster(), checkpointer


def save_checkpoint(checkpointer: Any, data: bytes, step: int, epoch: int) -> None:
    """Save this process's shard; a save that fails (storage or the API server unreachable, after
    the SDK's own retries) does not stop training: the next epoch saves again, and the Trainer's
    CheckpointOverdue condition says when commits stop coming."""
    try:
        name = checkpointer.save(data, step=step, epoch=epoch)
    except Exception as err:  # whatever the storage raised: training goes on
        log(f"checkpoint at step {step} not saved ({type(err).__name__}: {err}); training goes on")
        return
    log(f"checkpoint {name} saved")


def send_heartbeat(heartbeat: Any, epochs_done: int, step: int, total_steps: int, losses: list[float]) -> None:
    """Report progress (and read back a save the operator asks for); a failed beat does not stop
    training, but a fenced pod (replaced by another) stops at once."""
    try:
        metrics = {"loss": float(np.mean(losses))} if losses else None
        heartbeat.send(epoch=epochs_done, step=step, total_steps=total_steps, metrics=metrics)
    except Exception as err:  # progress reporting must not stop training
        log(f"heartbeat failed: {err}")
    except SystemExit as fenced:  # this pod was replaced (trainerop_sdk.heartbeat.Fenced): stop now
        log(str(fenced))
        sys.stderr.flush()
        os._exit(int(fenced.code or 0))  # not JAX's exit handler: it would wait for peers


def main() -> int:
    initialize_distributed()  # past INIT_TIMEOUT_SECONDS JAX ends the process itself (a signal: retried)
    epochs = int(os.environ.get("EPOCHS", "10"))
    steps_per_epoch = int(os.environ.get("STEPS_PER_EPOCH", "32"))
    learning_rate = float(os.environ.get("LEARNING_RATE", "0.5"))
    min_epoch_seconds = float(os.environ.get("MIN_EPOCH_SECONDS", "0"))
    heartbeat_steps = max(1, int(os.environ.get("HEARTBEAT_STEPS", "16")))
    heartbeat, checkpointer = operator_hooks()

    processes, me = jax.process_count(), jax.process_index()
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    points, labels = spirals()
    local_batch = max(POINTS // steps_per_epoch // processes, 1)
    global_batch = local_batch * processes

    params, step = initial_params(), 0
    saved = checkpointer.load() if checkpointer is not None else None
    if saved is not None:
        params, step = deserialize(saved)
        log(f"resuming from {os.environ['RESUME_FROM']}: global step {step}, epoch {step // steps_per_epoch + 1}")
    else:
        log(f"starting from scratch: {processes} processes, global batch {global_batch}")
    state = {name: jax.device_put(value, replicated) for name, value in params.items()}

    @jax.jit
    def train_step(params: dict[str, Any], points: jax.Array, labels: jax.Array) -> tuple[dict[str, Any], jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, points, labels)  # all-reduced over processes
        return jax.tree.map(lambda p, g: p - learning_rate * g, params, grads), loss

    # (parameters, global step) after the last step, replaced in one assignment, so a save on
    # SIGTERM always takes a consistent pair.
    latest = (state, step)

    def on_sigterm() -> tuple[bytes, int, int]:
        params, at = latest
        return serialize(params, at), at, at // steps_per_epoch

    if checkpointer is not None:
        checkpointer.save_on_sigterm(on_sigterm, hard_exit=True)  # no wait for peers at exit

    started_epoch = step // steps_per_epoch
    for epoch in range(started_epoch, epochs):
        started = time.monotonic()
        order = np.random.default_rng(1000 + epoch).permutation(POINTS)
        losses = []
        for batch in range(step - epoch * steps_per_epoch, steps_per_epoch):  # mid-epoch after a SIGTERM save
            rows = order[(batch * global_batch + me * local_batch) % POINTS :][:local_batch]
            x = jax.make_array_from_process_local_data(sharded, points[rows])
            y = jax.make_array_from_process_local_data(sharded, labels[rows])
            try:
                state, loss = train_step(state, x, y)
                losses.append(float(loss))
            except jax.errors.JaxRuntimeError as err:
                # A collective fails when a peer process died: not this process's fault, so exit
                # with a code restartPolicy ExitCode retries (128-255), not 1 (permanent).
                # os._exit: JAX's exit handler would wait at a shutdown barrier for the dead peer.
                log(f"step {step + 1} failed, a peer is likely gone: {str(err).splitlines()[0]}")
                sys.stderr.flush()
                os._exit(PEER_LOST)
            step += 1
            latest = (state, step)
            if len(losses) == 1 and epoch == started_epoch:
                log(f"first step done: global step {step}, loss {losses[0]:.4f}")
            mid_epoch = step % steps_per_epoch != 0  # (an epoch's end beats and saves below)
            if heartbeat is not None and mid_epoch and step % heartbeat_steps == 0:
                send_heartbeat(heartbeat, epoch, step, epochs * steps_per_epoch, losses)
            if checkpointer is not None and heartbeat is not None and mid_epoch and heartbeat.save_requested(step):
                log(f"saving at step {step}, as the operator asked")
                save_checkpoint(checkpointer, serialize(state, step), step, epoch)
        log(f"epoch {epoch + 1}/{epochs} step {step} loss {np.mean(losses):.4f}")
        if checkpointer is not None:
            save_checkpoint(checkpointer, serialize(state, step), step, epoch + 1)
        if heartbeat is not None:
            send_heartbeat(heartbeat, epoch + 1, step, epochs * steps_per_epoch, losses)
        time.sleep(max(0.0, min_epoch_seconds - (time.monotonic() - started)))

    final = float(loss_fn(jax.device_get(state), jnp.asarray(points), jnp.asarray(labels)))
    log(f"done: {epochs} epochs, global step {step}, loss on the whole dataset {final:.4f}")
    if processes > 1:
        jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
