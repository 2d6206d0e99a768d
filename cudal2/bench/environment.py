"""What every result records about where it was measured: GPU, clocks, driver and versions.

Clocks come from NVML (the nvidia-ml-py package, imported as pynvml) when it is present,
else from `nvidia-smi --query-gpu`, else they are left empty. Reading them at the start and
at the end of an evaluation shows throttling during it. The GPU is named by model and by UUID:
a process may see its GPU as cuda:0 while NVML numbers every GPU of the host (Dask-CUDA gives each
worker its own CUDA_VISIBLE_DEVICES), so NVML and nvidia-smi are asked by UUID where it is known.
"""

from __future__ import annotations

import shutil
import subprocess
from importlib import metadata

from ..version import __version__
from .results import Environment


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def host_cpu(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The host's CPU model and logical core count ("" parts where unknown). A search's seconds
    follow the host as much as the GPU: kernels compile on its cores, and two one-GPU H100 machines
    of the same kind recorded 35.4 s and 49.0 s of compiles for the same search."""
    import os
    import platform

    model = ""
    try:
        with open(cpuinfo) as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    model = model or platform.processor()
    cores = os.cpu_count()
    return ", ".join(part for part in (model, f"{cores} cores" if cores else "") if part)


def _module_version(name: str) -> str:
    try:
        mod = __import__(name)
        return str(getattr(mod, "__version__", "")) or _version(name)
    except Exception:  # noqa: BLE001 - an optional package that fails to import is just absent
        return ""


def clocks(index: int = 0, uuid: str = "") -> dict[str, float]:
    """Current SM and memory clocks in MHz (and temperature, power when NVML gives them) of the GPU
    with this UUID, else of NVML's GPU `index`."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else pynvml.nvmlDeviceGetHandleByIndex(index)
            out = {"sm": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                   "mem": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM))}
            try:
                out["temp_c"] = float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))
                out["power_w"] = pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
            except Exception:  # noqa: BLE001
                pass
            return out
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML: try nvidia-smi
        pass
    if shutil.which("nvidia-smi"):
        try:
            q = subprocess.run(["nvidia-smi", f"--id={uuid or index}",
                                "--query-gpu=clocks.sm,clocks.mem,temperature.gpu", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=10)
            sm, mem, temp = (float(x) for x in q.stdout.strip().split(",")[:3])
            return {"sm": sm, "mem": mem, "temp_c": temp}
        except Exception:  # noqa: BLE001
            pass
    return {}


def _driver() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001
        pass
    if shutil.which("nvidia-smi"):
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=10)
            return q.stdout.strip().splitlines()[0]
        except Exception:  # noqa: BLE001
            pass
    return ""


def gpu_uuid(props) -> str:
    """The UUID of a device as nvidia-smi writes it ("GPU-8c3f..."), from torch's properties; ""
    where torch does not give one."""
    text = str(getattr(props, "uuid", "") or "")
    return text if not text or text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def capture(device="cuda:0") -> Environment:
    """The environment of `device` now (clocks_end is filled by finish())."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        idx = dev.index or 0
        props = torch.cuda.get_device_properties(idx)
        gpu, sms, uuid = props.name, props.multi_processor_count, gpu_uuid(props)
        clk = clocks(idx, uuid)
    else:
        gpu, sms, clk, idx, uuid = "cpu", 0, {}, 0, ""
    extra = {k: v for k, v in {"nvmath-python": _version("nvmath-python"),
                               "nvidia-cutlass-dsl": _version("nvidia-cutlass-dsl"),
                               "python": __import__("platform").python_version(),
                               "host_cpu": host_cpu()}.items() if v}
    return Environment(gpu_name=gpu, sm_count=sms, driver=_driver() if gpu != "cpu" else "",
                       cuda=str(torch.version.cuda or ""), torch=torch.__version__,
                       triton=_module_version("triton"), cudal2=__version__,
                       clocks_start=clk, clocks_end={}, extra=extra, gpu_uuid=uuid)


def finish(env: Environment, device="cuda:0") -> Environment:
    """The same environment with the clocks at the end filled in."""
    from dataclasses import replace

    import torch

    dev = torch.device(device)
    end = clocks(dev.index or 0, env.gpu_uuid) if dev.type == "cuda" else {}
    return replace(env, clocks_end=end)


def record(device="cuda:0") -> dict:
    """capture() as a plain dict for a benchmark's JSON, with the date and the versions of the CuTe DSL
    and of apache-tvm-ffi (cudal2.matmul's launch path) under the keys the op's benchmarks report."""
    import time
    from dataclasses import asdict

    env = asdict(capture(device))
    env.update(date=time.strftime("%Y-%m-%d"), cutlass_dsl=_version("nvidia-cutlass-dsl") or "not installed",
               tvm_ffi=_version("apache-tvm-ffi") or "not installed")
    return env
