"""Scale-out on a Dask cluster, on the CPU: a LocalCluster of two worker processes with the recorded
runner stands in for two GPUs. A sweep whose worker is killed (SIGKILL) mid-batch still stores
every pair exactly once, the killed batch measured again elsewhere; searches of many shapes at once
share one SQLite store without losing a trial; timings of two GPU models never meet in one sweep,
export or training set; bad --workers values are one error line. The numbers are synthetic."""

import os
import signal
import sqlite3
import sys
import time

import pytest
from typer.testing import CliRunner

pytest.importorskip("distributed")

from cudal2.bench.results import Environment  # noqa: E402
from cudal2.dataset import cluster, export_rows, resolve_shapes, run_sweep  # noqa: E402
from cudal2.dataset.cluster_sweep import run_sweep_on_cluster  # noqa: E402
from cudal2.ir import GemmProblem  # noqa: E402
from cudal2.proposers.catalog import sample  # noqa: E402
from cudal2.tuner.recorded import RecordedRunner, specs_measured  # noqa: E402
from cudal2.store.store import Store, StoreError  # noqa: E402

DELAY_S = 0.04  # per pair: a batch of 4 takes 0.16 s, the window to kill a worker in


@pytest.fixture(scope="module")
def client():
    """Two worker processes (non-daemon, one task each), as open_cluster starts them for `--workers 2`."""
    with cluster.open_cluster(2, gpus=False) as c:
        yield c


def _pids(c) -> list[int]:
    return sorted(c.run(os.getpid).values())


def _daemon() -> bool:
    import multiprocessing

    return multiprocessing.current_process().daemon


def _integrity(db) -> str:
    with sqlite3.connect(db) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


class Killer:
    """on_pairs that kills a worker (SIGKILL) once the second batch is in, halfway into the next
    batch each worker took: the kill lands mid-batch."""

    def __init__(self, client):
        self.client, self.batches, self.killed = client, 0, None

    def __call__(self, n: int, label: str) -> None:
        if n == 0 or self.killed is not None:
            return
        self.batches += 1
        if self.batches == 2:
            time.sleep(2 * DELAY_S)
            self.killed = _pids(self.client)[0]
            os.kill(self.killed, signal.SIGKILL)


def test_a_killed_worker_loses_no_finished_pair_and_its_batch_runs_again(client, tmp_path):
    """Dask gives the batch of the dead worker to the other one."""
    _sweep_and_kill_a_worker(client, tmp_path)


def _allow_failures(n: int, dask_scheduler=None) -> int:
    old, dask_scheduler.allowed_failures = dask_scheduler.allowed_failures, n
    return old


def test_a_batch_that_dask_gives_up_on_is_resubmitted(client, tmp_path, monkeypatch):
    """With no failure allowed, the scheduler reports the batch lost (KilledWorker) at once, and
    the sweep submits it again itself."""
    from cudal2.dataset import cluster_sweep

    lost, result_of = [], cluster_sweep._result_of

    def spy(future):
        try:
            return result_of(future)
        except cluster_sweep._Lost:
            lost.append(future)
            raise

    monkeypatch.setattr(cluster_sweep, "_result_of", spy)
    allowed = client.run_on_scheduler(_allow_failures, 0)
    try:
        # Now and then the scheduler puts the dead worker's task back without counting it as a
        # failure (the kill, mid-batch each time, races the nanny's report): then nothing is lost
        # and the sweep's own resubmission is not exercised; the sweep is run again for that.
        for attempt in range(3):
            _sweep_and_kill_a_worker(client, tmp_path / f"attempt{attempt}")
            if lost:
                break
    finally:
        client.run_on_scheduler(_allow_failures, allowed)
    assert lost  # the batch came back lost, and was resubmitted


