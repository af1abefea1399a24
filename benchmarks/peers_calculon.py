"""bandwise beside Calculon on Calculon's own validation: Korthikanti et al. 2022, Table 5 and Figure 1.

    python benchmarks/peers_calculon.py --calculon PATH [--calculon-python PY]

PATH is a checkout of Calculon (github.com/calculon-ai/calculon, Apache-2.0; nothing of it is
vendored or fetched here). Calculon runs in its own process, under PY (default: this Python; it
needs numpy, pandas and psutil), on its own files: systems/a100_80g.json and a100_80e.json,
models/*.json and validation/seqsel/{tab5,fig1}/*.json, as its `llm-validation` command does.

bandwise predicts the same eight layouts (GPT 22B / 175B / 530B / 1T on A100, TP 8 with PP 1 / 8 /
35 / 64, sequence parallelism with selective recomputation, or full recomputation without it) from
its own published runs (`korthikanti2022_*` in data/published_runs.yaml), on `bandwise validate`'s
path, the one `plan --engine megatron@2022` takes (materialized attention, Megatron's selective
recomputation of the attention core only, equal pipeline stages: the engine's behaviours).
The full-recomputation rows are the same runs with recompute = full, no sequence parallelism and the
paper's full-recompute iteration time (`reported.step_time_full_recompute_s`). The script checks
that both tools read the same layouts before it compares them.

Step-time error = predicted / profiled - 1; memory error = predicted / profiled - 1 (Figure 1:
parameters + optimizer state, and activations, GiB per GPU).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.plan.runs import convert
from bandwise.plan.validate import load_runs, predict

MODELS = {"megatron-22B": "korthikanti2022_22B", "gpt3-175B": "korthikanti2022_175B", "turing-530B": "korthikanti2022_530B",
          "megatron-1T": "korthikanti2022_1T"}
MODES = ("full", "seqsel")

CALCULON = r"""
import json, logging, os, sys
sys.path.insert(0, sys.argv[1])
import calculon
from calculon.llm import Llm
from calculon.system import System
base = sys.argv[1]
out = {}
for model in json.loads(sys.argv[2]):
    app = Llm.Application(calculon.read_json_file(os.path.join(base, 'models', model + '.json')))
    for table, mode, system in (('tab5', 'full', 'a100_80g'), ('tab5', 'seqsel', 'a100_80g'), ('fig1', 'seqsel', 'a100_80e')):
        exe_json = calculon.read_json_file(os.path.join(base, 'validation', 'seqsel', table, f'{model}_{mode}.json'))
        llm = Llm(app, logging.getLogger('calculon'))
        llm.compile(System(calculon.read_json_file(os.path.join(base, 'systems', system + '.json'))), Llm.Execution.from_json(exe_json))
        llm.run(System(calculon.read_json_file(os.path.join(base, 'systems', system + '.json'))))
        stats = llm.get_stats_json(False)
        out[f'{model}/{table}/{mode}'] = {
            'step_s': stats['total_time'], 'exe': exe_json,
            'par_opt_gib': (stats['weight_space'] + stats['weight_grad_space'] + stats['optimizer_space']) / 2**30,
            'act_gib': stats['act_space'] / 2**30,
        }
