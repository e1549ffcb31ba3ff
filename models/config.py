"""Architecture configuration of a retriever, stored as `config.json` in every model folder.

One JSON document describes everything needed to rebuild the modules before the safetensors
weights are loaded into them: the variant, pooling and scoring, the backbone's Hugging Face
configuration (so a saved folder never needs the original checkpoint again), the TASER layout
and the DESIRE-ME domains. Keeping it a plain dataclass makes it hashable into a fingerprint and
storable in the `models` table as JSON.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

FORMAT = "odqa-retriever"
FORMAT_VERSION = 1

# Each architecture family names its architectures here, beside the settings that define its
# layout; `Arch` (the choices of every CLI, flow form and check) is their union.
# Bi-encoders: DPR's two towers, the dual-encoder paper's shared (SDE) and asymmetric (ADE-*) ones.
BiEncoderArch = Literal["dpr", "ade", "sde", "ade-ste", "ade-fte", "ade-spl"]
Pooling = Literal["cls", "mean"]
Similarity = Literal["dot", "cosine"]
Routing = Literal["det", "seq", "tok"]  # TASER: deterministic, per sequence, per token
FreezeSide = Literal["question", "passage"]  # thesis 4.2: fixQ, fixP
# How a passage reaches the tokenizer: the pair (title, text), as DPR; or one lowercased string
# "title text", as DESIRE-ME's reference code builds its passage embeddings.
PassageInput = Literal["pair", "joined-lowercase"]

BI_ENCODER_ARCHS: tuple[str, ...] = get_args(BiEncoderArch)
TWO_TOWER_ARCHS = ("dpr", "ade", "ade-ste", "ade-fte", "ade-spl")  # one encoder per side: a side can be frozen
POOLINGS: tuple[str, ...] = get_args(Pooling)
SIMILARITIES: tuple[str, ...] = get_args(Similarity)
ROUTINGS: tuple[str, ...] = get_args(Routing)
FREEZE_SIDES: tuple[str, ...] = get_args(FreezeSide)
PASSAGE_INPUTS: tuple[str, ...] = get_args(PassageInput)


TaserArch = Literal["taser", "taser-shared"]  # taser-shared: one expert, the FFN shared by both sides
TASER_ARCHS: tuple[str, ...] = get_args(TaserArch)


@dataclass
class TaserConfig:
    """TASER layout (paper section 3.1): one specialized block after every `shared_blocks` shared ones.

    `specialized_layers` is derived from the backbone depth at build time and stored so that a
    saved model keeps its layout even if the rule changes.
    """

    shared_blocks: int = 2  # T
    num_experts: int = 2  # I
    routing: str = "det"  # det | seq | tok
    entropy_beta: float = 0.01
    gumbel_tau: float = 1.0
    specialized_layers: list[int] = field(default_factory=list)

    def validate(self) -> None:
        if self.routing not in ROUTINGS:
            raise ValueError(f"TASER routing must be one of {ROUTINGS}, got {self.routing!r}")
        if self.shared_blocks < 0:
            raise ValueError(f"TASER shared_blocks (T) must be >= 0, got {self.shared_blocks}")
        if self.num_experts < 1:
            raise ValueError(f"TASER num_experts (I) must be >= 1, got {self.num_experts}")
        if self.routing == "det" and self.num_experts not in (1, 2):
            raise ValueError(
                "deterministic routing uses one expert for questions and one for passages: "
                f"num_experts must be 2 (or 1 for taser-shared), got {self.num_experts}"
            )


DesireMeArch = Literal["desire-me", "rnd-g"]  # rnd-g: DESIRE-ME with random gate weights (the baseline)
DESIRE_ME_ARCHS: tuple[str, ...] = get_args(DesireMeArch)


@dataclass
class DesireMeConfig:
    """DESIRE-ME query-side mixture of domain specializers on top of a base retriever."""

    domains: list[str] = field(default_factory=list)
    gate: str = "learned"  # learned | random (the RND-G baseline)
    freeze_base: bool = True
    seed: int = 0  # seeds the per-question random gate weights of RND-G

    def validate(self) -> None:
        if not self.domains:
            raise ValueError("DESIRE-ME needs at least one domain label")
        if len(set(self.domains)) != len(self.domains):
            raise ValueError(f"DESIRE-ME domain labels must be unique, got {self.domains}")
        if self.gate not in ("learned", "random"):
            raise ValueError(f"DESIRE-ME gate must be 'learned' or 'random', got {self.gate!r}")


Arch = Literal[BiEncoderArch, TaserArch, DesireMeArch]
ARCHS: tuple[str, ...] = get_args(Arch)
# Trained from a pretrained checkpoint (DESIRE-ME trains on top of a retriever): what a recipe trains.
CheckpointArch = Literal[BiEncoderArch, TaserArch]
CHECKPOINT_ARCHS: tuple[str, ...] = get_args(CheckpointArch)


@dataclass
class RetrieverConfig:
    """Everything that defines a retriever's modules, except the weights."""

    arch: str
    base: str
    pooling: str = "cls"
    similarity: str = "dot"
    question_max_length: int = 64
    passage_max_length: int = 256
    freeze: str | None = None  # thesis 4.2: "question" (fixQ) or "passage" (fixP)
    projection_dim: int | None = None  # ade-spl: size of the shared projection layer
    backbone: dict[str, Any] = field(default_factory=dict)  # the HF config of the encoder
    taser: TaserConfig | None = None
    desire_me: DesireMeConfig | None = None
    base_retriever: RetrieverConfig | None = None  # DESIRE-ME: the config of the wrapped model
    passage_input: str = "pair"  # one of PASSAGE_INPUTS

    def validate(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"unknown arch {self.arch!r}; expected one of {ARCHS}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if self.similarity not in SIMILARITIES:
            raise ValueError(f"similarity must be one of {SIMILARITIES}, got {self.similarity!r}")
        if self.passage_input not in PASSAGE_INPUTS:
            raise ValueError(f"passage_input must be one of {PASSAGE_INPUTS}, got {self.passage_input!r}")
        if self.freeze is not None:
            if self.freeze not in FREEZE_SIDES:
                raise ValueError(f"freeze must be one of {FREEZE_SIDES} or None, got {self.freeze!r}")
            if self.arch not in TWO_TOWER_ARCHS:
                raise ValueError(
                    f"freezing one tower needs two towers; arch {self.arch!r} shares its encoder"
                )
        if self.arch in TASER_ARCHS:
            if self.taser is None:
                raise ValueError(f"arch {self.arch!r} needs a TASER layout")
            self.taser.validate()
        if self.arch in DESIRE_ME_ARCHS:
            if self.desire_me is None or self.base_retriever is None:
                raise ValueError(f"arch {self.arch!r} needs DESIRE-ME settings and a base retriever")
            self.desire_me.validate()
            self.base_retriever.validate()

    def to_dict(self) -> dict[str, Any]:
        fields = dataclasses.asdict(self)
        # Written only when not the default, so the configs (and fingerprints) of models saved
        # before the option existed stay the same.
        _drop_default_passage_input(fields)
        return {"format": FORMAT, "format_version": FORMAT_VERSION, **fields}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> RetrieverConfig:
        if data.get("format") != FORMAT:
            raise ValueError(f"{source}: not an odqa retriever config (missing format={FORMAT!r})")
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{source}: retriever config format_version {data.get('format_version')!r} "
                f"is not supported (expected {FORMAT_VERSION})"
            )
        return cls._from_fields(data, source)

    @classmethod
    def _from_fields(cls, data: dict[str, Any], source: str) -> RetrieverConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in known}
        try:
            if fields.get("taser") is not None:
                fields["taser"] = TaserConfig(**fields["taser"])
            if fields.get("desire_me") is not None:
                fields["desire_me"] = DesireMeConfig(**fields["desire_me"])
            if fields.get("base_retriever") is not None:
                fields["base_retriever"] = cls._from_fields(fields["base_retriever"], source)
            config = cls(**fields)
        except TypeError as error:
            raise ValueError(f"{source}: malformed retriever config: {error}") from error
        config.validate()
        return config

    @classmethod
    def read(cls, path: Path) -> RetrieverConfig:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: invalid JSON at line {error.lineno}: {error.msg}") from error
        return cls.from_dict(data, source=str(path))


def _drop_default_passage_input(fields: dict[str, Any]) -> None:
    if fields.get("passage_input") == "pair":
        del fields["passage_input"]
    if fields.get("base_retriever"):
        _drop_default_passage_input(fields["base_retriever"])


def is_retriever_config(path: Path) -> bool:
    """True when `path` is a config.json written by this package (not a plain HF config)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT
