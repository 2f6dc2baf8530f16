"""Muon beside AdamW (training.optimizer): which parameters each takes, Muon's update against a Newton-Schulz written
here from the paper's recipe, and the update of a row-sharded matrix (FSDP2's DTensor) against the whole matrix's."""

import math
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from training import optimizer as optimizers
from training.model import MODEL_CONFIGS, Transformer

A, B, C = 3.4445, -4.7750, 2.0315  # the quintic's coefficients (Jordan et al. 2024)


def newton_schulz(matrix: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """Keller Jordan's zeroth-power iteration, in float64 (Muon runs it in bfloat16)."""
    x = matrix.double()
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = A * x + (B * gram + C * gram @ gram) @ x
    return (x.T if tall else x).float()


def muon_step(weight: torch.Tensor, grad: torch.Tensor, lr: float, weight_decay: float) -> torch.Tensor:
    param = torch.nn.Parameter(weight.clone())
    param.grad = grad.clone()
    torch.optim.Muon([param], lr=lr, weight_decay=weight_decay, nesterov=True, adjust_lr_fn="match_rms_adamw").step()
    return param.detach()


def test_muon_takes_the_blocks_matrices_and_adamw_the_rest():
    model = Transformer(MODEL_CONFIGS["tiny-moe"])
    built = optimizers.build(model, "muon", 1e-3, 0.1, (0.9, 0.95))
    muon, adamw = list(built)
    on_muon = {id(p) for group in muon.param_groups for p in group["params"]}
    for name, param in model.named_parameters():
        expected = param.dim() == 2 and not name.startswith(("tok_embeddings", "output")) and "router" not in name
        assert (id(param) in on_muon) == expected, name
    assert sum(len(g["params"]) for g in built.param_groups) == len(list(model.parameters()))
    assert isinstance(optimizers.build(model, "adamw", 1e-3, 0.1, (0.9, 0.95)), torch.optim.AdamW)


def test_muons_first_update_is_newton_schulz_at_adamws_rms():
    """Decoupled decay, then the orthogonalized gradient scaled by 0.2 sqrt(max(rows, cols)) (Moonlight): an update
    whose RMS is about 0.2 x lr, AdamW's, whatever the matrix's shape."""
    torch.manual_seed(0)
    for rows, cols in ((64, 32), (32, 96)):
        weight, grad, lr, decay = torch.randn(rows, cols), torch.randn(rows, cols), 0.01, 0.1
        decayed = weight * (1 - lr * decay)
        update, expected = muon_step(weight, grad, lr, decay) - decayed, -lr * 0.2 * math.sqrt(max(rows, cols)) * newton_schulz(grad)
        apart = float((update - expected).norm() / expected.norm())
        assert apart < 0.05, apart  # Muon's bf16 iterations round ~2% off float64's
        assert float((update - (-lr * 0.2 * math.sqrt(max(rows, cols)) * newton_schulz(grad, steps=1))).norm() / expected.norm()) > 0.1
        rms = float(update.pow(2).mean().sqrt()) / lr
        assert 0.12 < rms < 0.3, (rows, cols, rms)


def _sharded_step(rank: int, world: int, store: str, weight, grad, out):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    param = torch.nn.Parameter(distribute_tensor(weight, mesh, [Shard(0)]))
    param.grad = distribute_tensor(grad, mesh, [Shard(0)])
    torch.optim.Muon([param], lr=0.01, weight_decay=0.1, nesterov=True, adjust_lr_fn="match_rms_adamw").step()
    full = param.detach().full_tensor()
    if rank == 0:
        torch.save(full, out)
    dist.destroy_process_group()


def test_a_row_sharded_matrix_takes_the_whole_matrixs_update(tmp_path):
    """FSDP2 shards a matrix by rows; Muon on that DTensor runs Newton-Schulz on the whole matrix (DTensor's matmuls
    gather what each product needs), so 2 ranks step as one does, to bf16's rounding. Newton-Schulz on each row shard
    alone would give another update, by far more."""
    torch.manual_seed(1)
    weight, grad = torch.randn(64, 48), torch.randn(64, 48)
    whole = muon_step(weight, grad, 0.01, 0.1)
    mp.spawn(_sharded_step, args=(2, str(tmp_path / "store"), weight, grad, tmp_path / "full.pt"), nprocs=2, join=True)
    sharded = torch.load(tmp_path / "full.pt")
    per_shard = torch.cat([muon_step(w, g, 0.01, 0.1) for w, g in zip(weight.chunk(2), grad.chunk(2))])
    update = (whole - weight * (1 - 0.01 * 0.1)).norm()
    apart, wrong = float((sharded - whole).norm() / update), float((per_shard - whole).norm() / update)
    print(f"\nupdates apart, relative: sharded vs whole {apart:.1e}; per-shard Newton-Schulz vs whole {wrong:.1e}")
    assert apart < 0.05 and wrong > 0.2  # bf16's rounding (~2%) against another update


@pytest.mark.parametrize("kind", ["adamw", "muon"])
def test_the_optimizer_state_round_trips_through_a_state_dict(kind):
    """What checkpoints rely on: torch.distributed.checkpoint takes the Muon + AdamW pair as the optimizers it holds."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    torch.manual_seed(0)
    model = Transformer(MODEL_CONFIGS["tiny-moe"])
    built = optimizers.build(model, kind, 1e-3, 0.1, (0.9, 0.95))
    model(torch.randint(0, 100, (2, 16))).sum().backward()
    built.step()
    _, saved = get_state_dict(model, built)
    fresh = optimizers.build(model, kind, 1e-3, 0.1, (0.9, 0.95))
    set_state_dict(model, fresh, model_state_dict=model.state_dict(), optim_state_dict=saved)
    _, reloaded = get_state_dict(model, fresh)
    assert reloaded["state"].keys() == saved["state"].keys() and len(saved["state"]) == len(list(model.parameters()))
    for name, values in saved["state"].items():
        for key, value in values.items():
            if torch.is_tensor(value):
                assert torch.equal(reloaded["state"][name][key], value), (name, key)
