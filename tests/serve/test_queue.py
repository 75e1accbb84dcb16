"""The service queue (``serve.queue``) and the simulator's use of it (``serve.sim``):
priority order, preemption, Triton's timeout actions, closed-loop clients, replicas and
routers, padding, overlapping resources, conservation and bad input, each against a hand
computation or a closed form (issue 14)."""

from __future__ import annotations

import math
import signal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placewise.errors import InputError
from placewise.serve import (
    Admission,
    ClosedLoop,
    RequestQueue,
    StageTimes,
    Workload,
    gamma_arrivals,
    parse_batching,
    parse_class,
    poisson_arrivals,
    simulate,
)

NONE = parse_batching("none")
POLICIES = ["none", "static:3", "dynamic:max_batch=4,max_delay=1ms",
            "dynamic:max_batch=8,max_delay=0.5ms,preferred=2/4"]


def _mean_and_error(x: np.ndarray, batches: int = 20) -> tuple[float, float]:
    """The mean and 3 standard errors from batch means (the samples are correlated)."""
    means = np.array([b.mean() for b in np.array_split(x, batches)])
    return float(x.mean()), 3.0 * float(means.std(ddof=1) / np.sqrt(batches))


def _drain_batches(q: RequestQueue, now: float) -> list[list[int]]:
    out: list[list[int]] = []
    while True:
        batch, _ = q.take(now)
        if not batch:
            return out
        out.append(batch)


# -- 1. priority order ------------------------------------------------------------------

def test_batch_takes_priority_one_first_fifo_within_a_priority() -> None:
    q = RequestQueue(parse_batching("static:3"), Admission(), priorities=[1, 2])
    # class 1 (priority 2) and class 0 (priority 1) interleaved
    for rid, (t, cls) in enumerate([(0.0, 1), (0.1, 0), (0.2, 1), (0.3, 0), (0.4, 1),
                                    (0.5, 0)]):
        assert q.offer(rid, t, cls) == []
    assert len(q) == 6
    assert q.take(0.5) == ([1, 3, 5], [])  # every priority-1 request, in arrival order
    assert q.take(0.5) == ([0, 2, 4], [])  # then priority 2, in arrival order
    assert len(q) == 0 and q.next_time(0.5) == math.inf


def test_priorities_are_levels_not_indices() -> None:
    # class 0 has the lowest priority (3), class 2 the highest (1)
    q = RequestQueue(NONE, Admission(), priorities=[3, 2, 1])
    for rid, cls in enumerate([0, 1, 2, 0, 1, 2]):
        q.offer(rid, 0.1 * rid, cls)
    assert _drain_batches(q, 1.0) == [[2], [5], [1], [4], [0], [3]]


def test_simulated_priority_waits_exactly() -> None:
    """Six requests at t=0, alternating classes, one stage of 1 s, no batching: the three
    priority-1 requests go at 0, 1, 2 and the priority-2 ones at 3, 4, 5."""
    w = Workload(np.zeros(6), classes=np.array([1, 0, 1, 0, 1, 0]))
    r = simulate(w, lambda b: (1.0,), NONE, priorities=[1, 2])
    assert r.wait_s.tolist() == pytest.approx([3, 0, 4, 1, 5, 2])
    assert r.latency_s.tolist() == pytest.approx([4, 1, 5, 2, 6, 3])
    assert r.classes.tolist() == [1, 0, 1, 0, 1, 0]
    assert r.wait_s[r.classes == 0].mean() == pytest.approx(1.0)
    assert r.wait_s[r.classes == 1].mean() == pytest.approx(4.0)
    # the same arrivals with equal priorities: first come first served
    r = simulate(w, lambda b: (1.0,), NONE, priorities=[1, 1])
    assert r.wait_s.tolist() == pytest.approx([0, 1, 2, 3, 4, 5])


