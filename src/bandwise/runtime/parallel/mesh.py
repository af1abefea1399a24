"""Device meshes for one `Strategy`, and the runtime's own limits on it.

Ranks are laid out as torchtitan's `ParallelDims` does, outermost first:
(pp, dp_replicate, dp_shard, tp), so tensor-parallel peers are adjacent ranks (the fastest
links) and pipeline stages are farthest apart. Expert parallelism borrows `ep` ranks from
inside dp_shard: the same ranks viewed as (pp, dp_replicate, dp_shard/ep, ep, tp). Several
`DeviceMesh` objects over one rank array are built instead of flattening dims, because mesh
flattening is not public API in the torch versions we support.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from bandwise.errors import BandwiseError
from bandwise.runtime.layer_plan import unsupported
from bandwise.specs.model import ModelSpec
from bandwise.specs.schedules import FLOORS
from bandwise.specs.strategy import Strategy


def check_runtime_support(s: Strategy, model: ModelSpec) -> None:
    """What `Strategy.check` accepts but this runtime does not execute (yet), as one line each:
    layer kinds it does not build (`layer_plan.unsupported`), then layouts."""
    why = unsupported(model)
    if why:
        raise BandwiseError(why)
    if s.tp > 1 and model.mamba is not None:
        raise BandwiseError(
            f"tp={s.tp}: the trainer does not split Mamba-2 mixers over tensor parallelism (their packed input projection "
            "is not cut by heads); use tp=1 and give its ranks to dp_shard"
        )
    # the trainer's schedules are torch.distributed.pipelining's, with torch's floors on micro-batches
    floor = next((f for f in FLOORS["torch"] if f.schedule == s.schedule), None)
    if floor is not None and (why := floor.broken(s.microbatches, s.pp)):
        raise BandwiseError(why)
    if s.pp * s.virtual_stages > model.layers:
        raise BandwiseError(f"pp·virtual_stages = {s.pp * s.virtual_stages}: the trainer builds stages of whole layers, and {model.name} "
                            f"has {model.layers}; use at most {model.layers} stages")
    if s.cp > 1:
        raise BandwiseError(f"cp={s.cp}: the trainer does not run context parallelism; use cp=1 and give its ranks to dp_shard")
    if s.ep > 1 and s.dp_shard % s.ep:
        raise BandwiseError(
            f"ep={s.ep} must divide dp_shard={s.dp_shard}: the trainer places expert parallelism inside the dp_shard ranks "
            f"(expert parallelism over replicated data parallelism is planned but not executed); use dp_shard a multiple of {s.ep}"
        )
    if s.tp > 1 and model.n_kv_heads % s.tp:
        raise BandwiseError(f"tp={s.tp} must divide kv_heads={model.n_kv_heads} of {model.name} in the trainer (no key/value head replication); use tp dividing {model.n_kv_heads}")
    if s.tp > 1 and model.seq_len % s.tp:
        raise BandwiseError(
            f"tp={s.tp} must divide seq_len={model.seq_len} in the trainer (sequence parallelism shards the sequence "
            f"evenly); use a seq_len that is a multiple of {s.tp}"
        )
    if s.precision != "bf16":
        raise BandwiseError(f"precision={s.precision} is not executed by the trainer; use precision bf16")
    if s.zero_stage in (1, 2):
        raise BandwiseError(f"zero_stage={s.zero_stage}: the trainer shards with FSDP (dp_shard > 1) or replicates; use zero_stage 0 or dp_shard > 1 (plan with --engine bandwise)")


@dataclass(slots=True)
class Meshes:
    strategy: Strategy
    dense: DeviceMesh
    """(pp, dp_replicate, dp_shard, tp)."""
    dp_flat: DeviceMesh
    """(pp, dp, tp) with dp = dp_replicate·dp_shard: data sharding and router load sums."""
    expert: DeviceMesh | None
    """(pp, dp_replicate, dp_shard_mod_ep, ep, tp) when ep > 1."""

    @property
    def device_type(self) -> str:
        return self.dense.device_type

    def dp_rank(self) -> int:
        return self.dp_flat.get_local_rank("dp")

    def dp_group(self):
        return self.dp_flat.get_group("dp")

    def pp_rank(self) -> int:
        return self.dense.get_local_rank("pp")

    def pp_group(self):
        return self.dense.get_group("pp")

    def tp_mesh(self) -> DeviceMesh:
        return self.dense["tp"]

    def fsdp_mesh(self) -> DeviceMesh:
        s = self.strategy
        return self.dense["dp_replicate", "dp_shard"] if s.dp_replicate > 1 else self.dense["dp_shard"]

    def expert_fsdp_mesh(self) -> DeviceMesh | None:
        """Where expert weights are sharded/replicated: the data-parallel ranks outside the EP group."""
        s = self.strategy
        if self.expert is None:
            return self.fsdp_mesh() if s.dp > 1 else None
        if s.dp // s.ep == 1:
            return None
        return self.expert["dp_replicate", "dp_shard_mod_ep"] if s.dp_replicate > 1 else self.expert["dp_shard_mod_ep"]

    def ep_group(self):
        return self.expert.get_group("ep") if self.expert is not None else None

    def ep_rank(self) -> int:
        return self.expert.get_local_rank("ep") if self.expert is not None else 0

    def tied_group(self, last_pp_rank: int):
        """This rank's group of the pipeline ranks holding the first and the last stage (a tied
        embedding's two copies, `parallel/tied.py`), one per pipeline group; None where the last
        stage is on pipeline rank 0 (V-shaped schedules). `dist.new_group` is collective: every
        rank makes every pair, in the same order."""
        if last_pp_rank == 0:
            return None
        mine = None
        for column in self.dense.mesh.reshape(self.strategy.pp, -1).T.tolist():
            pair = [column[0], column[last_pp_rank]]
            group = dist.new_group(pair)
            if dist.get_rank() in pair:
                mine = group
        return mine


def build_meshes(s: Strategy, device_type: str) -> Meshes:
    world = dist.get_world_size()
    if s.world_size != world:
        raise BandwiseError(f"strategy {s.describe()} needs {s.world_size} processes, launched with {world}")
    ranks = torch.arange(world)
    dense = DeviceMesh(device_type, ranks.reshape(s.pp, s.dp_replicate, s.dp_shard, s.tp), mesh_dim_names=("pp", "dp_replicate", "dp_shard", "tp"))
    dp_flat = DeviceMesh(device_type, ranks.reshape(s.pp, s.dp, s.tp), mesh_dim_names=("pp", "dp", "tp"))
    expert = None
    if s.ep > 1:
        expert = DeviceMesh(
            device_type,
            ranks.reshape(s.pp, s.dp_replicate, s.dp_shard // s.ep, s.ep, s.tp),
            mesh_dim_names=("pp", "dp_replicate", "dp_shard_mod_ep", "ep", "tp"),
        )
    return Meshes(strategy=s, dense=dense, dp_flat=dp_flat, expert=expert)
