"""Model score: a Hugging Face sequence classifier's score per document (FineWeb-Edu's educational-value regressor,
a quality or toxicity classifier), kept as a column and, where asked, kept by threshold or top fraction.

The model and its tokenizer come from one local folder (`save_pretrained`'s layout), or from the hub where the recipe
says `hub: true`; code a model ships runs only where it says `trust_remote_code: true`.
A regression head (one output) gives its value; a classifier gives the softmax probability of `positive_class`. A
classifier `curate quality train-model` fitted on mean-pooled states says so in its config (`score_pooling: mean`) and
is scored that way.
A document longer than `max_tokens` (or than the model's positions) is scored on its first tokens, as FineWeb-Edu
scores its first 512: truncated, never an error. Inside each table the stage gets (a batch of a shard), documents are
sorted by length and cut into batches of at most `batch_tokens` padded tokens, each padded to its own longest (NeMo
Curator's CrossFit does the same), so little compute goes to padding and none to per-document calls.

The stage declares one GPU (`num_gpus`): on a Ray cluster with GPUs the runner runs it in actors that each hold one
and load the model once; elsewhere it runs on the CPU in the same worker as the stages around it.
"""

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
from pydantic import Field, model_validator

from filters.base import Annotation, Stage, StageParams

DTYPES = ("auto", "float32", "bfloat16", "float16")
# A token averages a few characters (about 4 in English BPE, fewer in code and most other scripts), so a document's
# first max_tokens * 32 characters hold every token a stage reads: a 26 MB page is cut to them before it is tokenized,
# not tokenized whole (40 s) to keep its first 512 tokens. Only text averaging over 32 characters a token (a run of
# whitespace that a vocabulary holds whole) would have fewer of its tokens scored.
CHARS_PER_TOKEN_BOUND = 32


class PretrainedModelParams(StageParams):
    """Where a model stage's model comes from: a local folder unless the recipe asks for the hub, and the code a model
    ships run only where the recipe trusts it (transformers would otherwise stop at a terminal prompt and wait)."""

    model_path: str
    hub: bool = Field(False, description="model_path is a Hugging Face hub id (org/name), downloaded by transformers or "
                      "read from its cache; without it model_path is a local folder and no network is asked")  # fmt: skip
    trust_remote_code: bool = Field(False, description="run the Python code the model ships (an auto_map in its "
                                    "config.json or tokenizer_config.json); without it such a model is refused")  # fmt: skip

    def pretrained_options(self) -> dict:
        """The keyword arguments of every from_pretrained call for the model and its tokenizer."""
        return {"local_files_only": not self.hub, "trust_remote_code": self.trust_remote_code}


def check_model_folder(params: PretrainedModelParams) -> None:
    """A local model_path is a folder here, and one that ships code is trusted by name: else transformers asks the hub
    for a missing `dir/name` (26 s of retries offline, then a message about the network) or prompts on the terminal."""
    if params.hub:
        return
    folder = Path(params.model_path)
    if not folder.is_dir():
        looks_like_hub_id = params.model_path.count("/") == 1 and not params.model_path.startswith((".", "/", "~"))
        raise ValueError(f"model folder not found: {params.model_path}"
                         + (" (a Hugging Face hub id needs `hub: true`)" if looks_like_hub_id else ""))  # fmt: skip
    for name in ("config.json", "tokenizer_config.json"):
        try:
            settings = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(settings, dict) and settings.get("auto_map") and not params.trust_remote_code:
            raise ValueError(f"{params.model_path} ships code that runs when it loads (auto_map in its {name}): set "
                             "`trust_remote_code: true` in the stage if you trust it")  # fmt: skip


def load_config_and_tokenizer(params: PretrainedModelParams):
    """The model's config and its tokenizer, or a ValueError naming the folder and what is wrong with it."""
    check_model_folder(params)  # before transformers' import, which alone takes seconds
    from transformers import AutoConfig, AutoTokenizer

    model_path = params.model_path
    try:
        config = AutoConfig.from_pretrained(model_path, **params.pretrained_options())
    except (OSError, ValueError) as error:
        raise ValueError(f"{model_path} holds no Hugging Face model config ({_first_line(error)})") from None
    if not any(name.endswith("ForSequenceClassification") for name in config.architectures or []):
        raise ValueError(f"{model_path} is a {', '.join(config.architectures or ['model without an architecture'])}, "
                         "not a sequence classifier (…ForSequenceClassification)")  # fmt: skip
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path, **params.pretrained_options())
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"{model_path} holds no tokenizer that loads ({_first_line(error)})") from None
    if len(tokenizer) <= len(tokenizer.all_special_tokens):  # transformers 5 makes one of special tokens from nothing
        raise ValueError(f"{model_path} holds no tokenizer that loads (no vocabulary beside special tokens)")
    if len(tokenizer) > config.vocab_size:
        raise ValueError(f"{model_path}: its tokenizer has {len(tokenizer):,} tokens, more than the model's vocabulary "
                         f"of {config.vocab_size:,}: the tokenizer of another model")  # fmt: skip
    return config, tokenizer