def test_priority_under_overload_matches_the_nonpreemptive_priority_form() -> None:
    """Poisson arrivals at 1.5x capacity, 20 % of them priority 1, service D: the server
    is always busy, so a priority-1 arrival waits the residual D/2 of the batch in service
    plus the priority-1 work ahead: W1 = (D/2) / (1 - rho1) (non-preemptive priority
    M/D/1); priority 2 falls ever further behind."""
    d, n, share = 1e-3, 100_000, 0.2
    lam = 1.5 / d
    rng = np.random.default_rng(5)
    cls = (rng.random(n) >= share).astype(np.int64)  # class 0: priority 1
    r = simulate(Workload(poisson_arrivals(lam, n, seed=6), classes=cls), lambda b: (d,),
                 NONE, priorities=[1, 2])
    w1, e1 = _mean_and_error(r.wait_s[r.classes == 0])
    rho1 = share * lam * d
    assert w1 == pytest.approx((d / 2) / (1 - rho1), abs=max(e1, 0.02 * d))
    w2 = float(r.wait_s[r.classes == 1].mean())
    assert w2 > 100 * w1
    assert r.completed == n and r.conserved()


# -- 2. preemption ----------------------------------------------------------------------

def test_higher_priority_arrival_preempts_the_newest_lowest_priority_request() -> None:
    q = RequestQueue(NONE, Admission(queue_limit=3, preempt=True), priorities=[1, 2, 3])
    assert q.offer(0, 0.0, 2) == []  # priority 3
    assert q.offer(1, 0.1, 1) == []  # priority 2
    assert q.offer(2, 0.2, 2) == []  # priority 3, the newest of the lowest
    assert q.offer(3, 0.3, 0) == [2]  # priority 1: takes request 2's place
    assert q.preempted == 1 and len(q) == 3
    assert q.offer(4, 0.4, 1) == [0]  # priority 2 above priority 3: evicts 0
    assert q.preempted == 2
    # now only priorities 1 and 2 are queued: a priority-2 arrival finds no victim
    assert q.offer(5, 0.5, 1) == [5]
    assert q.offer(6, 0.6, 2) == [6]  # nor does a priority-3 one
    assert q.preempted == 2
    assert _drain_batches(q, 1.0) == [[3], [1], [4]]


def test_without_preempt_a_full_queue_rejects_the_arrival() -> None:
    q = RequestQueue(NONE, Admission(queue_limit=2), priorities=[1, 2])
    assert q.offer(0, 0.0, 1) == [] and q.offer(1, 0.1, 1) == []
    assert q.offer(2, 0.2, 0) == [2]
    assert q.preempted == 0 and _drain_batches(q, 1.0) == [[0], [1]]


def test_an_equal_priority_arrival_never_preempts() -> None:
    q = RequestQueue(NONE, Admission(queue_limit=2, preempt=True), priorities=[1, 2, 1])
    assert q.offer(0, 0.0, 0) == [] and q.offer(1, 0.1, 2) == []  # both priority 1
    assert q.offer(2, 0.2, 0) == [2] and q.offer(3, 0.3, 2) == [3]
    assert q.offer(4, 0.4, 1) == [4]
    assert q.preempted == 0 and _drain_batches(q, 1.0) == [[0], [1]]


def test_simulated_preemption_is_counted_in_rejected_and_preempted() -> None:
    """Four arrivals at t=0 into a queue of two (arrivals come before the dispatch at the
    same instant): 0 and 1 (priority 2) queue, 2 (priority 2) is rejected, 3 (priority 1)
    evicts 1; then 3 runs at 0 and 0 at 1."""
    w = Workload(np.zeros(4), classes=np.array([1, 1, 1, 0]))
    for preempt in (True, False):
        r = simulate(w, lambda b: (1.0,), NONE, priorities=[1, 2],
                     admission=Admission(queue_limit=2, preempt=preempt))
        assert r.conserved() and r.rejected == 2 and r.completed == 2
        if preempt:
            assert r.preempted == 1
            assert r.rejected_by_class == (0, 2)
            assert r.classes.tolist() == [1, 0]  # requests 0 and 3, in arrival order
            assert r.wait_s.tolist() == pytest.approx([1.0, 0.0])
        else:
            assert r.preempted == 0
            assert r.rejected_by_class == (1, 1)
            assert r.classes.tolist() == [1, 1]
            assert r.wait_s.tolist() == pytest.approx([0.0, 1.0])


