#!/usr/bin/env python3
"""benchmarks/scaling_model.py: the alpha-beta fit recovers the link parameters that generated
all-to-all lines (in a host and between hosts), and the step model adds its terms as
docs/scaling.md writes them (hand-computed cases). Usage: scaling_model_test.py SOURCE_DIR"""
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(sys.argv[1], "benchmarks"))
import scaling_model as m  # noqa: E402

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-15)


# All-to-all lines made from known links: per message a + b x bytes; exchange_ms holds two calls.
a_in, b_in, a_out, b_out = 20e-6, 1e-9, 60e-6, 8e-9
lines = []
for ranks, hosts in ((2, 1), (4, 1), (4, 2)):
    local = ranks // hosts
    for nbytes in (1e4, 1e5, 1e6):
        call = (local - 1) * (a_in + b_in * nbytes) + (ranks - local) * (a_out + b_out * nbytes)
        lines.append({"bench": "alltoall", "hosts": hosts, "world_size": ranks,
                      "bytes_per_peer": nbytes, "exchange_ms": 2 * call * 1e3})
links = m.fit_links(lines)
check(close(links["in"]["alpha_s"], a_in, 1e-6), f"alpha in {links['in']}")
check(close(links["in"]["beta_s_per_byte"], b_in, 1e-6), f"beta in {links['in']}")
check(close(links["out"]["alpha_s"], a_out, 1e-6), f"alpha out {links['out']}")
check(close(links["out"]["beta_s_per_byte"], b_out, 1e-6), f"beta out {links['out']}")

# The JSON reader keeps only the named benchmark's lines.
with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
    f.write('{"bench": "env"}\nnot json\n{"bench": "alltoall", "world_size": 2}\n')
check(len(m.read_lines(f.name, "alltoall")) == 1, "read_lines filters by bench")
os.unlink(f.name)

# A step by hand: 4 ranks on 2 hosts, EP 4 (2 per host), one MoE layer, one micro-batch.
shape = {"compute_s": 1.0, "optimizer_s": 0.2, "tokens_per_rank_1": 1000, "tokens_per_rank": 500,
         "moe_layers": 1, "micro_batches": 1, "top_k": 2, "capacity_factor": 1.25,
         "d_model": 8, "dense_params": 100, "expert_params": 300}
p = m.predict(shape, links, 4, 2)
compute = 1.0 * 0.5 + 0.2 * (100 + 300 / 4) / 400
rows = 500 * 2 * 1.25
peer = rows / 4 * 8 * 4
exchange = 4 * (1 * (a_in + b_in * peer) + 2 * (a_out + b_out * peer))
sync = 2 * 3 * (a_out + b_out * 400 / 4)  # dense over 4 ranks, across hosts; DP 1: no experts
check(close(p["compute_s"], compute), f"compute {p['compute_s']} != {compute}")
check(close(p["exchange_s"], exchange, 1e-6), f"exchange {p['exchange_s']} != {exchange}")
check(close(p["grad_sync_s"], sync, 1e-6), f"grad sync {p['grad_sync_s']} != {sync}")
check(close(p["step_s"], compute + exchange + sync, 1e-6), "the step is the sum of its terms")
# Oversubscribed cores stretch the compute; one rank has no exchange and no sync.
check(close(m.predict(shape, links, 4, 2, cores=2)["compute_s"], 2 * compute), "cores")
one = m.predict(shape, links, 1, 1)
check(one["exchange_s"] == 0 and one["grad_sync_s"] == 0, "one rank: compute only")
# EP inside a host with DP across: no exchange between hosts, the experts' sync across them.
q = m.predict(shape, links, 4, 2, ep=2)
check(close(q["exchange_s"], 4 * (a_in + b_in * (rows / 2 * 8 * 4)), 1e-6), "EP in a host")
check(close(q["grad_sync_s"], sync + 2 * 1 * (a_out + b_out * 300 / 2 * 4 / 2), 1e-6),
      "experts over DP 2")

# The H100 inputs predict every layout (positive, compute-bound at one GPU).
rows = m.predict_machine(__import__("json").load(
    open(os.path.join(sys.argv[1], "benchmarks", "scaling_inputs_h100.json"))))
check(len(rows) == 5 and all(r["step_s"] > 0 for r in rows), "H100 layouts predicted")
check(rows[0]["exchange_s"] == 0, "one GPU: no exchange")

print("scaling_model_test:", "FAILED" if failures else "passed", f"({len(failures)} failures)")
sys.exit(1 if failures else 0)
