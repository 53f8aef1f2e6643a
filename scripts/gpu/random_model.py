"""A LLaMA-architecture GGUF with random weights and SmolLM2's real tokenizer, for speed work on the GPU box.

Why not the small model itself: its 98 MB are over what one call to the lent machine may carry (64 MiB),
and at 135M parameters an H200 decodes it in about the time of the kernel launches, so it would measure
the engine's overhead rather than its serving. Random weights change nothing a speed gate measures
(the same shapes and kernels do the same work), and greedy and teacher-forced replies are still real and
deterministic, only meaningless as text. The tokenizer (vocabulary, merges, chat template, special ids)
is SmolLM2's, taken from the cached GGUF here, so prompts tokenize as they do on the CPU box.

  extract SRC.gguf OUT.json            here: the tokenizer's fields, about 2 MB of JSON
  make OUT.gguf TOKENIZER.json SIZE     there: SIZE one of 135m, 1b, 3b (F16 weights, seeded)

Needs gguf-py (in llama.cpp's sources: PYTHONPATH=.../gguf-py) and numpy.
"""

from __future__ import annotations

import json
import sys

import numpy as np

# hidden, layers, heads, kv heads, ffn: SmolLM2-135M's own shape, and two LLaMA-3.2-like larger ones
SIZES = {"135m": (576, 30, 9, 3, 1536), "1b": (2048, 16, 32, 8, 8192), "3b": (3072, 28, 24, 8, 8192)}


def extract(source: str, out: str) -> None:
    import gguf

    reader = gguf.GGUFReader(source)
    fields = {}
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        kind = field.types[-1]
        values = [field.parts[i] for i in field.data]
        if kind == gguf.GGUFValueType.STRING:
            decoded = [bytes(v).decode("utf-8") for v in values]
        else:
            decoded = [v.tolist()[0] if hasattr(v, "tolist") and len(v) == 1 else v.tolist() for v in values]
        array = field.types[0] == gguf.GGUFValueType.ARRAY
        fields[key] = {"type": kind.name, "array": array, "value": decoded if array else decoded[0]}
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(fields, handle)


def make(out: str, tokenizer_json: str, size: str, seed: int = 0) -> None:
    import gguf

    hidden, layers, heads, kv_heads, ffn = SIZES[size]
    head_dim = hidden // heads
    with open(tokenizer_json, encoding="utf-8") as handle:
        tokenizer = json.load(handle)
    vocab = len(tokenizer["tokenizer.ggml.tokens"]["value"])
    writer = gguf.GGUFWriter(out, "llama")
    writer.add_name(f"random-llama-{size} (SmolLM2 tokenizer)")
    writer.add_context_length(8192)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for key, entry in tokenizer.items():
        kind = gguf.GGUFValueType[entry["type"]]
        if entry["array"]:
            writer.add_array(key, entry["value"])
        elif kind == gguf.GGUFValueType.STRING:
            writer.add_string(key, entry["value"])
        elif kind == gguf.GGUFValueType.BOOL:
            writer.add_bool(key, bool(entry["value"]))
        else:
            writer.add_uint32(key, int(entry["value"]))
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:  # numpy [out, in]; small enough that activations stay finite
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    writer.add_tensor("token_embd.weight", weight(vocab, hidden))
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    writer.add_tensor("output.weight", weight(vocab, hidden))
    for layer in range(layers):
        name = f"blk.{layer}"
        writer.add_tensor(f"{name}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(f"{name}.attn_q.weight", weight(heads * head_dim, hidden))
        writer.add_tensor(f"{name}.attn_k.weight", weight(kv_heads * head_dim, hidden))
        writer.add_tensor(f"{name}.attn_v.weight", weight(kv_heads * head_dim, hidden))
        writer.add_tensor(f"{name}.attn_output.weight", weight(hidden, heads * head_dim))
        writer.add_tensor(f"{name}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(f"{name}.ffn_gate.weight", weight(ffn, hidden))
        writer.add_tensor(f"{name}.ffn_up.weight", weight(ffn, hidden))
        writer.add_tensor(f"{name}.ffn_down.weight", weight(hidden, ffn))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "extract":
        extract(argv[1], argv[2])
    elif len(argv) == 4 and argv[0] == "make" and argv[3] in SIZES:
        make(argv[1], argv[2], argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
