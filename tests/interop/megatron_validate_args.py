"""Megatron-LM's own argument checks judge the emitted Megatron jobs, from a checkout of Megatron-LM.

    python tests/interop/megatron_validate_args.py [CHECKOUT]        # every Megatron case; a table and the pass count
    python megatron_validate_args.py --check CHECKOUT < [{"argv": [...], "devices": N, "arch_major": M, "env": {...}}, ...]

Megatron-LM's training package (megatron/training: parse_args, validate_args, the config builders)
is not in the Megatron-Core wheel, so this runs only where a checkout is given (the argument, or
MEGATRON_LM in the environment); without one it says so and exits 0. With `--check`, each job runs
what `pretrain_gpt.py` runs before it builds the model, in this process, with the checkout's
`megatron` package first on the path:

    parse_args()  ->  validate_args(args, {'tokenizer_type': 'GPT2BPETokenizer'})
    ->  gpt_config_from_args(args)   (core_transformer_config_from_args: TransformerConfig.__post_init__)
    ->  pretrain_cfg_container_from_args(args, model_cfg)   (the DDP, optimizer and training configs)

(pretrain_gpt.py, __main__; megatron/training/arguments.py, parse_and_validate_args, whose
set_global_variables builds the tokenizer and loggers and checks nothing). sys.argv is the job's
ARGS plus the flags its last line asks the user to add (USER_FLAGS: mock data, a null tokenizer, an
iteration count and a learning rate); the environment is the one the job script sets
(CUDA_DEVICE_MAX_CONNECTIONS) and the one torchrun sets (WORLD_SIZE = the job's devices, RANK 0).

Stood in for, because this machine has no GPU and no Transformer Engine (everything else is the
checkout's own code):
- the device's compute capability (`torch.cuda.get_device_capability`, and validate_args'
  `get_device_arch_version`): the exported cluster's GPU (export/megatron.py, ARCH_MAJOR);
- Transformer Engine's presence (`is_te_min_version` and the fused RoPE kernel
  `fused_apply_rotary_pos_emb` that TransformerConfig asks for): a job runs where TE is installed,
  as in NVIDIA's PyTorch containers;
- `typing.override` on Python 3.11 (megatron/training/models/hybrid.py imports it; Python 3.12 has
  it): typing_extensions' same decorator.

Each answer is {"ok": true} or {"ok": false, "error": "..."} with Megatron-LM's message.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
USER_FLAGS = ["--mock-data", "--tokenizer-type", "NullTokenizer", "--train-iters", "100", "--lr", "3e-4"]
"""What the emitted job asks the user to add after the file ("data, tokenizer, optimizer and checkpoint flags")."""


def checkout(given: str | None = None) -> Path | None:
    """The Megatron-LM checkout to run, or None: the argument, else $MEGATRON_LM."""
    path = given or os.environ.get("MEGATRON_LM")
    if not path:
        return None
    root = Path(path)
    return root if (root / "megatron" / "training" / "arguments.py").is_file() else None


def commit(root: Path) -> str:
    run = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return run.stdout.strip() or "unknown"


def validate(root: Path, jobs: list[dict]) -> list[dict]:
    """Each job judged by Megatron-LM at `root`, in a process of its own (`--check`)."""
    run = subprocess.run([sys.executable, __file__, "--check", str(root)], input=json.dumps(jobs), capture_output=True,
                         text=True, timeout=1800, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"Megatron-LM's checks did not run: {run.stderr[-2000:]}")
    return json.loads(run.stdout)


# ------------------------------------------------------------------ in the checkout's process

def _stand_ins(arch_major: int) -> None:
    """The GPU and Transformer Engine this machine lacks (see the module docstring)."""
    import torch
    from megatron.core.models.common.embeddings import rope_utils
    from megatron.core.transformer import transformer_config
    from megatron.training import arguments

    torch.cuda.get_device_capability = lambda *a, **k: (arch_major, 0)
    arguments.get_device_arch_version = lambda: arch_major
    transformer_config.is_te_min_version = lambda *a, **k: True
    if rope_utils.fused_apply_rotary_pos_emb is None:
        rope_utils.fused_apply_rotary_pos_emb = lambda *a, **k: None


def job_environment(job: dict) -> None:
    """The environment the job's launch script sets (a None value unsets), as rank 0 of its world."""
    for name, value in job["env"].items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    os.environ.update(WORLD_SIZE=str(job["devices"]), RANK="0", LOCAL_RANK="0")


