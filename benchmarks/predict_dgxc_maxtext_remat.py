"""Prediction for DGX Cloud Benchmarking's MaxText rows (Llama 2 70B of release v24.11.1, Llama 3 70B of v25.04, on
H100), made before the data states the remat policy their scripts run: today the rows leave `recompute` null
("remat_policy=custom (offload/save policy not stated in the README)") and the completion takes full recomputation.

What the source says (NVIDIA/dgxc-benchmarking maxtext/configure.sh, the script every run of the recipe sources):
- v24.11.1 (35a9aecc8d5b): BASE_CONFIG passes `remat_policy=${POLICY}` and then CONFIG_OVERRIDES, which for bf16
  are `remat_policy=custom query_proj=device value_proj=device key_proj=device qkv_proj=device out_proj=device
  mlpwo=device` and for fp8 the same without `mlpwo`; MaxText takes the later of two equal keys, so the policy is
  custom with those tensors kept on the device (the same tensors as POLICY, save_dot_except_mlpwi /
  save_dot_except_mlp);
- v25.04 (741c886025a7): `POLICY="save_qkv_proj"`, no override.

    PYTHONPATH=src:benchmarks python3 benchmarks/predict_dgxc_maxtext_remat.py
"""

from __future__ import annotations

from error_figures import restated

V24_BF16 = "remat_policy: custom; query_proj=device, value_proj=device, key_proj=device, qkv_proj=device, out_proj=device, mlpwo=device"
V24_FP8 = "remat_policy: custom; query_proj=device, value_proj=device, key_proj=device, qkv_proj=device, out_proj=device"
V25 = "remat_policy: save_qkv_proj"


def policy(run_id: str) -> str | None:
    if run_id.startswith("dgxc_v24111_h100_maxtext_"):
        return V24_FP8 if "_fp8_" in run_id else V24_BF16
    if run_id.startswith("dgxc_v2504_h100_maxtext_"):
        return V25
    return None


def state(run: dict) -> bool:
    text = policy(run["id"])
    if text is None or run["parallelism"].get("recompute") is not None:
        return False
    run["parallelism"]["recompute"] = text
    return True


def main() -> None:
    restated(state, "the MaxText rows")


if __name__ == "__main__":
    main()