def test_preemption_evicts_the_newest_even_when_older_ones_were_delayed() -> None:
    q = RequestQueue(NONE, Admission(queue_limit=3, timeout_s=1.0, timeout_action="delay",
                                     preempt=True), priorities=[1, 2])
    q.offer(0, 0.0, 1)
    q.offer(1, 0.1, 1)
    assert q.take(0.5) == ([0], [])  # at 0.5 nothing has timed out
    q.offer(2, 1.8, 1)
    q.offer(3, 1.9, 1)
    assert q.take(2.0) == ([2], [])  # 1 waited 1.9 s > 1 s: delayed behind 2 and 3
    assert q.delayed == 1
    q.offer(4, 2.0, 1)  # the queue holds 1 (delayed), 3, 4
    assert q.offer(5, 2.1, 0) == [4]  # the newest priority-2 request is 4, not 1


# -- 3. timeout actions -----------------------------------------------------------------

def _timeout_queue(action: str, batching: str) -> RequestQueue:
    q = RequestQueue(parse_batching(batching),
                     Admission(timeout_s=1.0, timeout_action=action), priorities=[1, 2])
    q.offer(0, 0.0, 0)  # priority 1, will have timed out at t=2
    q.offer(1, 0.0, 1)  # priority 2, will have timed out
    q.offer(2, 1.5, 0)  # priority 1, within its timeout at t=2
    q.offer(3, 1.5, 1)  # priority 2, within its timeout
    return q


def test_timeout_reject_drops_the_timed_out_requests() -> None:
    q = _timeout_queue("reject", "dynamic:max_batch=4,max_delay=0")
    assert q.take(2.0) == ([2, 3], [0, 1])
    assert len(q) == 0 and q.delayed == 0


def test_timeout_delay_puts_them_behind_their_own_level_only() -> None:
    """Triton: a delayed request waits until the requests of its own or a higher priority
    that have not timed out are processed: 0 goes after 2 but before 3 (a lower
    priority), 1 after 3."""
    q = _timeout_queue("delay", "static:4")
    assert q.take(2.0) == ([2, 0, 3, 1], [])
    assert q.delayed == 2
    q = _timeout_queue("delay", "none")
    assert _drain_batches(q, 2.0) == [[2], [0], [3], [1]]


def test_a_request_exactly_at_its_timeout_has_not_timed_out() -> None:
    q = RequestQueue(NONE, Admission(timeout_s=0.5), priorities=[1])
    q.offer(0, 0.0)
    q.offer(1, 0.25)
    assert q.take(0.5) == ([0], [])  # waited exactly 0.5 s: not longer
    assert q.take(1.0) == ([], [1])  # waited 0.75 s


def test_simulated_timeout_reject_against_delay() -> None:
    """Four arrivals at 0 and one at 1.9, one stage of 1 s, timeout 1.5 s: 0 runs at 0,
    1 at 1; at 2 requests 2 and 3 have waited 2 s. Reject drops them and runs 4 at 2;
    delay runs 4 at 2 (it has not timed out), then 2 at 3 and 3 at 4."""
    arr = np.array([0.0, 0.0, 0.0, 0.0, 1.9])
    r = simulate(arr, lambda b: (1.0,), NONE, admission=Admission(timeout_s=1.5))
    assert (r.completed, r.timed_out, r.delayed) == (3, 2, 0) and r.conserved()
    assert r.wait_s.tolist() == pytest.approx([0.0, 1.0, 0.1])
    assert r.timed_out_by_class == (2,)
    r = simulate(arr, lambda b: (1.0,), NONE,
                 admission=Admission(timeout_s=1.5, timeout_action="delay"))
    assert (r.completed, r.timed_out, r.delayed) == (5, 0, 2) and r.conserved()
    assert r.wait_s.tolist() == pytest.approx([0.0, 1.0, 3.0, 4.0, 0.1])