def _check_one(job: dict) -> dict:
    from megatron.training import arguments
    from megatron.training.argument_utils import (
        gpt_config_from_args,
        hybrid_config_from_args,
        pretrain_cfg_container_from_args,
    )

    _stand_ins(int(job["arch_major"]))
    job_environment(job)
    entry = job.get("entry", "pretrain_gpt.py")
    sys.argv = [entry, *job["argv"], *USER_FLAGS]
    try:
        args = arguments.parse_args()
        arguments.validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})
        # pretrain_hybrid.py builds its config with hybrid_config_from_args, pretrain_gpt.py with gpt_config_from_args
        model_cfg = (hybrid_config_from_args if entry == "pretrain_hybrid.py" else gpt_config_from_args)(args)
        pretrain_cfg_container_from_args(args, model_cfg)
    except SystemExit as exc:  # argparse refuses a flag
        return {"ok": False, "error": f"parse_args exited {exc.code}"}
    except Exception as exc:  # noqa: BLE001 (every refusal is an answer)
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    return {"ok": True}


def check(root: Path) -> None:
    answer_to, sys.stdout = sys.stdout, sys.stderr  # Megatron-LM prints its arguments; stdout carries the answers
    if sys.version_info < (3, 12):
        import typing

        import typing_extensions

        typing.override = typing_extensions.override
    sys.path.insert(0, str(root))
    import warnings

    warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed", on every import
    with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet):  # validate_args prints every argument of every job
        answers = [_check_one(job) for job in json.load(sys.stdin)]
    json.dump(answers, answer_to)


# ------------------------------------------------------------------ the cases

def megatron_job(text: str, cluster, devices: int) -> dict:
    """A job of `check` from an emitted Megatron-LM script."""
    sys.path.insert(0, str(HERE))
    import judges

    from bandwise.export import megatron as mg

    major = mg.arch_major(cluster)
    entry = "pretrain_hybrid.py" if "pretrain_hybrid.py" in text else "pretrain_gpt.py"
    return {"argv": mg.arguments(text), "devices": devices, "arch_major": 9 if major is None else major,
            "env": judges.job_environment(text), "entry": entry}


def cases() -> dict[str, dict]:
    """Every Megatron export of the interop matrix (tests/interop/test_matrix.py), of the planner's
    reference cases, and of rows 1 to 10 of their tables (`--engine megatron --pick N --emit`,
    tests/interop/test_pick.py), as jobs of `check`."""
    import tempfile

    sys.path.insert(0, str(HERE))
    import test_matrix
    import test_pick

    from bandwise.errors import BandwiseError
    from bandwise.export import plan_and_export
    from bandwise.plan.search import SEARCH_ROWS
    from bandwise.plan.verdict import REFERENCE_CASES
    from bandwise.specs.registry import get_cluster, get_model

    jobs = {}
    with tempfile.TemporaryDirectory() as folder:
        user = test_matrix.write_user_cluster(Path(folder))
        for p in test_matrix.PLANS:
            c = test_matrix._plan(p, user, ("megatron",))
            ex = c.exports["megatron"]
            if not isinstance(ex, BandwiseError):
                jobs[p.id] = megatron_job(ex.text, c.cluster, p.devices)
    for model, cluster, devices, seq, batch in REFERENCE_CASES:
        m, clus = get_model(model).with_seq_len(seq), get_cluster(cluster)
        _, out = plan_and_export(m, clus, devices, batch, engines=("megatron",), model_source=model,
                                 max_rows=SEARCH_ROWS)  # as tests/interop/conftest.py plans them
        if not isinstance(out["megatron"], BandwiseError):
            jobs[f"reference {model}@{devices}x{cluster}"] = megatron_job(out["megatron"].text, clus, devices)
        for o in test_pick.picked((model, cluster, devices, seq, batch), "megatron", tuple(range(1, 11))):
            if o.code == 0:
                jobs[f"reference {model}@{devices}x{cluster} --pick {o.n}"] = megatron_job(o.out, clus, devices)
    return jobs


def report(jobs: dict[str, dict], answers: list[dict], width: int) -> int:
    """One line a job: ok, or FAIL with the first `width` characters of the engine's refusal; the number that passed."""
    for name, answer in zip(jobs, answers):
        print(f"{'ok  ' if answer['ok'] else 'FAIL'} {name}" + ("" if answer["ok"] else f": {answer['error'][:width]}"))
    return sum(a["ok"] for a in answers)


def main() -> None:
    if sys.argv[1:2] == ["--check"]:
        check(Path(sys.argv[2]))
        return
    root = checkout(sys.argv[1] if len(sys.argv) > 1 else None)
    if root is None:
        print("skipped: no Megatron-LM checkout (give its path, or set MEGATRON_LM)")
        return
    jobs = cases()
    answers = validate(root, list(jobs.values()))
    passed = report(jobs, answers, 300)
    print(f"Megatron-LM {commit(root)[:10]}: parse_args + validate_args + config builders passed {passed} of {len(answers)} jobs")
    sys.exit(0 if passed == len(answers) else 1)


if __name__ == "__main__":
    main()
