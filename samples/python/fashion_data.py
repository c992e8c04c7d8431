"""Fashion-MNIST for the samples, read from Debian's dataset-fashion-mnist (IDX files, gzip)."""
import gzip
from pathlib import Path
from typing import Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

DEFAULT_DIR = Path("/usr/share/datasets/fashion-mnist")


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


class FashionMNIST(Dataset):
    """28x28 grey images scaled to [0, 1] (1 channel) and their labels 0..9."""

    def __init__(self, root: Path = DEFAULT_DIR, train: bool = True):
        prefix = "train" if train else "t10k"
        images, labels = root / f"{prefix}-images-idx3-ubyte.gz", root / f"{prefix}-labels-idx1-ubyte.gz"
        for p in (images, labels):
            if not p.exists():
                raise FileNotFoundError(f"{p} is missing: install Debian's dataset-fashion-mnist (scripts/setup.sh)")
        self.images = torch.from_numpy(_read_idx(images).copy())
        self.labels = torch.from_numpy(_read_idx(labels).astype(np.int64))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.images[i].unsqueeze(0).float().div_(255), self.labels[i]


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.classifier = torch.nn.Linear(32 * 7 * 7, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))
