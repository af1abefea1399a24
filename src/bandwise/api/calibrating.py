"""The calibration half of the Python API: what `bandwise calibrate` does, from each kind of evidence.

`calibrate(...)` takes one of: profiler traces of a known layout (`traces`, with `strategy`, `model`,
`cluster`), measured runs in the validate schema (`runs`, `run_ids`), one job's log of a known layout
(`runs` with `strategy` and `model`), or the collectives timed under torchrun (`bench`). It returns the
calibration with the cluster and engine it was made against, which `write_files` folds into cluster and
engine files and a page.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from bandwise.api.inputs import model_spec
from bandwise.cost.calibrated import folded_cluster, folded_engine, preset_figures
from bandwise.cost.profiles import params_for
from bandwise.errors import BandwiseError
from bandwise.files import write_text_atomic
from bandwise.plan.calibrate import calibrate_log, calibrate_runs, measured_runs
from bandwise.report.calibration_page import calibration_page
from bandwise.specs.calibration import Calibration
from bandwise.specs.hardware import Cluster, cluster_to_file_dict
from bandwise.specs.registry import engine_for, get_cluster, get_engine
from bandwise.specs.strategy import Strategy


@dataclass(frozen=True, kw_only=True, slots=True)
class Calibrated:
    """A calibration and the cluster and engine it was fitted against."""

    calibration: Calibration
    cluster: Cluster
    engine: str


def calibrate(
    traces: list[str | Path] | None = None,
    *,
    runs: str | Path | None = None,
    run_ids: list[str] | None = None,
    strategy: Strategy | None = None,
    model: str | None = None,
    cluster: str | Cluster = "h100",
    engine: str | None = None,
    eager: bool | None = None,
    bench: bool = False,
) -> Calibrated | None:
    """The calibration the evidence identifies; None on the ranks of a bench other than rank 0."""
    if sum([bool(traces), runs is not None, bench]) > 1:
        raise BandwiseError("calibrate: give one kind of evidence: traces, --runs FILE or --bench")
    clus = cluster if isinstance(cluster, Cluster) else get_cluster(cluster)
    label = get_engine(engine_for(clus.device, engine)).label
    if traces:
        if strategy is None or model is None:
            raise BandwiseError("calibrate TRACE needs the job's layout: add --strategy plan.json, --model and --cluster")
        from bandwise.api.doctoring import calibrate_trace

        cal = calibrate_trace([str(t) for t in traces], strategy=strategy, model=model, cluster=clus, engine=engine, eager=eager)
    elif bench:
        from bandwise.doctor.bench import bench_calibration  # torch, only where collectives are timed

        found = bench_calibration(clus)
        if found is None:
            return None
        cal = found[0]
    elif runs is None:
        raise BandwiseError("calibrate needs evidence: profiler traces with --strategy, --runs FILE (measured runs of known layouts, "
                            "the validate runs schema), or --bench under torchrun")
    elif strategy is not None:  # one job's own log of a known layout
        if model is None:
            raise BandwiseError("calibrate --runs LOG --strategy needs the job's --model and --cluster")
        cal = calibrate_log(runs, strategy, model_spec(model, None), clus, label)
    else:
        cal = calibrate_runs(runs, run_ids, engine)
        clus = measured_runs(runs, run_ids, engine)[0].case.cluster
        label = cal.engine or label
    return Calibrated(calibration=cal, cluster=clus, engine=cal.engine or label)


def write_files(done: Calibrated, *, out: Path | None = None, cluster: Path | None = None, engine: Path | None = None,
                html: Path | None = None) -> None:
    """The calibration file, the cluster and engine files with it folded in, and its page, where asked for."""
    cal, clus, eng = done.calibration, done.cluster, get_engine(done.engine)
    if html is not None:
        write_text_atomic(html, calibration_page(cal.to_dict(), preset_figures(cal, clus, params_for(eng, clus.device))), what="the calibration page")
    if cluster is not None:
        write_text_atomic(cluster, yaml.safe_dump(cluster_to_file_dict(folded_cluster(clus, cal)), sort_keys=False), what="the calibrated cluster")
    if engine is not None:
        write_text_atomic(engine, yaml.safe_dump(folded_engine(eng, clus.device, cal).to_dict(), sort_keys=False), what="the calibrated engine")
    if out is not None:
        write_text_atomic(out, cal.to_yaml(), what="the calibration")
