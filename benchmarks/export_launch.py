"""Issue 36's thirteen export failures before and after: each command run by the CLI of two
checkouts, the job it prints judged by the engine's own checks (tests/interop/judges.py).

    python benchmarks/export_launch.py BEFORE_SRC MAXTEXT_WHEEL_DIR > rows.json

BEFORE_SRC is the `src` folder of the earlier checkout (`git archive 47edac1 src | tar -x -C
before/`); the after side is this checkout. MAXTEXT_WHEEL_DIR is MaxText 0.2.5's wheel unpacked
(`pip download --no-deps --only-binary=:all: --python-version 3.12 maxtext==0.2.5`, then unzip).
Run with this checkout's `src` on PYTHONPATH and the `interop` extra installed.
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import yaml

HERE = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "tests" / "interop"))
import judges

from bandwise.export import megatron as mg
from bandwise.specs.registry import get_cluster, get_model

SRC = {"before": sys.argv[1], "after": str(HERE / "src")}
HF = str(HERE / "tests" / "data" / "hf")
ROOT = pathlib.Path(sys.argv[2])  # the unpacked MaxText wheel
short = pathlib.Path(tempfile.mkdtemp()) / "llama3-8b" / "config.json"
short.parent.mkdir()
cfg = json.loads(pathlib.Path(f"{HF}/Meta-Llama-3.1-8B/config.json").read_text())
cfg["num_hidden_layers"] = 16
short.write_text(json.dumps(cfg))

def run(which, args):
    env = dict(os.environ, PYTHONPATH=SRC[which])
    r = subprocess.run([sys.executable, "-m", "bandwise", *args], capture_output=True, text=True, env=env, check=False)
    return r.returncode, r.stdout, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""

def tt_check(out):
    try:
        c = judges.torchtitan_config(out)
        return f"TorchTitan parses it (disable_cuda_graphs={c.training.disable_cuda_graphs})"
    except AssertionError as e:
        return str(e)[:160]

def mg_check(out, model, cluster, n):
    m = get_model(model)
    try:
        judges.judge_megatron_text(out, m, get_cluster(cluster), n, None)
        return "validate_args rules and Megatron-Core configs pass"
    except AssertionError as e:
        return f"refused: {str(e)[:150]}"

def mx_check(out, n):
    [a] = judges.maxtext_validate(ROOT, [(out, n)])
    return "MaxText accepts it" if a["ok"] else "MaxText refuses: " + a["error"].split("\n")[1].strip()[:150] if "\n" in a["error"] else a["error"][:150]

def flags(out):
    return judges.parse_flags(mg.arguments(out))

CASES = []
def case(n, what, args, judge):
    CASES.append((n, what, args, judge))

case(1, "TorchTitan: pipelined llama3", ["plan", "--model", "llama3-8b", "--cluster", "h100", "--devices", "24", "--emit", "torchtitan"], lambda o: tt_check(o))
case(2, "Megatron: TP/CP on H100", ["plan", "--model", "llama3-70b", "--cluster", "h100", "--devices", "64", "--emit", "megatron"], lambda o: mg_check(o, "llama3-70b", "h100", 64))
case(3, "Megatron: Megatron-FSDP", ["plan", "--model", "llama3-8b", "--cluster", "h100", "--devices", "8", "--emit", "megatron"], lambda o: mg_check(o, "llama3-8b", "h100", 8))
case(5, "MaxText: 3 stages", ["plan", "--model", "llama3-8b", "--cluster", "h100", "--devices", "24", "--global-batch", "24", "--fix", "pp=3,micro_batch=3,cp=2", "--emit", "maxtext"], lambda o: mx_check(o, 24))
case(6, "MaxText: layout does not fit", ["plan", "--model", "llama3-8b", "--cluster", "h100", "--devices", "24", "--emit", "maxtext"], lambda o: next((l[2:] for l in o.splitlines() if l.startswith("# predicted for it")), ""))
case(6, "MaxText: layout does not fit (2)", ["plan", "--model", "llama3-8b", "--cluster", "h100", "--devices", "24", "--global-batch", "576", "--fix", "pp=3", "--emit", "maxtext"], lambda o: next((l[2:] for l in o.splitlines() if l.startswith("# predicted for it")), ""))
case(6, "Megatron: estimate of a layout that does not fit", ["estimate", "--model", "llama3-70b", "--dp-replicate", "8", "--global-batch", "64", "--emit", "megatron"], lambda o: next((l[2:] for l in o.splitlines() if l.startswith("# predicted")), ""))
case(7, "MaxText: DP with EP", ["plan", "--model", "mixtral-8x7b", "--cluster", "h100", "--devices", "64", "--emit", "maxtext"],
     lambda o: " ".join(l for l in o.splitlines() if l.startswith(("# runs", "dcn_expert", "ici_expert", "dcn_data", "ici_data", "dcn_fsdp", "ici_fsdp"))))
case(8, "Megatron: Llama 3 rope base", ["plan", "--model", "llama3-8b", "--cluster", "h100", "--devices", "8", "--emit", "megatron"], lambda o: f"--rotary-base {flags(o).get('--rotary-base')} --use-rope-scaling {'--use-rope-scaling' in flags(o)}")
case(9, "Megatron: Qwen3 QK norm", ["plan", "--model", f"{HF}/Qwen3-8B/config.json", "--cluster", "h100", "--devices", "8", "--emit", "megatron"], lambda o: f"--qk-layernorm {'--qk-layernorm' in flags(o)}")
case(10, "Megatron: Qwen2 QKV bias", ["plan", "--model", f"{HF}/Qwen2-7B/config.json", "--cluster", "h100", "--devices", "8", "--emit", "megatron"], lambda o: f"--add-qkv-bias {'--add-qkv-bias' in flags(o)}")
case(11, "Megatron: DeepSeek-V3 router", ["plan", "--model", "deepseek-v3", "--cluster", "h100", "--devices", "1024", "--emit", "megatron"], lambda o: f"score {flags(o).get('--moe-router-score-function', ['softmax (default)'])}, expert bias {'--moe-router-enable-expert-bias' in flags(o)}, scaling {flags(o).get('--moe-router-topk-scaling-factor')}")
case(11, "Megatron: Kimi K2 (config.json) router", ["plan", "--model", f"{HF}/Kimi-K2-Instruct/config.json", "--cluster", "h100", "--devices", "1024", "--emit", "megatron"], lambda o: f"score {flags(o).get('--moe-router-score-function', ['softmax (default)'])}, expert bias {'--moe-router-enable-expert-bias' in flags(o)}, scaling {flags(o).get('--moe-router-topk-scaling-factor')}")
case(12, "Megatron: MoE dispatcher", ["plan", "--model", "mixtral-8x7b", "--cluster", "h100", "--devices", "64", "--emit", "megatron"], lambda o: f"dispatcher {flags(o).get('--moe-token-dispatcher-type', ['allgather (default)'])}, grouped GEMM {'--moe-grouped-gemm' in flags(o)}")
case(13, "TorchTitan: 16-layer llama3-8b/config.json", ["plan", "--model", str(short), "--cluster", "h100", "--devices", "8", "--emit", "torchtitan"], lambda o: next((l.strip(" \\") for l in o.splitlines() if "--config" in l), ""))
case(13, "MaxText: 16-layer llama3-8b/config.json", ["plan", "--model", str(short), "--cluster", "h100", "--devices", "8", "--emit", "maxtext"], lambda o: f"model_name {yaml.safe_load(o).get('model_name')}, base_num_decoder_layers {yaml.safe_load(o).get('base_num_decoder_layers', '(32, from the model file)')}")

rows = []
for n, what, args, judge in CASES:
    res = {}
    for which in ("before", "after"):
        code, out, err = run(which, args)
        res[which] = f"exit {code}: " + (judge(out) if code == 0 else err.replace("bandwise: error: ", "")[:170])
    rows.append((n, what, "bandwise " + " ".join(a.replace(f"{HERE}/", "") for a in args).replace(str(short), "<tmp>/llama3-8b/config.json"), res["before"], res["after"]))
    print(rows[-1], file=sys.stderr, flush=True)
# --pick (4): five rows, two engines
for engine in ("torchtitan", "megatron"):
    res = {}
    for which in ("before", "after"):
        outs = [run(which, ["plan", "--model", "llama3-70b", "--cluster", "h100", "--devices", "64", "--pick", str(k), "--emit", engine]) for k in (1, 2, 3, 7, 9)]
        bodies = {"".join(l for l in o[1].splitlines(True) if not l.startswith("#")) or o[2] for o in outs}
        res[which] = f"exit codes {[o[0] for o in outs]}, {len(bodies)} distinct job(s) or refusals of 5"
    rows.append((4, f"--pick 1,2,3,7,9 --emit {engine}", f"bandwise plan --model llama3-70b --cluster h100 --devices 64 --pick N --emit {engine}", res["before"], res["after"]))
    print(rows[-1], file=sys.stderr, flush=True)
json.dump(rows, sys.stdout, indent=1)