# -- 4. closed loop ---------------------------------------------------------------------

def test_closed_loop_zero_think_is_a_cycle_of_n_services() -> None:
    """N clients, no think time, one stage of D, no batching: the server never idles
    (throughput 1/D) and, once every client has sent, each request waits for the N - 1
    ahead of it: latency N D. The first round sees D, 2D, ..., N D."""
    n, d, total = 5, 1e-3, 200
    r = simulate(ClosedLoop(clients=n, requests=total), lambda b: (d,), NONE)
    assert (r.arrived, r.completed, r.in_flight) == (total, total, 0) and r.conserved()
    assert r.throughput_rps == pytest.approx(1 / d, rel=1e-9)
    assert r.span_s == pytest.approx(total * d)
    assert np.sort(r.latency_s[:n]).tolist() == pytest.approx([d * (i + 1) for i in range(n)])
    assert r.latency_s[n:] == pytest.approx(np.full(total - n, n * d))
    assert r.utilization()[0] == pytest.approx(1.0)


def test_closed_loop_littles_law_with_think_time() -> None:
    """N = X (R + Z): clients, throughput, mean latency and mean think time."""
    n, d, z, total = 4, 1e-3, 2e-3, 40_000
    r = simulate(ClosedLoop(clients=n, think_s=z, requests=total, seed=3), lambda b: (d,),
                 NONE)
    assert r.completed == total and r.conserved()
    x = r.throughput_rps
    assert n == pytest.approx(x * (float(r.latency_s.mean()) + z), rel=0.03)
    # below saturation: some time idle, latency between D and N D
    assert x < 1 / d and d <= float(r.latency_s.mean()) < n * d


def test_closed_loop_duration_bound() -> None:
    """Clients send at 0 and at each completion (0.25 k); arrivals stop after 2 s: the
    three at 0 and eight at 0.25, ..., 2.0; those queued at the end are still served."""
    r = simulate(ClosedLoop(clients=3, duration_s=2.0), lambda b: (0.25,), NONE)
    assert r.arrived == 3 + 8 and r.completed == 11 and r.conserved()
    assert r.span_s == pytest.approx(11 * 0.25)
    # both bounds: whichever comes first
    r = simulate(ClosedLoop(clients=3, duration_s=2.0, requests=6), lambda b: (0.25,), NONE)
    assert r.arrived == 6 and r.completed == 6
    r = simulate(ClosedLoop(clients=3, duration_s=0.6, requests=100), lambda b: (0.25,),
                 NONE)
    assert r.arrived == 3 + 2


def test_closed_loop_rejected_clients_send_again() -> None:
    """A queue of one, three clients thinking 0.5 s on average, 1 s of service: rejected
    clients think and send again, the request budget is spent, and an admitted request
    found the queue empty, so it waits at most the 1 s of the batch in service."""
    r = simulate(ClosedLoop(clients=3, think_s=0.5, requests=30, seed=2), lambda b: (1.0,),
                 NONE, queue_limit=1)
    assert r.arrived == 30 and r.conserved() and r.in_flight == 0
    assert r.rejected > 0 and r.completed == 30 - r.rejected
    assert float(r.wait_s.max()) <= 1.0 + 1e-12
    assert float(r.latency_s.max()) <= 2.0 + 1e-12
    assert r.throughput_rps <= 1.0 + 1e-12


