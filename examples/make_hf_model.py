"""Write a small transformers model and its tokenizer to a directory, as a stand-in for a
checkpoint downloaded from a model hub (none is reachable offline):

    python examples/make_hf_model.py runs/demo-llama               # LlamaForCausalLM
    python examples/make_hf_model.py runs/demo-qwen2 --arch qwen2  # tied embeddings

The tokenizer is a byte-level BPE (the `tokenizers` library, as GPT-2 and LLaMA-3 use) trained
on the Python reference's topics (`pydoc_data.topics`, shipped with every Python), saved with
`save_pretrained` so `AutoTokenizer.from_pretrained` and `infinipipe.data.load_tokenizer` load
it. The model is the architecture's transformers class at a tiny shape, randomly initialised
with a seed, saved with `save_pretrained` (safetensors). examples/finetune_hf.py trains it.
"""

from __future__ import annotations

import argparse

import torch

from infinipipe.data import python_reference_documents

EOS = "<|endoftext|>"
SHAPE = dict(  # 1.26 M parameters with the 2048-token vocabulary
    hidden_size=128,
    intermediate_size=352,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
)


def make_tokenizer(vocab_size: int):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        python_reference_documents(), vocab_size=vocab_size, special_tokens=[EOS]
    )
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS)


def make_model(arch: str, vocab_size: int, eos_id: int, seed: int):
    import transformers

    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[arch]
    extra = {"tie_word_embeddings": True} if arch == "qwen2" else {}
    config = config_class(
        vocab_size=vocab_size, eos_token_id=eos_id, bos_token_id=eos_id, **SHAPE, **extra
    )
    torch.manual_seed(seed)
    return model_class(config)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out", help="the directory to write (model and tokenizer)")
    p.add_argument("--arch", default="llama", choices=["llama", "qwen2", "mistral"])
    p.add_argument("--vocab", type=int, default=2048, help="the tokenizer's vocabulary size")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    tokenizer = make_tokenizer(args.vocab)
    model = make_model(args.arch, len(tokenizer), tokenizer.eos_token_id, args.seed)
    tokenizer.save_pretrained(args.out)
    model.save_pretrained(args.out)
    params = sum(p.numel() for p in model.parameters())
    print(
        f"{args.out}: {type(model).__name__}, {params / 1e6:.2f} M parameters, "
        f"tokenizer of {len(tokenizer)} tokens"
    )


if __name__ == "__main__":
    main()
