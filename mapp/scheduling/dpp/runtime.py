"""DPP's ``forward_backward_func``: megatron-core's pipeline step, run in a dynamic order.

A drop-in for what ``megatron.core.pipeline_parallel.get_forward_backward_func()`` returns
(same keyword arguments, same return value: the loss dicts of the last stage, in data order).
Each step:

1. **Plan.** One rank of the model replica (the first stage's first TP rank) measures every
   microbatch's cost (``cost_of(batch)``, e.g. its sequence length, or the ``microbatch_costs``
   given to the call), plans the microbatch order with the simulator's planner
   (``plan_dynamic``: megatron's interleaved order over the best microbatch order found on the
   known costs) and broadcasts it. Without costs every rank knows the plan already: data order.
2. **Run.** Each rank follows its part of the plan. When the plan's next task is not ready
   (its activation or gradient has not arrived) it runs another ready task from the next few
   of its plan, chosen by the policy: depth-first (backwards first: microbatches finish and
   free memory), breadth-first (the shallowest forward: more microbatches in flight), or
   adaptive (breadth-first while the stage holds fewer activations than its budget). A
   forward never takes the stage past the activations megatron's own schedule would hold.
   The choice is ``mapp.scheduling.simulate.policies.Dynamic``, the simulator's own.
3. **Agree.** The TP peers of a stage choose from the tasks ready on all of them (a MIN
   all-reduce of readiness flags), so they run every task, and its TP collectives, together.
4. **Finish** as megatron does: gradient sync enabled for each chunk's last backward,
   ``finalize_model_grads_func``, the loss dicts in data order.

Messages are tagged by (step, kind, virtual stage, microbatch) and may arrive in any order
(``mapp.transport``); every receive of the step is posted when it starts. With mapp's capture
(``tracer``), forward and backward steps are traced by the capture's own hooks (megatron's
``forward_step``/``backward_step`` are called through the module, so each carries its
microbatch and chunk) and every message is a ``send``/``recv`` span (``cat: "p2p"``, lane
``comm``): a send from its post until this rank saw it delivered, a receive from the moment
the rank was free for the task that needs it until the tensor was in hand (its wait). Their
``seq`` numbers each message of a pair of ranks in one order both ends know (the tags of the
step, sorted), not in the order a dynamic schedule happened to run them, so that the
analysis pairs every send with its receive. Each microbatch's
data is read in data order whatever order it runs in (``MicrobatchData``), so DPP computes
exactly what megatron's schedule computes; only the order in which gradients are summed over
microbatches differs (floating-point rounding).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from mapp.scheduling.dpp.groups import ControlGroups, control_groups
from mapp.scheduling.dpp.messages import BACKWARD, FORWARD, StepMessages
from mapp.scheduling.dpp.microbatches import MicrobatchData
from mapp.scheduling.dpp.planner import POLICIES, StepShape, plan_step
from mapp.scheduling.simulate import DynamicPlan
from mapp.scheduling.simulate.engine import RankView

__all__ = ["DynamicPipeline", "POLICIES"]


class DynamicPipeline:
    """``forward_backward_func`` that schedules pipeline tasks dynamically (see the module doc).

    ``policy``: ``depth``, ``breadth`` or ``adaptive``. ``memory_budget``: adaptive's breadth-first
    limit in activations of one microbatch of one chunk (default: one under megatron's peak).
    ``cost_of(batch) -> float``: a microbatch's relative cost from its data (read on the first
    stage before the step). ``window``: how far ahead of the plan a stage may look for a ready
    task. ``plan_budget_s``: the planner's time limit per step. ``transport``: a
    ``mapp.transport`` transport (default: made at the first step, collectively, by
    ``make_transport(backend=transport_backend)``: ``auto`` is shared memory and CUDA IPC on
    one host, ``dist`` torch.distributed, NCCL on GPUs). ``tracer``:
    mapp's capture tracer, to trace the step's messages.
    """

    def __init__(self, policy: str = "adaptive", *, memory_budget: int | None = None,
                 cost_of: Callable[[Any], float] | None = None, window: int = 2,
                 plan_budget_s: float = 0.02, transport=None, transport_backend: str = "auto", seed: int = 0,
                 tracer=None):
        if policy not in POLICIES:
            from mapp.errors import InputError

            raise InputError(f"unknown DPP policy {policy!r}", "choose one of " + ", ".join(POLICIES))
        self.policy = policy
        self.memory_budget = memory_budget
        self.cost_of = cost_of
        self.window = window
        self.plan_budget_s = plan_budget_s
        self.transport = transport
        self.transport_backend = transport_backend
        self._own_transport = transport is None
        self.seed = seed
        self.tracer = tracer
        self.p2p_base: dict[tuple[int, int], int] = {}
        """Per (src, dst) global ranks: how many messages earlier steps sent (seq of the next step's first)."""
        self.groups: ControlGroups | None = None
        self.steps = 0
        self.last_order: list[int] | None = None
        """The microbatch order the last step planned (for logs and tests)."""
        self.last_tasks: list[tuple[str, int, int]] = []
        """The tasks this rank ran in the last step, in order: (kind, virtual stage, microbatch)."""

    def __call__(self, *, forward_step_func, data_iterator, model, num_microbatches: int, seq_length: int,
                 micro_batch_size: int, decoder_seq_length: int | None = None, forward_only: bool = False,
                 collect_non_loss_data: bool = False, first_val_step: bool | None = None,
                 adjust_tensor_shapes_fn=None, p2p_communicator=None, pg_collection=None,
                 force_all_reduce: bool = False, microbatch_costs: Sequence[float] | None = None):
        from megatron.core import parallel_state as ps
        from megatron.core.pipeline_parallel.schedules import get_forward_backward_func

        chunks = model if isinstance(model, list) else [model]
        pp = ps.get_pipeline_model_parallel_world_size()
        if pp == 1 or forward_only:
            # Nothing to reorder without a pipeline; a forward-only pass has no backward to
            # interleave, so megatron's own schedule is already as good.
            return get_forward_backward_func()(
                forward_step_func=forward_step_func, data_iterator=data_iterator, model=model,
                num_microbatches=num_microbatches, seq_length=seq_length, micro_batch_size=micro_batch_size,
                decoder_seq_length=decoder_seq_length, forward_only=forward_only,
                collect_non_loss_data=collect_non_loss_data, first_val_step=first_val_step,
                adjust_tensor_shapes_fn=adjust_tensor_shapes_fn, force_all_reduce=force_all_reduce,
            )
        if p2p_communicator is not None or pg_collection is not None:
            raise ValueError("DPP uses megatron-core's parallel_state groups; custom p2p_communicator/"
                             "pg_collection are not supported")
        self._setup()
        iterators = data_iterator if isinstance(data_iterator, list) else [data_iterator]
        data = [MicrobatchData(it) for it in iterators]
        step = _Step(self, chunks, data, forward_step_func, num_microbatches, collect_non_loss_data,
                     first_val_step, force_all_reduce)
        plan = self._plan(step, microbatch_costs)
        self.last_order = plan.order
        losses = step.run(plan)
        self.last_tasks = step.ran
        self.steps += 1
        return losses

    def _setup(self) -> None:
        if self.groups is None:
            self.groups = control_groups()
        if self.transport is None:
            from mapp.transport import make_transport

            self.transport = make_transport(backend=self.transport_backend)

    def close(self) -> None:
        """Close the transport this pipeline made (collective: every rank, before
        ``destroy_process_group``; a transport given to it is the caller's to close)."""
        if self._own_transport and self.transport is not None:
            self.transport.close()
            self.transport = None

    def _plan(self, step: "_Step", microbatch_costs: Sequence[float] | None) -> DynamicPlan:
        config = step.config
        group = getattr(config, "microbatch_group_size_per_vp_stage", None) or step.pp
        shape = StepShape(pp=step.pp, chunks=len(step.chunks), microbatches=step.microbatches,
                          group=min(group, step.microbatches), policy=self.policy,
                          memory_budget=self.memory_budget, window=self.window)
        if microbatch_costs is None and self.cost_of is None:
            return plan_step(shape, None, seed=self.seed + self.steps)   # the same on every rank
        groups = self.groups
        order = torch.zeros(step.microbatches + 1, dtype=torch.int64)
        if dist.get_rank() == groups.planner:
            costs = microbatch_costs
            if costs is None:
                costs = [float(self.cost_of(step.data[0].peek(m))) for m in range(step.microbatches)]
            plan = plan_step(shape, costs, seed=self.seed + self.steps, budget_s=self.plan_budget_s)
            order[0] = plan.window
            order[1:] = torch.tensor(plan.order)
        if len(groups.model_ranks) > 1:
            dist.broadcast(order, src=groups.planner, group=groups.model)
        return DynamicPlan(shape.config, order[1:].tolist(), int(order[0]))


class _Step:
    """One training step on one rank: the tasks of its chunks, their messages and tensors."""

    def __init__(self, owner: DynamicPipeline, chunks: list, data: list[MicrobatchData], forward_step_func,
                 microbatches: int, collect_non_loss_data: bool, first_val_step, force_all_reduce: bool):
        from megatron.core import parallel_state as ps
        from megatron.core.utils import get_model_config, get_model_type

        self.owner = owner
        self.chunks = chunks
        self.data = data
        self.forward_step_func = forward_step_func
        self.microbatches = microbatches
        self.collect_non_loss_data = collect_non_loss_data
        self.first_val_step = first_val_step
        self.force_all_reduce = force_all_reduce
        self.config = get_model_config(chunks[0])
        self.model_type = get_model_type(chunks[0])
        self.pp = ps.get_pipeline_model_parallel_world_size()
        self.rank = ps.get_pipeline_model_parallel_rank()
        pp_group = ps.get_pipeline_model_parallel_group()
        self.pp_ranks = [dist.get_global_rank(pp_group, i) for i in range(self.pp)]
        self.stages = self.pp * len(chunks)
        self.cp_size = ps.get_context_parallel_world_size()
        self.ran: list[tuple[str, int, int]] = []
        self.messages = StepMessages(step=owner.steps, stages=self.stages, microbatches=microbatches,
                                     rank_of=self.rank_of, me=dist.get_rank(), counts=owner.p2p_base,
                                     tracer=owner.tracer)

    # -- where things are ------------------------------------------------------------------

    def chunk_of(self, stage: int) -> int:
        return stage // self.pp

    def rank_of(self, stage: int) -> int:
        """Global rank that runs virtual stage ``stage`` in this pipeline."""
        return self.pp_ranks[stage % self.pp]

    # -- the step --------------------------------------------------------------------------

    def run(self, plan: DynamicPlan) -> list:
        transport, groups, msgs = self.owner.transport, self.owner.groups, self.messages
        policy = plan.policy()
        mbs, stages, me = self.microbatches, self.stages, self.rank
        mine = [c * self.pp + me for c in range(len(self.chunks))]
        recvs: dict[tuple[str, int, int], Any] = {}
        for stage in mine:
            for m in range(mbs):
                if stage > 0:
                    recvs["F", stage, m] = transport.irecv(self.rank_of(stage - 1), msgs.tag(FORWARD, stage, m))
                if stage < stages - 1:
                    recvs["B", stage, m] = transport.irecv(self.rank_of(stage + 1), msgs.tag(BACKWARD, stage, m))
        sends: list = []
        saved: dict[tuple[int, int], tuple] = {}
        stores: list[list] = [[] for _ in range(mbs)]
        backwards_left = {stage: mbs for stage in mine}
        forwards_done = {stage: 0 for stage in mine}
        tokens = None
        view = RankView(memory=[0] * self.pp)
        plan_tasks = policy.plans[me]
        total = len(plan_tasks)

        def post(tensor, stage: int, kind: int, m: int, chunk: int) -> None:
            dst, tag = self.rank_of(stage), msgs.tag(kind, stage, m)
            t0 = msgs.stamp()
            sends.append(transport.isend(tensor, dst, tag))
            msgs.sent(t0, tensor, dst=dst, tag=tag, direction="next" if kind == FORWARD else "prev",
                      microbatch=m, chunk=chunk)

        def receive(task, src_stage: int, kind: int, chunk: int, free):
            _, stage, m = task
            tensor = _received(recvs.pop(task))
            msgs.received(free, tensor, src=self.rank_of(src_stage), tag=msgs.tag(kind, stage, m),
                          direction="prev" if kind == FORWARD else "next", microbatch=m, chunk=chunk)
            return tensor

        no_sync = _NoSync(self.config)
        no_sync.disable()
        try:
            free = msgs.stamp()   # when this rank became free for its next task (a receive waits from here)
            while len(self.ran) < total:
                task = self._choose(policy, plan_tasks, recvs, view, groups)
                if task is None:   # nothing ready on every TP peer: wait for the plan's next task
                    head = _first_unstarted(policy, plan_tasks, me)
                    if head not in recvs:   # the plan's next task waits for nothing: a bug
                        raise RuntimeError(f"DPP is stuck at {head} on pipeline rank {me}")
                    recvs[head].wait()
                    continue
                kind, stage, m = task
                chunk = self.chunk_of(stage)
                if kind == "F":
                    inp = receive(task, stage - 1, FORWARD, chunk, free) if stage > 0 else None
                    if inp is not None:
                        inp.requires_grad_()
                    out, num_tokens = self._forward(chunk, stage, m, inp, stores[m],
                                                    first=forwards_done[stage] == 0)
                    forwards_done[stage] += 1
                    tokens = num_tokens if tokens is None else tokens + num_tokens
                    if stage < stages - 1:
                        post(out.detach(), stage + 1, FORWARD, m, chunk)
                    saved[stage, m] = (inp, out)
                    view.memory[me] += 1
                else:
                    grad_out = receive(task, stage + 1, BACKWARD, chunk, free) if stage < stages - 1 else None
                    inp, out = saved.pop((stage, m))
                    backwards_left[stage] -= 1
                    last = backwards_left[stage] == 0
                    if last and self.config.grad_sync_func is None:
                        no_sync.enable()     # megatron syncs a chunk's grads in its last backward
                    grad_in = self._backward(inp, out, grad_out)
                    no_sync.disable()
                    if stage > 0:
                        post(grad_in, stage - 1, BACKWARD, m, chunk)
                    view.memory[me] -= 1
                self.ran.append(task)
                sends = [w for w in sends if not w.test()]
                free = msgs.stamp()
            for work in sends:
                work.wait()
        finally:
            no_sync.enable()
        msgs.advance()
        self._finish(tokens)
        return [item for store in stores for item in store]

    def _choose(self, policy, plan_tasks, recvs, view: RankView, groups: ControlGroups):
        """The next task, the same on every TP peer; ``None`` when nothing is ready on all."""
        me = self.rank
        start = _first_index(policy, plan_tasks, me)
        window = plan_tasks[start:start + policy.window + 1]
        flags = [self._ready(task, recvs, policy.started[me]) for task in window]
        if groups.tp is not None and window:
            agreed = torch.tensor(flags, dtype=torch.uint8)
            dist.all_reduce(agreed, op=dist.ReduceOp.MIN, group=groups.tp)
            flags = [bool(f) for f in agreed.tolist()]
        ready = {task for task, ok in zip(window, flags) if ok}
        return policy.pick(me, 0.0, ready, view)

    def _ready(self, task, recvs, started) -> bool:
        if task in started:
            return False
        kind, stage, m = task
        work = recvs.get(task)
        if kind == "F":
            return stage == 0 or (work is not None and work.test())
        if ("F", stage, m) not in started:
            return False
        return stage == self.stages - 1 or (work is not None and work.test())

    def _forward(self, chunk: int, stage: int, m: int, inp, store: list, *, first: bool):
        from megatron.core.pipeline_parallel import schedules

        # Looked up at call time: mapp's capture wraps the module's forward_step.
        return schedules.forward_step(
            self.forward_step_func, self.data[chunk].view(m) if chunk < len(self.data) else None,
            self.chunks[chunk], self.microbatches, inp, store, self.config, self.cp_size,
            collect_non_loss_data=self.collect_non_loss_data, checkpoint_activations_microbatch=None,
            is_first_microbatch=schedules.check_first_val_step(self.first_val_step, False, first),
            current_microbatch=m, vp_stage=chunk if len(self.chunks) > 1 else None,
            is_last_stage=stage == self.stages - 1,
        )

    def _backward(self, inp, out, grad_out):
        from megatron.core.pipeline_parallel import schedules

        return schedules.backward_step(inp, out, grad_out, self.model_type, self.config)

    def _finish(self, tokens) -> None:
        config = self.config
        if config.grad_sync_func is not None:
            syncs = config.grad_sync_func if isinstance(config.grad_sync_func, list) else [config.grad_sync_func] * len(self.chunks)
            for sync, chunk in zip(syncs, self.chunks):
                sync(chunk.parameters())
        if config.finalize_model_grads_func is not None:
            config.finalize_model_grads_func(
                self.chunks, tokens if config.calculate_per_token_loss else None,
                pg_collection=_pg_collection(), force_all_reduce=self.force_all_reduce,
            )


def _received(work) -> torch.Tensor:
    tensor = work.wait()
    if tensor is None:
        raise RuntimeError("a pipeline message arrived empty")
    return tensor


def _first_index(policy, plan_tasks, rank: int) -> int:
    i = policy.head[rank]
    started = policy.started[rank]
    while i < len(plan_tasks) and plan_tasks[i] in started:
        i += 1
    return i


def _first_unstarted(policy, plan_tasks, rank: int):
    i = _first_index(policy, plan_tasks, rank)
    return plan_tasks[i] if i < len(plan_tasks) else None


class _NoSync:
    """megatron's ``config.no_sync_func`` (one per chunk or one for all), entered and left."""

    def __init__(self, config):
        func = config.no_sync_func
        if isinstance(func, list):
            funcs = list(func)

            def func():
                stack = contextlib.ExitStack()
                for f in funcs:
                    stack.enter_context(f())
                return stack
        self.func = func or contextlib.nullcontext
        self.context = None

    def disable(self) -> None:
        if self.context is None:
            self.context = self.func()
            self.context.__enter__()

    def enable(self) -> None:
        if self.context is not None:
            self.context.__exit__(None, None, None)
            self.context = None


def _pg_collection():
    """The process groups megatron's interleaved schedule hands ``finalize_model_grads``."""
    from megatron.core import parallel_state as ps
    from megatron.core.process_groups_config import ProcessGroupCollection

    pgs = ProcessGroupCollection()
    pgs.tp = ps.get_tensor_model_parallel_group()
    pgs.cp = ps.get_context_parallel_group()
    pgs.embd = ps.get_embedding_group(check_initialized=False)
    pgs.pos_embd = ps.get_position_embedding_group(check_initialized=False)
    pgs.pp = ps.get_pipeline_model_parallel_group()
    pgs.dp_cp = ps.get_data_parallel_group(with_context_parallel=True, partial_data_parallel=False)
    return pgs
