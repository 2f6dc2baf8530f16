"""The mixture-of-experts feed-forward against a plain per-token loop, and its two ways of balancing a router."""

import pytest
import torch
import torch.nn.functional as F

from training.moe import MoEConfig, MoEFeedForward


def reference(layer: MoEFeedForward, x: torch.Tensor) -> torch.Tensor:
    """Token by token: the softmax (or sigmoid) scores, the top-k experts, each expert's SwiGLU times its gate."""
    experts, rows = layer.experts, []
    for token in x.reshape(-1, x.shape[-1]):
        logits = layer.router(token)
        scores = logits.softmax(-1) if layer.config.score == "softmax" else logits.sigmoid()
        top = (scores + layer.expert_bias).topk(layer.config.top_k).indices if layer.config.bias_balancing else scores.topk(layer.config.top_k).indices
        gates = scores[top] / scores[top].sum() if layer.config.top_k > 1 or layer.config.score == "sigmoid" else scores[top]
        out = sum(gate * (F.silu(token @ experts.w1[e]) * (token @ experts.w3[e])) @ experts.w2[e] for gate, e in zip(gates, top.tolist()))
        if layer.shared is not None:
            out = out + (F.silu(token @ layer.shared.w1[0]) * (token @ layer.shared.w3[0])) @ layer.shared.w2[0]
        rows.append(out)
    return torch.stack(rows).reshape(x.shape)


@pytest.mark.parametrize("config", [
    MoEConfig(num_experts=4, top_k=2, expert_hidden=12),
    MoEConfig(num_experts=8, top_k=1, expert_hidden=8, shared_experts=1),
    MoEConfig(num_experts=6, top_k=3, expert_hidden=8, score="sigmoid", bias_balancing=True),
])  # fmt: skip
def test_forward_and_backward_match_a_plain_loop_over_tokens(config):
    torch.manual_seed(0)
    layer = MoEFeedForward(16, config).double()
    layer.expert_bias.copy_(torch.randn(config.num_experts, dtype=torch.float64) * 0.1)
    x = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    out = layer(x)
    expected = reference(layer, x)
    torch.testing.assert_close(out, expected)
    weights = torch.randn_like(out)
    grads = torch.autograd.grad((out * weights).sum(), [x, *layer.parameters()])
    expected_grads = torch.autograd.grad((expected * weights).sum(), [x, *layer.parameters()])
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want)
    assert int(layer.stats.tokens_per_expert.sum()) == 15 * config.top_k


def skewed_layer(**changes) -> tuple[MoEFeedForward, torch.Tensor]:
    """A router that sends about 80% of 512 tokens to expert 0 of 4: that expert's row leans along the data."""
    torch.manual_seed(1)
    layer = MoEFeedForward(8, MoEConfig(num_experts=4, top_k=1, expert_hidden=8, **changes))
    x = torch.randn(512, 8) + 0.5
    with torch.no_grad():
        layer.router.weight.copy_(torch.randn(4, 8) * 0.3)
        layer.router.weight[0] += 0.6
    return layer, x


def imbalance(layer: MoEFeedForward, x: torch.Tensor) -> float:
    """The busiest expert's load over the mean load (1: balanced; 4: every token on one of the 4)."""
    layer(x)
    load = layer.stats.tokens_per_expert.float()
    return float(load.max() / load.mean())


def test_the_balancing_loss_moves_a_skewed_router_toward_balance():
    layer, x = skewed_layer()
    before = imbalance(layer, x)
    optimizer = torch.optim.SGD(layer.router.parameters(), lr=0.1)
    for _ in range(200):
        layer(x)
        optimizer.zero_grad()
        layer.stats.balance_loss.backward()
        optimizer.step()
    after = imbalance(layer, x)
    print(f"\nmax/mean load: {before:.2f} before, {after:.2f} after 200 steps of the balancing loss")
    assert before > 3 and after < 1.2


def test_bias_balancing_moves_a_skewed_router_toward_balance_without_gradients():
    """The sign rule with a fixed step ends in a small cycle: the worst of its last 20 steps is what is checked."""
    layer, x = skewed_layer(bias_balancing=True)
    before, weights, last = imbalance(layer, x), layer.router.weight.clone(), []
    for step in range(300):
        load = imbalance(layer, x)  # the forward whose expert loads the update reads
        last += [load] if step >= 280 else []
        layer.balance_bias(layer.stats.tokens_per_expert, 0.005)
    print(f"\nmax/mean load: {before:.2f} before, at most {max(last):.2f} over the last 20 of 300 bias updates")
    assert before > 3 and max(last) < 1.5 and torch.equal(layer.router.weight, weights)


def test_the_router_z_loss_is_the_mean_squared_logsumexp():
    layer, x = skewed_layer()
    layer(x)
    torch.testing.assert_close(layer.stats.z_loss, torch.logsumexp(layer.router(x), -1).pow(2).mean())


def test_configs_that_cannot_route_are_refused():
    with pytest.raises(ValueError, match="top_k must be between 1 and num_experts"):
        MoEConfig(num_experts=4, top_k=5, expert_hidden=8)
    with pytest.raises(ValueError, match="score is softmax or sigmoid"):
        MoEConfig(num_experts=4, top_k=1, expert_hidden=8, score="relu")
