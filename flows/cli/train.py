"""`odqa train`: train a dense retriever (bi-encoder variants, TASER, DESIRE-ME) on workspace data."""

from __future__ import annotations

import click

from .groups import main, workspace_arg
from .report import echo_report

ARCH_CHOICES = [
    "dpr",
    "ade",
    "sde",
    "ade-ste",
    "ade-fte",
    "ade-spl",
    "taser",
    "taser-shared",
    "desire-me",
    "rnd-g",
]


@main.command("train")
@click.option("--arch", type=click.Choice(ARCH_CHOICES), help="Retriever architecture (not with --qsft).")
@click.option(
    "--base",
    required=True,
    metavar="M",
    help="HF checkpoint name or folder; for desire-me/rnd-g also a registered model id.",
)
@click.option(
    "--train",
    "train_sets",
    required=True,
    multiple=True,
    metavar="NAME:SPLIT[:WEIGHT]",
    help="Training questions (repeatable; WEIGHT scales how often the set is drawn per epoch).",
)
@click.option("--dev", default=None, metavar="NAME:SPLIT", help="Dev questions for R@K model selection.")
@click.option("--model-id", required=True, help="Name of the model folder and `models` row.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="Optimizer steps.")
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Epochs (instead of --max-steps).")
@click.option(
    "--batch-size", type=click.IntRange(min=1), default=16, show_default=True, help="Questions per device."
)
@click.option("--lr", type=float, default=2e-5, show_default=True, help="Peak learning rate (AdamW).")
@click.option(
    "--hard-negatives",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Hard negatives per question.",
)
@click.option(
    "--routing",
    type=click.Choice(["det", "seq", "tok"]),
    default="det",
    show_default=True,
    help="TASER routing.",
)
@click.option(
    "--experts",
    "num_experts",
    type=click.IntRange(min=1),
    default=None,
    help="TASER experts per specialized block (default 2).",
)
@click.option(
    "--pooling",
    type=click.Choice(["cls", "mean"]),
    default=None,
    help="Override the checkpoint's pooling (default: its sentence-transformers setting, else cls).",
)
@click.option("--passage-input", type=click.Choice(["pair", "joined-lowercase"]), default="pair", show_default=True,
              help="Passages as the tokenizer pair (title, text), or one lowercased 'title text' string "
                   "(DESIRE-ME's reference code).")  # fmt: skip
@click.option(
    "--objective",
    type=click.Choice(["contrastive", "stopgrad", "flipped"]),
    default="contrastive",
    show_default=True,
    help="Training loss (thesis 5.1 variants).",
)
@click.option(
    "--freeze",
    type=click.Choice(["question", "passage"]),
    default=None,
    help="Freeze one tower of a two-tower model (thesis fixQ / fixP).",
)
@click.option(
    "--temperature", type=float, default=None, help="Softmax temperature (default 1 dot, 0.05 cosine)."
)
@click.option(
    "--accumulation",
    "accumulation_steps",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Gradient accumulation micro-batches per step.",
)
@click.option("--warmup-steps", type=click.IntRange(min=0), default=None, help="Warmup steps (default 10%).")
@click.option(
    "--eval-every", type=click.IntRange(min=1), default=None, help="Dev evaluation interval in steps."
)
@click.option("--gpus", type=click.IntRange(min=1), default=1, show_default=True,
              help="GPUs per machine (>1 runs torchrun DDP; on a CPU-only machine: that many CPU processes).")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Machines training together; run the same command on each with its --node-rank.")
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True,
              help="This machine's number (0 hosts the rendezvous and registers the model).")
@click.option("--rdzv-endpoint", default=None, help="HOST:PORT of node 0 where the machines meet (--nodes > 1).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--amp", type=click.Choice(["auto", "bf16", "fp16", "none"]), default="auto", show_default=True,
              help="Mixed precision: auto = bf16/fp16 on GPU, bf16 on CPUs with bf16 units (about 2x faster), "
                   "else fp32; fp16 needs a GPU.")  # fmt: skip
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="Torch threads for training (default: torch's, one per core).")  # fmt: skip
@click.option("--bucket-tokens", type=click.IntRange(min=1), default=None, metavar="N",
              help="Encode each batch in length-sorted buckets of at most N padded tokens (less padding).")  # fmt: skip
@click.option("--grad-cache", is_flag=True,
              help="Cached-gradient steps (GradCache): memory of one bucket whatever the batch size; "
                   "about 1.3x the compute; needs --bucket-tokens.")  # fmt: skip
@click.option("--mask-duplicates", is_flag=True,
              help="Another copy of a question's positive passage in the batch (two questions on one paragraph, "
                   "a hard negative that is another question's positive) is not counted as its negative.")  # fmt: skip
