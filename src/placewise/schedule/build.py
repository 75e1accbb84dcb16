"""The scheduler's task graph: a placement becomes compute, transfer and conversion tasks.

``Build`` writes the tasks of one placement into a ``Timeline`` in creation order, which is
topological: one compute task per vertex, and the transfers and conversions that bring each
input to its consumer's device in the representation it reads, each made once and reused
(the **Tasks** rules of ``placewise.schedule.simulate``'s docstring).
"""

from __future__ import annotations

from collections.abc import Mapping

from placewise.cost.model import Cost
from placewise.errors import InputError
from placewise.schedule.placement import Assignment, Placement, Problem
from placewise.schedule.resources import Resources
from placewise.schedule.timeline import TaskKind, Timeline

__all__ = ["Build"]


class Build:
    """Builds the task graph of one placement into a ``Timeline`` (tasks in creation order,
    which is topological)."""

    def __init__(self, problem: Problem, placement: Placement,
                 lanes: Mapping[str, int] | None) -> None:
        self.p = problem
        self.pl = placement
        self.tl = Timeline(problem.reps)
        self.resources = r = Resources(self.tl, problem.machine, lanes)
        self.dev_res, self.dev_cores, self.dev_ctrl = r.dev_res, r.dev_cores, r.dev_ctrl
        self.link_res = r.link_res
        self.copy_key: dict[tuple[str, str, int], int] = {}
        self.src_copy: dict[str, int] = {}
        self.bits = problem.rep_bits
        self.numel = problem.numel

    def _task(self, name: str, kind: TaskKind, res: int, cost: Cost, preds: list[int],
              device: str, part: tuple[tuple[int, float], ...], vertex: str | None,
              tensor: str | None, dst_device: str | None, link: str | None, src_rid: int,
              dst_rid: int, nbytes: int) -> int:
        tl = self.tl
        ti = len(tl.name)
        tl.name.append(name)
        tl.kind.append(kind)
        tl.res.append(res)
        tl.dur.append(cost.total_s)
        tl.cost.append(cost)
        tl.preds.append(preds)
        tl.part.append(part)
        tl.vertex.append(vertex)
        tl.tensor.append(tensor)
        tl.device.append(device)
        tl.dst_device.append(dst_device)
        tl.link.append(link)
        tl.src_rid.append(src_rid)
        tl.dst_rid.append(dst_rid)
        tl.nbytes.append(nbytes)
        tl.cores.append(self.dev_cores.get(device, ()) if kind is not TaskKind.TRANSFER
                        else ())
        return ti

    def _copy(self, tensor: str, device: str, rid: int, made_by: int) -> int:
        tl = self.tl
        ci = len(tl.c_tensor)
        self.copy_key[(tensor, device, rid)] = ci
        tl.c_tensor.append(tensor)
        tl.c_rid.append(rid)
        tl.c_device.append(device)
        tl.c_bytes.append((self.numel[tensor] * self.bits[rid] + 7) // 8)
        tl.c_made.append(made_by)
        tl.c_final.append(False)
        return ci

    def _label(self, tensor: str, rid: int) -> str:
        rep = self.p.reps[rid]
        natural = self.p.reps[self.p.natural_rid[tensor]]
        return rep.dtype.value if rep.layout is natural.layout else str(rep)

    # -- obtaining a copy of a tensor on a device, in a representation --
    def _source(self, tensor: str) -> int:
        ci = self.src_copy.get(tensor)
        if ci is None:  # a graph input: on the host from time 0
            ci = self._copy(tensor, self.p.host, self.p.natural_rid[tensor], -1)
            self.src_copy[tensor] = ci
        return ci

    def get_copy(self, tensor: str, device: str, rid: int) -> int:
        ci = self.copy_key.get((tensor, device, rid))
        if ci is not None:
            return ci
        tl = self.tl
        src = self._source(tensor)
        d0, r0 = tl.c_device[src], tl.c_rid[src]
        if rid == r0:
            return self._walk(tensor, src, device, rid)
        if device == d0 or (self.numel[tensor] * self.bits[rid] + 7) // 8 < tl.c_bytes[src]:
            return self._walk(tensor, self._convert(tensor, src, rid, d0), device, rid)
        return self._convert(tensor, self.get_copy(tensor, device, r0), rid, device)

    def _convert(self, tensor: str, from_ci: int, rid: int, device: str) -> int:
        ci = self.copy_key.get((tensor, device, rid))
        if ci is not None:
            return ci
        tl = self.tl
        r_from = tl.c_rid[from_ci]
        cost = self.p.conversion(tensor, r_from, rid, device)
        made = tl.c_made[from_ci]
        mem = cost.memory_bytes
        part = tuple((c, float(mem)) for c in self.dev_ctrl[device]) if mem > 0 else ()
        ti = self._task(
            f"conv:{tensor}:{self._label(tensor, r_from)}->{self._label(tensor, rid)}@{device}",
            TaskKind.CONVERSION, self.dev_res[device], cost, [made] if made >= 0 else [],
            device, part, None, tensor, None, None, r_from, rid,
            (self.numel[tensor] * self.bits[rid] + 7) // 8)
        tl.read_copy.append(from_ci)
        tl.read_task.append(ti)
        return self._copy(tensor, device, rid, ti)

    def _walk(self, tensor: str, from_ci: int, dst: str, rid: int) -> int:
        tl = self.tl
        cur = from_ci
        a = tl.c_device[from_ci]
        if a == dst:
            return cur
        suffix = "" if rid == tl.c_rid[self.src_copy[tensor]] else ":" + self._label(tensor, rid)
        for link in self.p.route(a, dst):
            b = link.endpoints[1] if link.endpoints[0] == a else link.endpoints[0]
            nxt = self.copy_key.get((tensor, b, rid))
            if nxt is None:
                cost = self.p.transfer(tensor, rid, a, b)
                ri, link_ctrl = self.link_res[(link.name, a)]
                nbytes = tl.c_bytes[cur]
                if nbytes > 0 and (link_ctrl or self.dev_ctrl[a] or self.dev_ctrl[b]):
                    ctrls = dict.fromkeys((*link_ctrl, *self.dev_ctrl[a], *self.dev_ctrl[b]))
                    part = tuple((c, float(nbytes)) for c in ctrls)
                else:
                    part = ()
                made = tl.c_made[cur]
                ti = self._task(f"xfer:{tensor}:{a}->{b}{suffix}", TaskKind.TRANSFER, ri, cost,
                                [made] if made >= 0 else [], a, part, None, tensor, b,
                                link.name, rid, -1, nbytes)
                tl.read_copy.append(cur)
                tl.read_task.append(ti)
                nxt = self._copy(tensor, b, rid, ti)
            cur = nxt
            a = b
        return cur

    def build(self) -> None:
        p, pl, tl = self.p, self.pl, self.tl
        get_copy = self.get_copy
        copy_key = self.copy_key
        src_copy = self.src_copy
        numel, bits = self.numel, self.bits
        c_made = tl.c_made
        read_copy, read_task = tl.read_copy, tl.read_task
        no_part: tuple[tuple[int, float], ...] = ()
        compute = TaskKind.COMPUTE
        cost_of = p.cost
        io_reps = p.io_reps
        dev_res, dev_ctrl = self.dev_res, self.dev_ctrl
        t_name, t_kind, t_res, t_dur, t_cost = tl.name, tl.kind, tl.res, tl.dur, tl.cost
        t_preds, t_part, t_vertex, t_tensor = tl.preds, tl.part, tl.vertex, tl.tensor
        t_device, t_dst, t_link = tl.device, tl.dst_device, tl.link
        t_src_rid, t_dst_rid, t_nbytes = tl.src_rid, tl.dst_rid, tl.nbytes
        t_cores, dev_cores = tl.cores, self.dev_cores
        c_tensor, c_rid, c_device, c_bytes = tl.c_tensor, tl.c_rid, tl.c_device, tl.c_bytes
        c_final = tl.c_final
        for v in p.vertices:
            a: Assignment = pl[v.name]
            dev, dt = a.device, a.dtype
            vi = v.index
            cost = cost_of(vi, dev, dt)
            in_rids, out_rids = io_reps(vi, dt)
            preds: list[int] = []
            reads: list[int] = []
            for t, rid in zip(v.inputs, in_rids, strict=True):
                ci = copy_key.get((t, dev, rid))
                if ci is None:
                    ci = get_copy(t, dev, rid)
                made = c_made[ci]
                if made >= 0:
                    preds.append(made)
                reads.append(ci)
            if len(preds) > 1:  # each once, first seen first (a set: joins of 100k inputs)
                preds = list(dict.fromkeys(preds))
            ti = len(t_name)
            read_copy.extend(reads)
            read_task.extend([ti] * len(reads))
            mem = cost.memory_bytes
            ctrl = dev_ctrl[dev]
            # a compute task (appended inline: this loop is the scheduler's hot path)
            t_name.append(v.name)
            t_kind.append(compute)
            t_res.append(dev_res[dev])
            t_dur.append(cost.total_s)
            t_cost.append(cost)
            t_preds.append(preds)
            t_part.append(tuple((c, float(mem)) for c in ctrl) if mem > 0 and ctrl else no_part)
            t_vertex.append(v.name)
            t_tensor.append(None)
            t_device.append(dev)
            t_dst.append(None)
            t_link.append(None)
            t_src_rid.append(-1)
            t_dst_rid.append(-1)
            t_nbytes.append(mem)
            t_cores.append(dev_cores.get(dev, ()))
            for t, rid in zip(v.outputs, out_rids, strict=True):
                ci = len(c_tensor)
                copy_key[(t, dev, rid)] = ci
                src_copy[t] = ci
                c_tensor.append(t)
                c_rid.append(rid)
                c_device.append(dev)
                c_bytes.append((numel[t] * bits[rid] + 7) // 8)
                c_made.append(ti)
                c_final.append(False)
        for t in p.graph.outputs:
            home = get_copy(t, p.host, p.natural_rid[t]) if p.outputs_to_host \
                else self._source(t)
            c_final[home] = True
        if len(set(t_name)) != len(t_name):
            seen: set[str] = set()
            dup = next(x for x in t_name if x in seen or seen.add(x))  # type: ignore[func-returns-value]
            raise InputError(f"two tasks would be named {dup!r}: rename the vertex",
                             place=f"vertex {dup!r}")

