"""The coordinator on its own: one global order, no deadlock, any number of ranks.

Participants of a :class:`ThreadWorld` stand for processes; each hosts worker threads (virtual
ranks). A ready group's op is a real rendezvous of the participants hosting its members (a
``threading.Barrier``): two participants running two groups in opposite orders would wait on
each other until the barrier's timeout breaks the test. Every wait has a timeout, so a
deadlock fails a test in bounded time instead of hanging it.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from mapp.scheduling.fbd import Coordinator, DeadlockError, ThreadWorld
from mapp.scheduling.fbd.coordinator import table_layout

TIMEOUT = 30.0


class World:
    """``processes`` coordinators over ``groups``; virtual rank v lives on process v % processes."""

    def __init__(self, groups, ranks: int, processes: int, **kwargs):
        self.groups, self.processes = groups, processes
        self.home = {v: v % processes for v in range(ranks)}
        self.rounds = [[] for _ in range(processes)]
        self.runs = [[] for _ in range(processes)]
        hosts = [sorted({self.home[m] for m in g}) for g in groups]
        self.hosts = hosts
        self.barriers = [threading.Barrier(len(h), timeout=TIMEOUT) for h in hosts]
        self.net = ThreadWorld(processes, timeout=TIMEOUT)
        self.coords = [
            Coordinator(groups, [v for v in range(ranks) if self.home[v] == p], self.net.member(p),
                        execute=self._executor(p), on_round=self.rounds[p].append, **kwargs)
            for p in range(processes)
        ]

    def _executor(self, p):
        def execute(group, requests):
            self.runs[p].append(group)
            self.barriers[group].wait()  # every hosting process must be here for the same group
            for r in requests:
                r.result = (group, r.rank)

        return execute

    def start(self):
        for c in self.coords:
            c.start()
        return self

    def of(self, rank: int) -> Coordinator:
        return self.coords[self.home[rank]]

    def join(self):
        for c in self.coords:
            c.join(TIMEOUT)

    def global_order(self) -> list[int]:
        """The ready groups of every round, in order: the same list on every process."""
        seqs = [[(r.number, tuple(r.ready)) for r in rounds] for rounds in self.rounds]
        assert all(s == seqs[0] for s in seqs[1:]), "processes saw different rounds"
        order = [g for _, ready in seqs[0] for g in ready]
        for _, ready in seqs[0]:
            assert list(ready) == sorted(ready), "ready groups must run in ascending order"
        return order


def _run_workers(world: World, ranks: int, plan, pause: float = 0.001, seed: int = 0):
    errors = []

    def worker(v):
        try:
            rng = random.Random(seed * 1000 + v)
            requests = []
            for group in plan[v]:
                requests.append(world.of(v).post(v, group))
                if rng.random() < 0.2:
                    time.sleep(rng.random() * pause)  # computing between posts
            rng.shuffle(requests)
            for r in requests:
                assert r.wait(timeout=TIMEOUT) == (r.group, v)
            world.of(v).finish(v)
        except BaseException as e:  # reported by the test thread
            errors.append((v, e))
            world.of(v).finish(v)

    threads = [threading.Thread(target=worker, args=(v,), daemon=True) for v in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a worker never finished"
    assert not errors, errors[:3]
    world.join()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_many_threads_and_groups_in_random_orders_run_in_one_global_order(seed):
    # 100 virtual ranks on 4 processes, 150 groups of 2-6 ranks; every member posts each of its
    # groups 3 times, in its own random order, pausing at random
    rng = random.Random(seed)
    ranks, processes = 100, 4
    groups = [tuple(rng.sample(range(ranks), rng.randint(2, 6))) for _ in range(150)]
    plan = {v: [g for g, members in enumerate(groups) if v in members] * 3 for v in range(ranks)}
    for v in plan:
        rng.shuffle(plan[v])
    world = World(groups, ranks, processes).start()
    started = time.monotonic()
    _run_workers(world, ranks, plan, seed=seed)
    assert time.monotonic() - started < 2 * TIMEOUT
    order = world.global_order()
    assert sorted(order) == sorted(g for g in range(len(groups)) for _ in range(3))
    for p in range(processes):  # each ran exactly its share of the global order, in it
        assert world.runs[p] == [g for g in order if p in world.hosts[g]]


def test_more_than_64_ranks_of_bits():
    # one group of all 130 ranks (the original's int64 masks stop at 63) plus pairs; the big
    # group is not ready while one member has not posted, and runs once it has
    ranks = 130
    groups = [tuple(range(ranks))] + [(v, (v + 1) % ranks) for v in range(ranks)]
    offsets, size = table_layout(groups)
    assert size == ranks + 2 * ranks + 2 and offsets[1] == ranks
    world = World(groups, ranks, processes=3).start()
    late = ranks - 1
    requests = {v: world.of(v).post(v, 0) for v in range(ranks) if v != late}
    time.sleep(0.2)
    assert not any(r.done() for r in requests.values())
    requests[late] = world.of(late).post(late, 0)
    for v, r in requests.items():
        assert r.wait(timeout=TIMEOUT) == (0, v)
    plan = {v: [1 + v, 1 + (v - 1) % ranks] for v in range(ranks)}
    _run_workers(world, ranks, plan)
    assert world.global_order()[0] == 0


def test_a_group_that_can_never_be_ready_is_a_deadlock_error_not_a_hang():
    # 0 waits on group 0 (0, 1); 1 waits on group 1 (0, 1): each needs the other first
    world = World([(0, 1), (0, 1)], ranks=2, processes=2).start()
    outcome = {}

    def worker(v):
        started = time.monotonic()
        try:
            world.of(v).post(v, v).wait(timeout=TIMEOUT)
            outcome[v] = "ran"
        except DeadlockError as e:
            outcome[v] = (time.monotonic() - started, str(e))

    threads = [threading.Thread(target=worker, args=(v,)) for v in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert set(outcome) == {0, 1}
    for seconds, message in outcome.values():
        assert seconds < 5 and "groups with posted requests: 0(0, 1), 1(0, 1)" in message
    with pytest.raises(DeadlockError):
        world.coords[0].join(TIMEOUT)


def test_an_op_that_fails_raises_in_its_worker_and_the_run_goes_on():
    net = ThreadWorld(1, timeout=TIMEOUT)
    coord = Coordinator([(0,), (0,)], [0], net.member(0)).start()
    bad = coord.post(0, 0, op=lambda: 1 / 0)
    good = coord.post(0, 1, op=lambda: "ok")
    with pytest.raises(ZeroDivisionError):
        bad.wait(timeout=TIMEOUT)
    assert good.wait(timeout=TIMEOUT) == "ok"
    coord.finish(0)
    coord.join(TIMEOUT)


def test_idle_rounds_back_off_instead_of_spinning():
    # two processes whose workers compute for 0.5 s without posting: the rounds slow down to
    # one per idle period (2 ms at most), not thousands a second
    net = ThreadWorld(2, timeout=TIMEOUT)
    coords = [Coordinator([(0, 1)], [p], net.member(p), idle_s=(1e-4, 2e-3)).start() for p in (0, 1)]
    time.sleep(0.5)
    rounds = coords[0].rounds
    requests = [c.post(p, 0, op=lambda: "x") for p, c in enumerate(coords)]
    assert [r.wait(timeout=TIMEOUT) for r in requests] == ["x", "x"]
    for p, c in enumerate(coords):
        c.finish(p)
    for c in coords:
        c.join(TIMEOUT)
    assert 10 < rounds < 500, rounds


def test_posting_is_checked():
    coord = Coordinator([(0, 1), (0, 2)], [1], ThreadWorld(1).member(0))
    with pytest.raises(ValueError, match="not local"):
        coord.post(0, 0)
    with pytest.raises(ValueError, match="not a member"):
        coord.post(1, 1)
    with pytest.raises(ValueError, match="distinct members"):
        Coordinator([(0, 0)], [0], ThreadWorld(1).member(0))
