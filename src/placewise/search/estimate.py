"""The incremental estimate local search scores its moves with (``Estimator``).

A proven lower bound of the scheduler's makespan, updated move by move: the larger of the
contention-free longest path (each tensor copy counted once, as the scheduler sends it),
the busiest exclusive resource, and the sum over *barrier windows* (``_windows``: the
stretches between vertices every path passes through) of each window's busiest link or
device. Bottom levels are kept relative to the next barrier (``_anchors``), so a move
re-levels upstream only back to the previous barrier. How the walk uses it, and what it
bounds, is in ``placewise.search.local``'s docstring; the tests check the bound against
the scheduler and incremental against full recomputation.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from placewise.search.space import Model

__all__ = ["TIE", "Estimator"]

# an edge's copy key, delay and occupancy per resource (None: no copy) for two candidates
_EdgeInfo = tuple[tuple[str, str, int, str, int], float, tuple[tuple[int, float], ...] | None]

TIE = 0.2  # weight of the mean exclusive occupancy in the estimated walk's score

class Estimator:
    """Incremental contention-free estimate of a placement, and a bound on it that scores
    most moves without touching the timeline (see the module docstring).

    ``value()`` is, for latency, the larger of the longest path (``Model.makespan_s``:
    ``span``) and the busiest exclusive resource; for throughput, the busiest resource.
    Occupancy counts every tensor copy once per (tensor, source, representation,
    destination, representation), as the scheduler sends a copy once to every device that
    reads it; so, where no copy shares a route's first hops or a conversion with another
    (one hop per route, one precision per tensor), ``value()`` never exceeds the scheduler's
    makespan (checked by the tests). ``fin``/``endt``: each vertex's finish and end (its
    outputs on the host); ``bl``: its bottom level (from its start to the end of the
    longest path through it), refreshed lazily; kept relative to the next barrier where
    every path runs through it (``_anchors``), so a move re-levels upstream only back to the
    previous barrier.

    ``apply({vertex: candidate})`` returns ``(value, undo)``; ``revert(undo)`` restores.
    ``defer``: up to this many accepted moves off the longest path (of one vertex, or of
    several all off it, scored from their neighbours) are not re-timed at once but together
    (``flush``, also before any move on the path; ``critical_path`` reads the bottom
    levels, which deferring leaves exact): in between, finish
    times downstream of them are stale, so the longest-path part of later scores is
    approximate (``drift``: the largest relative error a flush found); with ``defer=0``
    every score is exact. ``propose(moves, limit)`` returns ``(score, applied)``: the move is applied (and kept)
    only if its value is at most ``limit`` (a deferred move that fills the batch is kept
    and returns the exact score the flush found, which may exceed it); else ``score`` is its value or a lower bound of
    it above ``limit``, and nothing changes. A move of one vertex off the longest paths is
    scored exactly from its neighbours (``through``); a move on them, or of several vertices,
    first by its occupancy (a bound), then by re-timing downstream of it, stopping where
    finish times do not change.
    """

    def __init__(self, model: Model, choice: Sequence[int], *, throughput: bool,
                 defer: int = 0) -> None:
        self.m = model
        self.throughput = throughput
        self.defer = defer
        self.touched = 0
        self.full_scores = 0  # re-timings (moves on the path, several vertices, flushes)
        self.flushes = 0  # times deferred moves were re-timed
        self.pending: dict[int, int] = {}
        self.kept = False  # set by propose
        # the largest relative error of a deferred move's score found when re-timed
        self.drift = 0.0
        self._believed: float | None = None
        self.reset(choice)

    # -- building blocks -------------------------------------------------------------------
    def _edge_info(self, e: int, ku: int, kv: int) -> _EdgeInfo:
        """Edge ``e``'s copy key, delay and occupancy (None: no copy, its ends hold the
        tensor alike) with its ends as candidates ``ku`` and ``kv``."""
        key = (e, ku, kv)
        got = self._einfo.get(key)
        if got is None:
            m = self.m
            ed = m.edges
            t = ed.tensor[e]
            d0, r0 = m._src(ed.src[e], ku, t)
            d1, r1 = m._src(ed.dst[e], kv, t)
            total, steps = m.comm.copy(t, d0, r0, d1, r1)
            got = ((t, d0, r0, d1, r1), total,
                   None if d0 == d1 and r0 == r1 else steps)
            self._einfo[key] = got
        return got

    def _own(self, i: int, k: int, sign: float) -> None:
        """Add (``sign`` +1) or remove (-1) vertex ``i``'s compute task and the trips of
        its graph inputs and outputs, as candidate ``k``."""
        m = self.m
        sp = m.space
        comm = m.comm
        load = self.load
        wl = self._wload[self._vwin[i]]
        for r, s in comm.vertex_parts(sp.cands[i][k].device, sp.cost_s[i][k],
                                      sp.mem_bytes[i][k]):
            load[r] += sign * s
            wl[r] = wl.get(r, 0.0) + sign * s
        self._dirty.add(self._vwin[i])
        p = m.problem
        ed = m.edges
        for t in ed.reads[i]:
            d1, r1 = m._src(i, k, t)
            self._copy((t, p.host, p.natural_rid[t], d1, r1), sign)
        for t in ed.delivers[i]:
            d0, r0 = m._src(i, k, t)
            self._copy((t, d0, r0, p.host, p.natural_rid[t]), sign)

    def _edge(self, e: int, sign: float) -> float:
        """Add or remove edge ``e``'s copy as its ends are placed now; returns its delay."""
        ed = self.m.edges
        ch = self.choice
        ku, kv = ch[ed.src[e]], ch[ed.dst[e]]
        info = self._einfo.get((e, ku, kv)) or self._edge_info(e, ku, kv)
        steps = info[2]
        if steps is None:
            return info[1]  # no copy
        key = info[0]
        crefs = self.refs
        c = crefs.get(key, 0)
        counted = True
        if sign > 0:
            crefs[key] = c + 1
            counted = c == 0
        elif c > 1:
            crefs[key] = c - 1
            counted = False
        else:
            del crefs[key]
        if counted:
            load = self.load
            for r, x in steps:
                load[r] += sign * x
        w = self._ewin[e]
        if w >= 0:
            wkey = (key, w)
            refs = self._wrefs
            n = refs.get(wkey, 0)
            if sign > 0:
                refs[wkey] = n + 1
                if n:
                    return info[1]
            else:
                if n > 1:
                    refs[wkey] = n - 1
                    return info[1]
                del refs[wkey]
            wl = self._wload[w]
            for r, x in steps:
                wl[r] = wl.get(r, 0.0) + sign * x
            self._dirty.add(w)
        return info[1]

    def _copy(self, key: tuple[str, str, int, str, int], sign: float) -> None:
        if key[1] == key[3] and key[2] == key[4]:
            return
        refs = self.refs
        n = refs.get(key, 0)
        if sign > 0:
            refs[key] = n + 1
            if n:
                return
        else:
            if n > 1:
                refs[key] = n - 1
                return
            del refs[key]
        load = self.load
        for r, s in self.m.comm.copy(*key)[1]:
            load[r] += sign * s

    def _move_loads(self, moves: dict[int, int]) -> dict[int, int]:
        """Set the moved vertices' candidates, updating occupancy; returns the old ones."""
        ed = self.m.edges
        ch = self.choice
        edges: dict[int, None] = {}
        for v in moves:
            for e in ed.e_in[v]:
                edges[e] = None
            for e in ed.e_out[v]:
                edges[e] = None
        old = {v: ch[v] for v in moves}
        for v in moves:
            self._own(v, ch[v], -1.0)
        for e in edges:
            self._edge(e, -1.0)
        m = self.m
        cost = m.space.cost_s
        for v, k in moves.items():
            ch[v] = k
            self.rel[v] = m.release(v, k)
            self.tl[v] = m.tail(v, k)
            self.cst[v] = cost[v][k]
        for v, k in moves.items():
            self._own(v, k, 1.0)
        dly = self.dly
        edge = self._edge
        for e in edges:
            dly[e] = edge(e, 1.0)
        self.touched += len(moves) + len(edges)
        return old

    def reset(self, choice: Sequence[int]) -> None:
        m = self.m
        ed = m.edges
        self.choice = list(choice)
        self.pending = {}
        self._believed = None
        n = m.space.n
        ch = self.choice
        self.rel = [m.release(i, ch[i]) for i in range(n)]
        self.tl = [m.tail(i, ch[i]) for i in range(n)]
        self.cst = [m.space.cost_s[i][ch[i]] for i in range(n)]
        self._einfo: dict[tuple[int, int, int], _EdgeInfo] = getattr(self, "_einfo", {})
        self.dly = [self._edge_info(e, ch[ed.src[e]], ch[ed.dst[e]])[1]
                    for e in range(len(ed.src))]
        self.fin = [0.0] * n
        self.endt = [0.0] * n
        for i in range(n):
            self._finish(i)
        self.span = max(self.endt, default=0.0)
        if not hasattr(self, "_vwin"):
            self._vwin, self._ewin, nw = _windows(m)
            self._nwin = nw
            self._nxt, self._bars = _anchors(m, self._vwin)
            self._starts = [i for i in range(n) if not ed.e_in[i] or ed.reads[i]]
            self._is_anchor = [False] * n
            for b in self._bars:
                self._is_anchor[b] = True
        self._blr = [0.0] * n
        for i in range(n - 1, -1, -1):
            self._blr[i] = self._bottom(i)
        self._boff = [0.0] * (n + 1)
        self._anchor()
        self._stale: set[int] = set()
        self.load = [0.0] * m.comm.n_resources
        self.refs: dict[tuple[str, str, int, str, int], int] = {}
        self._wload: list[dict[int, float]] = [{} for _ in range(self._nwin)]
        self._wrefs: dict[tuple[tuple[str, str, int, str, int], int], int] = {}
        self._wmax = [0.0] * self._nwin
        self._wsum = 0.0
        self._dirty: set[int] = set()
        for i in range(n):
            self._own(i, self.choice[i], 1.0)
        for e in range(len(ed.src)):
            self._edge(e, 1.0)
        self.lanes = m.comm.res_lanes
        self.touched += 9 * n + 6 * len(ed.src)  # a rebuild reads each several times

    def _finish(self, i: int) -> bool:
        ed = self.m.edges
        s = self.rel[i]
        fin = self.fin
        dly = self.dly
        src = ed.src
        for e in ed.e_in[i]:
            t = fin[src[e]] + dly[e]
            if t > s:
                s = t
        f = s + self.cst[i]
        changed = f != fin[i]
        fin[i] = f
        self.endt[i] = f + self.tl[i]
        return changed

    def _bottom(self, i: int) -> float:
        """Vertex ``i``'s bottom level relative to its anchor (``_anchors``)."""
        ed = self.m.edges
        b = self.tl[i]
        bl = self._blr
        dly = self.dly
        dst = ed.dst
        a = self._nxt[i]
        for e in ed.e_out[i]:
            w = dst[e]
            t = dly[e] + (0.0 if w == a else bl[w])
            if t > b:
                b = t
        return self.cst[i] + b

    def _anchor(self) -> None:
        """The anchors' own bottom levels (``_boff``), from the last anchor back."""
        boff, blr, nxt = self._boff, self._blr, self._nxt
        for b in self._bars:
            boff[b] = blr[b] + boff[nxt[b]]
        self.touched += len(self._bars)

    @property
    def bl(self) -> list[float]:
        """Every vertex's bottom level (from its start to the end of the longest path
        through it), as of the last refresh."""
        boff = self._boff
        return [r + boff[a] for r, a in zip(self._blr, self._nxt, strict=True)]

    def bottom(self, i: int) -> float:
        """Vertex ``i``'s bottom level, as of the last refresh."""
        return self._blr[i] + self._boff[self._nxt[i]]

    def _refresh(self) -> None:
        """Bring the bottom levels up to date (from the vertices moved since)."""
        if not self._stale:
            return
        preds = self.m.problem.preds
        heap = [-i for i in self._stale]
        heapq.heapify(heap)
        seen = set(self._stale)
        forced = self._stale
        bl, tl, cst, dly = self._blr, self.tl, self.cst, self.dly
        nxt, anchor = self._nxt, self._is_anchor
        ed = self.m.edges
        e_out, dst = ed.e_out, ed.dst
        pop, push = heapq.heappop, heapq.heappush
        touched = 0
        anchors = False
        while heap:
            i = -pop(heap)
            b = tl[i]
            outs = e_out[i]
            a = nxt[i]
            for e in outs:
                w = dst[e]
                t = dly[e] + (0.0 if w == a else bl[w])
                if t > b:
                    b = t
            b += cst[i]
            touched += 1 + len(outs)
            if b != bl[i] or i in forced:
                if b != bl[i] and anchor[i]:
                    anchors = True
                bl[i] = b
                for q in preds[i]:
                    # a vertex anchored at i holds its bottom level relative to i's
                    if q not in seen and nxt[q] != i:
                        seen.add(q)
                        push(heap, -q)
        if anchors:
            self._anchor()
        self._stale = set()
        self.touched += touched

    def _seed(self, moves: dict[int, int]) -> None:
        preds = self.m.problem.preds
        for v in moves:
            self._stale.add(v)
            self._stale.update(preds[v])

    def load_value(self, *, exclusive_only: bool) -> float:
        comm = self.m.comm
        worst = 0.0
        lanes = self.lanes
        for r, x in enumerate(self.load):
            if exclusive_only and not comm.res_exclusive[r]:
                continue
            v = x / lanes[r]
            if v > worst:
                worst = v
        return worst

    def window_value(self) -> float:
        """The sum over the barrier windows (``_windows``) of each one's busiest exclusive
        resource: the windows follow each other in every schedule, so their busiest loads
        add up (0 without barriers)."""
        dirty = self._dirty
        if dirty:
            excl = self.m.comm.res_exclusive
            lanes = self.lanes
            wmax = self._wmax
            tot = self._wsum
            for w in dirty:
                if w < 0:
                    continue
                best = 0.0
                for r, x in self._wload[w].items():
                    if excl[r]:
                        y = x / lanes[r]
                        if y > best:
                            best = y
                tot += best - wmax[w]
                wmax[w] = best
            self.touched += 4 * len(dirty)
            self._dirty = set()
            self._wsum = tot
        return self._wsum if self._nwin > 1 else 0.0

    def value(self) -> float:
        if self.throughput:
            return self.load_value(exclusive_only=False)
        return max(self.load_value(exclusive_only=True), self.span, self.window_value())

    def score(self) -> float:
        """What the walk minimizes: ``value()`` plus ``TIE`` times the mean occupancy of
        the exclusive resources (total busy time: less communication, faster devices).
        The bound alone is loose where links and devices are all near their busiest (the
        scheduler then queues transfers behind each other), and most moves off the longest
        path leave it unchanged, so without this term they would all be taken (each
        re-timing its downstream). 0.2 beat 0.01 on every layered 1k-op case of
        ``benchmarks/search_scale_quality.py`` (auto / best start 0.67-0.999 against
        0.70-1.0)."""
        if self.throughput:
            return self.value()
        return self.value() + self._tie()

    def _tie(self) -> float:
        comm = self.m.comm
        tot = 0.0
        cnt = 0
        for r, x in enumerate(self.load):
            if comm.res_exclusive[r]:
                tot += x / self.lanes[r]
                cnt += 1
        return TIE * tot / max(1, cnt)

    def through(self, v: int, k: int) -> float:
        """The longest path through vertex ``v`` given candidate ``k`` (the rest as now)."""
        m = self.m
        ed = m.edges
        ch = self.choice
        fin = self.fin
        blr, boff, nxt = self._blr, self._boff, self._nxt
        get, info = self._einfo.get, self._edge_info
        src, dst = ed.src, ed.dst
        s = m.release(v, k)
        for e in ed.e_in[v]:
            u = src[e]
            t = fin[u] + (get((e, ch[u], k)) or info(e, ch[u], k))[1]
            if t > s:
                s = t
        b = m.tail(v, k)
        for e in ed.e_out[v]:
            w = dst[e]
            t = (get((e, k, ch[w])) or info(e, k, ch[w]))[1] + blr[w] + boff[nxt[w]]
            if t > b:
                b = t
        self.touched += 1 + len(ed.e_in[v]) + len(ed.e_out[v])
        return s + m.space.cost_s[v][k] + b

    # -- moves -----------------------------------------------------------------------------
    def _retime(self, moves: dict[int, int], undo: list[tuple[int, ...]]) -> None:
        """Finish times downstream of the moved vertices, in topological (index) order, cut
        where unchanged; the span updated."""
        succs = self.m.problem.succs
        heap = list(moves)
        heapq.heapify(heap)
        seen = set(heap)
        fin, endt = self.fin, self.endt
        rel, tl, cst, dly = self.rel, self.tl, self.cst, self.dly
        ed = self.m.edges
        e_in, src = ed.e_in, ed.src
        pop, push = heapq.heappop, heapq.heappush
        span = self.span
        lost = False  # a vertex that ended at the span now ends earlier
        top = 0.0
        touched = 0
        while heap:
            i = pop(heap)
            ins = e_in[i]
            touched += 1 + len(ins)
            old_f, old_e = fin[i], endt[i]
            st = rel[i]
            for e in ins:
                t = fin[src[e]] + dly[e]
                if t > st:
                    st = t
            f = st + cst[i]
            en = f + tl[i]
            changed = f != old_f
            if changed or en != old_e:
                fin[i] = f
                endt[i] = en
                undo.append((2, i, old_f, old_e))  # type: ignore[arg-type]
                if old_e >= span and en < old_e:
                    lost = True
                if en > top:
                    top = en
            if changed or i in moves:
                for x in succs[i]:
                    if x not in seen:
                        seen.add(x)
                        push(heap, x)
        undo.append((3, span))  # type: ignore[arg-type]
        self.span = max(endt, default=0.0) if lost else max(span, top)
        # (the span recomputed by ``max``, a C loop, costs about 1/16 of a vertex read each)
        self.touched += touched + (len(endt) // 16 if lost else 0)
        self.full_scores += 1

    def flush(self) -> float:
        """Re-time the moves accepted without it (``defer``); the exact score after."""
        if self.pending:
            seeds = self.pending
            self.pending = {}
            self._retime(seeds, [])
            self.flushes += 1
        exact = self.score()
        if self._believed is not None:
            if exact > 0.0:
                self.drift = max(self.drift, abs(exact - self._believed) / exact)
            self._believed = None
        return exact

    def _region_through(self, moves: dict[int, int]) -> float:
        """The longest path through the moved vertices (their candidates already set),
        with finish times above and bottom levels below them as they are."""
        ed = self.m.edges
        e_in, e_out, src, dst = ed.e_in, ed.e_out, ed.src, ed.dst
        fin, dly = self.fin, self.dly
        blr, boff, nxt = self._blr, self._boff, self._nxt
        rel, cst, tl = self.rel, self.cst, self.tl
        local: dict[int, float] = {}
        best = 0.0
        touched = 0
        for v in sorted(moves):
            st = rel[v]
            for e in e_in[v]:
                u = src[e]
                t = (local[u] if u in local else fin[u]) + dly[e]
                if t > st:
                    st = t
            f = st + cst[v]
            local[v] = f
            b = tl[v]
            for e in e_out[v]:
                w = dst[e]
                if w not in moves:
                    t = dly[e] + blr[w] + boff[nxt[w]]
                    if t > b:
                        b = t
            if f + b > best:
                best = f + b
            touched += 1 + len(e_in[v]) + len(e_out[v])
        self.touched += touched
        return best

    def _snapshot(self, moves: dict[int, int]) -> list[float]:
        """Per moved vertex, its release, cost, tail and the delays of its edges as they
        are now (``_growth`` compares them after the move)."""
        ed = self.m.edges
        e_in, e_out = ed.e_in, ed.e_out
        rel, cst, tl, dly = self.rel, self.cst, self.tl, self.dly
        now: list[float] = []
        for v in moves:
            now.append(rel[v])
            now.append(cst[v])
            now.append(tl[v])
            now.extend(dly[e] for e in e_in[v])
            now.extend(dly[e] for e in e_out[v])
        self.touched += len(now)
        return now

    def _growth(self, moves: dict[int, int], before: list[float]) -> float:
        """How much longer any one path can get through the moved vertices, from
        ``before`` (``_snapshot`` before the move) and the values now: a path passes a
        vertex once, through one in-edge and one out-edge, so it grows by at most the sum
        over the moved vertices of their cost's growth and their largest in- and
        out-growth (a release or in-edge delay; a tail or out-edge delay)."""
        ed = self.m.edges
        e_in, e_out = ed.e_in, ed.e_out
        now = self._snapshot(moves)
        ed = self.m.edges
        e_in, e_out = ed.e_in, ed.e_out
        grow = 0.0
        i = 0
        for v in moves:
            ni, no = len(e_in[v]), len(e_out[v])
            up = now[i] - before[i]
            for j in range(i + 3, i + 3 + ni):
                up = max(up, now[j] - before[j])
            down = now[i + 2] - before[i + 2]
            for j in range(i + 3 + ni, i + 3 + ni + no):
                down = max(down, now[j] - before[j])
            grow += max(0.0, up) + max(0.0, now[i + 1] - before[i + 1]) + max(0.0, down)
            i += 3 + ni + no
        return grow

    def apply(self, moves: dict[int, int]) -> tuple[float, list[tuple[int, ...]]]:
        self.flush()
        old = self._move_loads(moves)
        undo: list[tuple[int, ...]] = [(0, v, k) for v, k in old.items()]
        self._retime(moves, undo)
        self._seed(moves)
        return self.value(), undo

    def revert(self, undo: list[tuple[int, ...]]) -> None:
        old = {item[1]: item[2] for item in undo if item[0] == 0}
        self._move_loads(old)
        self._seed(old)
        for item in reversed(undo):
            if item[0] == 2:
                self.fin[item[1]] = item[2]
                self.endt[item[1]] = item[3]
            elif item[0] == 3:
                self.span = item[1]

    def propose(self, moves: dict[int, int], limit: float) -> tuple[float, bool]:
        """Score a move against ``limit`` (see the class docstring). ``kept``: whether an
        applied move was of one vertex whose path stays below the span (a longest path not
        through it stays one, up to deferred moves' staleness)."""
        self._refresh()
        self.kept = False
        if self.throughput:
            old = self._move_loads(moves)
            val = self.load_value(exclusive_only=False)
            if val > limit:
                self._move_loads(old)
                return val, False
            undo: list[tuple[int, ...]] = []
            self._retime(moves, undo)
            self._seed(moves)
            return val, True
        single = len(moves) == 1
        off_path = False
        region = False
        thr = 0.0
        if not single and self.defer:
            span = self.span
            fin, cst, bottom = self.fin, self.cst, self.bottom
            region = all(fin[v] - cst[v] + bottom(v) < span * (1.0 - 1e-12) for v in moves)
        if single:
            ((v, k),) = moves.items()
            span = self.span
            thr = self.through(v, k)
            # the longest path through v now: its start plus its bottom level
            off_path = (self.fin[v] - self.cst[v] + self.bottom(v)) < span * (1.0 - 1e-12)
            if thr > limit:
                return thr, False
        grow = self._snapshot(moves) if not single else None
        old = self._move_loads(moves)
        lv = max(self.load_value(exclusive_only=True), self.window_value())
        tie = self._tie()
        if grow is not None and not region and self.span + self._growth(moves, grow) <= lv:
            region = True  # no path can outgrow the loads: the value is theirs, exactly
        if off_path or (single and max(self.span, thr) <= lv):
            # exact: the paths avoiding v keep the span; on the longest path, the new span
            # is at most the larger of the old and the path through v, which the loads
            # exceed: the value is the loads' (a fork-join's join need not be re-timed)
            val = max(lv, self.span, thr) + tie
            if val > limit:
                self._move_loads(old)
                return val, False
            self._seed(moves)
            self.pending.update(moves)
            self._believed = val
            self.kept = single and thr < self.span
            if len(self.pending) <= self.defer:
                return val, True  # re-timed later, with others
            return self.flush(), True
        if region:
            # off the longest paths: scored from the region's neighbours (approximate where
            # a path leaves the region and re-enters it), re-timed later with others
            val = max(lv, self.span, self._region_through(moves)) + tie
            if val > limit:
                self._move_loads(old)
                return val, False
            self._seed(moves)
            self.pending.update(moves)
            self._believed = val
            if len(self.pending) <= self.defer:
                return val, True
            return self.flush(), True
        if lv + tie > limit:
            self._move_loads(old)
            return lv + tie, False
        undo = [(0, v, k) for v, k in old.items()]
        seeds = {**self.pending, **moves}
        self._retime(seeds, undo)
        val = self.value() + tie
        if val > limit:
            self.revert(undo)  # the deferred moves stay pending
            return val, False
        self.pending = {}
        self._believed = None
        self._seed(moves)
        return val, True

    def critical_path(self) -> list[int]:
        """The vertices of one longest path (contention-free), last first: traced forward
        from the bottom levels, which are exact once refreshed even while moves are
        deferred (they depend on nothing upstream), so no re-timing is needed: the longest
        path starts at the vertex with the largest release plus bottom level and follows,
        at each vertex, an out-edge whose delay plus bottom level makes up the rest."""
        self._refresh()
        ed = self.m.edges
        rel, cst, tl, dly = self.rel, self.cst, self.tl, self.dly
        blr, boff, nxt = self._blr, self._boff, self._nxt
        if not blr:
            return []
        # a longest path starts where nothing precedes it or graph inputs arrive (any other
        # start extends backwards through a predecessor, no shorter)
        starts = self._starts
        tops = [rel[j] + blr[j] + boff[nxt[j]] for j in starts]
        top = max(tops)
        i = starts[tops.index(top)]
        path = [i]
        tol = 1e-12 * max(top, 1e-30)
        e_out, dst = ed.e_out, ed.dst
        while True:
            rest = blr[i] + boff[nxt[i]] - cst[i]
            if tl[i] >= rest - tol:
                break
            step = -1
            for e in e_out[i]:
                w = dst[e]
                if dly[e] + blr[w] + boff[nxt[w]] >= rest - tol:
                    step = w
                    break
            if step < 0:
                break
            path.append(step)
            i = step
        path.reverse()
        self.touched += len(starts) + 3 * len(path)
        return path



def _windows(model: Model) -> tuple[list[int], list[int], int]:
    """Barrier windows of the region DAG: a *barrier* is a vertex every other vertex is an
    ancestor or a descendant of (a fork-join's forks and joins, a chain's links); with the
    vertices in topological (index) order, it is one no edge jumps over, with every vertex
    before it feeding something and every vertex after it fed. The barriers cut the
    timeline into windows that follow each other in every schedule: each barrier's own
    window, and between two of them the window of the vertices in between (with the copies
    into and out of them). Returns each vertex's window, each edge's (-1: an edge between
    windows further apart, counted in no window) and the number of windows."""
    ed = model.edges
    n = model.space.n
    outdeg = [0] * n
    indeg = [0] * n
    far = [-1] * n  # the furthest destination of an edge from each vertex
    for u, v in zip(ed.src, ed.dst, strict=True):
        outdeg[u] += 1
        indeg[v] += 1
        if v > far[u]:
            far[u] = v
    fed_after = [True] * (n + 1)  # every vertex from i on has an input edge
    for i in range(n - 1, -1, -1):
        fed_after[i] = fed_after[i + 1] and indeg[i] > 0
    barrier = [False] * n
    reach = -1
    feeding = True
    for b in range(n):
        if reach <= b and feeding and fed_after[b + 1] and n > 1:
            barrier[b] = True
        reach = max(reach, far[b])
        feeding = feeding and outdeg[b] > 0
    vwin = [0] * n
    w = 0
    for i in range(n):
        if barrier[i]:
            w += 1
            vwin[i] = w
            w += 1
        else:
            vwin[i] = w
    nwin = w + 1
    ewin = []
    for u, v in zip(ed.src, ed.dst, strict=True):
        a, b = vwin[u], vwin[v]
        bu, bv = barrier[u], barrier[v]
        if bu and bv:
            ewin.append(a + 1 if b == a + 2 else -1)
        elif bu:
            ewin.append(b if b == a + 1 else -1)
        elif bv:
            ewin.append(a if b == a + 1 else -1)
        else:
            ewin.append(a if a == b else -1)
    return vwin, ewin, nwin


def _anchors(model: Model, vwin: list[int]) -> tuple[list[int], list[int]]:
    """Anchors of the bottom levels: ``cut``, the last barrier (``_windows``: odd windows)
    before which no vertex delivers a graph output, and the barriers before it. Every path
    from a vertex before ``cut`` runs through the next barrier after it (no edge jumps over
    a barrier, every vertex before one feeds something, and none of them ends a path at the
    host), so its bottom level is the longest path to that barrier's start plus the
    barrier's own: the estimator keeps it relative to that barrier (its *anchor*), and a
    move re-levels upstream only back to the previous barrier. Returns each vertex's anchor
    (-1: none, the bottom level kept as it is: from ``cut`` on) and the anchors, last
    first."""
    n = model.space.n
    delivers = model.edges.delivers
    cut = -1
    for i in range(n):
        if vwin[i] % 2 == 1:
            cut = i
        if delivers[i]:
            break
    nxt = [-1] * n
    bars: list[int] = []
    nb = -1
    for i in range(n - 1, -1, -1):
        if i < cut:
            nxt[i] = nb
        if vwin[i] % 2 == 1 and i <= cut:
            nb = i
            bars.append(i)
    return nxt, bars
