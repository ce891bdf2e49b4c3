"""momoe models in plain PyTorch: load a `momoe-export` folder, evaluate or fine-tune it.

    import momoe_torch
    model = momoe_torch.load("exported/quickstart")          # a torch.nn.Module, eval mode
    logits = model(ids)                                      # ids [B, S] int64 -> [B, S, V]
    ids = momoe_torch.read_split("data/prepared", "valid")   # a momoe-data dataset's tokens
    print(momoe_torch.perplexity(model, ids)["ppl"])         # as momoe-eval computes it

Needs only torch and numpy (safetensors are read with numpy).
"""

from .data import TokenizerMismatchError, read_split, read_token_file
from .evaluate import perplexity
from .model import MomoeLM, load
from .safetensors_numpy import read_safetensors

__all__ = [
    "MomoeLM", "TokenizerMismatchError", "load", "perplexity", "read_split", "read_token_file",
    "read_safetensors",
]
