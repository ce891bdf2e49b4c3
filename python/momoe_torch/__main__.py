"""python3 -m momoe_torch --model EXPORTED --dataset PREPARED [--split valid] [--max-sequences N]

Prints one JSON line with the perplexity (the same as momoe-eval's on the same tokens). A dataset
tokenized with another tokenizer than the model's is refused: the reason on stderr, exit code 2."""

import argparse
import json
import sys

import torch

from . import TokenizerMismatchError, load, perplexity, read_split
from .replay import RoutingReplay


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m momoe_torch", description=" ".join(__doc__.split("\n")[2:]))
    parser.add_argument("--model", required=True, help="a momoe-export folder")
    parser.add_argument("--dataset", required=True, help="a momoe-data prepare folder")
    parser.add_argument("--split", default="valid", help="train, valid or test (default valid)")
    parser.add_argument("--max-sequences", type=int, default=0, help="only the first N (0: all)")
    parser.add_argument("--batch", type=int, default=0, help="sequences per batch (default: config.json's eval_batch_size)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument(
        "--replay", metavar="ROUTING",
        help="momoe-eval --routing-out's file: evaluate on its routing decisions instead of the "
        "module's own, after comparing the two (the result says \"replayed\": true and has "
        "\"decisions\": the comparison per MoE layer, python/momoe_torch/cross_path.py)")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    model = load(args.model, dtype=getattr(torch, args.dtype))
    try:
        ids = read_split(args.dataset, args.split, tokenizer=model.cfg["tokenizer"],
                         model_dir=args.model)
    except TokenizerMismatchError as e:
        print(f"python3 -m momoe_torch: {e}", file=sys.stderr)
        return 2
    batch = args.batch or int(model.cfg["eval_batch_size"])
    replay = RoutingReplay(args.replay, model.cfg, batch) if args.replay else None
    result = perplexity(model, ids, batch, args.max_sequences, replay)
    if replay is not None:
        result["replayed"] = True
        result["dtype"] = args.dtype
        result["decisions"] = replay.finish()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
