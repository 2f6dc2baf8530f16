"""Training configuration: a named model size plus optimization, data and logging settings, validated at load."""

from dataclasses import replace
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from training.attention import KERNELS
from training.fp8 import RECIPES as FP8_RECIPES
from training.metrics import SPIKE_POLICIES
from training.mixture import PhaseShape
from training.model import MODEL_CONFIGS, ModelConfig


PP_SCHEDULES = ("1F1B", "GPipe")  # training.pipeline.SCHEDULES runs each


class Parallelism(BaseModel):
    """How the ranks split the work, torchtitan's names: the sizes multiply to the world size. dp_shard -1 takes the
    ranks the others leave (FSDP over them); dp_replicate > 1 with dp_shard > 1 is HSDP (replicate across nodes, shard
    inside)."""

    model_config = ConfigDict(extra="forbid")
    dp_replicate: int = Field(1, ge=1, description="data-parallel replicas (DDP-like across groups of ranks)")
    dp_shard: int = Field(-1, ge=-1, description="FSDP2 shards per replica; -1: the ranks left over")
    tp: int = Field(1, ge=1, description="tensor parallel (+ sequence parallel) degree, inside a node")
    pp: int = Field(1, ge=1, description="pipeline stages (one per rank of a pipeline group)")
    pp_schedule: Literal[PP_SCHEDULES] = Field("1F1B", description="pipeline schedule")
    pp_microbatches: int = Field(0, ge=0, description="micro-batches a pipeline step is split into; 0: the step's "
                                 "micro-batches per data-parallel rank (global_batch / (micro_batch x dp))")  # fmt: skip
    cp: int = Field(1, ge=1, description="context parallel degree (CUDA only)")
    ep: int = Field(1, ge=1, description="expert parallel degree: each MoE layer's experts split over this many of the "
                    "dp_shard ranks (all-to-all dispatch); FSDP shards the experts over the dp_shard / ep left")  # fmt: skip

    @model_validator(mode="after")
    def shard_nonzero(self):
        if self.dp_shard == 0:
            raise ValueError("parallelism.dp_shard is -1 (the ranks left over) or at least 1")
        return self

    def resolve(self, world: int) -> "Parallelism":
        """The same layout with dp_shard filled in for `world` ranks; ValueError naming the sizes that do not fit."""
        fixed = self.dp_replicate * self.tp * self.pp * self.cp
        shard = self.dp_shard if self.dp_shard != -1 else world // fixed
        if shard < 1 or fixed * shard != world:
            raise ValueError(f"parallelism dp_replicate {self.dp_replicate} x dp_shard {self.dp_shard} x tp {self.tp} x "
                             f"pp {self.pp} x cp {self.cp} does not make the {world} ranks launched")  # fmt: skip
        return self.model_copy(update={"dp_shard": shard})

    def ranks(self) -> int | None:
        """The world size the layout names, when it names one (no dp_shard -1 and more than one rank)."""
        sizes = self.dp_replicate * self.tp * self.pp * self.cp * max(self.dp_shard, 1)
        return sizes if sizes > 1 else None

    def check_model(self, config: ModelConfig) -> None:
        """What a layout cannot do with a model, as one line, before any rank starts."""
        if config.n_kv_heads % self.tp or config.n_heads % self.tp:
            raise ValueError(f"parallelism.tp {self.tp} does not divide the model's {config.n_heads} query and "
                             f"{config.n_kv_heads} key/value heads: each tensor-parallel rank needs whole heads (GQA)")  # fmt: skip
        if config.ffn_hidden % self.tp:  # the vocabulary may split unevenly (DTensor pads it); the FFN is kept even
            raise ValueError(f"parallelism.tp {self.tp} does not divide the model's ffn_hidden {config.ffn_hidden}")
        if self.tp > 1 and config.qk_norm:
            raise ValueError("parallelism.tp > 1 with model_overrides qk_norm: tensor parallelism does not shard the "
                             "heads' norms yet; train a qk_norm model with tp 1")  # fmt: skip
        if self.pp > config.n_layers:
            raise ValueError(f"parallelism.pp {self.pp} is more stages than the model's {config.n_layers} layers")
        if self.pp > 1 and config.tie_embeddings:
            raise ValueError("parallelism.pp > 1 needs untied embeddings (--config tiny-untied, or model_overrides: "
                             "{tie_embeddings: false}): the embedding and the output layer live on different stages")  # fmt: skip
        if self.ep > 1 and not config.moe_experts:
            raise ValueError(f"parallelism.ep {self.ep} needs a mixture-of-experts model (e.g. --config tiny-moe)")
        if self.ep > 1 and (config.moe_experts % self.ep or self.dp_shard % self.ep or self.dp_replicate > 1):
            raise ValueError(f"parallelism.ep {self.ep} must divide the model's {config.moe_experts} experts and dp_shard "
                             f"{self.dp_shard} (expert parallelism splits the FSDP ranks; no dp_replicate with it yet)")  # fmt: skip
        if config.moe_experts and (self.tp > 1 or self.pp > 1):
            raise ValueError("a mixture-of-experts model trains with FSDP / HSDP (tp 1, pp 1): tensor parallelism does not "
                             "split experts and a pipeline stage's router losses do not reach the last stage's objective yet")  # fmt: skip
        if self.cp > 1:
            raise ValueError("parallelism.cp > 1: context parallelism is not built yet (torch's ring attention runs only on "
                             "CUDA's flash/efficient SDPA kernels, so it cannot be tested on this CPU machine)")  # fmt: skip

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    def describe(self) -> str:
        sizes = {"dp_replicate": self.dp_replicate, "dp_shard": self.dp_shard, "tp": self.tp, "pp": self.pp, "cp": self.cp,
                 "ep": self.ep}  # fmt: skip
        used = [f"{name} {size}" for name, size in sizes.items() if size > 1]
        pipeline = f" ({self.pp_schedule})" if self.pp > 1 else ""
        return " x ".join(used) + pipeline if used else "one rank"


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field("tiny", description=f"one of {sorted(MODEL_CONFIGS)}")
    model_overrides: dict = Field(default_factory=dict, description="ModelConfig fields to change, e.g. n_layers")
    seq_len: int = Field(128, gt=0)
    global_batch: int = Field(8, gt=0, description="sequences per optimizer step, over all ranks")
    micro_batch: int = Field(2, gt=0, description="sequences per rank per forward/backward")
    steps: int = Field(40, gt=0)
    # the tiny model's: 300 steps of the README's mixture, two seeds, reached validation loss 5.98-6.00 at 3e-3,
    # 5.33-5.46 at 1e-3 and 5.73-5.82 at 3e-4 (2026-12-05), and 3e-3 is chaotic by step 7 (README, parallelism)
    lr: float = Field(1e-3, gt=0)
    min_lr: float = Field(1e-4, ge=0)
    warmup: int = Field(5, ge=0)
    schedule: Literal["cosine", "wsd", "constant"] = "cosine"
    decay_frac: float = Field(0.2, ge=0, le=1, description="WSD: fraction of steps spent decaying")
    weight_decay: float = Field(0.1, ge=0)
    beta1: float = 0.9
    beta2: float = 0.95
    clip: float = Field(1.0, gt=0)
    seed: int = 0
    dtype: Literal["auto", "bf16", "fp32"] = Field("auto", description="auto: bf16 params on CUDA, fp32 on CPU")
    attention: Literal[KERNELS] = Field(
        "auto", description="auto: flash-attn when installed on CUDA in bf16, else SDPA; sdpa-<backend> pins SDPA's kernel"
    )
    activation_checkpointing: bool = False
    compile: bool = False
    fp8: Literal[FP8_RECIPES] = Field(
        "off", description="float8 matmuls in the blocks' Linear layers (torchao; H100/H200): per-tensor or per-row scales"
    )
    log_every: int = Field(1, gt=0)
    checkpoint_every: int = Field(20, gt=0)
    keep_checkpoints: int = Field(2, gt=0)
    lineage_every: int = Field(0, ge=0, description="write the documents of every N-th step's batch; 0: never")
    spike_sigma: float = Field(6.0, gt=0, description="a loss this many std above the recent mean logs its documents")
    spike_policy: Literal[SPIKE_POLICIES] = Field(
        "log", description="on a spike (or NaN): log its documents; skip: also drop the step's update; rewind: reload the "
        "last checkpoint and never train on the offending documents again",
    )  # fmt: skip
    z_loss: float = Field(0.0, ge=0, description="weight of PaLM's z-loss, mean log(Z)^2 of the logits (e.g. 1e-4); 0: off")
    average_last: float = Field(0.0, ge=0, lt=1, description="end with the mean of the weights over this fraction of the "
                                "run's last steps (LAWA, SWA's tail mean; e.g. 0.2); 0: the last step's weights")
    optimizer: Literal["adamw", "muon"] = Field("adamw", description="muon: Muon for the blocks' matrices (Moonlight's "
                                                "RMS-matched scale: same lr schedule), AdamW for embeddings, output, norms, routers")  # fmt: skip
    muon_momentum: float = Field(0.95, ge=0, lt=1, description="Muon's Nesterov momentum")
    offload: bool = Field(False, description="parameters, gradients and optimizer state in CPU memory between uses "
                          "(FSDP2's CPUOffloadPolicy; the optimizer steps on the CPU)")  # fmt: skip
    moe_balance_loss: float = Field(0.01, ge=0, description="weight of the MoE load-balancing loss (Switch; OLMoE's 0.01)")
    moe_router_z_loss: float = Field(0.001, ge=0, description="weight of the MoE router z-loss (ST-MoE; OLMoE's 0.001)")
    moe_bias_rate: float = Field(0.001, ge=0, description="bias step of auxiliary-loss-free balancing, for models with "
                                 "moe_bias_balancing (DeepSeek-V3's 0.001)")  # fmt: skip
    shuffle_sequences: bool = Field(False, description="take each epoch's windows in a shuffled order, so a batch mixes "
                                    "documents (runs of one sequence length; less noisy small runs: ladders, ablations)")  # fmt: skip
    eval_every: int = Field(20, ge=0, description="validation loss on the held-out slice every N steps and at the end; 0: never")
    eval_sequences: int = Field(16, gt=0, description="held-out sequences scored per source at each validation")
    parallelism: Parallelism = Field(default_factory=Parallelism)

    @model_validator(mode="after")
    def known_model(self):
        if self.model not in MODEL_CONFIGS:
            raise ValueError(f"model {self.model!r} is not one of {sorted(MODEL_CONFIGS)}")
        return self

    def model_config_for(self, vocab_size: int, longest: int = 0) -> ModelConfig:
        """The model for a vocabulary, its RoPE tables long enough for `longest` (a context-extension phase's)."""
        base = MODEL_CONFIGS[self.model]
        return replace(base, **{"vocab_size": vocab_size, "max_seq_len": max(base.max_seq_len, self.seq_len, longest),
                                **self.model_overrides})  # fmt: skip

    def base_shape(self) -> PhaseShape:
        """Sequence length, batch and RoPE of a run's first phase, before any phase changes them."""
        theta = self.model_overrides.get("rope_theta", MODEL_CONFIGS[self.model].rope_theta)
        return PhaseShape(self.seq_len, self.global_batch, self.micro_batch, theta)