def test_closed_loop_with_rejections_and_only_a_duration_terminates() -> None:
    def alarm(signum: int, frame: object) -> None:
        raise TimeoutError("simulate did not return within 3 s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, 3.0)
    try:
        r = simulate(ClosedLoop(clients=3, duration_s=2.0), lambda b: (1.0,), NONE,
                     queue_limit=1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, old)
    # whatever the retry rule, the server is busy from 0 to at least 2 s
    assert r.conserved() and r.completed >= 2 and r.span_s >= 2.0


def test_closed_loop_class_mix() -> None:
    r = simulate(ClosedLoop(clients=4, think_s=1e-3, requests=20_000, shares=(1.0, 3.0),
                            seed=1), lambda b: (1e-4,), NONE, priorities=[1, 2])
    assert sum(r.arrived_by_class) == r.arrived == 20_000
    assert r.arrived_by_class[0] / r.arrived == pytest.approx(0.25, abs=0.02)


# -- 5. replicas and routers ------------------------------------------------------------

def test_round_robin_alternates_exactly() -> None:
    # four at t=0, two replicas, 1 s each: 0 and 2 on r0, 1 and 3 on r1
    r = simulate(np.zeros(4), lambda b: (1.0,), NONE, replicas=2)
    assert r.wait_s.tolist() == pytest.approx([0.0, 0.0, 1.0, 1.0])
    assert r.resources == ("r0/stage0", "r1/stage0")
    # five arrivals 1 s apart, 1.5 s each: each replica sees one every 2 s, none waits
    r = simulate(np.arange(5.0), lambda b: (1.5,), NONE, replicas=2)
    assert r.wait_s.tolist() == pytest.approx([0.0] * 5)
    assert r.busy_s == pytest.approx((4.5, 3.0))  # 3 and 2 requests
    # one replica with the same arrivals queues: waits 0, .5, 1, 1.5, 2
    r = simulate(np.arange(5.0), lambda b: (1.5,), NONE)
    assert r.wait_s.tolist() == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0])


def test_least_outstanding_sends_to_the_idle_replica() -> None:
    """A long request (10 s) on r0, a short one (0.1 s) on r1, a third at 1 s: round-robin
    sends it to r0 (waits 9 s), least-outstanding to the idle r1 (no wait)."""
    w = Workload(np.array([0.0, 0.0, 1.0]), shapes=np.array([1, 0, 0]))

    def service(b: int, shape: int) -> tuple[float]:
        return (10.0 if shape == 1 else 0.1,)

    rr = simulate(w, service, NONE, replicas=2, router="round-robin")
    assert rr.wait_s.tolist() == pytest.approx([0.0, 0.0, 9.0])
    lo = simulate(w, service, NONE, replicas=2, router="least-outstanding")
    assert lo.wait_s.tolist() == pytest.approx([0.0, 0.0, 0.0])
    assert lo.busy_s == pytest.approx((10.0, 0.2))


def test_least_outstanding_counts_queued_and_in_service_ties_to_lowest() -> None:
    # all idle at t=0: ties go to r0, then r1 (r0 has one), then r0 ...
    r = simulate(np.zeros(4), lambda b: (1.0,), NONE, replicas=2, router="least-outstanding")
    assert r.wait_s.tolist() == pytest.approx([0.0, 0.0, 1.0, 1.0])
    # three replicas, six at once: two each
    r = simulate(np.zeros(6), lambda b: (1.0,), NONE, replicas=3, router="least-outstanding")
    assert r.busy_s == pytest.approx((2.0, 2.0, 2.0))