def default_batch_tokens(device) -> int:
    """Padded tokens per forward pass where the recipe gives none: smaller batches stay in the CPU's caches."""
    return 16384 if device.type == "cuda" else 4096


def model_device_and_dtype(device: str, dtype: str):
    """A stage's torch device and dtype: `auto` is a visible GPU in bfloat16, else the CPU in float32."""
    import torch

    chosen = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    if dtype == "auto":
        dtype = "bfloat16" if chosen.type == "cuda" else "float32"
    return chosen, getattr(torch, dtype)


def usable_positions(model, tokenizer) -> float:
    """Tokens the model reads at once: its position table less RoBERTa's offset (RoBERTa and its kin number positions
    from pad_token_id + 1, so 514 positions hold 512 tokens), and at most the tokenizer's model_max_length (a tokenizer
    saved without one says 1e30)."""
    positions = getattr(model.config, "max_position_embeddings", None) or math.inf
    table = getattr(getattr(model.base_model, "embeddings", None), "position_embeddings", None)
    padding = getattr(table, "padding_idx", None)  # set only where positions count from the padding token
    if padding is not None:
        positions -= padding + 1
    return min(positions, tokenizer.model_max_length)


def padding_parity_rtol(config) -> float:
    """How far a float32 score may move with the padding of its batch, relative (and absolute under 1): sums taken in
    another order round differently, by about float32's epsilon per step, growing like a random walk with the width
    (√hidden) and adding up over the layers. CPUs order their sums differently too: a bound of 1e-5 tuned on one CPU
    failed on another (2.55e-5 at 3.01, 2 layers of 32). A masking or padding bug moves scores by far more."""
    return 32 * float(np.finfo(np.float32).eps) * config.num_hidden_layers * math.sqrt(config.hidden_size)


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


class ModelScoreParams(PretrainedModelParams):
    model_path: str = Field(description="a folder with a …ForSequenceClassification model and its tokenizer "
                            "(save_pretrained's layout); a hub id with `hub: true`")  # fmt: skip
    column: str = Field("model_score", min_length=1, description="the score's column, so several scorers coexist")
    positive_class: str | int | None = Field(None, description="a classifier's class whose probability is the score: a "
                                             "label of the model's id2label (quoted where it is a number: '1'), or an "
                                             "index where no label is that number (an integer that is one class's "
                                             "label and another's index is refused); none for a regression head (one "
                                             "output)")  # fmt: skip
    max_tokens: int = Field(512, ge=1, description="tokens scored per document (its first ones); at most the model's positions")
    batch_tokens: int | None = Field(None, ge=1, description="padded tokens per forward pass; default 4,096 on the CPU "
                                     "(larger batches ran slower there: 45 docs/s at 16,384), 16,384 on a GPU")  # fmt: skip
    threshold: float | None = Field(None, description="keep documents scoring at least this")
    keep_top_fraction: float | None = Field(None, gt=0, le=1, description="keep this best-scoring fraction of each shard")
    int_score: bool = Field(False, description="also write COLUMN_int: the score rounded and clipped to 0-5, as FineWeb-Edu's int_score")
    dtype: str = Field("auto", description=f"one of {DTYPES}; auto: bfloat16 on a GPU, float32 on the CPU")
    device: str = Field("auto", description="auto (a GPU when one is visible), cpu, or cuda[:N]")

    @model_validator(mode="after")
    def checked_against_the_model(self):
        if self.threshold is not None and self.keep_top_fraction is not None:
            raise ValueError("give threshold or keep_top_fraction, not both")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {DTYPES}")
        config, _ = load_config_and_tokenizer(self)
        self.positive_index(config)
        return self

    def positive_index(self, config) -> int | None:
        """The output the score reads: None for a regression head, else the positive class's index. A class is named by
        its label first (a YAML `1` is the label "1" where the model has one), else by its index; an integer that is one
        class's label and another's index would silently score the wrong one, so it is refused."""
        labels = {int(index): str(name) for index, name in (config.id2label or {}).items()}
        if config.num_labels == 1:
            if self.positive_class is not None:
                raise ValueError(f"positive_class: {self.model_path} is a regression head (one output), it has no classes")
            return None
        if self.positive_class is None:
            raise ValueError(f"positive_class: {self.model_path} has {config.num_labels} classes "
                             f"({', '.join(labels.values())}): name the one whose probability is the score")  # fmt: skip
        named = [index for index, name in labels.items() if name == str(self.positive_class)]
        if isinstance(self.positive_class, int) and 0 <= self.positive_class < config.num_labels:
            index = self.positive_class
            if named and named[0] != index:
                raise ValueError(f"positive_class: {index} is both the label '{index}' (index {named[0]}) and index "
                                 f"{index} (label '{labels[index]}'): quote the label you mean, positive_class: "
                                 f"'{index}' or positive_class: '{labels[index]}'")  # fmt: skip
            return index
        if not named:
            raise ValueError(f"positive_class: {self.positive_class!r} is not a class of {self.model_path} "
                             f"({', '.join(labels.values())})")  # fmt: skip
        return named[0]