@click.option("--layer-decay", type=click.FloatRange(min=0, max=1, min_open=True), default=None, metavar="D",
              help="Layer-wise learning-rate decay: block i of L trains at lr*D^(L+1-i), the embeddings at "
                   "lr*D^(L+2) (TASER's reference code uses 0.8; its paper does not; docs/reproducing-papers.md).")  # fmt: skip
@click.option("--loss-weights", type=(float, float), default=None, metavar="SIM AUX",
              help="Weights of the similarity loss and the model's auxiliary loss (DESIRE-ME's gate BCE, TASER's "
                   "entropy term); default 1 1. DESIRE-ME's reference code: 0.5 0.5.")  # fmt: skip
@click.option("--gate-targets", type=click.Choice(["question", "positive"]), default="question", show_default=True,
              help="What DESIRE-ME's gate learns: the question's domains (its positives' union, the paper), or "
                   "those of the positive passage it trains on (the reference code).")  # fmt: skip
@click.option("--snapshot-every", type=click.IntRange(min=1), default=None, metavar="STEPS",
              help="Keep a copy of the model every STEPS steps, with the wall/CPU time spent (quality curves).")  # fmt: skip
@click.option("--snapshot-dir", type=click.Path(file_okay=False), default=None,
              help="Where snapshots go (default: inside the training folder, removed after registration).")  # fmt: skip
@click.option(
    "--resume/--restart",
    default=None,
    help="Default: continue an interrupted run of this model id from its checkpoint when it was written for the "
    "same parameters and data, else start over (saying why). --resume: must continue; --restart: start over.",
)
@click.option(
    "--checkpoint-minutes",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Wall time between resumable checkpoints (one is also written at the end).",
)
@click.option(
    "--qsft",
    is_flag=True,
    help="Query-side fine-tuning (thesis 5.2): train only BASE's question side against its fixed index.",
)
@click.option("--index-type", type=click.Choice(["flat", "hnsw", "ivfpq"]), default="flat", show_default=True,
              help="With --qsft: the index of BASE to retrieve from.")  # fmt: skip
@click.pass_context
def train(
    ctx: click.Context,
    arch: str,
    base: str,
    train_sets: tuple[str, ...],
    dev: str | None,
    model_id: str,
    max_steps: int | None,
    epochs: int | None,
    batch_size: int,
    lr: float,
    hard_negatives: int,
    routing: str,
    num_experts: int | None,
    pooling: str | None,
    passage_input: str,
    objective: str,
    freeze: str | None,
    temperature: float | None,
    accumulation_steps: int,
    warmup_steps: int | None,
    eval_every: int | None,
    gpus: int,
    nodes: int,
    node_rank: int,
    rdzv_endpoint: str | None,
    seed: int,
    amp: str,
    threads: int | None,
    bucket_tokens: int | None,
    grad_cache: bool,
    mask_duplicates: bool,
    layer_decay: float | None,
    loss_weights: tuple[float, float] | None,
    gate_targets: str,
    snapshot_every: int | None,
    snapshot_dir: str | None,
    resume: bool | None,
    checkpoint_minutes: float,
    qsft: bool,
    index_type: str,
) -> None:
    """Train a retriever and record it in the `models` table."""
    if qsft:
        from ..qsft import qsft_flow

        report = qsft_flow(model=base, train=list(train_sets), model_id=model_id, index_type=index_type,
                           epochs=epochs or 2, batch_size=batch_size, lr=lr,
                           warmup_steps=100 if warmup_steps is None else warmup_steps, seed=seed,
                           workspace=workspace_arg(ctx))  # fmt: skip
        echo_report(f"train --qsft {model_id}", report)
        return
    if arch is None:
        raise click.UsageError("--arch is required (unless --qsft)")
    if (max_steps is None) == (epochs is None):
        raise click.UsageError("give exactly one of --max-steps or --epochs")
    from ..train import train_flow

    report = train_flow(
        arch=arch,
        base=base,
        train=list(train_sets),
        model_id=model_id,
        dev=dev,
        max_steps=max_steps,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        hard_negatives=hard_negatives,
        routing=routing,
        pooling=pooling,
        passage_input=passage_input,
        seed=seed,
        resume=resume,
        workspace=workspace_arg(ctx),
        gpus=gpus,
        accumulation_steps=accumulation_steps,
        eval_every=eval_every,
        objective=objective,
        temperature=temperature,
        freeze=freeze,
        num_experts=num_experts,
        warmup_steps=warmup_steps,
        amp=amp,
        checkpoint_minutes=checkpoint_minutes,
        threads=threads,
        bucket_tokens=bucket_tokens,
        grad_cache=grad_cache,
        mask_duplicates=mask_duplicates,
        layer_decay=layer_decay,
        loss_weights=list(loss_weights) if loss_weights else None,
        gate_targets=gate_targets,
        snapshot_every=snapshot_every,
        snapshot_dir=snapshot_dir,
        nodes=nodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
    )
    echo_report(f"train {model_id}", report)