def _sweep_and_kill_a_worker(client, tmp_path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    db, log = tmp_path / "s.db", tmp_path / "log"
    problems, specs = resolve_shapes("48x80x96,64x96x128,32x64x128,96x96x96"), sample(12)
    kill = Killer(client)
    summary = run_sweep_on_cluster(problems, specs, client, _recorded(log), Store(db),
                                   chunk=4, on_pairs=kill)
    assert kill.killed is not None and kill.killed not in _pids(client)  # it died (and was replaced)
    # The worker its nanny started again is non-daemon too, so that its evaluator may start processes.
    client.wait_for_workers(2, timeout=60)
    assert not any(client.run(_daemon).values())
    records = Store(db).kernels()
    pairs = {(r["problem"].key(), r["result"].spec.key()) for r in records}
    assert summary.measured == len(records) == len(pairs) == 48 and summary.already == 0
    measured = specs_measured(log)
    assert len(set(measured)) == 48 < len(measured)  # the killed batch's pairs were measured twice
    assert _integrity(db) == "ok"
    # Every stored pair carries the baselines its worker timed and the environment it was measured in.
    assert all(r["baselines"]["torch"].available and r["environment"]["gpu_name"] == "recorded" for r in records)
    again = run_sweep_on_cluster(problems, specs, client, _recorded(log), Store(db), chunk=4)
    assert (again.measured, again.already) == (0, 48)


def _recorded(log):
    import functools

    from cudal2.dataset.cluster_worker import given_runner

    return functools.partial(given_runner, RecordedRunner(delay_s=DELAY_S, log=log))


class SmallGpu(RecordedRunner):
    """A recorded runner whose GPU has 1 GiB free: it refuses a problem that does not fit, as the
    evaluator does (MemoryFitError)."""

    def device_memory(self, problem=None):
        from cudal2.bench.memory import DeviceMemory

        return DeviceMemory(free=2**30, total=2**30, name="a small GPU")

    def evaluate(self, problem, specs, modes=("layer",), with_baselines=True):
        from cudal2.ir.footprint import check_fits

        check_fits(problem, 2**30, "free on a small GPU")
        return super().evaluate(problem, specs, modes, with_baselines)


def test_the_cluster_sweep_stores_what_the_serial_sweep_stores(client, tmp_path):
    problems, specs = resolve_shapes("48x80x96,16384x16384x16384,64x96x128"), sample(6)
    one = run_sweep(problems, specs, SmallGpu(), Store(tmp_path / "one.db"), chunk=4)
    many = run_sweep_on_cluster(problems, specs, client, SmallGpu, Store(tmp_path / "many.db"), chunk=4)
    assert (one.measured, one.skipped) == (many.measured, many.skipped) == (12, [many.skipped[0]])
    assert many.skipped[0].startswith("16384x16384x16384") and "a small GPU" in many.skipped[0]

    def figures(db):
        return sorted((r["problem"].key(), r["result"].spec.key(), r["status"], r["kernel_ms"])
                      for r in Store(db).kernels())

    assert figures(tmp_path / "one.db") == figures(tmp_path / "many.db")


class CountsBaselines(RecordedRunner):
    """A recorded runner that logs "baselines PROBLEM WORKER" each time it times a shape's
    baselines, and "call PROBLEM N" for each evaluator call of N specs."""

    def __init__(self, path):
        super().__init__()
        self.path = str(path)

    def evaluate(self, problem, specs, modes=("layer",), with_baselines=True):
        from distributed import get_worker

        with open(self.path, "a") as f:
            if with_baselines:
                f.write(f"baselines {problem.key()} {get_worker().address}\n")
            f.write(f"call {problem.key()} {len(specs)}\n")
        return super().evaluate(problem, specs, modes)


def test_a_shape_stays_on_one_worker_its_baselines_timed_once_in_even_calls(client, tmp_path):
    """With 10 specs in calls of at most 4, a shape is one batch of three calls of 4, 3 and 3 (not
    4, 4 and 2); each worker would otherwise time the baselines of every shape it got a batch of."""
    import functools

    from cudal2.dataset.cluster_worker import given_runner

    log = tmp_path / "calls"
    problems, specs = resolve_shapes("48x80x96,64x96x128,32x64x128"), sample(10)
    summary = run_sweep_on_cluster(problems, specs, client, functools.partial(given_runner, CountsBaselines(log)),
                                   Store(tmp_path / "s.db"), chunk=4)
    assert summary.measured == 30
    lines = [ln.split() for ln in log.read_text().splitlines()]
    timed = [ln[1] for ln in lines if ln[0] == "baselines"]
    assert sorted(timed) == sorted(p.key() for p in problems)  # once per shape
    calls = {}
    for ln in lines:
        if ln[0] == "call":
            calls.setdefault(ln[1], []).append(int(ln[2]))
    assert all(sorted(c) == [3, 3, 4] for c in calls.values())


def test_many_searches_at_once_share_one_store_without_losing_a_trial(client, tmp_path):
    import optuna

    db = tmp_path / "shared.db"
    problems = [GemmProblem(m=m, n=256, k=128) for m in (64, 128, 192, 256)]
    results = cluster.run_searches(problems, client, RecordedRunner, Store(db).url, backends=("triton",),
                                   arch="sm_90a", proposer="rules", budget=4, batch_size=2, seed=1)
    store = Store(db)
    assert [r.problem for r in results] == problems
    for problem, result in zip(problems, results):
        assert result.evaluations == 4 and result.best is not None
        measured = {r["result"].spec.key() for r in store.kernels(problem)}
        assert len(measured) == 4
        trials = result.study.get_trials(deepcopy=False)
        assert not [t for t in trials if t.state in (optuna.trial.TrialState.RUNNING,
                                                     optuna.trial.TrialState.WAITING)]
        told = {t.user_attrs["spec_key"] for t in trials if t.state == optuna.trial.TrialState.COMPLETE}
        assert told == measured  # every measurement reached its study, and nothing else did
    assert len(store.study_names()) == len(problems) and _integrity(db) == "ok"


def test_a_search_on_a_cluster_returns_its_result_and_refuses_what_does_not_fit(client, tmp_path):
    import cudal2
    from cudal2.ir.footprint import MemoryFitError

    store = Store(tmp_path / "s.db")
    res = cudal2.search((64, 256, 128), proposer="rules", budget=4, store=store, runner=RecordedRunner(),
                        cluster=client, arch="sm_90a", confirm=None)
    assert res.evaluations == 4 and len(res.study.trials) >= 4 and len(store.kernels()) == 4
    with pytest.raises(MemoryFitError, match="a small GPU"):  # raised on the worker, reaches the caller as itself
        cudal2.search((16384, 16384, 16384), budget=4, store=store, runner=SmallGpu(), cluster=client, arch="sm_90a")


class TwoModels(RecordedRunner):
    """A recorded runner that reports a different GPU model on each worker."""

    def environment(self):
        from dataclasses import replace

        from distributed import get_worker

        return replace(super().environment(), gpu_name=f"model-{get_worker().name}")


def test_one_sweep_measures_one_gpu_model(client, tmp_path):
    client.wait_for_workers(2, timeout=60)  # a worker killed by an earlier test is back
    store = Store(tmp_path / "s.db")
    with pytest.raises(cluster.ClusterError, match="one sweep measures one GPU model"):
        run_sweep_on_cluster(resolve_shapes("48x80x96,64x96x128,32x64x128"), sample(8), client,
                             TwoModels, store, chunk=2)
    assert len(store.gpu_models()) == 1  # what came back before the second model is kept


def _env(name: str) -> Environment:
    return Environment(gpu_name=name, sm_count=132, driver="-", cuda="-", torch="-", triton="-", cudal2="-",
                       gpu_uuid=f"GPU-{name}")


def test_a_store_export_and_training_set_hold_one_gpu_model(tmp_path):
    from cudal2.learn.samples import from_store
    from cudal2.proposers.sample import Sample, one_gpu_model

    store = Store(tmp_path / "s.db")
    a, b = resolve_shapes("48x80x96,64x96x128")
    specs = sample(3)
    for problem, model in ((a, "NVIDIA H100"), (b, "NVIDIA A100")):
        results = RecordedRunner().evaluate(problem, specs)
        for r in results:
            store.record_kernel(problem, r, environment=_env(model))
        store.record_baselines(problem, RecordedRunner().baselines(problem), _env(model))
    assert store.gpu_models() == {"NVIDIA H100": 3, "NVIDIA A100": 3}
    with pytest.raises(StoreError, match="holds timings of NVIDIA A100 .3 pairs.*another --store"):
        store.check_gpu_model("NVIDIA H100")
    with pytest.raises(StoreError, match="one GPU model"):
        run_sweep([a], specs, RecordedRunner(), store)  # the recorded runner is a third "model"
    with pytest.raises(ValueError, match="2 GPU models.*--gpu NAME"):
        list(export_rows(store))
    rows = list(export_rows(store, gpu="NVIDIA A100"))
    assert len(rows) == 3
    assert {(r["gpu"], r["gpu_uuid"], r["m"]) for r in rows} == {("NVIDIA A100", "GPU-NVIDIA A100", 64)}
    with pytest.raises(ValueError, match="no timings of GPU 'V100'"):
        list(export_rows(store, gpu="V100"))
    with pytest.raises(ValueError, match="2 GPU models"):
        list(from_store(store))
    p, s = a, specs[0]
    mixed = [Sample(p, s, 0.1, gpu="NVIDIA H100"), Sample(p, s, 0.2, gpu="NVIDIA A100")]
    with pytest.raises(ValueError, match="2 GPU models.*dataset export --gpu"):
        one_gpu_model(mixed)
    from cudal2.ir import DeviceProfile
    from cudal2.learn.train import train

    # a cost model learns from several GPUs where its device features tell them apart, not otherwise
    unknown = [Sample(p, s, 0.1, gpu="GPU X"), Sample(p, s, 0.2, gpu="GPU Y")]
    with pytest.raises(ValueError, match="same device figures"):
        train(unknown, DeviceProfile.of_arch("sm_90a"))
    assert one_gpu_model(mixed[:1] + [Sample(p, s, 0.3)]) == "NVIDIA H100"  # a pair that names no GPU joins


def test_the_environment_names_the_gpu_by_uuid_and_reads_its_clocks_by_it(monkeypatch):
    import types

    from cudal2.bench import environment

    assert environment.gpu_uuid(types.SimpleNamespace(uuid="8c3f0a1e-0000")) == "GPU-8c3f0a1e-0000"
    assert environment.gpu_uuid(types.SimpleNamespace(uuid="MIG-1234")) == "MIG-1234"
    assert environment.gpu_uuid(types.SimpleNamespace()) == ""
    asked = []
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1,
        NVML_TEMPERATURE_GPU=0, nvmlDeviceGetHandleByUUID=lambda u: asked.append(("uuid", u)) or u,
        nvmlDeviceGetHandleByIndex=lambda i: asked.append(("index", i)) or i,
        nvmlDeviceGetClockInfo=lambda h, which: 1980.0 if which == 0 else 2619.0,
        nvmlDeviceGetTemperature=lambda h, t: 40.0, nvmlDeviceGetPowerUsage=lambda h: 100000)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert environment.clocks(0, "GPU-8c3f")["sm"] == 1980.0 and asked == [("uuid", "GPU-8c3f")]
    environment.clocks(1)
    assert asked[-1] == ("index", 1)
    from cudal2.store.store import environment_from_dict

    old = {"gpu_name": "H100", "sm_count": 132, "driver": "", "cuda": "", "torch": "", "triton": "", "cudal2": ""}

    assert environment_from_dict(old).gpu_uuid == ""  # a record written before the UUID was kept


