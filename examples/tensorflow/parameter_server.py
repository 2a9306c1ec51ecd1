"""Parameter-server TensorFlow training on CPU: a TFJob of a Chief, parameter servers and Workers
(examples/tensorflow/parameter_server_tfjob.yaml), or a Trainer of the same topology
(parameter_server_trainer.yaml).

TF_CONFIG (the cluster of every role's addresses and this replica's task, set by the operator) is
what ``tf.distribute.cluster_resolver.TFConfigClusterResolver`` reads. The parameter servers and
workers run a ``tf.distribute.Server`` and serve until their pods are stopped (the job's
``cleanPodPolicy: Running`` stops them once it ends). The chief is the coordinator of
``tf.distribute.ParameterServerStrategy``: the model's variables live on the parameter servers, and
the chief schedules training steps on the workers (``ClusterCoordinator``), each step reading its
batch from the worker's own copy of the dataset and updating the variables where they live. The
chief's success ends the job (the Kubeflow success policy with a chief).

The data ships with scikit-learn (``load_digits``), so the job needs no download. The chief prints
the cluster it coordinates and the mean loss of each epoch's steps.
"""

from __future__ import annotations

import os

import numpy as np

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras is Keras 2 (tf-keras), as in multi_worker.py

import tensorflow as tf  # after the variable above, which it reads on import
from sklearn.datasets import load_digits

EPOCHS = 5
STEPS_PER_EPOCH = 40
BATCH = 64


def dataset(_: tf.distribute.InputContext) -> tf.data.Dataset:
    """scikit-learn's digits as (8x8 image in [0, 1], label) batches, repeated and shuffled."""
    images, labels = load_digits(return_X_y=True)
    x = (images.reshape(-1, 64) / 16.0).astype(np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, labels.astype(np.int64)))
    return data.shuffle(len(x), seed=0).repeat().batch(BATCH)


def serve(resolver: tf.distribute.cluster_resolver.ClusterResolver) -> None:
    """A worker or parameter server: serve the chief's requests until stopped."""
    print(f"serving as {resolver.task_type} {resolver.task_id}", flush=True)
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    server.join()


def coordinate(resolver: tf.distribute.cluster_resolver.ClusterResolver) -> None:
    """The chief: train a small network with its variables on the parameter servers."""
    spec = resolver.cluster_spec().as_dict()
    print(f"parameter servers: {len(spec.get('ps', []))}, workers: {len(spec.get('worker', []))}", flush=True)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        net = tf.keras.Sequential(
            [tf.keras.Input(shape=(64,)), tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)]
        )
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)
    loss_of = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    @tf.function
    def per_worker_dataset() -> tf.distribute.DistributedDataset:
        return strategy.distribute_datasets_from_function(dataset)

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset))

    @tf.function
    def step(batches: tf.distribute.DistributedIterator) -> tf.Tensor:
        def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_of(y, net(x, training=True)))
            grads = tape.gradient(loss, net.trainable_variables)
            optimizer.apply_gradients(zip(grads, net.trainable_variables, strict=True))
            return loss

        x, y = next(batches)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(x, y)), axis=None)

    for epoch in range(1, EPOCHS + 1):
        scheduled = [coordinator.schedule(step, args=(iterator,)) for _ in range(STEPS_PER_EPOCH)]
        coordinator.join()
        loss = float(np.mean([s.fetch() for s in scheduled]))
        print(f"Epoch {epoch}: loss={loss:.4f}", flush=True)
    print("training done", flush=True)


def main() -> None:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        serve(resolver)
    else:
        coordinate(resolver)


if __name__ == "__main__":
    main()
