"""A TFJob worker that trains and writes TensorBoard summaries, at the path and with the arguments
of the image upstream Kubeflow's SDK tests run (gcr.io/kubeflow-ci/tf-mnist-with-summaries:1.0:
``python /var/tf_mnist/mnist_with_summaries.py --log_dir=/train/logs --learning_rate=0.01
--batch_size=150``), so that test runs with only its image changed.

A small dense network on scikit-learn's bundled digits (no download), trained with plain SGD at
``--learning_rate`` in batches of ``--batch_size`` for ``--max_steps`` steps; every ten steps the
loss and the held-out accuracy are printed and written as summaries (``tf.summary.write``: the
image has no TensorBoard) under ``--log_dir/train`` and ``--log_dir/test``, as upstream's example
writes them.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras is Keras 2 (tf-keras), as in multi_worker.py

import tensorflow as tf  # after the variable above, which it reads on import
from sklearn.datasets import load_digits


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--max_steps", type=int, default=200)
    parser.add_argument("--learning_rate", type=float, default=0.001)
    parser.add_argument("--batch_size", type=int, default=100)
    parser.add_argument("--log_dir", default="/tmp/tensorflow/mnist/logs/mnist_with_summaries")
    return parser.parse_args()


def main() -> None:
    args = arguments()
    images, labels = load_digits(return_X_y=True)
    x, y = (images / 16.0).astype(np.float32), labels.astype(np.int64)
    train, test = slice(0, 1500), slice(1500, None)
    net = tf.keras.Sequential(
        [tf.keras.Input(shape=(64,)), tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)]
    )
    optimizer = tf.keras.optimizers.SGD(learning_rate=args.learning_rate * 10)  # digits: 10x fewer pixels
    loss_of = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    batches = iter(tf.data.Dataset.from_tensor_slices((x[train], y[train])).shuffle(1500, seed=0).repeat())
    writers = {part: tf.summary.create_file_writer(os.path.join(args.log_dir, part)) for part in ("train", "test")}
    for step in range(1, args.max_steps + 1):
        xb, yb = zip(*(next(batches) for _ in range(args.batch_size)), strict=True)
        with tf.GradientTape() as tape:
            loss = loss_of(tf.stack(yb), net(tf.stack(xb), training=True))
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables, strict=True))
        if step % 10 == 0:
            accuracy = float(np.mean(np.argmax(net(x[test]).numpy(), axis=1) == y[test]))
            with writers["train"].as_default():
                tf.summary.write("cross_entropy", tf.constant(float(loss)), step=step)
            with writers["test"].as_default():
                tf.summary.write("accuracy", tf.constant(accuracy), step=step)
            print(f"Step {step}: loss={float(loss):.4f} accuracy={accuracy:.4f}", flush=True)
    for writer in writers.values():
        writer.flush()
    print(f"summaries written to {args.log_dir}", flush=True)


if __name__ == "__main__":
    main()
