#!/usr/bin/env python3
"""The step-time cost model of docs/scaling.md: measured kernel times plus an alpha-beta model of
each collective, fitted to `momoe-bench alltoall`, predicting a training step for N ranks on H hosts.

    scaling_model.py fit     ALLTOALL.jsonl                      -> the alpha-beta fit per link
    scaling_model.py compare ALLTOALL.jsonl SCALING.jsonl [--cores C]
                             predicted against measured (`momoe-bench scaling --what train`)
    scaling_model.py predict INPUTS.json                         a machine that is not here

The model (every term in docs/scaling.md):
  step(N, H) = compute(N) + exchange(N, H) + grad_sync(N, H)
  compute    = the 1-rank step's forward + backward (its exchange is a local copy, left out) scaled
               by the tokens per rank, plus its optimizer scaled by the parameters per rank; on a
               machine with fewer cores than ranks the ranks share them (x N / cores)
  exchange   = calls x [(L - 1)(a_in + b_in B) + (EP - L)(a_out + b_out B)]: per all-to-all
               call, pairwise messages of B bytes to the L - 1 peers of the EP group in the host
               and the EP - L outside (L = the group's ranks per host); calls = 4 per MoE layer
               and micro-batch (dispatch and combine, forward and backward); B = the rows a rank
               sends per peer times D x 4
  grad_sync  = ring all-reduces: the dense gradients over all N ranks, 2 (N - 1) (a + b P / N),
               and the experts' over their DP group, over the slowest link of the ring (between
               hosts when H > 1)
Lines of the JSON files: `momoe-bench` output, each tagged {"hosts": H} by run_scaling.sh.
"""
import argparse
import json
import sys


def read_lines(path, bench):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                row = json.loads(line)
                if row.get("bench") == bench:
                    rows.append(row)
    return rows


def least_squares(xs, ys):
    """(a, b) minimising sum (a + b x - y)^2, with a >= 0 and b >= 0."""
    n = len(xs)
    if n == 0:
        raise ValueError("no points to fit")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0
    b = max(b, 0.0)
    a = max(my - b * mx, 0.0)
    return a, b


def fit_links(alltoall_rows):
    """Alpha (s) and beta (s/byte) per link class: "in" from single-host runs, "out" from runs
    over hosts (the pairwise messages between hosts dominate: their per-message time is fitted
    after the in-host pairs' predicted time is taken off)."""
    def per_message(row):
        # exchange_ms holds two all-to-alls; each is (R - 1) pairwise messages of B bytes.
        return row["exchange_ms"] / 1e3 / 2, row["bytes_per_peer"], row["world_size"]

    inside = [per_message(r) for r in alltoall_rows
              if r.get("hosts", 1) == 1 and r["world_size"] > 1]
    if not inside:
        raise ValueError("no single-host all-to-all lines with world_size > 1 to fit")
    a_in, b_in = least_squares([b for _, b, _ in inside], [t / (r - 1) for t, _, r in inside])
    links = {"in": {"alpha_s": a_in, "beta_s_per_byte": b_in}}
    across = [(per_message(r), r["hosts"]) for r in alltoall_rows if r.get("hosts", 1) > 1]
    if across:
        xs, ys = [], []
        for (t, b, ranks), hosts in across:
            local = ranks // hosts
            rest = t - (local - 1) * (a_in + b_in * b)
            xs.append(b)
            ys.append(max(rest, 0.0) / (ranks - local))
        a_out, b_out = least_squares(xs, ys)
        links["out"] = {"alpha_s": a_out, "beta_s_per_byte": b_out}
    else:
        links["out"] = dict(links["in"])
    return links


def message_time(link, nbytes):
    return link["alpha_s"] + link["beta_s_per_byte"] * nbytes


def exchange_seconds(links, ep, local, calls, bytes_per_peer):
    """An EP group of `ep` ranks, `local` of them per host (local = ep inside one host)."""
    if ep == 1:
        return 0.0
    return calls * ((local - 1) * message_time(links["in"], bytes_per_peer) +
                    (ep - local) * message_time(links["out"], bytes_per_peer))


def allreduce_seconds(links, ranks, across_hosts, nbytes):
    if ranks == 1:
        return 0.0
    link = links["out"] if across_hosts else links["in"]
    return 2 * (ranks - 1) * message_time(link, nbytes / ranks)


def predict(shape, links, ranks, hosts, cores=None, ep=None):
    """Seconds per step and its parts for `ranks` ranks on `hosts` hosts with EP groups of `ep`
    consecutive ranks (default: all of them) and DP = ranks / ep across them. shape: the 1-rank
    measurement and the model's sizes: compute_s (forward + backward at 1 rank, without its
    exchange), optimizer_s, tokens_per_rank_1, tokens_per_rank, moe_layers, micro_batches, top_k,
    capacity_factor, d_model, dense_params, expert_params (all experts)."""
    ep = ranks if ep is None else ep
    per_host = ranks // hosts
    local = min(ep, per_host)  # an EP group's ranks per host
    scale = shape["tokens_per_rank"] / shape["tokens_per_rank_1"]
    per_rank_params = shape["dense_params"] + shape["expert_params"] / ep
    compute = shape["compute_s"] * scale + shape["optimizer_s"] * per_rank_params / (
        shape["dense_params"] + shape["expert_params"])
    if cores is not None and ranks > cores:
        compute *= ranks / cores
    rows = shape["tokens_per_rank"] / shape["micro_batches"] * shape["top_k"] * max(
        1.0, shape["capacity_factor"])
    bytes_per_peer = rows / ep * shape["d_model"] * 4
    calls = 4 * shape["moe_layers"] * shape["micro_batches"]
    exchange = exchange_seconds(links, ep, local, calls, bytes_per_peer)
    # Dense gradients over every rank; each expert's over its DP group (across hosts whenever an
    # EP group fits in a host and there are several hosts).
    dp = ranks // ep
    sync = allreduce_seconds(links, ranks, hosts > 1, shape["dense_params"] * 4)
    sync += allreduce_seconds(links, dp, hosts > 1, shape["expert_params"] / ep * 4)
    return {"compute_s": compute, "exchange_s": exchange, "grad_sync_s": sync,
            "step_s": compute + exchange + sync}


