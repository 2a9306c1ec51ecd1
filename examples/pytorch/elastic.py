"""Elastic data-parallel PyTorch on CPU: a run whose workers come and go while it trains.

torchrun runs this file in every Worker of ``elastic_pytorchjob.yaml``. The operator gives torchrun
its rendezvous: ``PET_RDZV_ENDPOINT`` on worker 0 and ``PET_NNODES`` (min:max, from the job's
elasticPolicy). Each torchrun agent joins a c10d rendezvous; when a worker joins or goes, every
agent restarts its training process with the new world size.

Each step all-reduces the gradients of a small linear model over gloo. After every epoch each
process keeps the model and the epoch reached in ``STATE_DIR`` (default ``/tmp/elastic``, which
outlives a restart of the process in the same pod). A restarted group continues from the furthest
epoch any of its members reached: the member that reached it broadcasts its model to the others,
so a worker that joins late starts from there too.

Each epoch prints ``epoch E world size W rank R loss L``. ``EPOCHS`` (default 30) and
``EPOCH_SECONDS`` (default 2) set the run's length, long enough to scale it while it trains.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

STATE = Path(os.environ.get("STATE_DIR", "/tmp/elastic")) / "state.pt"
STEPS = 20


def resume(model: torch.nn.Module) -> int:
    """The epoch to start from: the furthest any member reached, its model given to all."""
    epoch = torch.zeros(1)
    if STATE.exists():
        saved = torch.load(STATE)
        model.load_state_dict(saved["model"])
        epoch[0] = saved["epoch"]
    furthest = epoch.clone()
    dist.all_reduce(furthest, op=dist.ReduceOp.MAX)
    holder = torch.tensor([dist.get_rank() if epoch[0] == furthest[0] else dist.get_world_size()])
    dist.all_reduce(holder, op=dist.ReduceOp.MIN)  # the lowest rank that reached it
    for tensor in model.state_dict().values():
        dist.broadcast(tensor, src=int(holder[0]))
    return int(furthest[0])


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    true_weights = torch.randn(8, 1)
    model = torch.nn.Linear(8, 1)
    start = resume(model)
    print(f"rank {rank} of {world} starts at epoch {start + 1}", flush=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    epochs, pause = int(os.environ.get("EPOCHS", "30")), float(os.environ.get("EPOCH_SECONDS", "2"))
    generator = torch.Generator().manual_seed(rank)
    for epoch in range(start + 1, epochs + 1):
        for _ in range(STEPS):
            x = torch.randn(32, 8, generator=generator)
            loss = torch.nn.functional.mse_loss(model(x), x @ true_weights)
            optimizer.zero_grad()
            loss.backward()
            for p in model.parameters():
                assert p.grad is not None
                dist.all_reduce(p.grad)
                p.grad /= world
            optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        print(f"epoch {epoch} world size {world} rank {rank} loss {float(total) / world:.4f}", flush=True)
        STATE.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"model": model.state_dict(), "epoch": epoch}, STATE)
        time.sleep(pause)
    dist.destroy_process_group()
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    main()
