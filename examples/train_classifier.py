"""Train an image classifier from a packed dataset: the loop people actually run.

    packer convert ~/data/train /data/train.packer --to lmdb
    packer convert ~/data/val /data/val.packer --to lmdb
    python examples/train_classifier.py /data/train.packer /data/val.packer --fast \\
        --checkpoint /data/run1.pt --resume
    torchrun --nproc_per_node 8 examples/train_classifier.py /data/train.packer /data/val.packer \\
        --fast --checkpoint /data/run1.pt --resume
    python examples/train_classifier.py --smoke      # a few CPU steps on a generated dataset

What it does, each part the usual way:

* loading: ``make_loader`` (packer.read.loader) picks workers, prefetching, persistent workers,
  pinned memory and the sampler for this machine and this rank (``--workers`` overrides);
* transforms: ``--fast`` reads the stored bytes (``decode=False``), crops and resizes them to
  ``uint8`` in the workers (``RandomResizedCropFlip``, ``CenterCropResize``) and normalises
  each batch on the device (``Normalize``); without it, plain PIL callables produce float
  tensors in the workers, as a torchvision pipeline does (no torchvision needed);
* mixed precision: ``torch.amp.autocast("cuda")`` and ``GradScaler`` when CUDA is present
  (``--no-amp`` turns it off); channels-last on the GPU;
* several processes: launched by ``torchrun`` (``WORLD_SIZE`` set), it joins the process group
  (NCCL on GPUs, gloo on CPUs), gives each rank its part of every epoch (``DistributedSampler``,
  or ``--sampler shard`` for packer's block-reading ``ShardAwareSampler``), wraps the model in
  ``DistributedDataParallel`` and logs from rank 0; ``--batch-size`` is per process;
* checkpoints: ``--checkpoint PATH`` is written atomically after every epoch (model, optimizer,
  LR schedule, grad scaler, epoch, sampler state); ``--resume`` continues from it when it
  exists (so a preempted job can be resubmitted with the same command).

``--smoke`` trains a tiny model on 32x32 crops for a few steps on CPU, saves a checkpoint,
resumes from it for a second epoch and prints "smoke OK": seconds, and no data needed (it
packs a generated tree of 24 images unless DATA is given).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from PIL import Image
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

import packer
from packer.read.loader import available_cpus, loader_settings, make_loader
from packer.read.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CenterCropResize,
    Normalize,
    RandomResizedCropFlip,
    random_resized_crop_params,
)

#: name -> (channels per stage, blocks per stage, ImageNet stem: 7x7 stride 2 + max pool).
ARCHS: dict[str, tuple[tuple[int, ...], tuple[int, ...], bool]] = {
    "tiny": ((8, 16), (1, 1), False),
    "resnet10": ((64, 128, 256, 512), (1, 1, 1, 1), True),
    "resnet18": ((64, 128, 256, 512), (2, 2, 2, 2), True),
}


# --- model -----------------------------------------------------------------------------------

class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection (ResNet-18's block)."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False),
                                          nn.BatchNorm2d(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    """A small ResNet: a stem, stages of :class:`BasicBlock` (stride 2 from the second), a linear head."""

    def __init__(self, arch: str, num_classes: int) -> None:
        super().__init__()
        widths, depths, imagenet_stem = ARCHS[arch]
        if imagenet_stem:
            self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]),
                                      nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        else:
            self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]),
                                      nn.ReLU(inplace=True))
        blocks: list[nn.Module] = []
        inputs = widths[0]
        for stage, (width, depth) in enumerate(zip(widths, depths, strict=True)):
            for block in range(depth):
                blocks.append(BasicBlock(inputs, width, 2 if stage > 0 and block == 0 else 1))
                inputs = width
        self.stages = nn.Sequential(*blocks)
        self.head = nn.Linear(inputs, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.stages(self.stem(x))
        logits: torch.Tensor = self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(features, 1), 1))
        return logits


# --- transforms for the PIL path (any callable works; no torchvision) ------------------------

def _normalised_tensor(image: Image.Image) -> torch.Tensor:
    mean, std = np.asarray(IMAGENET_MEAN, dtype=np.float32), np.asarray(IMAGENET_STD, dtype=np.float32)
    array = (np.asarray(image, dtype=np.float32) / 255.0 - mean) / std
    return torch.from_numpy(array.transpose(2, 0, 1).copy())


class PilTrainTransform:
    """torchvision's RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize, on a PIL image."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, image: Image.Image) -> torch.Tensor:
        top, left, height, width = random_resized_crop_params(*image.size)
        image = image.resize((self.size, self.size), Image.Resampling.BILINEAR,
                             box=(left, top, left + width, top + height))
        if torch.rand(1).item() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return _normalised_tensor(image)


