"""Data-parallel TensorFlow training on CPU, for Kubeflow's TFJob examples run unchanged.

The image this directory builds runs this file in every Worker of upstream Kubeflow's
``multi_worker_tfjob.yaml`` example (bench.kubeflow.TENSORFLOW_EXAMPLE). TF_CONFIG (the cluster of
workers and this one's task, set by the operator) is what ``tf.distribute.MultiWorkerMirroredStrategy``
reads: the workers meet over gRPC, each holds a
replica of the model, and each step's gradients are all-reduced across them (ring collectives on
CPU). The input is sharded by data, so each worker trains on its own part of every global batch.

The data ships with scikit-learn (``load_digits``: 1797 handwritten digits of 8x8 pixels), so the
job needs no download. Keras prints the loss of every epoch; ``BackupAndRestore`` keeps the
training state under ``--checkpoint_dir`` so a restarted worker continues the epoch count, and at
the end worker 0 saves the model under ``--saved_model_dir`` (the others in a directory of their
own, as MultiWorkerMirroredStrategy needs every worker to save). Arguments are named like
upstream's example.

Run outside a cluster (one worker): ``python multi_worker.py --saved_model_dir /tmp/m --checkpoint_dir /tmp/c``.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np

# tf.keras is Keras 2 (the tf-keras package): Keras 3's Model.fit refuses the per-replica batches
# of MultiWorkerMirroredStrategy ("unsupported type PerReplica"), Keras 2's takes them.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # after the variable above, which it reads on import
from sklearn.datasets import load_digits

BATCH_PER_REPLICA = 32


def digits() -> tf.data.Dataset:
    """scikit-learn's digits as an unbatched dataset of (8x8x1 image in [0, 1], label)."""
    images, labels = load_digits(return_X_y=True)
    x = (images.reshape(-1, 8, 8, 1) / 16.0).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((x, labels.astype(np.int64)))


def model() -> tf.keras.Model:
    """A small convolutional network, compiled (inside the strategy's scope)."""
    net = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(8, 8, 1)),
            tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    net.compile(
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return net


class PrintLoss(tf.keras.callbacks.Callback):
    """One line per epoch, the same on every worker: ``Epoch N: loss=… accuracy=…``."""

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        logs = logs or {}
        print(
            f"Epoch {epoch + 1}: loss={logs.get('loss', float('nan')):.4f} "
            f"accuracy={logs.get('accuracy', float('nan')):.4f}",
            flush=True,
        )


def task_index() -> int:
    return int(json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {}).get("index", 0))


def main(args: argparse.Namespace) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    print(f"Workers in sync: {strategy.num_replicas_in_sync}; this is worker {task_index()}", flush=True)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    batch = BATCH_PER_REPLICA * strategy.num_replicas_in_sync
    train = digits().shuffle(2048, seed=1).repeat().batch(batch).with_options(options)
    with strategy.scope():
        net = model()
    callbacks = [tf.keras.callbacks.BackupAndRestore(backup_dir=args.checkpoint_dir), PrintLoss()]
    net.fit(train, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks, verbose=2)
    index = task_index()
    where = args.saved_model_dir if index == 0 else os.path.join(args.saved_model_dir, f"worker_tmp_{index}")
    os.makedirs(where, exist_ok=True)
    net.save(os.path.join(where, "model.keras"))
    print(f"Saved the model in {where}", flush=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="TensorFlow digits, MultiWorkerMirroredStrategy (a TFJob example)")
    parser.add_argument("--saved_model_dir", required=True, help="where worker 0 saves the trained model")
    parser.add_argument("--checkpoint_dir", required=True, help="BackupAndRestore's directory")
    parser.add_argument("--epochs", type=int, default=5, help="epochs to train (default: 5)")
    parser.add_argument("--steps_per_epoch", type=int, default=20, help="global batches per epoch (default: 20)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse())