class ModelScorer(Stage):
    name = "model_score"
    Params = ModelScoreParams
    num_gpus = 1.0  # used where the cluster has GPUs; the runner keeps the stage on the CPU elsewhere

    def __init__(self, params: ModelScoreParams | None = None):
        super().__init__(params)
        column = self.params.column
        self.adds = {column: pa.float32(), **({f"{column}_int": pa.int8()} if self.params.int_score else {})}

    @property
    def per_document(self) -> bool:
        """A threshold judges each document alone; a top fraction needs the whole shard."""
        return self.params.keep_top_fraction is None

    def loaded_files(self) -> list[str]:
        return [self.params.model_path]

    def setup(self) -> None:
        from transformers import AutoModelForSequenceClassification

        config, self.tokenizer = load_config_and_tokenizer(self.params)
        self.positive = self.params.positive_index(config)
        self.device, dtype = model_device_and_dtype(self.params.device, self.params.dtype)
        self.batch_tokens = self.params.batch_tokens or default_batch_tokens(self.device)
        self.model = AutoModelForSequenceClassification.from_pretrained(self.params.model_path,
                                                                        **self.params.pretrained_options())  # fmt: skip
        self.model = self.model.to(self.device, dtype).eval()
        if self.tokenizer.pad_token is None:  # a decoder's classifier reads its last token that is not padding
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.max_tokens = int(min(self.params.max_tokens, usable_positions(self.model, self.tokenizer)))

    def scores(self, texts: list[str]) -> np.ndarray:
        """One score per text, in the order given."""
        import torch

        if not texts:  # a tokenizer given no text fails
            return np.zeros(0, dtype=np.float32)
        cut = [text[: self.max_tokens * CHARS_PER_TOKEN_BOUND] for text in texts]
        encoded = self.tokenizer(cut, truncation=True, max_length=self.max_tokens)["input_ids"]
        result = np.zeros(len(texts), dtype=np.float32)
        with torch.inference_mode():
            for batch in length_sorted_batches([len(ids) for ids in encoded], self.batch_tokens):
                padded = self.tokenizer.pad({"input_ids": [encoded[i] for i in batch]}, return_tensors="pt")
                inputs = {k: v.to(self.device) for k, v in padded.items()}
                if getattr(self.model.config, "score_pooling", None) == "mean":
                    logits = mean_pooled_logits(self.model, inputs)
                else:
                    logits = self.model(**inputs).logits.float()
                values = logits[:, 0] if self.positive is None else logits.softmax(-1)[:, self.positive]
                result[batch] = values.cpu().numpy()
        return result

    def annotate(self, table: pa.Table) -> Annotation:
        texts = table["text"].to_pylist()
        scores = self.scores(texts)
        column = self.params.column
        columns = {column: scores.tolist()}
        if self.params.int_score:
            columns[f"{column}_int"] = np.rint(np.clip(scores, 0, 5)).astype(np.int8).tolist()
        cut = self.params.threshold
        if self.params.keep_top_fraction is not None and len(scores):
            wanted = math.ceil(self.params.keep_top_fraction * len(scores) - 1e-9)
            cut = float(np.sort(scores)[::-1][wanted - 1])
        reason = f"{column}_below_threshold" if self.params.threshold is not None else f"{column}_not_top_fraction"
        reasons = [None if cut is None or s >= cut else reason for s in scores.tolist()]
        return Annotation(reasons, columns, {} if cut is None else {f"{column}_cut": float(cut)})


def classifier_head(model):
    """The linear layer that makes a sequence classifier's logits: `classifier` (BERT and kin) or `score` (decoders)."""
    import torch

    for name in ("classifier", "score"):
        layer = getattr(model, name, None)
        if isinstance(layer, torch.nn.Linear):
            return layer
    raise ValueError(f"{type(model).__name__}: its head is not one linear layer (`classifier` or `score`)")


def mean_pooled_hidden(model, inputs: dict):
    """The base model's last hidden states averaged over each document's real tokens."""
    hidden = model.base_model(**inputs).last_hidden_state.float()
    mask = inputs["attention_mask"][..., None].to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1)


def mean_pooled_logits(model, inputs: dict):
    """The logits of a classifier `curate quality train-model` fitted on mean-pooled states (`score_pooling: mean` in
    its config, with `score_bias` where its head has none): transformers alone would read the last token instead."""
    import torch

    head = classifier_head(model)
    logits = torch.nn.functional.linear(mean_pooled_hidden(model, inputs), head.weight.float(),
                                        None if head.bias is None else head.bias.float())  # fmt: skip
    bias = getattr(model.config, "score_bias", None)
    return logits if bias is None else logits + torch.tensor(bias, dtype=logits.dtype, device=logits.device)


def length_sorted_batches(lengths: list[int], batch_tokens: int) -> list[list[int]]:
    """Indices of `lengths` cut into batches, longest first, each at most `batch_tokens` once padded to its longest
    (a single document longer than that is a batch alone)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for index in order:
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= batch_tokens:
            batches[-1].append(index)
        else:
            batches.append([index])
    return batches
