"""A kernel's workspace serves one launch at a time: a launch on another stream than the workspace's previous
one first makes its stream wait for that stream's work (cudal2.codegen.workspace.Workspace.follow_stream). On the
CPU, with torch.cuda's stream calls stood in for; the GPU test in test_ops.py runs it on two real streams."""

import contextlib

import pytest
import torch

from cudal2.codegen import workspace as workspace_module
from cudal2.codegen.workspace import Workspace


class FakeStream:
    def __init__(self, handle, log):
        self.cuda_stream, self.log = handle, log

    def wait_event(self, event):
        self.log.append(("wait", self.cuda_stream, event.recorded_on))


class FakeCuda:
    """The current stream per device, whether a capture runs, and what was recorded and waited on."""

    def __init__(self, monkeypatch):
        self.current, self.capturing, self.log, self.reads = {0: 0, 1: 0}, False, [], 0
        fake = self

        class Event:
            def record(self, stream):
                self.recorded_on = stream.cuda_stream
                fake.log.append(("record", stream.cuda_stream))

        def raw_stream(index):
            fake.reads += 1
            return fake.current[index]

        monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", raw_stream, raising=False)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda index=None: FakeStream(fake.current[index], fake.log))
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: fake.capturing)
        monkeypatch.setattr(workspace_module, "_raw_stream", None)


@pytest.fixture
def cuda(monkeypatch):
    return FakeCuda(monkeypatch)


def test_launches_on_one_stream_wait_for_nothing_and_read_one_handle_each(cuda):
    ws = Workspace()
    cuda.current[0] = 7
    ws.follow_stream(0)  # the first launch: nothing before it to wait for
    reads = cuda.reads
    for _ in range(5):
        ws.follow_stream(0)
    assert cuda.log == [] and cuda.reads == reads + 5


def test_a_launch_on_another_stream_waits_for_the_previous_streams_work(cuda):
    ws = Workspace()
    cuda.current[0] = 7
    ws.follow_stream(0)
    cuda.current[0] = 9
    ws.follow_stream(0)
    assert cuda.log == [("record", 7), ("wait", 9, 7)]
    cuda.log.clear()
    ws.follow_stream(0)  # the same stream again: nothing more
    assert cuda.log == []
    cuda.current[0] = 0  # and back to the legacy default stream, which waits for 9
    ws.follow_stream(0)
    assert cuda.log == [("record", 9), ("wait", 0, 9)]


def test_each_device_follows_its_own_streams(cuda):
    ws = Workspace()
    cuda.current.update({0: 7, 1: 8})
    ws.follow_stream(0)
    ws.follow_stream(1)  # device 1's first launch: device 0's stream is not its business
    assert cuda.log == []
    cuda.current[1] = 5
    ws.follow_stream(1)
    assert cuda.log == [("record", 8), ("wait", 5, 8)]


def test_a_launch_a_capture_records_neither_waits_nor_becomes_the_latest(cuda):
    """A capture only records the launch (its replay's stream is not known here), and a capturing stream cannot
    wait on an event recorded outside the capture: the capture changes nothing, and the next eager launch on the
    stream before it waits for nothing."""
    ws = Workspace()
    cuda.current[0] = 7
    ws.follow_stream(0)
    cuda.current[0], cuda.capturing = 11, True
    ws.follow_stream(0)
    ws.follow_stream(0)
    assert cuda.log == []
    cuda.current[0], cuda.capturing = 7, False
    ws.follow_stream(0)
    assert cuda.log == []


def test_a_first_launch_during_a_capture_leaves_the_next_eager_one_first(cuda):
    ws = Workspace()
    cuda.current[0], cuda.capturing = 11, True
    ws.follow_stream(0)
    cuda.current[0], cuda.capturing = 7, False
    ws.follow_stream(0)
    cuda.current[0] = 8
    ws.follow_stream(0)
    assert cuda.log == [("record", 7), ("wait", 8, 7)]


def test_a_cpu_call_follows_no_stream(cuda):
    ws = Workspace()
    ws.follow_device(torch.device("cpu"))  # the Triton interpreter's calls
    assert cuda.reads == 0 and cuda.log == []
