"""export_test's reference runs, in one process (torch is imported once): each job evaluates an
exported model with python/momoe_torch in float64 on momoe-eval's routing decisions (replay.py)
and applies the cross-path rule (cross_path.check_perplexity) against momoe-eval's result.

usage: export_reference.py MODULE_DIR JOBS_JSON RESULTS_JSON [CACHE_DIR]
MODULE_DIR holds the momoe_torch package to test (a mutated copy, say). JOBS_JSON is a list of
{"key", "name", "export", "dataset", "routing", "batch", "eval", "expect", "what"}: "eval" is
momoe-eval's JSON result, "expect" "pass" (the rule holds) or "caught" (the rule must reject
it: a perturbed export or a mutated module). RESULTS_JSON receives {key: the reference's
result}. Exits 1 when any job's verdict is not its expectation.

The module derives each block's residual coefficients from the papers' quantities ("dynamics")
and cross-checks momoe's own ("residual"). A disagreement fails the job (naming both numbers);
the module then still evaluates with its derived coefficients, so that the comparison against
momoe-eval says too whether the difference is seen in the perplexity.

CACHE_DIR (tests/run.sh's kernel phases share one): a reference result is a function of its
inputs (the module's source, the export, the tokens, the routing decisions and the batch), so it
is kept there under their SHA-256 and reused when a later phase's momoe-eval decided the same
(the float64 reference moves by ~1e-15 with torch's own BLAS kernel, far below the rule's
bounds). The verdict is always recomputed against this phase's momoe-eval result.
"""

import glob
import hashlib
import json
import os
import sys

MAX_SEQUENCES = 40


def input_key(module_dir, job):
    h = hashlib.sha256()
    files = sorted(glob.glob(os.path.join(module_dir, "momoe_torch", "*.py")))
    files += [os.path.join(job["export"], n) for n in ("config.json", "model.safetensors")]
    # The dataset's ids and vocabulary (its index.json names the folder it was prepared from).
    files += sorted(glob.glob(os.path.join(job["dataset"], "*.tok")))
    files.append(os.path.join(job["dataset"], "vocab.txt"))
    files.append(job["routing"])
    for path in files:
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    h.update(f"batch {job['batch']} sequences {MAX_SEQUENCES}".encode())
    return h.hexdigest()


def main():
    module_dir, jobs_path, results_path = sys.argv[1:4]
    cache = sys.argv[4] if len(sys.argv) > 4 else ""
    sys.path.insert(0, module_dir)
    import torch

    import momoe_torch
    from momoe_torch.cross_path import check_perplexity
    from momoe_torch.dynamics import ResidualMismatchError, check_export
    from momoe_torch.replay import RoutingReplay

    torch.set_num_threads(2)
    failed, results, reused = [], {}, 0
    for job in json.load(open(jobs_path)):
        key = job["key"]
        cached = os.path.join(cache, input_key(module_dir, job) + ".json") if cache else ""
        with open(os.path.join(job["export"], "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        try:
            check_export(cfg)
        except ResidualMismatchError as e:
            print(f"FAIL: {key}: {e}")
            failed.append(f"{key} (momoe's residual coefficients)")
        if cached and os.path.exists(cached):
            reference = json.load(open(cached))
            reused += 1
        else:
            model = momoe_torch.load(job["export"], dtype=torch.float64, cross_check=False)
            ids = momoe_torch.read_split(job["dataset"], "train",
                                         fingerprint=model.cfg["tokenizer"]["fingerprint"])
            replay = RoutingReplay(job["routing"], model.cfg, job["batch"])
            reference = momoe_torch.perplexity(model, ids, job["batch"], MAX_SEQUENCES, replay)
            reference["replayed"] = True
            reference["dtype"] = "float64"
            reference["decisions"] = replay.finish()
            if cached:
                with open(cached + ".tmp", "w") as f:
                    json.dump(reference, f)
                os.replace(cached + ".tmp", cached)
        results[key] = reference
        momoe = json.load(open(job["eval"]))
        ok, lines = check_perplexity(key, momoe, reference, cfg)
        if job["expect"] == "pass":
            print("\n".join(lines))
            if not ok:
                failed.append(key)
            elif not momoe["ppl"] < 2000:
                print(f"FAIL: {key}: perplexity {momoe['ppl']}: the model is too close to "
                      "uniform to test much")
                failed.append(key)
        elif ok:
            print("\n".join(lines))
            print(f"FAIL: {key}: {job['what']} passes the comparison: the check could not see it")
            failed.append(f"{key} ({job['what']})")
        else:
            first = next(line for line in lines if line.startswith("FAIL"))
            print(f"{job['name']}: {job['what']} is caught: {first}")
        sys.stdout.flush()
    if cache:
        print(f"reference results: {reused} of {len(results)} reused from {cache} (the same "
              "inputs and decisions as an earlier kernel phase)")
    with open(results_path, "w") as f:
        json.dump(results, f)
    if failed:
        sys.exit(f"FAIL: {', '.join(failed)}")


if __name__ == "__main__":
    main()
