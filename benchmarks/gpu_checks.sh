#!/usr/bin/env bash
# The checks and figures of a lent GPU machine, in one go (each stage bounded, each continuing
# after a failure of the one before), from the repository root of an installed odqa:
#   [GPU_STEPS="5 6"] bash benchmarks/gpu_checks.sh [LOG_DIR]
# 1. the CUDA tests (tests/gpu); 2. BERT-base passage encoding, bf16 vs fp32 vs
# sentence-transformers; 3. training step time and peak memory of ADE (DPR's two towers), TASER
# and SDE on BERT-base at batch 128 with one hard negative each; 4. the same step under torchrun
# with 2 processes (on one GPU they share it over gloo); 5. issue 38: encoding from stored token
# ids, the feed ceiling, sentence-transformers with bf16 weights, faiss-gpu against faiss-cpu;
# 6. issue 38: the training step beside sentence-transformers' MNRL, as a share of peak.
# GPU_STEPS picks the steps (default all: about 17 minutes at the limits below; 5 and 6 alone
# fit one 600 s device call). On the device machine the packages it lacks come first:
# benchmarks/device_packages.py (faiss-gpu with CUDA 12's cuBLAS, duckdb, mwparserfromhell).
# BERT-base is BERT-base-shaped with seeded random weights (bench_encode.bert_base_dir): speed
# and memory do not depend on the weights.
set -u
LOG=${1:-gpu-logs}
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
STEPS=" ${GPU_STEPS:-1 2 3 4 5 6} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$LOG/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$LOG/gpu.txt"

if want 1; then
echo "== 1. tests/gpu"
timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" -rs tests/gpu 2>&1 | tee "$LOG/tests.txt" | tail -40
fi

# A BERT-base-shaped folder: BERT_BASE_DIR if given (made by bench_encode.bert_base_dir), else made here.
BERT=${BERT_BASE_DIR:-$(mktemp -d)/bert-base}
[ -f "$BERT/config.json" ] || python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path; from bench_encode import bert_base_dir; bert_base_dir(Path('$BERT'))"

if want 2; then
echo "== 2. encoding (BERT-base, bf16 and fp32)"
timeout 150 python3 benchmarks/bench_encode.py --model bert-base --bert-base-dir "$BERT" --device cuda --passages 6000 --batch-size 256 \
  --repeats 2 --threads 8 --no-rss 2>&1 | tee "$LOG/encode.txt" | grep -v "^ *[0-9]*%" | tail -15
fi

if want 3; then
echo "== 3. training step, one process (BERT-base, batch 128 + 128 positives + 128 hard negatives)"
timeout 120 python3 benchmarks/bench_train_step.py --device cuda --base "$BERT" --amp bf16 --modes single \
  --archs ade,taser,sde --batch 128 --hard-negatives 1 --seq-lens 256 --question-len 32 --steps 5 --warmup 2 \
  2>&1 | tee "$LOG/train_step.txt" | tail -8
fi

if want 4; then
echo "== 4. training step under torchrun, 2 processes (batch 64 per rank)"
timeout 90 python3 benchmarks/bench_train_step.py --device cuda --base "$BERT" --amp bf16 --modes ddp \
  --world-size 2 --archs ade,taser,sde --batch 64 --hard-negatives 1 --seq-lens 256 --question-len 32 --steps 3 \
  --warmup 1 --no-memory 2>&1 | tee "$LOG/torchrun.txt" | tail -8
fi

if want 5; then
echo "== 5. issue 38: BERT-base from stored token ids, feed ceiling, vs sentence-transformers bf16, faiss-gpu vs cpu"
# TOKENIZERS_PARALLELISM unset, as a user runs it: sentence-transformers tokenizes with the Rust
# tokenizer's threads (its best), odqa's tokenizer workers turn theirs off (one core each).
env -u TOKENIZERS_PARALLELISM timeout 380 python3 benchmarks/bench_gpu_tokens.py --passages 200000 --st-passages 40000 --st-batches 128,256,512 --batch-size 256 \
  --json "$LOG/issue38_tokens.json" 2>&1 | tee "$LOG/issue38_tokens.txt" | tail -40
fi

if want 6; then
echo "== 6. issue 38: training step beside sentence-transformers' MNRL (BERT-base, batch 128, bf16), share of peak"
timeout 140 python3 benchmarks/bench_train_anchor.py --device cuda --base "$BERT" --amp bf16 --batch 128 \
  --seq-len 256 --json "$LOG/train_anchor.json" 2>&1 | tee "$LOG/train_anchor.txt" | tail -12
fi
