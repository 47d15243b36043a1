"""A tiny, randomly initialised Llama and its tokenizer, saved like a real checkpoint.

Used by the KernelLLM tests and benchmarks in place of facebook/KernelLLM: the
generator loads it through the same ``from_pretrained`` path.
"""

from __future__ import annotations

from pathlib import Path

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>"]


def build_tiny_llama(out: Path, corpus: str, seed: int = 0) -> Path:
    """Train a 400-token byte-level BPE on ``corpus``, build a 2-layer Llama, save both in ``out``."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([corpus] * 4, trainer=trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=SPECIALS[0], eos_token=SPECIALS[1]
    )
    fast.save_pretrained(out)
    config = transformers.LlamaConfig(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    torch.manual_seed(seed)
    transformers.LlamaForCausalLM(config).save_pretrained(out)
    return out
