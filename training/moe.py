"""A mixture-of-experts feed-forward: token-choice top-k routing over SwiGLU experts, optional shared experts, a
load-balancing loss, a router z-loss and DeepSeek-V3's auxiliary-loss-free bias balancing.

Dispatch is dropless: every token reaches each of its top-k experts, however many others chose the same one. A
capacity factor would drop tokens when an expert is over-subscribed, which makes a token's output depend on what
else is in its batch (so the same model would give other losses on 1 rank and under expert parallelism, and a
resumed run other losses than an uninterrupted one); on the sizes this project trains, the uneven expert batches that
dropless dispatch gives cost less than that. Tokens are sorted by expert and each expert runs on its contiguous slice
(a loop over experts: torch's grouped GEMM is still a private op).

Expert parallelism (`parallelize.apply_ep`): each of `ep` ranks holds num_experts / ep experts (their stacked
weights a DTensor sharded by expert), a token's hidden state travels by all-to-all to the rank of each expert it
chose and its output travels back (torch.distributed.nn's differentiable all_to_all_single); the router, the shared
experts and everything outside the layer stay data-parallel.
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as collectives
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor


@dataclass(frozen=True)
class MoEConfig:
    num_experts: int
    top_k: int
    expert_hidden: int  # each expert's SwiGLU width
    shared_experts: int = 0  # always-on experts of the same width, summed with the routed ones (DeepSeek's)
    score: str = "softmax"  # softmax over experts (Switch, Mixtral) or sigmoid (DeepSeek-V3)
    bias_balancing: bool = False  # DeepSeek-V3's auxiliary-loss-free balancing: a per-expert bias on the selection

    def __post_init__(self):
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"top_k must be between 1 and num_experts ({self.num_experts}), not {self.top_k}")
        if self.score not in ("softmax", "sigmoid"):
            raise ValueError(f"score is softmax or sigmoid, not {self.score!r}")


@dataclass
class RoutingStats:
    """What a forward pass's router did: the losses to add (weighted by the trainer) and each expert's load."""

    balance_loss: torch.Tensor  # Switch Transformer's: num_experts x sum_e (share of assignments) x (mean probability)
    z_loss: torch.Tensor  # ST-MoE's router z-loss: mean logsumexp(logits)^2
    tokens_per_expert: torch.Tensor  # assignments per expert (int64)


class Experts(nn.Module):
    """`num_experts` SwiGLU feed-forwards with their weights stacked: (experts, in, out) per projection."""

    def __init__(self, num_experts: int, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(num_experts, dim, hidden))
        self.w3 = nn.Parameter(torch.empty(num_experts, dim, hidden))
        self.w2 = nn.Parameter(torch.empty(num_experts, hidden, dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for weight in (self.w1, self.w3, self.w2):
            nn.init.normal_(weight, std=weight.shape[1] ** -0.5)  # 1 / sqrt(fan_in), as the dense layers

    def forward(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """`x` holds each (local) expert's tokens in turn, `counts[e]` of them for expert e."""
        w1, w3, w2 = (w.to_local() if isinstance(w, DTensor) else w for w in (self.w1, self.w3, self.w2))
        outputs, start = [], 0
        for expert, count in enumerate(counts):
            rows = x[start : start + count]
            outputs.append((F.silu(rows @ w1[expert]) * (rows @ w3[expert])) @ w2[expert])
            start += count
        return torch.cat(outputs) if outputs else x[:0]