def shape_from_scaling(one, row):
    """The model's inputs from the 1-rank training line and the line to predict (the quick-start
    model of `momoe-bench scaling --what train`: its sizes are in the lines)."""
    return {
        "compute_s": (one["forward_ms"] + one["backward_ms"] - one["exchange_ms"]) / 1e3,
        "optimizer_s": one["optimizer_ms"] / 1e3,
        "tokens_per_rank_1": one["global_batch"] * one["seq_len"] / one["world_size"],
        "tokens_per_rank": row["global_batch"] * row["seq_len"] / row["world_size"],
        "moe_layers": row["moe_layers"], "micro_batches": row["grad_accum"],
        "top_k": row["top_k"], "capacity_factor": row["capacity_factor"],
        "d_model": row["d_model"], "dense_params": row["dense_params"],
        "expert_params": row["expert_params"],
    }


def compare(alltoall, scaling, cores):
    links = fit_links(read_lines(alltoall, "alltoall"))
    rows = [r for r in read_lines(scaling, "scaling") if r.get("what") == "train"]
    out = []
    for mode in ("weak", "strong"):
        pts = [r for r in rows if r["mode"] == mode]
        ones = [r for r in pts if r["world_size"] == 1]
        if not ones:
            continue
        for r in sorted(pts, key=lambda r: (r.get("hosts", 1), r["world_size"])):
            p = predict(shape_from_scaling(ones[0], r), links, r["world_size"], r.get("hosts", 1),
                        cores)
            out.append({"mode": mode, "ranks": r["world_size"], "hosts": r.get("hosts", 1),
                        "measured_ms": r["step_ms"], "predicted_ms": p["step_s"] * 1e3,
                        "measured_exchange_ms": r["exchange_ms"],
                        "predicted_exchange_ms": p["exchange_s"] * 1e3,
                        "ratio": p["step_s"] * 1e3 / r["step_ms"]})
    return links, out


def predict_machine(inputs):
    """A machine described by its inputs (docs/scaling.md): links in GB/s and microseconds, the
    compute from FLOPs over an achieved GEMM rate."""
    links = {k: {"alpha_s": v["latency_us"] * 1e-6, "beta_s_per_byte": 1 / (v["gb_per_s"] * 1e9)}
             for k, v in inputs["links"].items()}
    m = inputs["model"]
    flops = 6 * m["active_params_per_token"] * m["tokens_per_rank"]
    compute = flops / (inputs["gemm_tflops"] * 1e12 * inputs.get("gemm_efficiency", 1.0))
    shape = {"compute_s": compute, "optimizer_s": 0.0, "tokens_per_rank_1": m["tokens_per_rank"],
             "tokens_per_rank": m["tokens_per_rank"], "moe_layers": m["moe_layers"],
             "micro_batches": m.get("micro_batches", 1), "top_k": m["top_k"],
             "capacity_factor": m.get("capacity_factor", 1.0), "d_model": m["d_model"],
             "dense_params": m["dense_params"], "expert_params": m["expert_params"]}
    bytes_per_value = m.get("bytes_per_value", 2)
    out = []
    for layout in inputs["layouts"]:
        p = predict(shape, links, layout["ranks"], layout["hosts"], ep=layout.get("ep"))
        # The exchanged rows scale with the activations' width (bf16: half of f32); gradients
        # stay f32 under BF16.
        p["exchange_s"] *= bytes_per_value / 4
        p["step_s"] = p["compute_s"] + p["exchange_s"] + p["grad_sync_s"]
        out.append(dict(layout, **{k: v * 1e3 for k, v in p.items()}))
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit")
    f.add_argument("alltoall")
    c = sub.add_parser("compare")
    c.add_argument("alltoall")
    c.add_argument("scaling")
    c.add_argument("--cores", type=int, default=None)
    p = sub.add_parser("predict")
    p.add_argument("inputs")
    a = ap.parse_args(argv)
    if a.cmd == "fit":
        print(json.dumps(fit_links(read_lines(a.alltoall, "alltoall"))))
    elif a.cmd == "compare":
        links, rows = compare(a.alltoall, a.scaling, a.cores)
        print(json.dumps({"links": links}))
        print(f"{'mode':6} {'ranks':>5} {'hosts':>5} {'measured ms':>12} {'predicted ms':>12} "
              f"{'ratio':>6} {'exch meas':>10} {'exch pred':>10}")
        for r in rows:
            print(f"{r['mode']:6} {r['ranks']:5d} {r['hosts']:5d} {r['measured_ms']:12.1f} "
                  f"{r['predicted_ms']:12.1f} {r['ratio']:6.2f} {r['measured_exchange_ms']:10.1f} "
                  f"{r['predicted_exchange_ms']:10.1f}")
    else:
        with open(a.inputs) as fh:
            inputs = json.load(fh)
        print(f"{'layout':34} {'step ms':>9} {'compute':>9} {'exchange':>9} {'grad sync':>9}")
        for r in predict_machine(inputs):
            print(f"{r['name']:34} {r['step_s']:9.2f} {r['compute_s']:9.2f} {r['exchange_s']:9.2f} "
                  f"{r['grad_sync_s']:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
