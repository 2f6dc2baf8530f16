"""`train export`: a training run's checkpoint as a Hugging Face Llama model, for transformers, vLLM and
lm-evaluation-harness.

The DCP checkpoint (of any world size) is loaded into one CPU copy of the model and written as `model.safetensors`
(or shards of it with an index), `config.json` (LlamaForCausalLM), `generation_config.json`, and the run's tokenizer
as `tokenizer.json` + `tokenizer_config.json`. Our attention rotates interleaved pairs of each head's dimensions;
Llama in transformers rotates the first half against the second, so the rows of q and k are reordered (the same
permutation on both leaves every attention score unchanged).
"""

import json
import shutil
import warnings
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from training import checkpoint
from training.model import ModelConfig, Transformer
from training.rope import hf_rope_scaling
from shard_contract import EOS_TOKEN, TOKENIZER_FILE

MODEL_FILE = "model.json"  # the run's ModelConfig, written by `train` beside its checkpoints
SHARD_BYTES = 5 * 1024**3  # transformers' default max_shard_size


def find_checkpoint(path: str | Path) -> tuple[Path, Path]:
    """(run folder, checkpoint folder) for RUN (its latest complete checkpoint) or RUN/checkpoints/step-N."""
    path = Path(path)
    if (path / checkpoint.STATE_FILE).is_file():
        return path.parent.parent, path
    found = checkpoint.latest(path / "checkpoints")
    if found is None:
        raise FileNotFoundError(f"{path} holds no complete checkpoint (checkpoints/step-N with {checkpoint.STATE_FILE})")
    return path, found


def load_model(run: Path, step: Path) -> Transformer:
    """The checkpoint's model on the CPU, in fp32, whatever world size wrote it."""
    if not (run / MODEL_FILE).is_file():
        raise FileNotFoundError(f"{run / MODEL_FILE} is missing: the run predates exports (train writes it at start)")
    config = ModelConfig(**json.loads((run / MODEL_FILE).read_text()))
    rope = json.loads((step / checkpoint.STATE_FILE).read_text()).get("rope")
    if rope:  # the RoPE in effect at this step (a context-extension phase changes it)
        config.rope_theta, config.rope_scaling = rope["theta"], rope["scaling"]
    model = Transformer(config)
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=str(step), no_dist=True)
    model.load_state_dict(state["model"])
    return model.float().eval()


def load_run(run: str | Path):
    """(model, tokenizer) of a training run's latest complete checkpoint (or RUN/checkpoints/step-N), on the CPU."""
    from tokenizers import Tokenizer

    run_dir, step = find_checkpoint(run)
    with warnings.catch_warnings():  # DCP says it loads in one process: what this is
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        model = load_model(run_dir, step)
    return model, Tokenizer.from_file(str(run_dir / TOKENIZER_FILE))


