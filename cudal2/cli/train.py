"""`cudal2 train`: fit a cost model to a store's (or export files') measurements."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from ..ir.hardware import DEFAULT_ARCH
from ..bench.results import is_synthetic
from ..cli import common as cli
from ..ir import ARCHS
from ..ir import DeviceProfile


def train(store: Annotated[Optional[str], typer.Option("--store", help=(
              "SQLAlchemy URL or SQLite file to read measurements from"))] = None,
          data: Annotated[Optional[list[Path]], typer.Option("--data", exists=True, dir_okay=False, help=(
              "an export of 'cudal2 dataset export' (.csv or .csv.gz); repeat for several"))] = None,
          out: Annotated[Optional[Path], typer.Option("--out", "-o", dir_okay=False, help=(
              "model JSON to write (default: the user's model of the measurements' GPU, "
              "<cache>/models/<arch>-<gpu>.json, which the learned proposer then uses on that GPU)"))] = None,
          arch: Annotated[str, typer.Option(help="the arch the measurements were taken on")] = DEFAULT_ARCH,
          seed: Annotated[int, typer.Option(help="the training's seed: the same data and seed give the same model")] = 0) -> None:
    """Train the cost model (gradient-boosted trees) on measured pairs: settings chosen by
    cross-validation over the training shapes, validation shapes only scored. Seeded: the same
    measurements give the same model. Without --out it becomes the user's model of the GPU the
    pairs were measured on, which searches on that GPU then use."""
    from cudal2.learn.samples import from_csv, from_store
    from cudal2.proposers.model_files import user_model_path
    from cudal2.learn.train import train as run_training

    if arch not in ARCHS:
        cli._fail(f"--arch {arch}: give one of {', '.join(ARCHS)}")
    if store is None and not data:
        cli._fail("train: give --store URL or --data FILE (an export of 'cudal2 dataset export')")
    samples, refused = [], []
    sources: dict = {}
    try:
        if store is not None:
            opened = cli._store(store)
            sources["store"] = cli._shown_url(opened)  # a password in the URL is not kept
            samples.extend(from_store(opened, refused))
        for path in data or ():
            samples.extend(from_csv(path, refused))
    except (ValueError, OSError) as e:
        cli._fail(f"train: {cli._one_line(e)}")
    if refused:  # NaN, infinite, zero or negative times: a broken measurement, never a reward
        shown = "; ".join(refused[:3]) + ("; ..." if len(refused) > 3 else "")
        message = (f"train: {len(refused)} row(s) have times that are not finite positive numbers ({shown}); "
                   "measure them again with 'cudal2 sweep'")
        if not samples:
            cli._fail(message)
        cli._warning(message + f"; training on the other {len(samples)}")
    if not samples:
        cli._fail("train: no measured pair with a torch time in the data; measure some with 'cudal2 sweep'")
    synthetic = sum(is_synthetic(s.gpu) for s in samples)
    if synthetic:
        cli._warning(f"train: {synthetic} of the {len(samples)} pairs are synthetic (gpu 'recorded': the recorded "
                     "runner's model, not measurements): the model learns that model, not a GPU; train on a sweep "
                     "measured on a GPU to propose real kernels")
    gpus = sorted({s.gpu for s in samples if s.gpu})
    if out is None:
        if len(gpus) != 1:
            cli._fail(f"train: the pairs come from {len(gpus)} GPU models ({', '.join(gpus) or 'none named'}): "
                      "a user's model is one GPU's; give --out FILE")
        out = user_model_path(arch, gpus[0])
    if data:
        sources["data"] = [p.name for p in data]
    cli.console.print(f"{len(samples)} measured pairs on {len({s.group for s in samples})} shapes")
    try:
        report = run_training(samples, DeviceProfile.of_arch(arch), seed=seed, say=cli.console.print)
    except (ValueError, RuntimeError) as e:
        cli._fail(f"train: {cli._one_line(e)}")
    report.model.info["source"] = sources  # with info's date, seed and data (GPUs, pairs): its provenance
    report.model.save(out)
    cli.console.print(f"chosen {report.params}; {report.train_pairs} training pairs, cross-validated: "
                      f"{report.cross_validation}")
    if report.validation is not None:
        cli.console.print(f"validation ({report.validation_pairs} pairs, never fitted to): {report.validation}")
    cli.console.print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
    if out == user_model_path(arch, gpus[0] if len(gpus) == 1 else ""):
        cli.console.print(f"the learned proposer uses it on {gpus[0]} (unless $CUDAL2_COST_MODEL names another)")
