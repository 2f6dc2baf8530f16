"""Perplexity: each document's bits per byte under a causal language model (ours from `train export`, or any Hugging
Face one), kept by a threshold or in CCNet's head / middle / tail buckets.

CCNet keeps web pages by their perplexity under a language model trained on Wikipedia; bits per byte (the summed
negative log-likelihood of the text's tokens in bits, over its UTF-8 bytes) is that measure made independent of the
tokenizer, so models compare. The first token is scored after the tokenizer's end-of-text token (how `train` separates
documents). A document longer than the model's positions is scored in windows of `window` tokens, each after the
`window - stride` tokens before it, so every token is scored once and with context; `max_tokens` scores only a
document's first tokens (and their bytes), for speed. Empty or whitespace-only text has no bytes to score (it would
count 0 bits per byte, the best bucket): it gets no score and is dropped as `empty_text`.
"""

import math

import numpy as np
import pyarrow as pa
from pydantic import Field, model_validator

from filters.base import Annotation, Stage
from filters.model_score import (
    CHARS_PER_TOKEN_BOUND,
    DTYPES,
    PretrainedModelParams,
    check_model_folder,
    default_batch_tokens,
    length_sorted_batches,
    model_device_and_dtype,
)


def load_causal_config_and_tokenizer(params: PretrainedModelParams):
    """The model's config and tokenizer, or a ValueError naming the folder and what is wrong with it."""
    check_model_folder(params)  # before transformers' import, which alone takes seconds
    from transformers import AutoConfig, AutoTokenizer

    model_path = params.model_path
    try:
        config = AutoConfig.from_pretrained(model_path, **params.pretrained_options())
        tokenizer = AutoTokenizer.from_pretrained(model_path, **params.pretrained_options())
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"{model_path} does not load as a model and tokenizer ({str(error).splitlines()[0][:200]})") from None
    if not any(name.endswith(("ForCausalLM", "LMHeadModel")) for name in config.architectures or []):
        raise ValueError(f"{model_path} is a {', '.join(config.architectures or ['model without an architecture'])}, "
                         "not a causal language model (`train export` writes a LlamaForCausalLM)")  # fmt: skip
    if len(tokenizer) > config.vocab_size or len(tokenizer) <= len(tokenizer.all_special_tokens):
        raise ValueError(f"{model_path}: its tokenizer ({len(tokenizer):,} tokens) is not the model's "
                         f"(vocabulary {config.vocab_size:,})")  # fmt: skip
    return config, tokenizer


class PerplexityParams(PretrainedModelParams):
    model_path: str = Field(description="a folder `train export` wrote (or any causal LM with its tokenizer); a hub id "
                            "with `hub: true`")  # fmt: skip
    column: str = Field("perplexity_bpb", min_length=1, description="the bits-per-byte column")
    bucket_column: str = Field("perplexity_bucket", min_length=1, description="the bucket column, where `cutoffs` are given")
    cutoffs: list[float] | None = Field(None, min_length=2, max_length=2, description="[head, middle] upper bounds in "
                                        "bits per byte: head below the first, middle below the second, tail above")  # fmt: skip
    keep: list[str] = Field(["head", "middle", "tail"], description="the buckets kept (with cutoffs)")
    threshold: float | None = Field(None, gt=0, description="keep documents of at most this many bits per byte")
    window: int | None = Field(None, ge=2, description="tokens per forward pass of a long document; default the model's positions")
    stride: int | None = Field(None, ge=1, description="new tokens per window after the first; default half the window")
    max_tokens: int | None = Field(None, ge=1, description="score only a document's first tokens")
    batch_tokens: int | None = Field(None, ge=1, description="padded tokens per forward pass; default 4,096 on the CPU "
                                     "(larger batches ran slower there: 45 docs/s at 16,384), 16,384 on a GPU")  # fmt: skip
    dtype: str = Field("auto", description=f"one of {DTYPES}; auto: bfloat16 on a GPU, float32 on the CPU")
    device: str = Field("auto", description="auto (a GPU when one is visible), cpu, or cuda[:N]")

    @model_validator(mode="after")
    def checked_against_the_model(self):
        if self.threshold is not None and self.cutoffs is not None:
            raise ValueError("give threshold or cutoffs, not both")
        if self.cutoffs is not None and not self.cutoffs[0] <= self.cutoffs[1]:
            raise ValueError(f"cutoffs {self.cutoffs}: the head's bound comes first and is the lower")
        unknown = set(self.keep) - {"head", "middle", "tail"}
        if unknown:
            raise ValueError(f"keep: {sorted(unknown)} are not buckets (head, middle, tail)")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {DTYPES}")
        load_causal_config_and_tokenizer(self)
        return self