def test_two_replicas_wait_less_than_one_at_the_same_load() -> None:
    """M/D/1 at rho = 0.8 waits rho D / (2 (1 - rho)) = 2 D. Two replicas at the same
    per-replica load: with a deterministic service, round-robin is exactly the M/D/2
    queue with one shared FCFS queue (request n starts at max(t_n, s_{n-1}, s_{n-2} + D):
    the server that frees first is the one that started earliest), about 0.9 D
    (Cosmetatos); least-outstanding cannot beat that shared queue but is far below 2 D."""
    d, rho, n = 1e-3, 0.8, 100_000
    one = simulate(poisson_arrivals(rho / d, n, seed=11), lambda b: (d,), NONE)
    m1, e1 = _mean_and_error(one.wait_s)
    assert m1 == pytest.approx(rho * d / (2 * (1 - rho)), abs=e1)
    arr2 = poisson_arrivals(2 * rho / d, n, seed=12)
    rr = simulate(arr2, lambda b: (d,), NONE, replicas=2, router="round-robin")
    start = np.empty(n)
    t = arr2.tolist()
    for i in range(n):
        s = t[i]
        if i >= 1:
            s = max(s, start[i - 1])
        if i >= 2:
            s = max(s, start[i - 2] + d)
        start[i] = s
    assert rr.wait_s == pytest.approx(start - arr2, abs=1e-12)
    mmc = (2 * rho * rho / (1 + rho)) / (2 / d - 2 * rho / d)  # M/M/2 (Erlang C)
    cosmetatos = 0.5 * mmc * (1 + (1 - rho) * (math.sqrt(14) - 2) / (16 * rho * 2))
    m2, e2 = _mean_and_error(rr.wait_s)
    assert m2 == pytest.approx(cosmetatos, abs=e2 + 0.03 * cosmetatos)
    assert m2 < 0.6 * m1
    lo = simulate(arr2, lambda b: (d,), NONE, replicas=2, router="least-outstanding")
    assert m2 <= float(lo.wait_s.mean()) < 0.6 * m1
    # both replicas carry the load (ties go to r0, so it carries a little more)
    assert sum(lo.utilization()) == pytest.approx(2 * rho, rel=0.03)
    assert rr.utilization() == pytest.approx((rho, rho), rel=0.03)


# -- 6. conservation --------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(policy=st.sampled_from(POLICIES),
       priorities=st.lists(st.integers(1, 3), min_size=2, max_size=3),
       replicas=st.integers(1, 3), router=st.sampled_from(["round-robin", "least-outstanding"]),
       preempt=st.booleans(), action=st.sampled_from(["reject", "delay"]),
       limit=st.one_of(st.none(), st.integers(1, 12)),
       timeout=st.one_of(st.none(), st.floats(1e-4, 5e-3)),
       closed=st.booleans(), n=st.integers(1, 200), seed=st.integers(0, 2**16),
       pad=st.one_of(st.none(), st.integers(1, 8)))
def test_conservation_property(policy: str, priorities: list[int], replicas: int,
                               router: str, preempt: bool, action: str, limit: int | None,
                               timeout: float | None, closed: bool, n: int, seed: int,
                               pad: int | None) -> None:
    rng = np.random.default_rng(seed)
    k = len(priorities)
    workload: Workload | ClosedLoop
    if closed:
        shares = tuple(float(x) for x in rng.uniform(0.1, 1.0, k))
        workload = ClosedLoop(clients=int(rng.integers(1, 9)),
                              think_s=float(rng.choice([0.0, 5e-4])), requests=n,
                              duration_s=float(rng.choice([0.05, 1.0])), shares=shares,
                              seed=seed)
    else:
        arr = gamma_arrivals(float(rng.uniform(1e3, 3e4)), float(rng.uniform(0.3, 3.0)), n,
                             seed=seed)
        workload = Workload(arr, classes=rng.integers(0, k, n))
    adm = Admission(queue_limit=limit, timeout_s=timeout, timeout_action=action,
                    preempt=preempt)
    r = simulate(workload, lambda b: StageTimes(2e-4 + 1e-4 * b, (0.0, 1e-4 * b),
                                                (1e-4 + 1e-4 * b, 1e-4 * b)),
                 parse_batching(policy), admission=adm, priorities=priorities,
                 replicas=replicas, router=router, pad_to=pad)
    assert r.arrived == r.completed + r.rejected + r.timed_out + r.in_flight
    assert r.conserved()
    assert int(r.batch_sizes.sum()) == r.completed
    assert len(r.latency_s) == len(r.wait_s) == len(r.classes) == r.completed
    assert (len(r.arrived_by_class), len(r.rejected_by_class),
            len(r.timed_out_by_class)) == (k, k, k)
    assert sum(r.arrived_by_class) == r.arrived
    assert sum(r.rejected_by_class) == r.rejected
    assert sum(r.timed_out_by_class) == r.timed_out
    done = np.bincount(r.classes, minlength=k)
    left = (np.array(r.arrived_by_class) - np.array(r.rejected_by_class)
            - np.array(r.timed_out_by_class))
    assert bool((done <= left).all()) and int((left - done).sum()) == r.in_flight
    assert 0 <= r.preempted <= r.rejected
    if not preempt:
        assert r.preempted == 0
    if timeout is None or action == "reject":
        assert r.delayed == 0
    if timeout is None or action == "delay":
        assert r.timed_out == 0
    if limit is None:
        assert r.rejected == 0
    if closed:
        assert r.arrived <= n
    assert bool((r.wait_s >= -1e-12).all()) and bool((r.latency_s >= r.wait_s).all())
    assert len(r.utilization()) == 2 * replicas
    assert all(0.0 <= u <= 1.0 + 1e-9 for u in r.utilization())