def test_the_environment_names_the_host_cpu_whose_cores_compile_the_kernels(monkeypatch, tmp_path):
    from cudal2.bench import environment

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nprocessor\t: 1\n")
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert environment.host_cpu(str(info)) == "Intel(R) Xeon(R) Platinum 8480+, 16 cores"
    monkeypatch.setattr("platform.processor", lambda: "")
    assert environment.host_cpu(str(tmp_path / "absent")) == "16 cores"
    assert environment.capture("cpu").extra["host_cpu"].endswith("16 cores")


# ---- the command line ------------------------------------------------------------------------------
cli = CliRunner()


def _error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.mark.parametrize("workers, words", [
    ("lots", ["--workers 'lots'", "auto", "tcp://host:8786"]),
    ("0", ["--workers '0'", "a number of workers"]),
    ("tcp://127.0.0.1:9", ["tcp://127.0.0.1:9", "no Dask scheduler answered", "dask scheduler"]),
    ("auto", ["no CUDA GPU is visible", "tcp://host:8786"]),  # the GPU runner, on this CPU machine
])
def test_a_bad_workers_value_is_one_error_line(workers, words, tmp_path, monkeypatch):
    from cudal2.cli import app

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    monkeypatch.setenv("COLUMNS", "60")  # narrower than the line: it must not wrap
    line = _error_line(cli.invoke(app, ["sweep", "48x80x96", "--specs", "4", "--store", str(tmp_path / "s.db"),
                                        "--workers", workers]))
    for word in words:
        assert word in line, line


