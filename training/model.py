"""A Llama-style decoder: RMSNorm, RoPE, SwiGLU, grouped-query attention, tied or untied embeddings, optional QK-norm,
and optionally mixture-of-experts feed-forwards (training.moe)."""

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from training.attention import _sdpa
from training.moe import MoEConfig, MoEFeedForward
from training.rope import rope_tables


@dataclass
class ModelConfig:
    dim: int = 256
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 8192
    ffn_hidden: int = 688
    max_seq_len: int = 256
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # context extension: see training.rope
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    qk_norm: bool = False  # RMSNorm over each head's queries and keys before RoPE (as Qwen 3)
    init_std: float | None = 0.02  # std of every matrix's normal init; None: 1 / sqrt(fan_in) (embeddings: 1 / sqrt(dim))
    # mixture of experts (training.moe): 0 experts is a dense model
    moe_experts: int = 0
    moe_top_k: int = 2
    moe_hidden: int = 0  # each routed expert's SwiGLU width; 0: ffn_hidden
    moe_shared: int = 0  # always-on shared experts of moe_hidden each (DeepSeek's)
    moe_score: str = "softmax"  # router scores: softmax (Switch, Mixtral, OLMoE) or sigmoid (DeepSeek-V3)
    moe_bias_balancing: bool = False  # DeepSeek-V3's auxiliary-loss-free balancing of the selection
    moe_dense_layers: int = 0  # the first layers keep a dense feed-forward (DeepSeek-V3: 3)

    def __post_init__(self):
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError(f"dim {self.dim} / n_heads {self.n_heads} / n_kv_heads {self.n_kv_heads} do not divide")
        if self.init_std is not None and not self.init_std > 0:
            raise ValueError(f"init_std {self.init_std} must be above 0 (or none: 1 / sqrt(fan_in))")
        if self.moe_experts < 0 or self.moe_shared < 0 or self.moe_hidden < 0 or self.moe_dense_layers < 0:
            raise ValueError("moe_experts, moe_shared, moe_hidden and moe_dense_layers are 0 or more")
        if self.moe_experts and not 1 <= self.moe_top_k <= self.moe_experts:
            raise ValueError(f"moe_top_k {self.moe_top_k} must be between 1 and moe_experts {self.moe_experts}")
        if self.moe_score not in ("softmax", "sigmoid"):
            raise ValueError(f"moe_score is softmax or sigmoid, not {self.moe_score!r}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def moe(self) -> MoEConfig | None:
        if not self.moe_experts:
            return None
        return MoEConfig(self.moe_experts, self.moe_top_k, self.moe_hidden or self.ffn_hidden, self.moe_shared,
                         self.moe_score, self.moe_bias_balancing)  # fmt: skip

    def is_moe(self, layer: int) -> bool:
        return bool(self.moe_experts) and layer >= self.moe_dense_layers

    @property
    def moe_layers(self) -> int:
        return sum(self.is_moe(layer) for layer in range(self.n_layers))


MODEL_CONFIGS = {
    "tiny": ModelConfig(dim=256, n_layers=4, n_heads=4, n_kv_heads=2, ffn_hidden=688, max_seq_len=256),
    "small": ModelConfig(dim=768, n_layers=12, n_heads=12, n_kv_heads=4, ffn_hidden=2048, max_seq_len=1024, vocab_size=32768),
    "1b": ModelConfig(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_hidden=8192, max_seq_len=2048, vocab_size=128256),
    # Llama 2's shapes (untied embeddings), for `train plan` and runs on many GPUs
    "7b": ModelConfig(dim=4096, n_layers=32, n_heads=32, n_kv_heads=32, ffn_hidden=11008, max_seq_len=4096, vocab_size=32000,
                      tie_embeddings=False),
    "70b": ModelConfig(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_hidden=28672, max_seq_len=4096, vocab_size=32000,
                       tie_embeddings=False),
    # mixtures of experts: the tiny model's shapes with 8 experts of 224, 2 routed + 1 shared active (3 x 224 = 672,
    # about the dense tiny model's 688 of FFN per token); and OLMoE-1B-7B's shapes (64 experts of 1,024, top 8: 1.3B
    # of 6.9B active) for `train plan` and GPUs
    "tiny-moe": ModelConfig(dim=256, n_layers=4, n_heads=4, n_kv_heads=2, ffn_hidden=688, max_seq_len=256, moe_experts=8,
                            moe_top_k=2, moe_hidden=224, moe_shared=1),
    "moe-7b-a1b": ModelConfig(dim=2048, n_layers=16, n_heads=16, n_kv_heads=16, ffn_hidden=1024, max_seq_len=4096,
                              vocab_size=50304, tie_embeddings=False, qk_norm=True, moe_experts=64, moe_top_k=8),
}


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (batch, seq, heads, head_dim), rotating interleaved pairs."""
    seq = x.shape[1]
    cos, sin = cos[:seq, None, :], sin[:seq, None, :]
    even, odd = x[..., 0::2].float(), x[..., 1::2].float()
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    return rotated.type_as(x)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        self.wq = nn.Linear(config.dim, config.n_heads * config.head_dim, bias=False)
        self.wk = nn.Linear(config.dim, config.n_kv_heads * config.head_dim, bias=False)
        self.wv = nn.Linear(config.dim, config.n_kv_heads * config.head_dim, bias=False)
        self.wo = nn.Linear(config.n_heads * config.head_dim, config.dim, bias=False)
        self.q_norm = nn.RMSNorm(config.head_dim, eps=config.norm_eps) if config.qk_norm else None
        self.k_norm = nn.RMSNorm(config.head_dim, eps=config.norm_eps) if config.qk_norm else None
        self.attend = _sdpa

    def forward(self, x, cos, sin):
        batch, seq, _ = x.shape
        # -1 heads: under tensor parallelism a rank holds n_heads / tp of them
        q = self.wq(x).view(batch, seq, -1, self.head_dim)
        k = self.wk(x).view(batch, seq, -1, self.head_dim)
        v = self.wv(x).view(batch, seq, -1, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        out = self.attend(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)
        return self.wo(out.reshape(batch, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.ffn_hidden, bias=False)
        self.w2 = nn.Linear(config.ffn_hidden, config.dim, bias=False)
        self.w3 = nn.Linear(config.dim, config.ffn_hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.attention_norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.feed_forward = MoEFeedForward(config.dim, config.moe) if config.is_moe(layer) else FeedForward(config)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    """Layers are keyed by their index, so a pipeline stage that keeps some of them (and only the first stage's
    embedding, the last's norm and output) names its parameters as the whole model does: checkpoints move between
    layouts."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleDict({str(i): Block(config, i) for i in range(config.n_layers)})
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rope_tables(config.head_dim, config.max_seq_len, config.rope_theta, config.rope_scaling)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def set_rope(self, theta: float, scaling: dict | None) -> None:
        """A new RoPE base or scaling, as a context-extension phase sets (the weights stay as they are)."""
        self.config.rope_theta, self.config.rope_scaling = theta, scaling
        device = self.rope_cos.device
        self.rope_cos, self.rope_sin = rope_tables(self.config.head_dim, self.config.max_seq_len, theta, scaling, device)

    def init_weights(self, device: torch.device | None = None, buffer_device: torch.device | None = None) -> None:
        """Materialize a model built on the meta device (buffers included) and initialize it; `buffer_device`: where the
        buffers go when the parameters stay elsewhere (on the CPU, offloaded)."""
        if device is not None:
            self.to_empty(device=device)
        if buffer_device is not None:
            for module in self.modules():
                for name, buffer in module.named_buffers(recurse=False):
                    setattr(module, name, buffer.to(buffer_device))
        self.set_rope(self.config.rope_theta, self.config.rope_scaling)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal weights, the residual outputs (wo, w2, experts' w2) scaled down by sqrt(2 * layers) (GPT-2). A
        fixed std of 0.02 suits widths near 768; at the cpu ladder's widths (16-64) it starts every matrix far smaller
        than its fan-in gives, which `init_std: none` follows. Experts' stacked weights are (experts, in, out)."""
        for name, param in self.named_parameters():
            if param.dim() >= 2:
                fan_in = param.shape[1] if param.dim() == 2 else param.shape[-2]  # embeddings too: (vocab, dim)
                std = self.config.init_std or fan_in**-0.5
                if name.endswith(("wo.weight", "w2.weight", ".w2")):
                    std /= (2 * self.config.n_layers) ** 0.5
                nn.init.normal_(param, mean=0.0, std=std)
        for module in self.modules():
            if isinstance(module, nn.RMSNorm):
                module.reset_parameters()
            elif isinstance(module, MoEFeedForward):
                module.expert_bias.zero_()

    def set_attention(self, attend) -> None:
        for block in self.layers.values():
            block.attention.attend = attend

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids to logits; a pipeline stage without the embedding takes hidden states, one without the output
        returns them."""
        x = self.hidden(tokens)
        return self.output(self.norm(x)) if self.output is not None else x

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """The last block's output, before the final norm: scoring that needs the logits of a few positions only
        applies `output(norm(.))` to those."""
        x = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for block in self.layers.values():
            x = block(x, self.rope_cos, self.rope_sin)
        return x

    def moe_layers(self) -> list[tuple[str, MoEFeedForward]]:
        """(layer name, MoE feed-forward) of each MoE layer this model (or pipeline stage) holds."""
        return [(name, module) for name, module in self.named_modules() if isinstance(module, MoEFeedForward)]

    def num_params(self, embeddings: bool = True, active: bool = False) -> int:
        """Parameters; `active`: those one token uses (an MoE layer's top_k routed experts of its num_experts)."""
        total = sum(p.numel() for p in self.parameters())
        if not embeddings and self.tok_embeddings is not None:
            total -= self.tok_embeddings.weight.numel()
        if active:
            for _, moe in self.moe_layers():
                per_expert = sum(p[0].numel() for p in moe.experts.parameters())
                total -= (moe.config.num_experts - moe.config.top_k) * per_expert
        return total


def flops_per_token(config: ModelConfig, num_params: int, seq_len: int) -> float:
    """Training FLOPs per token: 6N for the matmuls plus 12 * layers * dim * seq_len for attention (PaLM, appendix B).
    For a mixture of experts N is the active parameter count (`num_params(active=True)`)."""
    return 6 * num_params + 12 * config.n_layers * config.dim * seq_len