# -- 7. padding -------------------------------------------------------------------------

def test_pad_to_counts_empty_slots_and_prices_the_padded_batch() -> None:
    """Three at 0, one at 10; batches of whatever is queued (max_delay 0), padded to 4,
    a batch of b costing b seconds: both batches cost 4 s; 1 + 3 slots sent empty."""
    b = parse_batching("dynamic:max_batch=4,max_delay=0")
    r = simulate(np.array([0.0, 0.0, 0.0, 10.0]), lambda k: (float(k),), b, pad_to=4)
    assert r.batch_sizes.tolist() == [3, 1] and r.completed == 4
    assert r.padded == 4
    assert r.latency_s.tolist() == pytest.approx([4.0, 4.0, 4.0, 4.0])
    assert r.busy_s == pytest.approx((8.0,))
    # without padding each batch costs its own size
    r = simulate(np.array([0.0, 0.0, 0.0, 10.0]), lambda k: (float(k),), b)
    assert r.padded == 0 and r.latency_s.tolist() == pytest.approx([3.0, 3.0, 3.0, 1.0])
    # a batch already at or above the padded size runs as it is
    r = simulate(np.zeros(4), lambda k: (float(k),), b, pad_to=2)
    assert r.batch_sizes.tolist() == [4] and r.padded == 0
    assert r.latency_s.tolist() == pytest.approx([4.0] * 4)


# -- 8. overlapping resources -----------------------------------------------------------

def test_overlapping_resources_keep_latency_and_saturate_at_the_bottleneck() -> None:
    """Two resources that start together (offsets 0, 0) for w = (1, 0.6) s, latency
    1.2 s < 1.6 s: alone, a request takes 1.2 s; at saturation (window of two batches)
    resource 0 is the bottleneck: a completion every 1 s (at 1.2, 2.2, 3.2, ...)."""
    w1, w2, lat = 1.0, 0.6, 1.2
    st_ = StageTimes(lat, (0.0, 0.0), (w1, w2), ("gpu", "link"))
    r = simulate(np.array([0.0]), lambda b: st_, NONE)
    assert r.latency_s.tolist() == pytest.approx([lat])
    assert r.resources == ("gpu", "link")
    n = 1000
    r = simulate(np.zeros(n), lambda b: st_, NONE)
    assert r.latency_s == pytest.approx(np.arange(n) * w1 + lat)
    assert r.throughput_rps == pytest.approx(1 / max(w1, w2), rel=1e-3)
    assert r.utilization() == pytest.approx((1.0, w2 / w1), rel=1e-3)
    # a window of one batch: the next starts when the previous is done, 1 / L
    r = simulate(np.zeros(n), lambda b: st_, NONE, in_flight=1)
    assert r.throughput_rps == pytest.approx(1 / lat, rel=1e-9)
    # the same two resources in a chain take 1.6 s alone
    r = simulate(np.array([0.0]), lambda b: (w1, w2), NONE)
    assert r.latency_s.tolist() == pytest.approx([w1 + w2])


# -- 9. bad input -----------------------------------------------------------------------

def _place(exc: pytest.ExceptionInfo[InputError]) -> str | None:
    return exc.value.place


