"""Data-parallel PyTorch training on CPU, for Kubeflow's PyTorchJob examples run unchanged.

The image this directory builds runs this file in every replica of upstream Kubeflow's
``pytorch_job_mnist_gloo.yaml`` example (bench.kubeflow.PYTORCH_EXAMPLE), Master and Workers
alike, with the variables a PyTorchJob's pods get: MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK.
``torch.distributed`` meets on the Master (env:// rendezvous), DistributedDataParallel all-reduces
each step's gradients with the chosen backend (gloo on CPU), and each rank trains on its own shard
of the data (DistributedSampler).

The data ships with scikit-learn (``load_digits``: 1797 handwritten digits of 8x8 pixels), so the
job needs no download; a small convolutional network learns them. Each rank prints its loss every
``--log-interval`` batches and its accuracy on the held-out quarter after every epoch, so a run's
log shows the loss falling. Arguments are named like upstream's mnist.py.

Run outside a cluster (one process): ``python mnist.py --epochs 2``.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn import functional
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Net(nn.Module):
    """Two convolutions and a linear layer over an 8x8 digit."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = functional.relu(self.conv1(x))
        x = functional.max_pool2d(functional.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


def digits(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """scikit-learn's digits as (train, test) tensors, pixels scaled to [0, 1]; every rank splits alike."""
    images, labels = load_digits(return_X_y=True)
    x = torch.tensor(images, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    y = torch.tensor(labels, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=seed)
    return TensorDataset(x_train, y_train), TensorDataset(x_test, y_test)


def train_epoch(
    model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer, epoch: int, args: argparse.Namespace
) -> None:
    model.train()
    for batch, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = functional.cross_entropy(model(x), y)
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        if batch % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch * len(x)}/{len(loader.sampler)}]\tloss={loss.item():.4f}", flush=True)


def accuracy(model: nn.Module, data: TensorDataset) -> float:
    model.eval()
    with torch.no_grad():
        x, y = data.tensors
        return (model(x).argmax(1) == y).float().mean().item()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="PyTorch digits, data-parallel (a PyTorchJob example)")
    parser.add_argument("--batch-size", type=int, default=32, help="input batch size per rank (default: 32)")
    parser.add_argument("--epochs", type=int, default=3, help="number of epochs to train (default: 3)")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate (default: 0.05)")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default: 0.9)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default: 1)")
    parser.add_argument("--log-interval", type=int, default=5, help="batches between loss lines (default: 5)")
    parser.add_argument("--backend", default="gloo", help="torch.distributed backend (default: gloo)")
    return parser.parse_args(argv)


def main() -> None:
    args = parse()
    torch.manual_seed(args.seed)
    os.environ.setdefault("WORLD_SIZE", "1")  # outside a job: one process, its own master
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "23456")
    print(f"Using distributed PyTorch with {args.backend} backend", flush=True)
    dist.init_process_group(backend=args.backend)
    print(f"World Size: {dist.get_world_size()}. Rank: {dist.get_rank()}", flush=True)
    train, test = digits(args.seed)
    sampler = DistributedSampler(train, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    model = DistributedDataParallel(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        train_epoch(model, loader, optimizer, epoch, args)
        print(f"Epoch {epoch}: test accuracy={accuracy(model, test):.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