PRESETS = {
    "tiny": {"model": "tiny"},
    "tiny-untied": {"model": "tiny", "model_overrides": {"tie_embeddings": False}},  # a pipeline can split it
    "tiny-moe": {"model": "tiny-moe"},
    "moe-7b-a1b": {"model": "moe-7b-a1b", "seq_len": 4096, "global_batch": 1024, "micro_batch": 2, "lr": 4e-4, "min_lr": 4e-5,
                   "warmup": 2000, "activation_checkpointing": True},  # OLMoE-1B-7B's batch (4M tokens) and peak lr
    "small": {"model": "small", "seq_len": 1024, "global_batch": 64, "micro_batch": 8, "lr": 1e-3, "min_lr": 1e-4, "warmup": 200},
    "1b": {"model": "1b", "seq_len": 2048, "global_batch": 256, "micro_batch": 4, "lr": 4e-4, "min_lr": 4e-5, "warmup": 2000,
           "activation_checkpointing": True},
    # Llama 2's batch of about 4M tokens, lr and schedule (Touvron et al. 2023); see `train plan --model 7b --gpus N`
    "7b": {"model": "7b", "seq_len": 4096, "global_batch": 1024, "micro_batch": 1, "lr": 3e-4, "min_lr": 3e-5, "warmup": 2000,
           "activation_checkpointing": True},
    "70b": {"model": "70b", "seq_len": 4096, "global_batch": 1024, "micro_batch": 1, "lr": 1.5e-4, "min_lr": 1.5e-5,
            "warmup": 2000, "activation_checkpointing": True},
}  # fmt: skip


def load_config(name_or_path: str, **overrides) -> TrainConfig:
    """A preset name (see PRESETS) or a YAML file of TrainConfig fields; CLI overrides win."""
    if name_or_path in PRESETS:
        data = dict(PRESETS[name_or_path])
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise ValueError(f"--config {name_or_path!r} is neither a preset {sorted(PRESETS)} nor a file")
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a training config is a mapping of TrainConfig fields")
    layout = {k: overrides.pop(k) for k in list(overrides) if k in Parallelism.model_fields}
    data.update({k: v for k, v in overrides.items() if v is not None})
    data["parallelism"] = {**data.get("parallelism", {}), **{k: v for k, v in layout.items() if v is not None}}
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as error:
        lines = [f"  {'.'.join(str(p) for p in item['loc']) or '(config)'}: {item['msg']}" for item in error.errors()]
        raise ValueError(f"invalid training config {name_or_path}\n" + "\n".join(lines)) from None
