"""What the training examples share: the byte-level corpus, model shapes and their config fields."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parent / "demo_corpus.txt"


@dataclass(frozen=True)
class ModelShape:
    """Decoder shape of a preset: what the HF config needs besides the vocabulary."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int

    def config_kwargs(self) -> dict[str, Any]:
        """HF config fields of this shape, and the special token ids of byte-level text."""
        return {
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.hidden // self.heads,
            "pad_token_id": 0,  # NUL: never in the text
            "bos_token_id": 1,
            "eos_token_id": 2,
        }


def corpus_windows(
    seq: int, steps: int, batch: int, seed: int, rank: int = 0, world: int = 1
) -> list[Any]:
    """``steps`` batches of ``batch`` random corpus windows of ``seq`` byte tokens: this rank's
    slice of global batches of ``world * batch`` windows, the same for every run of the same
    seed."""
    import torch

    data = torch.frombuffer(bytearray(CORPUS.read_bytes()), dtype=torch.uint8).long()
    gen = torch.Generator().manual_seed(seed + 1)
    starts = torch.randint(0, data.numel() - seq, (steps, world * batch), generator=gen)
    mine = starts[:, rank * batch : (rank + 1) * batch]
    return [torch.stack([data[s : s + seq] for s in row]) for row in mine]
