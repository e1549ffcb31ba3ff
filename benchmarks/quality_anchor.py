"""The anchor of the quality benchmark: sentence-transformers' MultipleNegativesRankingLoss
fine-tune of the same base model on the same training examples, run in its own process.

    python benchmarks/quality_anchor.py --examples EXAMPLES.json --base MODEL_DIR --output DIR \
        --steps 150 --batch-size 16 --lr 2e-5 [--warmup-steps N] [--threads 1] [--bf16] \
        [--snapshot-every 50] [--seed 0]

EXAMPLES.json is a list of {"question", "positive": [title, text], "negatives": [[title, text], ...]}
exported from the odqa workspace (`bench_quality.py` writes it with `odqa sql`), so both sides
train on the same questions, positives and hard negatives. Passages are (title, text) pairs,
which sentence-transformers tokenizes as odqa does: `[CLS] title [SEP] text [SEP]`, segment ids
0/1, truncated longest-first to the model's 256 tokens (questions never reach that length).
Same steps, batch, learning rate, warmup (10% of the steps unless given), linear decay; the
loss is MNRL with its defaults (cosine similarity, scale 20 = odqa's temperature 0.05), which is
odqa's contrastive loss with in-batch and hard negatives. Everything else is
sentence-transformers' default (AdamW, gradient clipping at 1.0, its own batch order).

The output folder is a sentence-transformers model (safetensors) that odqa loads like any
checkpoint; `train.json` beside it holds the costs: training-loop wall and CPU seconds
(process user + system, all threads) and examples per second. With `--snapshot-every`,
`<output>/snapshots/step-N` get the model every N steps with `snapshot.json` (step, elapsed_s,
cpu_s), the same files odqa's trainer writes, for the quality-vs-cost curve.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_dataset(examples: list[dict], negatives: int):
    """Columns anchor, positive, negative_1..H (passages as [title, text] pairs); examples with
    fewer than `negatives` hard negatives are dropped, as a fixed column count requires."""
    from datasets import Dataset

    kept = [e for e in examples if len(e["negatives"]) >= negatives]
    if not kept:
        raise ValueError(f"no training example has {negatives} hard negatives")
    columns: dict[str, list] = {"anchor": [e["question"] for e in kept], "positive": [e["positive"] for e in kept]}
    for index in range(negatives):
        columns[f"negative_{index + 1}"] = [e["negatives"][index] for e in kept]
    return Dataset.from_dict(columns), len(examples) - len(kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=Path, required=True)
    parser.add_argument("--base", required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--hard-negatives", type=int, default=1)
    parser.add_argument("--warmup-steps", type=int, default=None, help="Default: 10%% of the steps (as odqa).")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (sentence-transformers default: fp32).")
    parser.add_argument("--snapshot-every", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
    )
    from transformers import TrainerCallback

    if args.threads:
        torch.set_num_threads(args.threads)
    examples = json.loads(args.examples.read_text(encoding="utf-8"))
    dataset, dropped = build_dataset(examples, args.hard_negatives)
    model = SentenceTransformer(args.base, device="cpu")
    model.max_seq_length = 256
    loss = losses.MultipleNegativesRankingLoss(model)
    warmup = args.warmup_steps if args.warmup_steps is not None else args.steps // 10
    work = args.output.parent / f".{args.output.name}.work"
    training_args = SentenceTransformerTrainingArguments(
        output_dir=str(work),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        warmup_steps=warmup,
        lr_scheduler_type="linear",
        seed=args.seed,
        bf16=args.bf16,
        use_cpu=True,
        save_strategy="no",
        logging_steps=10,
        report_to="none",
        dataloader_drop_last=True,
        disable_tqdm=True,
    )
    clock: dict[str, float] = {}

    class Costs(TrainerCallback):
        """Training-loop wall and CPU time; a model snapshot every `--snapshot-every` steps."""

        def on_train_begin(self, *_, **__):
            clock["wall"], clock["cpu"] = time.perf_counter(), time.process_time()

        def on_step_end(self, _args, state, *_, **__):
            if args.snapshot_every and state.global_step % args.snapshot_every == 0:
                folder = args.output / "snapshots" / f"step-{state.global_step:07d}"
                spent = {"step": state.global_step, "elapsed_s": time.perf_counter() - clock["wall"],
                         "cpu_s": time.process_time() - clock["cpu"],
                         "examples": state.global_step * args.batch_size}  # fmt: skip
                model.save(str(folder), safe_serialization=True)
                (folder / "snapshot.json").write_text(json.dumps(spent, indent=1), encoding="utf-8")

        def on_train_end(self, *_, **__):
            clock["wall"], clock["cpu"] = time.perf_counter() - clock["wall"], time.process_time() - clock["cpu"]

    trainer = SentenceTransformerTrainer(model=model, args=training_args, train_dataset=dataset, loss=loss,
                                         callbacks=[Costs()])  # fmt: skip
    trainer.train()
    model.save(str(args.output), safe_serialization=True)
    losses_logged = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    report = {
        "steps": trainer.state.global_step,
        "examples": trainer.state.global_step * args.batch_size,
        "elapsed_s": clock["wall"],
        "cpu_s": clock["cpu"],
        "examples_per_s": trainer.state.global_step * args.batch_size / clock["wall"],
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": losses_logged[-1] if losses_logged else None,
        "dropped_examples": dropped,
        "threads": torch.get_num_threads(),
        "precision": "bfloat16" if args.bf16 else "float32",
        "warmup_steps": warmup,
    }
    (args.output / "train.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
