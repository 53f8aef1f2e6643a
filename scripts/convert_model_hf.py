"""Convert a GGUF model to a Hugging Face directory that core vLLM can load (it cannot load the GGUF).

Run with the vLLM venv's python (scripts/setup-vllm.sh installs transformers, gguf and accelerate
there): ``python convert_model_hf.py GGUF OUT_DIR``. Writes into ``OUT_DIR.tmp`` and renames, so a
killed conversion never leaves a half-written model at OUT_DIR; then writes OUT_DIR/SHA256SUMS
(``sha256sum`` format, the file a contract's ``model.sha256_manifest`` can pin).

transformers dequantizes the GGUF weights on load; the quantization bookkeeping it attaches
(``hf_quantizer``, ``config.quantization_config``) would make save_pretrained write a config that
claims a quantization the saved tensors no longer have, so both are dropped before saving.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from pathlib import Path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(directory: Path) -> None:
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != "SHA256SUMS")
    lines = [f"{sha256(p)}  {p.relative_to(directory).as_posix()}\n" for p in files]
    (directory / "SHA256SUMS").write_text("".join(lines))


def convert(gguf: Path, out: Path, dtype_name: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[dtype_name]
    stage = out.with_name(out.name + ".tmp")
    shutil.rmtree(stage, ignore_errors=True)
    started = time.monotonic()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=dtype)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(stage))
    tokenizer.save_pretrained(str(stage))
    write_manifest(stage)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(stage, out)
    print(f"convert-model-hf: {type(model).__name__} {dtype_name} -> {out} "
          f"in {time.monotonic() - started:.1f}s", file=sys.stderr)


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print("usage: convert_model_hf.py GGUF OUT_DIR [bfloat16|float32|float16]", file=sys.stderr)
        return 2
    gguf, out = Path(argv[1]).resolve(), Path(argv[2]).resolve()
    if not gguf.is_file():
        print(f"convert-model-hf: {gguf}: no such file", file=sys.stderr)
        return 2
    convert(gguf, out, argv[3] if len(argv) == 4 else "bfloat16")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