class MoEFeedForward(nn.Module):
    def __init__(self, dim: int, config: MoEConfig):
        super().__init__()
        self.config = config
        self.router = nn.Linear(dim, config.num_experts, bias=False)
        self.experts = Experts(config.num_experts, dim, config.expert_hidden)
        self.shared = Experts(1, dim, config.expert_hidden * config.shared_experts) if config.shared_experts else None
        # the selection bias of auxiliary-loss-free balancing: a buffer, moved by `balance_bias`, never by gradients
        self.register_buffer("expert_bias", torch.zeros(config.num_experts), persistent=True)
        self.stats: RoutingStats | None = None
        self.ep_group: dist.ProcessGroup | None = None  # set by parallelize.apply_ep

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(each token's top-k experts, their gate weights, the router logits) for tokens `x` of shape (tokens, dim)."""
        logits = self.router(x)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # routing in at least fp32 under bf16
        scores = logits.softmax(-1) if self.config.score == "softmax" else logits.sigmoid()
        chosen = (scores + self.expert_bias if self.config.bias_balancing else scores).topk(self.config.top_k, dim=-1).indices
        gates = scores.gather(-1, chosen)
        if self.config.top_k > 1 or self.config.score == "sigmoid":
            gates = gates / gates.sum(-1, keepdim=True)  # the chosen experts' weights sum to one
        return chosen, gates, logits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        chosen, gates, logits = self.route(tokens)
        flat = chosen.reshape(-1)
        order = flat.argsort(stable=True)  # the (token, slot) assignments grouped by expert
        counts = torch.bincount(flat, minlength=self.config.num_experts)
        routed = tokens[order // self.config.top_k]
        expert_out = self.experts(routed, counts.tolist()) if self.ep_group is None else self.exchange(routed, counts)
        weighted = expert_out * gates.reshape(-1)[order, None].to(expert_out.dtype)
        out = torch.zeros_like(tokens).index_add_(0, order // self.config.top_k, weighted.to(tokens.dtype))
        if self.shared is not None:
            out = out + self.shared(tokens, [tokens.shape[0]])
        self.stats = routing_stats(logits, chosen, counts, self.config)
        return out.reshape(shape)

    def exchange(self, routed: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Expert parallelism: `routed` (this rank's assignments sorted by expert, `counts` per expert) to the ranks
        holding their experts, through those experts, and back in the same order."""
        ranks = dist.get_world_size(self.ep_group)
        local = self.config.num_experts // ranks
        received = torch.empty_like(counts)
        dist.all_to_all_single(received, counts, group=self.ep_group)  # received[s * local + j]: rank s's, our expert j
        received = received.view(ranks, local)
        send_splits, receive_splits = counts.view(ranks, local).sum(1).tolist(), received.sum(1).tolist()
        arrived = collectives.all_to_all_single(routed.new_empty(sum(receive_splits), routed.shape[1]), routed,
                                                receive_splits, send_splits, group=self.ep_group)  # fmt: skip
        by_expert = _source_to_expert_order(received)  # arrived: by source rank, then expert; the experts want expert first
        out = self.experts(arrived[by_expert], received.sum(0).tolist())
        out = out.new_empty(out.shape).index_copy(0, by_expert, out)
        return collectives.all_to_all_single(routed.new_empty(routed.shape), out, send_splits, receive_splits,
                                             group=self.ep_group)  # fmt: skip

    @torch.no_grad()
    def balance_bias(self, load: torch.Tensor, rate: float) -> None:
        """DeepSeek-V3's update after a step: raise the bias of experts below the mean `load` (the step's tokens per
        expert, summed over every rank so that each rank moves its copy alike), lower those above."""
        load = load.to(self.expert_bias.device, torch.float32)
        self.expert_bias += rate * torch.sign(load.mean() - load)


def _source_to_expert_order(counts: torch.Tensor) -> torch.Tensor:
    """The rows of segments laid out by (source, expert), `counts[s, e]` rows each, in (expert, source) order."""
    sizes = counts.flatten()
    starts = sizes.cumsum(0) - sizes  # where each (source, expert) segment begins
    new_sizes = counts.t().flatten()
    new_starts = new_sizes.cumsum(0) - new_sizes
    shift = starts.view(counts.shape).t().flatten() - new_starts
    return torch.arange(int(sizes.sum()), device=counts.device) + torch.repeat_interleave(shift, new_sizes)


def routing_stats(logits: torch.Tensor, chosen: torch.Tensor, counts: torch.Tensor, config: MoEConfig) -> RoutingStats:
    probabilities = logits.softmax(-1)
    share = counts.float() / chosen.numel()
    balance = config.num_experts * (share * probabilities.mean(0)).sum()
    return RoutingStats(balance, torch.logsumexp(logits, -1).pow(2).mean(), counts)