def test_bad_simulator_arguments_name_the_place() -> None:
    arr = np.zeros(3)
    with pytest.raises(InputError, match="unknown router") as e:
        simulate(arr, lambda b: (1.0,), NONE, router="random")
    assert _place(e) == "--router"
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InputError) as e:
            simulate(arr, lambda b: (1.0,), NONE, replicas=bad)  # type: ignore[arg-type]
        assert _place(e) == "--replicas"
    with pytest.raises(InputError) as e:
        simulate(arr, lambda b: (1.0,), NONE, in_flight=-2)
    assert _place(e) == "--in-flight"
    with pytest.raises(InputError) as e:
        simulate(arr, lambda b: (1.0,), NONE, pad_to=0)
    assert _place(e) == "pad_to"
    for cls in ([0, 0, 2], [0, -1, 1]):
        with pytest.raises(InputError) as e:
            simulate(Workload(arr, classes=np.array(cls)), lambda b: (1.0,), NONE,
                     priorities=[1, 2])
        assert _place(e) == "classes"
    with pytest.raises(InputError) as e:
        Workload(arr, classes=np.array([0, 1]))
    assert _place(e) == "arrivals"
    with pytest.raises(InputError) as e:
        Workload(np.array([1.0, 0.5]))
    assert _place(e) == "arrivals"
    with pytest.raises(InputError) as e:
        simulate(arr, lambda b: StageTimes(1.0, (0.0,), (1.0, 1.0)), NONE)
    assert _place(e) == "service"


def test_a_negative_class_is_named_in_the_message() -> None:
    with pytest.raises(InputError, match="class -1"):
        simulate(Workload(np.zeros(3), classes=np.array([0, -1, 1])), lambda b: (1.0,),
                 NONE, priorities=[1, 2])


def test_bad_closed_loops_name_the_place() -> None:
    for bad in (0, -3, True, 2.0):
        with pytest.raises(InputError) as e:
            ClosedLoop(clients=bad, requests=10)  # type: ignore[arg-type]
        assert _place(e) == "--concurrency"
    with pytest.raises(InputError) as e:
        ClosedLoop(clients=2)
    assert _place(e) == "--requests"
    for think in (-1.0, math.inf, math.nan):
        with pytest.raises(InputError) as e:
            ClosedLoop(clients=2, think_s=think, requests=10)
        assert _place(e) == "--think"


@pytest.mark.parametrize(("text", "place"), [
    ("chat:share=0", "--class chat share"),
    ("chat:share=-0.5", "--class chat share"),
    ("chat:share=inf", "--class chat share"),
    ("chat:share=lots", "--class chat share"),
    ("chat:priority=0", "--class chat priority"),
    ("chat:priority=-1", "--class chat priority"),
    ("chat:priority=1.5", "--class chat priority"),
    ("chat:slo_p99=0", "--class chat slo_p99"),
    ("chat:slo_p99=soon", "--class chat slo_p99"),
    ("chat:colour=red", "--class chat"),
    ("chat:share", "--class chat"),
    ("bad name:share=1", "--class"),
    (":share=1", "--class"),
])
def test_bad_classes_name_the_place(text: str, place: str) -> None:
    with pytest.raises(InputError) as e:
        parse_class(text)
    assert e.value.place == place


def test_good_classes_parse() -> None:
    c = parse_class("chat:share=0.2,priority=2,slo_p99=5ms")
    assert (c.name, c.share, c.priority, c.slo_p99_s) == ("chat", 0.2, 2, 0.005)
    assert parse_class(c.text()) == c
    d = parse_class("batch")
    assert (d.share, d.priority, d.slo_p99_s) == (1.0, 1, None)


@pytest.mark.parametrize(("kwargs", "place"), [
    ({"queue_limit": 0}, "--queue-limit"),
    ({"queue_limit": True}, "--queue-limit"),
    ({"timeout_s": 0.0}, "--timeout"),
    ({"timeout_s": math.inf}, "--timeout"),
    ({"timeout_s": 1.0, "timeout_action": "drop"}, "--timeout-action"),
])
def test_bad_admission_names_the_place(kwargs: dict[str, object], place: str) -> None:
    with pytest.raises(InputError) as e:
        Admission(**kwargs)  # type: ignore[arg-type]
    assert e.value.place == place