print(json.dumps(out))
"""


def run_calculon(path: Path, python: str) -> dict:
    proc = subprocess.run([python, "-c", CALCULON, str(path), json.dumps(list(MODELS))], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"Calculon failed under {python}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
    return json.loads(proc.stdout)


def bandwise_cases() -> dict[str, dict]:
    """Our published runs for the eight layouts: the seqsel run as shipped, the full run derived from it."""
    runs, sources = load_runs(None)
    by_id = {r["id"]: r for r in runs}
    cases = {}
    for model, rid in MODELS.items():
        seqsel = by_id[rid]
        full = copy.deepcopy(seqsel)
        full["id"] = rid + "_full_recompute"
        full["parallelism"]["recompute"] = "full"
        full["parallelism"]["sp"] = False
        step = full["reported"]["step_time_full_recompute_s"]
        gb, n, seq = seqsel["parallelism"]["global_batch_seqs"], seqsel["hardware"]["count"], seqsel["model"]["seq_len"]
        full["target"] = {**full["target"], "tokens_per_sec_per_device": gb * seq / (step * n)}
        cases[f"{model}/full"] = {"run": full, "step_s": step, "sp": False}
        cases[f"{model}/seqsel"] = {"run": seqsel, "step_s": seqsel["reported"]["step_time_s"], "sp": True}
    return cases | {"_sources": sources}


def predict_step(run: dict, sources: dict, sp: bool) -> tuple[float, object]:
    case = convert(run, sources)
    # Table 5's full-recomputation baseline runs without sequence parallelism: a stated fact of the case
    params = replace(DEFAULT_PARAMS, sequence_parallel=sp)
    res = predict(case, params)
    if res.predicted is None:
        sys.exit(f"bandwise could not predict {run['id']}: {res.reason}")
    gb, n, seq = case.global_batch, case.devices, run["model"]["seq_len"]
    return gb * seq / (res.predicted * n), res


def same_layout(exe: dict, run: dict) -> None:
    p = run["parallelism"]
    ours = (run["hardware"]["count"], p["tp"], p["pp"], p["global_batch_seqs"], p["micro_batch"])
    theirs = (exe["num_procs"], exe["tensor_par"], exe["pipeline_par"], exe["batch_size"], exe["microbatch_size"])
    if ours != theirs:
        sys.exit(f"{run['id']}: bandwise reads (devices, tp, pp, batch, micro-batch) {ours}, Calculon {theirs}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calculon", type=Path, required=True, help="a checkout of github.com/calculon-ai/calculon")
    ap.add_argument("--calculon-python", default=sys.executable, help="the Python that runs Calculon (needs numpy, pandas, psutil)")
    args = ap.parse_args()
    calc = run_calculon(args.calculon, args.calculon_python)
    cases = bandwise_cases()
    sources = cases.pop("_sources")

    print("Step time (Korthikanti et al. 2022, Table 5; A100, TP 8):\n")
    print("| case | profiled (s) | Calculon (s) | error | bandwise validate (s) | error |")
    print("|---|---:|---:|---:|---:|---:|")
    errs: dict[str, list[float]] = {"calculon": [], "validate": []}
    results = {}
    for key, c in cases.items():
        model, mode = key.split("/")
        ce = calc[f"{model}/tab5/{mode}"]
        same_layout(ce["exe"], c["run"])
        v, vres = predict_step(c["run"], sources, sp=c["sp"])
        results[key] = vres
        row = {"calculon": ce["step_s"], "validate": v}
        cells = []
        for tool, t in row.items():
            e = t / c["step_s"] - 1
            errs[tool].append(e)
            cells.append(f"{t:.2f} | {e:+.1%}")
        print(f"| {model} {mode} | {c['step_s']:.2f} | " + " | ".join(cells) + " |")
    print()
    for tool, e in errs.items():
        worst = max(e, key=abs)
        print(f"{tool}: mean |error| {statistics.mean(map(abs, e)):.1%}, max {worst:+.1%}")

    print("\nMemory per GPU, sequence parallelism + selective recomputation (Figure 1; GiB):\n")
    print("| model | params+opt profiled | Calculon | bandwise | activations profiled | Calculon | bandwise |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    merr: dict[str, list[float]] = {"calculon": [], "bandwise": []}
    runs, _ = load_runs(None)
    by_id = {r["id"]: r for r in runs}
    for model, rid in MODELS.items():
        mem = by_id[rid]["reported"]["memory_gib"]
        po, act = mem["params_and_optimizer_state"], mem["activations_selective_sp"]
        ce = calc[f"{model}/fig1/seqsel"]
        est = results[f"{model}/seqsel"].estimate
        ours_po = est.memory_gib["params"] + est.memory_gib["grads_optimizer"]
        ours_act = est.memory_gib["activations"]
        for tool, a, b in (("calculon", ce["par_opt_gib"], ce["act_gib"]), ("bandwise", ours_po, ours_act)):
            merr[tool] += [a / po - 1, b / act - 1]
        print(f"| {model} | {po:.2f} | {ce['par_opt_gib']:.2f} ({ce['par_opt_gib'] / po - 1:+.1%}) | {ours_po:.2f} ({ours_po / po - 1:+.1%}) | "
              f"{act:.2f} | {ce['act_gib']:.2f} ({ce['act_gib'] / act - 1:+.1%}) | {ours_act:.2f} ({ours_act / act - 1:+.1%}) |")
    print()
    for tool, e in merr.items():
        print(f"{tool} memory: mean |error| {statistics.mean(map(abs, e)):.1%}, max {max(e, key=abs):+.1%}")


if __name__ == "__main__":
    main()