def test_without_dask_the_workers_option_names_the_extra(tmp_path, monkeypatch):
    import importlib.util

    from cudal2.cli import app

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "distributed" else real(name, *a))
    monkeypatch.setenv("COLUMNS", "60")
    line = _error_line(cli.invoke(app, ["sweep", "48x80x96", "--specs", "4", "--runner", "recorded", "--store",
                                        str(tmp_path / "s.db"), "--workers", "2"]))
    assert "--workers needs Dask" in line and "pip install 'cudal2[dask]'" in line


def test_the_sweep_command_on_the_workers_of_a_scheduler(client, tmp_path, monkeypatch):
    from cudal2.cli import app

    monkeypatch.setenv("COLUMNS", "200")
    db, address = tmp_path / "s.db", client.scheduler.address
    client.wait_for_workers(2, timeout=60)  # a worker killed by an earlier test is back
    r = cli.invoke(app, ["sweep", "48x80x96,64x96x128", "--specs", "6", "--runner", "recorded", "--store", str(db),
                         "--workers", address])
    assert r.exit_code == 0, r.output
    assert f"on 2 workers ({address})" in r.output and "12 pairs measured" in r.output
    assert len(Store(db).kernels()) == 12


def test_importing_cudal2_does_not_import_dask():
    import subprocess

    code = ("import sys, cudal2, cudal2.cli, cudal2.dataset, cudal2.dataset.cluster; "
            "print(sorted(m for m in ('dask', 'distributed', 'dask_cuda') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr[-2000:]


def test_the_commands_keep_gpu_models_apart(tmp_path, monkeypatch):
    from cudal2.cli import app

    monkeypatch.setenv("COLUMNS", "60")
    db = tmp_path / "s.db"
    (problem,) = resolve_shapes("48x80x96")
    for model in ("NVIDIA H100", "NVIDIA A100"):
        for r in RecordedRunner().evaluate(problem, sample(2) if model == "NVIDIA H100" else sample(3)[2:]):
            Store(db).record_kernel(problem, r, environment=_env(model))
    store = ["--store", str(db)]
    line = _error_line(cli.invoke(app, ["sweep", "48x80x96", "--specs", "4", "--runner", "recorded", *store]))
    assert "holds timings of NVIDIA A100 (1 pairs), NVIDIA H100 (2 pairs), and this run measures on recorded" in line
    line = _error_line(cli.invoke(app, ["dataset", "export", "--out", str(tmp_path / "d.csv"), *store]))
    assert "2 GPU models" in line and "--gpu NAME" in line
    r = cli.invoke(app, ["dataset", "export", "--out", str(tmp_path / "d.csv"), *store, "--gpu", "NVIDIA H100"])
    assert r.exit_code == 0 and "wrote 2 rows" in r.output, r.output


def test_ctrl_c_on_a_local_cluster_sweep_is_one_line_and_leaves_no_process(tmp_path):
    # Ctrl-C reaches every process of the terminal's group: each Dask worker printed a
    # KeyboardInterrupt traceback, and then a heartbeat error, while the sweep was already
    # stopping them. Now the workers leave it to the sweep, which says how to resume.
    import contextlib
    import subprocess

    store = tmp_path / "s.db"
    proc = subprocess.Popen([sys.executable, "-m", "cudal2.cli", "sweep", "all:train", "--specs", "40", "--runner",
                             "recorded", "--workers", "2", "--store", str(store)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,  # its own group, as a terminal's
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})  # its lines as it says them, not at exit
    try:
        for line in proc.stdout:  # the cluster is up once the sweep says where it measures
            if line.startswith("sweep:"):
                break
        time.sleep(2.0)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    said = out + err.replace("\r", "\n")
    assert "interrupted; run the same command to resume" in said
    assert "Traceback" not in said and "KeyboardInterrupt" not in said, err[-3000:]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # every process of its group has ended
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("processes of the interrupted sweep are still running")


def test_ctrl_c_while_a_cluster_sweep_submits_stops_it_there_and_cancels_what_it_submitted():
    # Ctrl-C raised KeyboardInterrupt wherever the main thread was; landing in one of Dask's
    # callbacks while a sweep submitted its batches, it was swallowed and the sweep ran to the end.
    # Inside the sweep's ctrl_c_deferred block, Ctrl-C sets a flag, and the sweep stops at its next submission.
    from cudal2.dataset import cluster_sweep

    class Client:
        def __init__(self):
            self.submitted, self.cancelled = [], None

        def submit(self, fn, name, batch, pure=False):
            self.submitted.append(batch)
            if len(self.submitted) == 3:
                os.kill(os.getpid(), signal.SIGINT)  # delivered here, in the middle of a submission
            return object()

        def cancel(self, futures):
            self.cancelled = futures

    client, before = Client(), signal.getsignal(signal.SIGINT)
    with cluster.ctrl_c_deferred():
        with pytest.raises(KeyboardInterrupt):
            cluster_sweep._measure_all(client, "runner", list(range(10)), writer=None)
    assert len(client.submitted) == 3 and len(client.cancelled) == 3  # none after the press; those cancelled
    cluster.stop_if_interrupted()  # outside the block, nothing is pending
    assert signal.getsignal(signal.SIGINT) is before  # and Ctrl-C is handled as before it
