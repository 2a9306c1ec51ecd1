"""Distributed XGBoost on CPU for Kubeflow's XGBoostJob example, run with only its image changed.

Upstream's ``examples/xgboost/xgboostjob.yaml`` (training-operator v1.8.1) runs its image with
``--job_type=Train --xgboost_parameter=objective:multi:softprob,num_class:3 --n_estimators=10
--learning_rate=0.1 --model_path=/tmp/xgboost-model --model_storage_type=local`` in a Master and
two Workers. This program takes the same arguments. The operator gives every replica
``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK`` (the master is rank 0): the master
starts xgboost's collective tracker (``RabitTracker``) on ``MASTER_PORT``, every replica joins it
(``xgboost.collective.CommunicatorContext``), trains on its own share of the rows, and the trees
are built from histograms summed across all of them, so each round's metric is the whole data's
and the same on every replica. The master saves the model. Every replica first waits until the
master's name resolves (its DNS record appears once its pod runs).

The data ships with scikit-learn (``load_iris``), so the job needs no download.

Run outside a cluster (one process): ``MASTER_ADDR=127.0.0.1 MASTER_PORT=9991 WORLD_SIZE=1 RANK=0
python train.py --job_type=Train``.
"""

from __future__ import annotations

import argparse
import os
import socket
import time

import numpy as np
import xgboost as xgb
from sklearn.datasets import load_iris
from xgboost.tracker import RabitTracker


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--job_type", required=True, choices=["Train"], help="only Train (upstream: also Predict)")
    parser.add_argument("--xgboost_parameter", default="", help="key:value pairs, comma-separated")
    parser.add_argument("--n_estimators", type=int, default=10, help="boosting rounds")
    parser.add_argument("--learning_rate", type=float, default=0.1)
    parser.add_argument("--model_path", default="/tmp/xgboost-model")
    parser.add_argument("--model_storage_type", default="local", choices=["local"])
    return parser.parse_args()


def parameters(text: str, learning_rate: float) -> dict[str, str | float]:
    """``objective:multi:softprob,num_class:3`` as xgboost's parameters (the quotes upstream's
    Worker passes literally are dropped; a value may hold colons)."""
    out: dict[str, str | float] = {"eta": learning_rate, "tree_method": "hist"}
    for pair in filter(None, text.strip("\"'").split(",")):
        key, _, value = pair.partition(":")
        out[key] = value
    return out


def resolved(address: str, seconds: float = 300) -> None:
    """Wait until ``address`` resolves: a replica's DNS name is published once its pod runs, and
    the master joins its own tracker by that name too (xgboost does not retry a name it cannot
    resolve)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.getaddrinfo(address, None)
            return
        except socket.gaierror:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def main() -> None:
    args = arguments()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    print(f"world size {world}, rank {rank}, tracker {address}:{port}", flush=True)
    tracker = None
    if rank == 0:
        tracker = RabitTracker(n_workers=world, host_ip="0.0.0.0", port=port)
        tracker.start()
    resolved(address)
    features, labels = load_iris(return_X_y=True)
    mine = np.arange(len(labels)) % world == rank  # this replica's share of the rows
    with xgb.collective.CommunicatorContext(dmlc_tracker_uri=address, dmlc_tracker_port=port, dmlc_task_id=str(rank)):
        data = xgb.DMatrix(features[mine], label=labels[mine])
        booster = xgb.train(
            parameters(args.xgboost_parameter, args.learning_rate),
            data,
            num_boost_round=args.n_estimators,
            evals=[(data, "train")],
        )
        if rank == 0:
            booster.save_model(f"{args.model_path}.json")
            print(f"model saved to {args.model_path}.json ({booster.num_boosted_rounds()} rounds)", flush=True)
    if tracker is not None:
        tracker.wait_for()
    print("training done", flush=True)


if __name__ == "__main__":
    main()