class PilEvalTransform:
    """torchvision's Resize(size * 8 / 7) + CenterCrop(size) + ToTensor + Normalize."""

    def __init__(self, size: int) -> None:
        self.size, self.resize = size, size * 8 // 7

    def __call__(self, image: Image.Image) -> torch.Tensor:
        width, height = image.size
        scale = self.resize / min(width, height)
        image = image.resize((max(self.size, round(width * scale)), max(self.size, round(height * scale))),
                             Image.Resampling.BILINEAR)
        left, top = (image.width - self.size) // 2, (image.height - self.size) // 2
        return _normalised_tensor(image.crop((left, top, left + self.size, top + self.size)))


def open_datasets(args: argparse.Namespace) -> tuple[packer.PackedImageDataset,
                                                     packer.PackedImageDataset | None]:
    """The training set and, when given, the validation set, with the chosen transforms."""
    if args.fast:  # stored bytes in, uint8 CHW out; Normalize runs per batch on the device
        train = packer.open_dataset(args.data, transform=RandomResizedCropFlip(args.size), decode=False)
        val_tf: Any = CenterCropResize(args.size, resize=args.size * 8 // 7)
        val = None if args.val is None else packer.open_dataset(args.val, transform=val_tf, decode=False)
    else:
        train = packer.open_dataset(args.data, transform=PilTrainTransform(args.size))
        val = None if args.val is None else packer.open_dataset(args.val,
                                                                  transform=PilEvalTransform(args.size))
    return train, val


# --- processes, devices, checkpoints ---------------------------------------------------------

def setup_distributed() -> tuple[torch.device, int, int]:
    """Join torchrun's process group when launched by it: ``(device, rank, world_size)``."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")  # rank, world, address from torchrun's env
    rank = dist.get_rank() if dist.is_initialized() else 0
    return device, rank, world_size


def save_checkpoint(path: str, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically: a temporary file, fsynced, then renamed over it."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ckpt-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def sampler_state(loader: DataLoader[Any]) -> dict[str, Any]:
    """What the training sampler needs to continue: ShardAwareSampler's own state, else the seed."""
    sampler = loader.sampler
    if isinstance(sampler, packer.ShardAwareSampler):
        return {"kind": "shard", "state": sampler.state_dict(consumed=len(sampler))}
    return {"kind": type(sampler).__name__, "seed": getattr(sampler, "seed", None)}


def restore_sampler(loader: DataLoader[Any], saved: dict[str, Any]) -> None:
    """Adopt the saved sampler state; ShardAwareSampler also checks it is the same dataset.

    Checkpoints are taken at epoch ends, so the next ``set_epoch`` starts the next epoch from
    its beginning whatever the state; a run resumed with another number of processes (whose
    state would not load) simply goes on.
    """
    sampler = loader.sampler
    if saved.get("kind") == "shard" and isinstance(sampler, packer.ShardAwareSampler) \
            and saved["state"]["num_replicas"] == sampler.num_replicas:
        sampler.load_state_dict(saved["state"])


class Logger:
    """Prints from rank 0 only."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __call__(self, message: str) -> None:
        if self.rank == 0:
            print(message, flush=True)


def batches(loader: DataLoader[Any], max_steps: int) -> Iterator[tuple[int, Any]]:
    """``enumerate(loader)``, stopped after ``max_steps`` batches when it is positive."""
    for step, batch in enumerate(loader):
        if max_steps and step >= max_steps:
            return
        yield step, batch


# --- training ----------------------------------------------------------------------------------

def evaluate(model: nn.Module, loader: DataLoader[Any], device: torch.device,
             normalize: Normalize | None, amp: bool, max_steps: int) -> float:
    """Top-1 accuracy over ``loader``, summed across ranks (DistributedSampler pads with repeats)."""
    model.eval()
    counts = torch.zeros(2, device=device)
    with torch.no_grad():
        for _, (images, targets) in batches(loader, max_steps):
            images = images.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            if normalize is not None:
                images = normalize(images)
            with torch.amp.autocast("cuda") if amp else contextlib.nullcontext():
                logits = model(images.contiguous(memory_format=_memory_format(device)))
            counts += torch.stack([(logits.argmax(1) == targets).sum().float(),
                                   torch.tensor(float(len(targets)), device=device)])
    if dist.is_initialized():
        dist.all_reduce(counts)
    model.train()
    return (counts[0] / counts[1].clamp(min=1)).item()


def _memory_format(device: torch.device) -> torch.memory_format:
    return torch.channels_last if device.type == "cuda" else torch.contiguous_format


def train(args: argparse.Namespace) -> dict[str, Any]:
    """Train per ``args``; returns what happened (first epoch run, epochs, last loss, accuracy)."""
    device, rank, world_size = setup_distributed()
    log = Logger(rank)
    torch.manual_seed(args.seed)
    train_set, val_set = open_datasets(args)
    amp = device.type == "cuda" and not args.no_amp

    model: nn.Module = ResNet(args.arch, len(train_set.classes)).to(device)
    if device.type == "cuda":  # channels-last convolutions run faster on tensor cores
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # not in the stubs
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=args.weight_decay,
                                nesterov=True)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, args.epochs))
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    start_epoch = 0
    saved: dict[str, Any] | None = None
    if args.resume and args.checkpoint and os.path.exists(args.checkpoint):
        saved = torch.load(args.checkpoint, map_location=device, weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        scaler.load_state_dict(saved["scaler"])
        start_epoch = saved["epoch"]
        log(f"resumed from {args.checkpoint} at epoch {start_epoch}")
    elif args.resume:
        log(f"no checkpoint at {args.checkpoint}: starting from scratch")
    if world_size > 1:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)

    sampler = "shard" if args.sampler == "shard" else None
    loader = make_loader(train_set, args.batch_size, train=True, num_workers=args.workers, sampler=sampler,
                         seed=args.seed)
    val_loader = None if val_set is None else make_loader(val_set, args.batch_size, train=False,
                                                          num_workers=args.workers, sampler=sampler)
    if saved is not None:
        restore_sampler(loader, saved["sampler"])
    settings = loader_settings(train=True, num_workers=args.workers, sampler=sampler)
    if device.type == "cpu":  # leave the workers their cores: more intra-op threads only contend
        torch.set_num_threads(max(1, available_cpus() // settings.local_world_size - settings.num_workers))
    normalize = Normalize().to(device) if args.fast else None
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    log(f"{train_set}\n{world_size} process(es) on {device}, amp {amp}, "
        f"{'fast path' if args.fast else 'PIL transforms'}, {settings}")

    loss_value, accuracy, epoch = math.nan, None, start_epoch - 1
    last = args.epochs if not args.stop_after else min(args.epochs, start_epoch + args.stop_after)
    for epoch in range(start_epoch, last):
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)  # a new order every epoch, the same on every rank
        started, seen, total_loss = time.perf_counter(), 0, torch.zeros((), device=device)
        for step, (images, targets) in batches(loader, args.max_steps):
            images = images.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            if normalize is not None:
                images = normalize(images)  # uint8 -> normalised float32, on the device
            images = images.contiguous(memory_format=_memory_format(device))
            with torch.amp.autocast("cuda") if amp else contextlib.nullcontext():
                loss = criterion(model(images), targets)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            total_loss += loss.detach() * len(targets)
            seen += len(targets)
            if args.log_every and step % args.log_every == 0:
                log(f"epoch {epoch} step {step}: loss {loss.item():.4f}, lr {scheduler.get_last_lr()[0]:.4g}")
        scheduler.step()
        stats = torch.stack([total_loss, torch.tensor(float(seen), device=device)])
        if dist.is_initialized():
            dist.all_reduce(stats)
        loss_value = (stats[0] / stats[1].clamp(min=1)).item()
        seconds = time.perf_counter() - started
        line = f"epoch {epoch}: loss {loss_value:.4f}, {stats[1].item() / seconds:.0f} images/s"
        if val_loader is not None:
            accuracy = evaluate(model, val_loader, device, normalize, amp, args.max_steps)
            line += f", val accuracy {accuracy:.2%}"
        log(line)
        if args.checkpoint:
            if rank == 0:
                raw = model.module if isinstance(model, DistributedDataParallel) else model
                save_checkpoint(args.checkpoint, {
                    "model": raw.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                    "epoch": epoch + 1, "sampler": sampler_state(loader), "world_size": world_size,
                    "args": {k: v for k, v in vars(args).items() if isinstance(v, str | int | float | bool)}})
            if dist.is_initialized():
                dist.barrier()  # the checkpoint is complete before any rank goes on
    return {"start_epoch": start_epoch, "end_epoch": epoch + 1, "loss": loss_value,
            "accuracy": accuracy}


# --- smoke test ----------------------------------------------------------------------------------

def make_smoke_dataset(directory: str) -> str:
    """Pack 24 generated images in 3 classes (colour-coded, so a tiny model can learn) into ``directory``."""
    src = os.path.join(directory, "images")
    rng = np.random.default_rng(0)
    for index in range(24):
        label = index % 3
        pixels = rng.integers(0, 80, size=(40, 48, 3), dtype=np.uint8)
        pixels[..., label] += 150
        os.makedirs(os.path.join(src, f"class{label}"), exist_ok=True)
        Image.fromarray(pixels).save(os.path.join(src, f"class{label}", f"{index:02d}.jpg"), quality=90)
    dst = os.path.join(directory, "packed")
    packer.convert(src, dst, to="lmdb", workers=1)
    return dst


def smoke(args: argparse.Namespace) -> None:
    """A tiny run, then a resumed one from its checkpoint; raises SystemExit if resume failed."""
    _, rank, world_size = setup_distributed()
    with contextlib.ExitStack() as stack:
        where = [""]
        if rank == 0:
            where = [stack.enter_context(tempfile.TemporaryDirectory(prefix="packer-smoke-"))]
        if world_size > 1:
            dist.broadcast_object_list(where)  # rank 0's directory, for every rank
        if args.data is None:
            if rank == 0:
                make_smoke_dataset(where[0])
            if world_size > 1:
                dist.barrier()
        data = args.data or os.path.join(where[0], "packed")
        tiny = dict(vars(args), data=data, val=args.val or data, arch="tiny", size=32, batch_size=8,
                    max_steps=3, log_every=1, checkpoint=os.path.join(where[0], "smoke.pt"))
        # Two epochs, as a job cut short after the first and resubmitted would run them.
        first = train(argparse.Namespace(**{**tiny, "epochs": 2, "stop_after": 1, "resume": False}))
        second = train(argparse.Namespace(**{**tiny, "epochs": 2, "stop_after": 0, "resume": True}))
        if world_size > 1:
            dist.barrier()  # every rank is done with the directory before rank 0 removes it
    if (first["start_epoch"], second["start_epoch"], second["end_epoch"]) != (0, 1, 2) \
            or not math.isfinite(second["loss"]):
        raise SystemExit(f"smoke FAILED: {first} then {second}")
    Logger(rank)(f"loss {second['loss']:.4f}, val accuracy {second['accuracy']:.2%}\nsmoke OK")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", nargs="?", metavar="DATA", help="training set: DST of a packer convert")
    parser.add_argument("val", nargs="?", metavar="VAL", help="validation set (optional), also packed")
    parser.add_argument("--arch", choices=sorted(ARCHS), default="resnet18")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64, help="per process")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--size", type=int, default=224, help="crop size")
    parser.add_argument("--workers", type=int, default=None,
                        help="DataLoader workers per process (default: make_loader's choice)")
    parser.add_argument("--fast", action="store_true",
                        help="decode+crop to uint8 in the workers, normalise on the device")
    parser.add_argument("--sampler", choices=("auto", "shard"), default="auto",
                        help="shard: packer's ShardAwareSampler (block reads for slow storage)")
    parser.add_argument("--checkpoint", metavar="PATH", help="save after every epoch (atomically)")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint if it exists")
    parser.add_argument("--stop-after", type=int, default=0, metavar="N",
                        help="run at most N epochs now, then exit (time-limited jobs: resubmit "
                        "with --resume)")
    parser.add_argument("--max-steps", type=int, default=0, help="batches per epoch at most (0: all)")
    parser.add_argument("--log-every", type=int, default=100, help="steps between log lines (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-amp", action="store_true", help="no mixed precision on CUDA")
    parser.add_argument("--smoke", action="store_true",
                        help="a few steps of a tiny model on CPU, with checkpoint and resume; seconds")
    args = parser.parse_args(argv)
    if args.data is None and not args.smoke:
        parser.error("DATA is required (or pass --smoke)")
    if args.resume and not args.checkpoint:
        parser.error("--resume needs --checkpoint PATH")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        if args.smoke:
            smoke(args)
        else:
            train(args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