def _half_split(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of each head from interleaved pairs (0,1),(2,3),... to halves (0..d/2-1 | d/2..d-1)."""
    rows, columns = weight.shape
    return weight.view(heads, rows // heads // 2, 2, columns).transpose(1, 2).reshape(rows, columns)


def hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    config, state = model.config, model.state_dict()
    out = {"model.embed_tokens.weight": state["tok_embeddings.weight"], "model.norm.weight": state["norm.weight"]}
    for i in range(config.n_layers):
        ours, theirs = f"layers.{i}.", f"model.layers.{i}."
        out |= {
            f"{theirs}self_attn.q_proj.weight": _half_split(state[f"{ours}attention.wq.weight"], config.n_heads),
            f"{theirs}self_attn.k_proj.weight": _half_split(state[f"{ours}attention.wk.weight"], config.n_kv_heads),
            f"{theirs}self_attn.v_proj.weight": state[f"{ours}attention.wv.weight"],
            f"{theirs}self_attn.o_proj.weight": state[f"{ours}attention.wo.weight"],
            f"{theirs}mlp.gate_proj.weight": state[f"{ours}feed_forward.w1.weight"],
            f"{theirs}mlp.up_proj.weight": state[f"{ours}feed_forward.w3.weight"],
            f"{theirs}mlp.down_proj.weight": state[f"{ours}feed_forward.w2.weight"],
            f"{theirs}input_layernorm.weight": state[f"{ours}attention_norm.weight"],
            f"{theirs}post_attention_layernorm.weight": state[f"{ours}ffn_norm.weight"],
        }
    if not config.tie_embeddings:
        out["lm_head.weight"] = state["output.weight"]
    return {name: tensor.contiguous() for name, tensor in out.items()}


def hf_config(config: ModelConfig, eos_id: int, dtype: str) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": config.dim,
        "intermediate_size": config.ffn_hidden, "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads, "num_key_value_heads": config.n_kv_heads, "head_dim": config.head_dim,
        "rms_norm_eps": config.norm_eps, "rope_theta": config.rope_theta, "rope_scaling": hf_rope_scaling(config.rope_scaling),
        "max_position_embeddings": config.max_seq_len,
        "vocab_size": config.vocab_size, "tie_word_embeddings": config.tie_embeddings, "hidden_act": "silu",
        "attention_bias": False, "mlp_bias": False, "bos_token_id": None, "eos_token_id": eos_id, "torch_dtype": dtype,
    }  # fmt: skip


def _write_weights(tensors: dict[str, torch.Tensor], out: Path, shard_bytes: int) -> None:
    """model.safetensors, or model-0000i-of-0000n.safetensors and their index past `shard_bytes`."""
    from safetensors.torch import save_file

    shards, current, size = [], {}, 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if current and size + nbytes > shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name], size = tensor, size + nbytes
    shards.append(current)
    if len(shards) == 1:
        save_file(shards[0], out / "model.safetensors", metadata={"format": "pt"})
        return
    weight_map = {}
    for index, shard in enumerate(shards, 1):
        name = f"model-{index:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, out / name, metadata={"format": "pt"})
        weight_map |= dict.fromkeys(shard, name)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))


def export(path: str | Path, out: str | Path, dtype: str = "float32", shard_bytes: int = SHARD_BYTES) -> Path:
    """Write the Hugging Face model of the checkpoint at `path` into `out`, its weights in files of at most
    `shard_bytes` (past it, an index names each tensor's file); returns the checkpoint exported."""
    from tokenizers import Tokenizer

    run, step = find_checkpoint(path)
    saved = json.loads((run / MODEL_FILE).read_text()) if (run / MODEL_FILE).is_file() else {}  # before the weights load
    if saved.get("qk_norm"):
        raise ValueError(f"{run}: a qk_norm model has no Llama layout in transformers; export supports models "
                         "trained without model_overrides qk_norm")  # fmt: skip
    if saved.get("moe_experts"):
        raise ValueError(f"{run}: a mixture-of-experts model has no Llama layout in transformers; export supports dense "
                         "models")  # fmt: skip
    model = load_model(run, step)
    tokenizer_file = run / TOKENIZER_FILE
    eos_id = Tokenizer.from_file(str(tokenizer_file)).token_to_id(EOS_TOKEN)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {name: tensor.to(getattr(torch, dtype)) for name, tensor in hf_state_dict(model).items()}
    _write_weights(tensors, out, shard_bytes)
    (out / "config.json").write_text(json.dumps(hf_config(model.config, eos_id, dtype), indent=1))
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_id, "pad_token_id": eos_id}, indent=1))
    shutil.copyfile(tokenizer_file, out / TOKENIZER_FILE)
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS_TOKEN, "pad_token": EOS_TOKEN,
        "model_max_length": model.config.max_seq_len, "clean_up_tokenization_spaces": False,
    }, indent=1))  # fmt: skip
    return step


def write_model_config(out: Path, config: ModelConfig) -> None:
    """Beside the run's checkpoints: what `export` needs to rebuild the model."""
    (out / MODEL_FILE).write_text(json.dumps(asdict(config), indent=1))
