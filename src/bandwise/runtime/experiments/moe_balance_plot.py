"""The moe-balance figure: MaxVio_batch against step per router, and validation loss per router."""

from __future__ import annotations

from bandwise.errors import BandwiseError
from bandwise.files import save_figure
from bandwise.runtime.experiments.moe_balance import Summary, miniature_deepseekmoe


def _smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average, so per-step sampling noise does not hide the trend."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot(summary: Summary, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import ScalarFormatter
    except ImportError as exc:
        raise BandwiseError(f"--plot needs matplotlib ({exc}); install it with: pip install 'bandwise[plot]'") from exc
    names = list(summary.means)
    if not names:
        raise BandwiseError("nothing to plot: the experiment ran no router")
    spec = miniature_deepseekmoe(summary.config.seq_len)
    window = max(1, summary.config.steps // 50)
    fig, (ax_curve, ax_bar) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    for name in names:
        curve = _smooth(summary.mean_curve(name), window)
        ax_curve.plot(range(1, len(curve) + 1), curve, label=name, lw=1.4)
    ax_curve.set_yscale("log")
    ax_curve.yaxis.set_major_formatter(ScalarFormatter())
    ax_curve.yaxis.set_minor_formatter(ScalarFormatter())
    ax_curve.set_xlabel("optimizer step")
    ax_curve.set_ylabel("MaxVio_batch")
    ax_curve.set_title(f"Load imbalance in training (mean of MoE layers and {summary.config.seeds} seed(s), {window}-step average)", fontsize=9)
    ax_curve.legend(fontsize=8)
    ax_curve.grid(alpha=0.3, which="both")

    means = [summary.means[n]["val_loss"] for n in names]
    ax_bar.bar(range(len(names)), means, color="#4C72B0", alpha=0.8)
    for i, name in enumerate(names):
        seeds = [r.val_loss for r in summary.by_router(name)]
        ax_bar.scatter([i] * len(seeds), seeds, color="black", s=10, zorder=3)
    low = min(r.val_loss for r in summary.runs)
    high = max(r.val_loss for r in summary.runs)
    pad = max(0.01, (high - low) * 0.5)
    ax_bar.set_ylim(low - pad, high + pad)  # differences are a few per mille; a zero-based axis hides them
    ax_bar.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax_bar.set_ylabel("validation loss (nats/byte)")
    ax_bar.set_title("Validation loss (bars: mean, dots: seeds)", fontsize=9)
    ax_bar.grid(alpha=0.3, axis="y")
    fig.suptitle(f"Loss-free balancing vs auxiliary loss (Wang et al. 2024) — {summary.config.steps} steps, sigmoid top-{spec.top_k} of {spec.experts} routed + {spec.shared_experts} shared experts", fontsize=10)
    fig.tight_layout()
    try:
        save_figure(fig, path, what="the plot", dpi=120)
    finally:
        plt.close(fig)
