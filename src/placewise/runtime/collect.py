"""What the executor keeps of its workers' records: every task (a transfer's send and
receive halves paired into one ``TaskRecord``, whichever arrives first), every wait, the
live-tensor peaks per device and phase, the process memory peaks; turned into
``runtime.telemetry`` records with the plan's task names."""

from __future__ import annotations

from typing import Any

from placewise.runtime.program import ExecProgram
from placewise.runtime.telemetry import TaskRecord, WaitRecord

__all__ = ["Records"]

_KINDS = {"compute": "compute", "convert": "conversion"}


class Records:
    """The records of one program's run so far (``absorb`` each worker's batch)."""

    def __init__(self, program: ExecProgram) -> None:
        self.program = program
        self.names = [t.name for t in program.tasks]
        self.tasks: list[TaskRecord] = []
        self.waits: list[WaitRecord] = []
        self.peak_live: dict[str, int] = {}
        self.phase_peaks: dict[str, dict[str, int]] = {}
        self.rss_peak: dict[str, int] = {}
        self._sends: dict[tuple[int, int], tuple[Any, ...]] = {}
        self._recvs: dict[tuple[int, int], tuple[str, tuple[Any, ...]]] = {}

    def absorb(self, device: str, data: dict[str, Any], phase: str) -> None:
        """A worker's records since its last batch (``_Worker.telemetry_data``)."""
        names = self.names
        for rec in data["tasks"]:
            kind = rec[2]
            if kind == "send":
                self._sends.setdefault((rec[1], rec[0]), rec)
            elif kind == "recv":
                self._recvs.setdefault((rec[1], rec[0]), (device, rec))
            else:
                r, ti, kind_s, start, end, kernel, hidden, live, cpu_ns = rec
                name = names[ti] if ti >= 0 else ("io:in" if kind_s == "io_in" else "io:out")
                self.tasks.append(TaskRecord(r, name, _KINDS.get(kind_s, "io"), device, start,
                                             end, kernel, hidden, live, phase=phase,
                                             cpu_ns=int(cpu_ns)))
        self._pair(phase)
        for w in data["waits"]:
            r, ti, start, end = w[:4]
            what = names[ti] if ti >= 0 else "request"
            if len(w) > 4 and w[4]:
                what = f"gate:{what}"  # a core gate: waiting for that task to end
            self.waits.append(WaitRecord(r, device, what, start, end, phase))
        peak = int(data["peak_live"])
        self.peak_live[device] = max(self.peak_live.get(device, 0), peak)
        at = self.phase_peaks.setdefault(phase, {})
        at[device] = max(at.get(device, 0), peak)
        self.rss_peak[device] = max(self.rss_peak.get(device, 0), int(data["rss_peak"]))

    def _pair(self, phase: str) -> None:
        """Sends with their receives (either side may arrive first): one transfer record."""
        for key in [k for k in self._sends if k in self._recvs]:
            s = self._sends.pop(key)
            dev_r, rcv = self._recvs.pop(key)
            ti, r = key
            t = self.program.tasks[ti]
            _, _, _, w0, w1, wk, notified, sent, cpu_s = s
            _, _, _, r0, r1, rk, received, live, cpu_r = rcv
            self.tasks.append(TaskRecord(
                r, t.name, "transfer", t.device, w0, r1, wk + rk, 0, live,
                dst_device=dev_r, marks=(("write_end", w1), ("notified", notified),
                                         ("sent", sent), ("received", received),
                                         ("read_start", r0), ("send_cpu_ns", int(cpu_s)),
                                         ("receive_cpu_ns", int(cpu_r))),
                phase=phase, cpu_ns=int(cpu_s) + int(cpu_r)))