class PerplexityScorer(Stage):
    name = "perplexity"
    Params = PerplexityParams
    num_gpus = 1.0

    def __init__(self, params: PerplexityParams | None = None):
        super().__init__(params)
        self.adds = {self.params.column: pa.float32()}
        if self.params.cutoffs is not None:
            self.adds[self.params.bucket_column] = pa.string()

    def loaded_files(self) -> list[str]:
        return [self.params.model_path]

    def setup(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        config, self.tokenizer = load_causal_config_and_tokenizer(self.params)
        self.device, dtype = model_device_and_dtype(self.params.device, self.params.dtype)
        self.batch_tokens = self.params.batch_tokens or default_batch_tokens(self.device)
        self.model = AutoModelForCausalLM.from_pretrained(self.params.model_path, **self.params.pretrained_options())
        self.model = self.model.to(self.device, dtype).eval()
        positions = getattr(config, "max_position_embeddings", None) or 2048
        self.window = min(self.params.window or positions, positions)
        self.stride = min(self.params.stride or max(1, self.window // 2), self.window - 1)
        self.start = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else self.tokenizer.bos_token_id
        self.pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.start
        self.torch = torch

    def windows(self, ids: list[int]) -> list[tuple[list[int], int]]:
        """(window tokens, how many of its last tokens it scores) covering `ids` after the start token once each."""
        tokens = [self.start, *ids]
        if len(tokens) <= self.window:
            return [(tokens, len(tokens) - 1)]
        result, scored = [], 1  # tokens[:scored] are scored already (the start token never is)
        while scored < len(tokens):
            end = min(len(tokens), max(self.window, scored + self.stride))
            begin = end - self.window
            result.append((tokens[begin:end], end - scored))
            scored = end
        return result

    def bits_per_byte(self, texts: list[str]) -> np.ndarray:
        torch = self.torch
        if not texts:  # a tokenizer given no text fails
            return np.zeros(0)
        if self.params.max_tokens is not None:  # the characters its first tokens can come from, not the whole text
            texts = [text[: self.params.max_tokens * CHARS_PER_TOKEN_BOUND] for text in texts]
        encoded = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        if self.params.max_tokens is not None:
            encoded = [ids[: self.params.max_tokens] for ids in encoded]
        sizes = [len(text.encode("utf-8")) if self.params.max_tokens is None or len(ids) < self.params.max_tokens
                 else len(self.tokenizer.decode(ids).encode("utf-8")) for text, ids in zip(texts, encoded)]  # fmt: skip
        pieces = [(doc, window, count) for doc, ids in enumerate(encoded) for window, count in self.windows(ids)]
        nats = np.zeros(len(texts))
        with torch.inference_mode():
            for batch in length_sorted_batches([len(window) for _, window, _ in pieces], self.batch_tokens):
                longest = max(len(pieces[i][1]) for i in batch)
                ids = torch.full((len(batch), longest), self.pad, dtype=torch.long)
                mask = torch.zeros((len(batch), longest), dtype=torch.long)
                for row, i in enumerate(batch):
                    window = pieces[i][1]
                    ids[row, : len(window)] = torch.tensor(window)
                    mask[row, : len(window)] = 1
                logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits.float()
                targets = ids[:, 1:].to(self.device)  # flat (tokens, vocab) logits: the transposed layout is slow on CPU
                losses = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(),
                                                           reduction="none").view_as(targets).cpu().numpy()  # fmt: skip
                for row, i in enumerate(batch):
                    doc, window, count = pieces[i]
                    nats[doc] += losses[row, len(window) - 1 - count : len(window) - 1].sum()
        return np.array([n / math.log(2) / max(1, size) for n, size in zip(nats, sizes)])

    def annotate(self, table: pa.Table) -> Annotation:
        texts = table["text"].to_pylist()
        scored = [i for i, text in enumerate(texts) if text and not text.isspace()]
        scores: list[float | None] = [None] * len(texts)
        for i, value in zip(scored, self.bits_per_byte([texts[i] for i in scored]).tolist()):
            scores[i] = value
        columns: dict[str, list] = {self.params.column: scores}
        verdicts: list[str | None] = [None] * len(texts)
        stats: dict = {}
        if self.params.cutoffs is not None:
            head, middle = self.params.cutoffs
            buckets = [None if s is None else "head" if s < head else "middle" if s < middle else "tail" for s in scores]
            columns[self.params.bucket_column] = buckets
            verdicts = [None if b in self.params.keep else f"perplexity_{b}" for b in buckets]
            stats["perplexity_buckets"] = {b: buckets.count(b) for b in ("head", "middle", "tail") if b in buckets}
        elif self.params.threshold is not None:
            verdicts = [None if s is None or s <= self.params.threshold else "perplexity_above_threshold" for s in scores]
        reasons = ["empty_text" if s is None else verdict for s, verdict in zip(scores, verdicts)]
        return Annotation(reasons, columns, stats)
