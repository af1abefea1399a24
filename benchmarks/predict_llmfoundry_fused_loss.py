"""Prediction of pricing llm-foundry's loss as the fused kernel its MPT model defaults to, made before the change.

llm-foundry's MPT model takes `loss_fn` from its config with the default `fused_crossentropy`: flash-attn's
`flash_attn.losses.cross_entropy.CrossEntropyLoss` (the xentropy CUDA kernel), and raises rather than fall back when
it is missing (`llmfoundry/models/mosaic_gpt/mosaic_gpt.py` at 300cc5c, the A100 tables; `llmfoundry/models/mpt/
modeling_mpt.py` at b2a43a1 and 5e85bd6, the H100 tables). The benchmark configs (`scripts/train/yamls/pretrain/
mpt-*.yaml`, read by `submit_benchmarks.py`) set no `loss_fn`; only the CPU and testing yamls choose
`torch_crossentropy`. The engine file says nothing of the loss, so a GPU run is priced with eager kernels
(`CROSS_ENTROPY_BYTES_EAGER`, 52 bytes a logit); the fused loss is `CROSS_ENTROPY_BYTES_FUSED` (6).

Prints, for llm-foundry's runs priced as now and with `fused_cross_entropy` on: the figures by device and by model,
the whole data set's, and the one-scalar pair figure of one model on one device.

    PYTHONPATH=src python3 benchmarks/predict_llmfoundry_fused_loss.py

It reproduces the recorded prediction at 0de92a6, the commit before the engine states the fused loss (5f7edf4);
from there on both columns price the fused loss.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import replace

from bandwise.cost.params import DEFAULT_PARAMS
from bandwise.plan import validate as V
from bandwise.plan.runs import load_runs
from error_figures import fig

SOURCE = "llmfoundry_mpt"


def main() -> None:
    runs, sources = load_runs()
    by_id = {r["id"]: r for r in runs}
    fused = replace(DEFAULT_PARAMS, fused_cross_entropy=True)
    base = {r.id: r.error for r in V.run_all(runs, sources=sources) if r.error is not None}
    after = dict(base)
    for r in runs:
        if r["source"] == SOURCE:
            res = V.predict(V.convert(r, sources), fused)
            after[r["id"]] = res.error
    for label, err in (("now", base), ("fused loss", after)):
        lf = {i: e for i, e in err.items() if by_id[i]["source"] == SOURCE}
        print(f"{label}:\n  all priced runs   {fig(list(err.values()))}")
        seen = [e for i, e in err.items() if by_id[i].get("first_sight")]
        print(f"  first-sight runs  {fig(seen)}")
        print(f"  {SOURCE}    {fig(list(lf.values()))}")
        for key, name in ((lambda r: r["hardware"]["accelerator"], "device"), (lambda r: r["model"]["name"], "model")):
            for k in sorted({key(by_id[i]) for i in lf}, key=str):
                print(f"    {name} {k:16s} {fig([e for i, e in lf.items() if key(by_id[i]) == k])}")
        groups = defaultdict(list)
        for i in lf:
            groups[(by_id[i]["hardware"]["accelerator"], by_id[i]["model"]["name"])].append(i)
        pairs = [(1 + lf[b]) / (1 + lf[a]) - 1 for ids in groups.values() for a, b in itertools.permutations(ids, 2)]
        print(f"  one-scalar pairs, one model on one device {fig(pairs)}")


if __name__ == "__main__":
    main()
