"""Query-side fine-tuning (thesis section 5.2, after Lee et al. 2021).

The passage encoder and the passage index stay fixed; only the question side learns, on the
real retrieval task: each question is encoded, searched in the full index, and the loss

    L_QSFT = -log  sum_{c in C, POS(q,c)} exp(S(q,c)) / sum_{c in C} exp(S(q,c))      (eq. 5.2)

raises the probability mass of the answer-bearing candidates among the top-k retrieved ``C``
(k = 100 as in the thesis' Table 6.1). ``S(q,c)`` is recomputed from the stored passage vectors
so gradients reach the question encoder; ``POS`` is DPR's answer match on the passage text.
Questions with no answer-bearing candidate give no signal and are skipped (counted).

Gradients only reach parameters on the question path, so a model with separate towers keeps
its passage tower unchanged. In a model whose towers share weights (SDE / "1enc", TASER's
shared blocks) the shared weights move too; the fine-tuned model must then keep being used with
the index it was tuned against (its passage side is the base model's), not re-encode passages.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from ..evaluation.answers import AnswerMatcher, MatchMode
from ..progress import Progress
from .divergence import TrainingDiverged
from .faiss_index import DenseIndex


class QuestionTower(Protocol):
    """What query-side fine-tuning needs from a ``models/`` retriever."""

    similarity: str

    def tokenize_questions(self, texts: Sequence[str]) -> dict[str, torch.Tensor]: ...

    def embed_questions(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def train(self, mode: bool = True) -> QuestionTower: ...

    def to(self, device: str | torch.device) -> QuestionTower: ...


@dataclass(frozen=True)
class QsftConfig:
    """Defaults: the thesis' Table 6.1 (2 epochs, batch 24, lr 2e-5, 100 warmup steps, top 100)."""

    epochs: int = 2
    batch_size: int = 24
    learning_rate: float = 2e-5
    warmup_steps: int = 100
    top_k: int = 100
    temperature: float | None = None  # None: 1 for dot-product models, 0.05 for cosine ones
    max_grad_norm: float = 2.0
    seed: int = 0
    device: str | None = None
    match_mode: MatchMode = "string"
    progress: bool | None = None


@dataclass
class QsftResult:
    steps: int
    epoch_losses: list[float] = field(default_factory=list)  # mean loss over used questions
    answerable: list[float] = field(default_factory=list)  # share with a positive in the top k, per epoch
    skipped_without_positive: int = 0


def qsft_loss(scores: torch.Tensor, positive: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Eq. 5.2 averaged over the questions (rows) that have at least one positive candidate.

    ``scores`` (b, k) retrieval scores, ``positive`` (b, k) bool. Returns (loss, rows used);
    the loss is a zero that still carries the graph when no row has a positive.
    """
    usable = positive.any(dim=1)
    if not bool(usable.any()):
        return scores.sum() * 0.0, 0
    scores, positive = scores[usable], positive[usable]
    positive_mass = torch.logsumexp(scores.masked_fill(~positive, float("-inf")), dim=1)
    loss = torch.logsumexp(scores, dim=1) - positive_mass
    return loss.mean(), int(usable.sum())


def _lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warmup then linear decay to zero (the schedule DPR and the thesis train with)."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return max(0.0, (total - step) / max(1, total - warmup))


def _diverged(step: int, total: int, what: str, config: QsftConfig) -> str:
    """Why fine-tuning stopped at `step` (1-based), and what to change."""
    return (f"query-side fine-tuning diverged at step {step} of {total}: {what}. No update with them was applied and "
            f"no model is registered. Lower --lr (now {config.learning_rate:g})")


def query_side_finetune(
    retriever: QuestionTower,
    index: DenseIndex,
    passage_vectors: Callable[[np.ndarray], np.ndarray],
    questions: Sequence[str],
    answers: Sequence[Sequence[str]],
    passage_texts: Mapping[str, str],
    config: QsftConfig | None = None,
) -> QsftResult:
    """Fine-tune ``retriever``'s question side in place against the fixed ``index``.

    ``passage_vectors(rows)`` returns the stored float32 vectors of global index rows (e.g.
    ``EncodedCorpus.vectors``); ``passage_texts`` maps passage ids to text for answer matching.
    """
    config = config or QsftConfig()
    if len(questions) != len(answers):
        raise ValueError(f"got {len(questions)} questions but {len(answers)} answer lists")
    if not questions:
        raise ValueError("query-side fine-tuning needs at least one question")
    device = torch.device(config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    temperature = config.temperature or (0.05 if retriever.similarity == "cosine" else 1.0)
    retriever.to(device)
    parameters = [p for p in retriever.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=config.learning_rate, weight_decay=0.0)
    batches_per_epoch = (len(questions) + config.batch_size - 1) // config.batch_size
    total_steps = batches_per_epoch * config.epochs
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _lr_factor(step, config.warmup_steps, total_steps))
    matcher = AnswerMatcher(passage_texts, config.match_mode)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                else contextlib.nullcontext())
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    result = QsftResult(steps=0)
    retriever.train(True)
    bar = Progress(total_steps, "qsft", "step", enabled=config.progress is not False)
    try:
        for _ in range(config.epochs):
            order = list(range(len(questions)))
            rng.shuffle(order)
            loss_sum, used_sum = 0.0, 0
            for start in range(0, len(order), config.batch_size):
                batch = order[start:start + config.batch_size]
                inputs = {k: v.to(device) for k, v in retriever.tokenize_questions([questions[i] for i in batch]).items()}
                with autocast:
                    q = retriever.embed_questions(inputs).float()
                if not torch.isfinite(q).all():  # (the index would answer nan vectors with no positives)
                    raise TrainingDiverged(_diverged(result.steps + 1, total_steps, "the question vectors are no "
                                                     "longer finite numbers", config))  # fmt: skip
                _, rows = index.search_rows(q.detach().cpu().numpy(), config.top_k)
                ids = index.ids_of_rows(rows)
                positive = np.zeros(rows.shape, dtype=bool)
                for r, i in enumerate(batch):
                    valid = rows[r] >= 0
                    positive[r, valid] = matcher.hits(list(ids[r, valid]), answers[i])
                vectors = torch.from_numpy(passage_vectors(np.maximum(rows, 0))).to(device)
                scores = torch.einsum("bd,bkd->bk", q, vectors) / temperature
                scores = scores.masked_fill(torch.from_numpy(rows < 0).to(device), float("-inf"))
                loss, used = qsft_loss(scores, torch.from_numpy(positive).to(device))
                result.skipped_without_positive += len(batch) - used
                optimizer.zero_grad(set_to_none=True)
                if used:
                    loss.backward()
                    norm = float(torch.nn.utils.clip_grad_norm_(parameters, config.max_grad_norm))
                    if not (math.isfinite(loss.item()) and math.isfinite(norm)):
                        raise TrainingDiverged(_diverged(result.steps + 1, total_steps, f"the loss is {loss.item():.4g} "
                                                         f"and the gradients' norm {norm:.4g}", config))  # fmt: skip
                    optimizer.step()
                    loss_sum += loss.item() * used
                    used_sum += used
                scheduler.step()
                result.steps += 1
                bar.update(1, loss=loss.item(), lr=scheduler.get_last_lr()[0])
            result.epoch_losses.append(loss_sum / used_sum if used_sum else float("nan"))
            result.answerable.append(used_sum / len(questions))
    except BaseException:
        bar.close(failed=True)
        raise
    finally:
        bar.close()
        retriever.train(False)
    return result
